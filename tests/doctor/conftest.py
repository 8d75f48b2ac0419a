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


LAUNCH_VARS = ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE", "ACCELERATE_DEEPSPEED_CONFIG_FILE",
               "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
               "ACCELERATE_GRADIENT_CLIPPING", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL")


@pytest.fixture
def clean_launch(monkeypatch):
    """No `accelerate launch` DeepSpeed variables from the environment the tests run in."""
    for k in LAUNCH_VARS:
        monkeypatch.delenv(k, raising=False)


@pytest.fixture
def launch(monkeypatch, tmp_path, clean_launch):
    """launch(stage=2, ds_json=None, **env): the environment `accelerate launch` with DeepSpeed sets."""
    import json

    def set_(stage: int = 2, ds_json=None, **env):
        monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
        monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", str(stage))
        if ds_json is not None:
            path = tmp_path / "ds_config.json"
            path.write_text(json.dumps(ds_json))
            monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(path))
        for k, v in env.items():
            monkeypatch.setenv(k, v)

    return set_
