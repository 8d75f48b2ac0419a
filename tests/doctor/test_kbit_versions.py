"""MM090: bitsandbytes installed but older than the installed transformers accepts. Reports:
https://github.com/bitsandbytes-foundation/bitsandbytes/issues/815, https://github.com/artidoro/qlora/issues/26
("4 bit quantization requires bitsandbytes>=0.39.0 - please upgrade your bitsandbytes version");
transformers 5 raised the minimum to 0.46.1 (https://github.com/huggingface/transformers/pull/41283)."""

from __future__ import annotations

import sys

import pytest

DATA = {"train": "synthetic:counting", "synthetic_train_size": 8}


@pytest.fixture
def old_bitsandbytes_metadata(tmp_path, monkeypatch):
    """An environment whose bitsandbytes metadata says 0.41.1 (a real dist-info first on sys.path, as an older
    install left in site-packages would be): importlib.metadata reads it, nothing in mmtune is patched."""
    dist = tmp_path / "bitsandbytes-0.41.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bitsandbytes\nVersion: 0.41.1\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)


def test_premise_transformers_declares_a_bitsandbytes_minimum():
    from mmtune.compat.transformers_internals import bitsandbytes_min_version

    assert bitsandbytes_min_version() is not None


def test_qlora_with_bitsandbytes_older_than_transformers_accepts(doctor, old_bitsandbytes_metadata):
    from mmtune.compat.transformers_internals import bitsandbytes_min_version

    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": DATA, "adapter": {"method": "qlora"}}, "MM090",
                 fast=True)
    [f] = rep.errors
    assert "bitsandbytes 0.41.1 is installed" in f.message
    assert f.fix == f"pip install -U 'bitsandbytes>={bitsandbytes_min_version()}'"
    # LoRA without k-bit weights needs no bitsandbytes; a plan for another GPU says nothing of this machine's
    assert doctor({"model": {"name": "tiny/qwen2-vl"}, "data": DATA}, "MM090", fast=True).findings == []
    assert doctor({"model": {"name": "tiny/qwen2-vl"}, "data": DATA, "adapter": {"method": "qlora"}}, "MM090",
                  gpu="a100-80gb", fast=True).findings == []


def test_qlora_with_the_installed_bitsandbytes_is_silent(doctor):
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": DATA, "adapter": {"method": "qlora"}}, "MM090", fast=True)
    assert rep.findings == []
