"""Fast checks (no model, no data scan): each fires on a broken config and stays silent on a good one."""

from __future__ import annotations

import json
import struct

import pytest
from doctor_helpers import TINY_VL

GOOD = TINY_VL


def test_good_config_has_no_fast_errors(doctor):
    rep = doctor(GOOD, fast=True)
    assert rep.errors == [], rep.errors


def test_mm019_unknown_key_with_did_you_mean(doctor):
    rep = doctor({**GOOD, "train": {"max_step": 3, "lr": "fast"}}, "MM019")
    msgs = {f.message: f for f in rep.findings}
    unknown = next(f for f in rep.findings if "max_step" in f.message)
    assert unknown.code == "MM019" and unknown.severity == "error"
    assert "train.max_steps" in unknown.fix
    assert any("train.lr" in m for m in msgs)  # wrong type reported too, in the same pass
    assert doctor(GOOD, "MM019").findings == []


def test_mm019_missing_config_file_and_bad_override():
    from mmtune.doctor.runner import run_doctor

    rep = run_doctor("/nonexistent/cfg.yaml", [], only=["MM019"])
    assert [f.code for f in rep.errors] == ["MM019"]
    rep = run_doctor("/nonexistent/cfg.yaml", ["not-an-override"])
    assert [f.code for f in rep.errors] == ["MM019"] and "key=value" in rep.errors[0].message


def test_mm007_device_map_refused(doctor):
    rep = doctor({**GOOD, "model": {"name": "tiny/qwen2-vl", "device_map": "auto"}}, "MM007", "MM019")
    assert [f.code for f in rep.errors] == ["MM007"]  # not repeated as an unknown key
    assert "remove model.device_map" in rep.errors[0].fix
    assert doctor(GOOD, "MM007").findings == []


def test_mm026_missing_data_file_with_did_you_mean(doctor, tmp_path):
    (tmp_path / "train.jsonl").write_text("{}\n")
    rep = doctor({**GOOD, "data": {"train": str(tmp_path / "trian.jsonl")}}, "MM026")
    assert [f.code for f in rep.errors] == ["MM026"]
    assert rep.errors[0].fix == f"data.train={tmp_path / 'train.jsonl'}"
    # reported even when another key fails validation
    rep = doctor({**GOOD, "data": {"train": str(tmp_path / "nope.jsonl")}, "bogus": 1}, "MM026")
    assert "MM026" in rep.codes("error")
    assert doctor({**GOOD, "data": {"train": str(tmp_path / "train.jsonl")}}, "MM026").findings == []


def test_mm015_split_alias(doctor, tmp_path):
    (tmp_path / "val.jsonl").write_text("{}\n")
    rep = doctor({**GOOD, "data": {"train": "synthetic:counting", "eval": str(tmp_path / "validation.jsonl")}},
                 "MM015", "MM026")
    # `train` reads the `val` split (the resolved run's split rule): said, not an error
    assert rep.errors == [] and [f.code for f in rep.findings] == ["MM015"]
    assert rep.findings[0].fix == f"data.eval={tmp_path / 'val.jsonl'} to say so in the config"
    from mmtune.config import load_config
    from mmtune.resolve import local_target, resolve_run

    cfg = load_config(None, ["model.name=tiny/qwen2-vl", f"data.eval={tmp_path / 'validation.jsonl'}"])
    assert resolve_run(cfg, local_target("cpu")).cfg.data.eval == str(tmp_path / "val.jsonl")
    assert doctor({**GOOD, "data": {"train": "synthetic:counting", "eval": str(tmp_path / "val.jsonl")}},
                  "MM015").findings == []
    rep = doctor({**GOOD, "data": {"train": "synthetic:counting", "eval": str(tmp_path / "nothing.jsonl")}},
                 "MM015", "MM026")
    assert [f.code for f in rep.errors] == ["MM026"]


def test_mm028_eval_settings(doctor):
    rep = doctor({**GOOD, "eval": {"every": 10}}, "MM028")  # evaluating every 10 steps with no eval set
    assert {f.severity for f in rep.findings} == {"warning"}
    # a best_metric that is not computed is a config error at load time (the schema's cross-field rule)
    rep = doctor({**GOOD, "eval": {"best_metric": "accuracy"}}, "MM019")
    assert [f.code for f in rep.errors] == ["MM019"] and "is not computed" in rep.errors[0].message
    assert doctor(GOOD, "MM028").findings == []


def test_mm029_adapter_settings(doctor):
    rep = doctor({**GOOD, "adapter": {"train_components": ["projector"], "freeze_components": ["projector"]}}, "MM029")
    assert "MM029" in rep.codes("error")
    rep = doctor({**GOOD, "adapter": {"lr_multipliers": {"projector": 10}}}, "MM029")
    assert "MM029" in rep.codes("warning")
    assert doctor({**GOOD, "adapter": {"train_components": ["projector"], "lr_multipliers": {"projector": 10}}},
                  "MM029").findings == []


def test_mm032_full_finetune_lr(doctor, tmp_path):
    from mmtune.models.tiny import tiny_config_and_processor

    folder = tmp_path / "pretrained"  # a local model folder stands for pretrained weights
    config, processor = tiny_config_and_processor("tiny/qwen2-vl")
    config.save_pretrained(folder)
    tree = {**GOOD, "model": {"name": str(folder)}, "adapter": {"method": "full"}}
    assert "MM032" in doctor({**tree, "train": {"lr": 2e-4}}, "MM032").codes("warning")
    assert doctor({**tree, "train": {"lr": 1e-5}}, "MM032").findings == []
    assert doctor({**GOOD, "adapter": {"method": "full"}, "train": {"lr": 2e-3}}, "MM032").findings == []  # random init


def test_mm005_bf16_on_t4_is_the_runs_own_decision(doctor):
    """bf16 on a T4: train switches to fp16 + GradScaler itself, so doctor says so (info), never an error."""
    rep = doctor({**GOOD, "train": {"precision": "bf16"}}, "MM005", gpu="t4")
    assert rep.errors == [] and [f.code for f in rep.findings] == ["MM005"]
    assert "fp16 + GradScaler (bf16 unsupported on T4 (sm_75))" in rep.findings[0].message
    assert doctor({**GOOD, "train": {"precision": "bf16"}}, "MM005", gpu="a100-80gb").findings == []
    assert doctor({**GOOD, "train": {"precision": "fp16"}}, "MM005", gpu="t4").findings == []


def test_mm005_unknown_gpu_name(doctor):
    rep = doctor(GOOD, "MM005", gpu="a100-80")
    assert [f.code for f in rep.errors] == ["MM005"] and "did you mean" in rep.errors[0].fix


def test_mm025_flash_attention_on_turing(doctor):
    tree = {**GOOD, "model": {"name": "tiny/qwen2-vl", "attn_implementation": "flash_attention_2"}}
    rep = doctor(tree, "MM025", gpu="t4")
    assert rep.errors and rep.errors[0].fix == "model.attn_implementation=sdpa"
    assert doctor(tree, "MM025", gpu="h100").errors == []
    assert doctor(GOOD, "MM025", gpu="t4").findings == []


def test_mm006_fp16_where_bf16_exists(doctor):
    tree = {**GOOD, "train": {"precision": "fp16", "nan_guard": False}}
    rep = doctor(tree, "MM006", gpu="a100-40gb")
    assert len(rep.findings) == 2 and rep.codes("warning") == {"MM006"}
    assert doctor({**GOOD, "train": {"precision": "fp16"}}, "MM006", gpu="t4").findings == []


def test_mm024_model_missing_offline(doctor, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    rep = doctor({**GOOD, "model": {"name": "someorg/not-cached-model"}}, "MM024")
    assert [f.code for f in rep.errors] == ["MM024"] and "mmtune download" in rep.errors[0].fix
    assert doctor(GOOD, "MM024").findings == []


def _write_safetensors(folder, tensors: dict[str, str]):
    header = {k: {"dtype": d, "shape": [1], "data_offsets": [i * 4, i * 4 + 4]} for i, (k, d) in enumerate(tensors.items())}
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (4 * len(tensors)))


@pytest.mark.parametrize("dtypes,severity", [
    # vision in fp32 beside a bf16 language model: the loader casts to one dtype, so only an info (was a
    # false alarm on clean checkpoints)
    ({"model.layers.0.q.weight": "BF16", "model.visual.proj.weight": "F32"}, "info"),
    ({"model.layers.0.q.weight": "U8", "model.layers.0.k.weight": "BF16"}, "error"),
    ({"model.layers.0.q.weight": "BF16", "model.layers.0.k.weight": "BF16"}, None),
])
def test_mm009_checkpoint_dtypes(doctor, tmp_path, dtypes, severity):
    from mmtune.models.tiny import tiny_config_and_processor

    folder = tmp_path / "ckpt"
    folder.mkdir()
    config, processor = tiny_config_and_processor("tiny/qwen2-vl")
    config.save_pretrained(folder)
    processor.save_pretrained(folder)
    _write_safetensors(folder, dtypes)
    rep = doctor({**GOOD, "model": {"name": str(folder)}}, "MM009")
    assert ({f.severity for f in rep.findings} or {None}) == {severity}


def test_mm027_max_length_beyond_positions(doctor):
    assert "MM027" in doctor({**GOOD, "data": {"train": "synthetic:counting", "max_length": 100000}},
                             "MM027").codes("warning")
    assert doctor(GOOD, "MM027").findings == []


def test_mm023_compares_like_with_like_an_unchanged_restart_is_silent(doctor, tmp_path):
    """A real run's folder: restarting with the same config says nothing (the resolved config against the
    checkpoint's, as train compares them -- not the user's config against config.resolved.yaml); a changed
    lr is the warning that train will refuse; a changed adapter rank the error that nothing can apply it."""
    import yaml

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    tree = {**GOOD, "output_dir": str(tmp_path / "run"), "adapter": {"r": 4, "dropout": 0.0},
            "train": {"max_steps": 1, "micro_batch_size": 2, "grad_accum": 1, "precision": "fp32", "device": "cpu",
                      "save_every": 1},
            "logging": {"tensorboard": False}}
    path = tmp_path / "first.yaml"
    path.write_text(yaml.safe_dump(tree))
    train(build_run(load_config(path, [])))
    assert doctor(tree, "MM023").findings == []
    assert doctor(tree, "MM023", overrides=["train.max_steps=1", "eval.every=5"]).findings == []  # benign keys
    rep = doctor(tree, "MM023", overrides=["train.lr=5e-3"])
    assert rep.codes("warning") == {"MM023"} and "train.lr" in rep.findings[0].message
    assert doctor(tree, "MM023", overrides=["train.lr=5e-3", "train.accept_changes=true"]).findings == []
    rep = doctor(tree, "MM023", overrides=["adapter.r=8", "train.accept_changes=true"])
    assert rep.codes("error") == {"MM023"} and "adapter.r" in rep.findings[0].message
    assert "even with train.accept_changes=true" in rep.findings[0].message
