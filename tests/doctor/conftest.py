"""Helpers: write a config, run selected checks, look at the findings."""

from __future__ import annotations

import pytest
import yaml


@pytest.fixture
def doctor(tmp_path):
    """doctor(tree, *codes, gpu=None, **kw) -> DoctorReport for the given checks only."""
    from mmtune.doctor.runner import run_doctor

    def run(tree: dict, *codes: str, gpu: str | None = None, overrides=None, **kw):
        tree = dict(tree)
        tree.setdefault("output_dir", str(tmp_path / "run"))
        path = tmp_path / "cfg.yaml"
        path.write_text(yaml.safe_dump(tree))
        return run_doctor(path, overrides or [], gpu, only=list(codes) or None, **kw)

    return run


