"""Exports that explain themselves: a model card whose loading code runs in plain Python (no mmtune), `--merge`
on a full fine-tune that says there is nothing to merge, the Qwen-VL processor's torchvision named with the
build that matches this torch, and `--push-to-hub` failing with a clear message when the Hub is unreachable."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.util import find_spec

import pytest
import yaml
from typer.testing import CliRunner

from mmtune.cli import app
from mmtune.export.card import torchvision_install


def _invoke(*args, ok=True):
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert (res.exit_code == 0) == ok, res.output
    return res.output


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """A 3-step run of the tiny Qwen2 (text only), LoRA unless a test trains its own."""
    root = tmp_path_factory.mktemp("text")
    rows = [{"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                          {"role": "assistant", "content": str(2 * i)}]} for i in range(8)]
    (root / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")

    def train(method="lora", name="run"):
        cfg = {"output_dir": str(root / name), "model": {"name": "tiny/qwen2", "gradient_checkpointing": False},
               "data": {"train": str(root / "data.jsonl"), "eval": str(root / "data.jsonl"), "max_length": 64,
                        "eval_max_samples": 2},
               "adapter": {"method": method, "r": 4, "dropout": 0.0},
               "train": {"max_steps": 3, "micro_batch_size": 2, "grad_accum": 1, "lr": 1e-3, "precision": "fp32",
                         "device": "cpu", "warmup_steps": 1, "seed": 0},
               "eval": {"every": None, "metrics": ["exact_match"], "max_new_tokens": 6, "batch_size": 2},
               "logging": {"tensorboard": False}}
        (root / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        _invoke("train", root / f"{name}.yaml", "--skip-checks")
        return root / name

    return train


def test_card_code_loads_and_generates_in_plain_python(text_run, tmp_path):
    run = text_run()
    out = tmp_path / "export"
    printed = _invoke("export", run, "--merge", "--out", out)
    assert "README.md" in printed
    card = (out / "README.md").read_text()
    assert "library_name: transformers" in card and "| exact_match |" in card and "best constant answer" in card
    code = re.search(r"```python\n(.*?)```", card, re.S).group(1)
    # A fresh interpreter: -I ignores PYTHONPATH and the user's site, so nothing of mmtune's tree is importable
    # unless installed; the code itself imports only transformers.
    res = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    from mmtune.chat import load_session

    assert res.stdout.strip() == load_session(str(out), max_new_tokens=6).ask("Hello")  # what mmtune chat answers
    assert "vllm serve" in card and "--max-model-len 70" in card  # data.max_length 64 + max_new_tokens 6


def test_merge_on_a_full_fine_tune_says_there_is_nothing_to_merge(text_run, tmp_path):
    run = text_run("full", "full-run")
    printed = _invoke("export", run, "--merge", "--out", tmp_path / "e")
    assert "nothing to merge" in printed and "(full)" in printed
    marker = json.loads((tmp_path / "e" / ".mmtune-export.json").read_text())
    assert marker["kind"] == "full" and not marker["merged"]
    assert "full fine-tuning" in (tmp_path / "e" / "README.md").read_text()


def test_adapter_export_card_and_vl_processor_requirement(trained, tmp_path):
    run = trained[0]
    printed = _invoke("export", run, "--out", tmp_path / "a")
    card = (tmp_path / "a" / "README.md").read_text()
    assert "library_name: peft" in card and "PeftModel.from_pretrained(model, path)" in card
    assert "--enable-lora" in card and "--max-lora-rank 8" in card  # r=4 -> the smallest rank vLLM takes above it
    notes = json.loads((tmp_path / "a" / ".mmtune-export.json").read_text())["notes"]
    if find_spec("torchvision") is None:  # this machine: Qwen2-VL's AutoProcessor cannot load without it
        import torch

        assert any(torchvision_install(torch.__version__) in n for n in notes), notes
        assert "torchvision" in printed and "**Requirement**" in card
    else:
        assert notes == []


@pytest.mark.parametrize("torch_version,command", [
    ("2.13.0+cpu", "pip install 'torchvision==0.28.*' --index-url https://download.pytorch.org/whl/cpu"),
    ("2.14.1", "pip install 'torchvision==0.29.*'"),
    ("2.11.0+cu128", "pip install 'torchvision==0.26.*' --index-url https://download.pytorch.org/whl/cu128"),
])
def test_torchvision_matching_torch(torch_version, command):
    # From the wheels' METADATA: torchvision 0.28.0 requires torch==2.13.0, 0.29.0 torch==2.14.0.
    assert torchvision_install(torch_version) == command


def test_push_to_hub_offline_and_unreachable(trained, tmp_path, monkeypatch):
    """No network in tests: offline mode, then a Hub endpoint on a closed 127.0.0.1 port. Each says what to do,
    and the export is complete on disk either way."""
    from huggingface_hub import constants

    from mmtune.serve.server import free_port

    run = trained[0]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    printed = _invoke("export", run, "--out", tmp_path / "o", "--push-to-hub", "me/tiny", ok=False)
    assert "offline mode is on" in printed and "hf upload me/tiny" in printed
    assert (tmp_path / "o" / "README.md").is_file()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    printed = _invoke("export", run, "--out", tmp_path / "o", "--push-to-hub", "me/tiny", ok=False)
    assert "cannot reach the Hugging Face Hub" in printed and "hf upload" in printed
    printed = _invoke("export", run, "--out", tmp_path / "o", "--push-to-hub", "not-a-repo-id", ok=False)
    assert "ORG/NAME" in printed
