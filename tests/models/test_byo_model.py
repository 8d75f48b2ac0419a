"""Bring your own model (docs/byo_model.md): a LLaVA-like research model outside transformers' registry
(tests/models/byo/byo_llava.py: CLIP tower + MLP projector + Qwen2 decoder, its own output type) plugs in
by import path, trains, evaluates, plans and passes the doctor; its loss is read from a dataclass, a
tuple or a dict alike; each way of missing the contract is an error naming what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmtune.config import load_config
from mmtune.errors import MMTuneError, ModelLoadError

BYO = Path(__file__).resolve().parent / "byo"


@pytest.fixture
def byo(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BYO))
    from tests.train.conftest import make_dataset

    data = make_dataset(tmp_path / "data", 8)

    def cfg(*over, out="run"):
        return load_config(None, [
            "model.name=tiny", "model.factory=byo_llava:build", "model.class=byo_llava:MyLlava",
            "model.processor=byo_llava:make_processor", f"data.train={data}", f"data.eval={data}",
            "data.eval_max_samples=2", "adapter.r=4", "adapter.dropout=0", "train.max_steps=2",
            "train.micro_batch_size=2", "train.grad_accum=2", "train.precision=fp32", "train.device=cpu",
            "train.scheduler=constant", "eval.max_new_tokens=3", "eval.batch_size=2", "logging.tensorboard=false",
            f"output_dir={tmp_path / out}", *over])
    return cfg


def _losses(cfg):
    rows = [json.loads(ln) for ln in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "train"]


def test_a_brought_model_trains_evaluates_and_its_loss_reads_alike_from_each_output_form(byo):
    from mmtune.build import build_run
    from mmtune.train.loop import train

    cfg = byo()
    run = build_run(cfg)
    assert run.family.custom and type(run.unwrapped_model().base_model.model).__name__ == "MyLlava"
    assert any(d.startswith("model.class: byo_llava:build: vision=vision_tower.") for d in run.decisions)
    assert any("gradient checkpointing: on (non-reentrant) in vision_tower, language_model" in d for d in run.decisions)
    # LoRA went on the decoder only, by the declared component
    lora = [n for n, _ in run.unwrapped_model().named_parameters() if "lora_" in n]
    assert lora and all(".language_model.model." in n for n in lora)
    summary = train(run)
    assert summary["steps"] == 2 and {"eval_loss", "exact_match"} <= set(summary["eval"])
    reference = _losses(cfg)
    for cls, factory in (("MyLlava", "build"), ("TupleLlava", "build_tuple"), ("DictLlava", "build_dict")):
        c = byo(f"model.class=byo_llava:{cls}", f"model.factory=byo_llava:{factory}", "model.loss=output", out=cls)
        train(build_run(c))
        assert _losses(c) == pytest.approx(reference, rel=1e-5), cls  # the model's own loss = mmtune's


def test_components_select_trainable_parts_and_lora_targets(byo):
    from mmtune.build import build_run

    run = build_run(byo("adapter.train_components=[projector]", "adapter.target_modules=[q_proj, 'vision[-1:]:q_proj']"),
                    with_data=False, with_optimizer=False)
    names = [n for n, p in run.unwrapped_model().named_parameters() if p.requires_grad]
    assert any("projector" in n for n in names)
    lora = [n for n in names if "lora_" in n]
    assert any("vision_tower" in n and "layers.1." in n for n in lora)
    assert not any("vision_tower" in n and "layers.0." in n for n in lora)


def test_plan_and_doctor_run_on_a_brought_model(byo):
    from mmtune.doctor.runner import run_doctor
    from mmtune.plan.planner import predict

    cfg = byo("train.precision=bf16")
    plan = predict(cfg, gpu="a100-40gb")
    assert plan.fits and plan.peak_allocated_bytes > 0
    overrides = [f"{k}={v}" for k, v in (("model.name", "tiny"), ("model.factory", "byo_llava:build"),
                                          ("model.class", "byo_llava:MyLlava"), ("model.processor", "byo_llava:make_processor"),
                                          ("data.train", cfg.data.train), ("output_dir", cfg.output_dir))]
    report = run_doctor(None, overrides, gpu="a100-40gb")
    bad = [(f.code, f.message) for f in report.findings if f.severity in ("error", "warning")]
    assert not bad, bad
    assert any(f.code == "MM001" for f in report.findings)  # the planned step ran


@pytest.mark.parametrize("over, what, where", [
    (["model.class=no_such_pkg.models:MyLlava"], "cannot import module 'no_such_pkg.models'", "model.class"),
    (["model.class=byo_llava:MyLava"], "module 'byo_llava' has no 'MyLava'", "model.class"),
    (["model.class=null"], "declares no components", "model.components"),
    (["model.class=byo_llava:NoLabels", "model.factory=byo_llava:build_nolabels", "model.loss=output"],
     "NoLabels.forward takes no 'labels'", "model.class"),
    (["adapter.train_components=[audio]"], "has no component named 'audio'", "adapter.train_components"),
    (["train.stages=[{train: [audio_lora]}]"], "has no component named 'audio'", "train.stages[0]"),
    (["model.components={decoder: [llm.], vision: [vision_tower.]}"], "prefix 'llm.' matches no parameter", None),
])
def test_each_missing_piece_of_the_contract_is_named(byo, over, what, where):
    from mmtune.build import build_run

    with pytest.raises(ModelLoadError) as e:
        build_run(byo(*over), with_data=False, with_optimizer=False)
    assert what in e.value.what
    if where:
        assert e.value.where == where


def test_no_loss_in_the_output_is_named(byo):
    from mmtune.build import build_run
    from mmtune.train.loop import train

    cfg = byo("model.class=byo_llava:LogitsOnly", "model.factory=byo_llava:build_logits_only", "model.loss=output")
    with pytest.raises(MMTuneError, match="holds no loss") as e:
        train(build_run(cfg))
    assert e.value.where == "model.loss"
