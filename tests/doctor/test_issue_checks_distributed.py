"""MM045-MM049: the DeepSpeed setup `accelerate launch` hands the process, read from the same
environment variables accelerate's DeepSpeed plugin reads (set here as the launcher sets them)."""

from __future__ import annotations

import pytest
from doctor_helpers import TINY_VL

NEW = ("MM045", "MM046", "MM047", "MM048", "MM049", "MM054", "MM055")


def test_no_launcher_no_findings(doctor, launch):
    for tree in (TINY_VL, {**TINY_VL, "adapter": {"method": "qlora"}, "train": {"grad_accum": 8}}):
        assert doctor(tree, *NEW).findings == []


def test_zero2_with_the_runs_own_settings_is_clean(doctor, launch):
    launch(stage=2, ds_json={"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}, "gradient_clipping": 1.0,
                             "gradient_accumulation_steps": "auto", "train_micro_batch_size_per_gpu": "auto"})
    rep = doctor(TINY_VL, *NEW, gpu="a100-80gb")
    assert rep.findings == [], rep.findings


def test_mm045_zero3_checkpoints(doctor, launch, monkeypatch):
    """mmtune's checkpoints gather ZeRO-3's partitions (tests/train/test_deepspeed.py): a launch that does
    not allow the gather is refused; one that does is clean."""
    launch(stage=3)
    rep = doctor(TINY_VL, "MM045")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM045", "error")]
    assert "stage3_gather_16bit_weights_on_model_save" in rep.findings[0].fix and "train.strategy=zero3" in rep.findings[0].fix
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "true")  # accelerate launch --zero3_save_16bit_model
    assert doctor(TINY_VL, "MM045").findings == []
    launch(stage=3, ds_json={"zero_optimization": {"stage": 3}})  # a file without it: the file decides
    assert [f.severity for f in doctor(TINY_VL, "MM045").findings] == ["error"]
    launch(stage=3, ds_json={"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}})
    assert doctor(TINY_VL, "MM045").findings == []


def test_mm046_qlora_under_zero3(doctor, launch):
    launch(stage=3)
    assert [f.severity for f in doctor({**TINY_VL, "adapter": {"method": "qlora"}}, "MM046").findings] == ["error"]
    assert doctor(TINY_VL, "MM046").findings == []
    launch(stage=2)
    assert doctor({**TINY_VL, "adapter": {"method": "qlora"}}, "MM046").findings == []


def test_mm047_zero3_with_a_multimodal_model(doctor, launch):
    launch(stage=3, ds_json={"zero_optimization": {"stage": 3}})
    rep = doctor(TINY_VL, "MM047")  # the loop keeps the towers in step (masked rows): said, not a warning
    assert [(f.code, f.severity) for f in rep.findings] == [("MM047", "info")]
    assert "masked" in rep.findings[0].message and "MM080" in rep.findings[0].message
    text_only = {"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:counting"}}
    assert doctor(text_only, "MM047").findings == []  # no encoder to skip


def test_mm048_deepspeed_accumulation_is_the_engines(doctor, launch):
    """accelerate runs engine.step() in every accelerator.backward outside accelerator.accumulate(): the
    loop therefore runs each micro-batch inside accumulate() under DeepSpeed (and gives the Accelerator
    the run's accumulation), so grad_accum > 1 is no finding; were that dropped, this test says so."""
    import inspect

    from accelerate.utils.deepspeed import DeepSpeedEngineWrapper

    src = inspect.getsource(DeepSpeedEngineWrapper.backward)
    assert "self.engine.step()" in src and "if sync_gradients" in src  # the premise, in accelerate itself
    from mmtune import build
    from mmtune.train import step as train_step

    assert "accelerator.accumulate(" in inspect.getsource(train_step)
    assert '"gradient_accumulation_steps": resolved.cfg.train.grad_accum' in inspect.getsource(build._deepspeed_kwargs)

    launch(stage=2)
    assert doctor({**TINY_VL, "train": {"grad_accum": 8}}, "MM048").findings == []
    assert doctor({**TINY_VL, "train": {"grad_accum": 1, "micro_batch_size": 4}}, "MM048").findings == []


def test_mm048_deepspeed_json_disagrees_with_the_run(doctor, launch):
    launch(stage=2, ds_json={"gradient_accumulation_steps": 4, "train_micro_batch_size_per_gpu": 8})
    rep = doctor(TINY_VL, "MM048")
    assert [f.severity for f in rep.findings] == ["error", "error"]
    assert "gradient_accumulation_steps=4" in rep.findings[0].message
    assert "train_micro_batch_size_per_gpu=8" in rep.findings[1].message


def test_mm049_deepspeed_json_owns_optimizer_or_precision(doctor, launch):
    launch(stage=2, ds_json={"optimizer": {"type": "AdamW"}, "scheduler": {"type": "WarmupLR"},
                             "fp16": {"enabled": True}})
    rep = doctor(TINY_VL, "MM049", gpu="a100-80gb")  # the run is bf16 there
    msgs = [f.message for f in rep.findings]
    assert [f.severity for f in rep.findings] == ["error"] * 3
    assert "'optimizer'" in msgs[0] and "'scheduler'" in msgs[1] and "enables fp16 and the run is bf16" in msgs[2]
    launch(stage=2, ds_json={"fp16": {"enabled": True}})
    assert doctor({**TINY_VL, "train": {"precision": "fp16"}}, "MM049", gpu="t4").findings == []


def test_mm054_zero_offload_refuses_the_runs_optimizer(doctor, launch, monkeypatch):
    launch(stage=2, ds_json={"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    rep = doctor(TINY_VL, "MM054")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM054", "error")]
    assert "client provided optimizer" in rep.findings[0].message
    launch(stage=2, ds_json={"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                             "zero_force_ds_cpu_optimizer": False})
    assert doctor(TINY_VL, "MM054").findings == []
    launch(stage=2, ds_json={"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}})
    assert doctor(TINY_VL, "MM054").findings == []


def test_mm054_offload_from_the_accelerate_config(doctor, launch, monkeypatch):
    """recipes/accelerate/zero2.yaml style (no JSON): accelerate passes offload_optimizer_device as a variable."""
    launch(stage=2)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu")
    assert [f.severity for f in doctor(TINY_VL, "MM054").findings] == ["error"]
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none")  # what the shipped zero2.yaml sets
    assert doctor(TINY_VL, "MM054").findings == []


def test_mm055_deepspeed_ignores_max_grad_norm(doctor, launch, monkeypatch):
    """accelerate's clip_grad_norm_ under DeepSpeed returns the engine's norm and clips nothing itself."""
    import inspect

    from accelerate import Accelerator

    src = inspect.getsource(Accelerator.clip_grad_norm_)
    assert "DistributedType.DEEPSPEED" in src and "get_global_grad_norm" in src  # the premise

    launch(stage=2)
    rep = doctor({**TINY_VL, "train": {"max_grad_norm": 1.0}}, "MM055")  # no gradient_clipping in the launch
    assert [(f.code, f.severity) for f in rep.findings] == [("MM055", "warning")] and "does not clip" in rep.findings[0].message
    monkeypatch.setenv("ACCELERATE_GRADIENT_CLIPPING", "1.0")  # recipes/accelerate/zero2.yaml's value
    assert doctor({**TINY_VL, "train": {"max_grad_norm": 1.0}}, "MM055").findings == []
    rep = doctor({**TINY_VL, "train": {"max_grad_norm": 0.3}}, "MM055")
    assert [f.severity for f in rep.findings] == ["warning"] and "clips at 1" in rep.findings[0].message
    launch(stage=2, ds_json={"gradient_clipping": "auto"})
    assert doctor({**TINY_VL, "train": {"max_grad_norm": 0.3}}, "MM055").findings == []  # accelerate fills it


def test_mm048_smoke_run_is_checked_with_what_it_runs(launch, tmp_path):
    """`mmtune train --smoke` launches the tiny twin on the CPU with micro-batch <= 2, accumulation <= 2 and fp32:
    the preflight checks the launch's DeepSpeed file against that run, not the recipe's full one (which it used
    to: a file written for the full run passed and the smoke run then met it; one written for the smoke run was
    refused)."""
    import yaml

    from mmtune.commands.train import preflight, preflight_findings, prepare_config, resolve_runs
    from mmtune.errors import MMTuneError

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({**TINY_VL, "output_dir": str(tmp_path / "run"),
                                      "train": {"micro_batch_size": 4, "grad_accum": 8, "gpu": "a100-80gb",
                                                "precision": "bf16", "strategy": "zero2"}}))
    cfg, run_cfg, _ = prepare_config(recipe, [], smoke=True)
    target_run, launched = resolve_runs(cfg, run_cfg, smoke=True)
    assert (target_run.precision, launched.precision) == ("bf16", "fp32")
    assert (launched.cfg.train.micro_batch_size, launched.cfg.train.grad_accum) == (2, 2)
    assert target_run.cfg.train.strategy == launched.cfg.train.strategy == "zero2"

    def found(**kw):
        return sorted((f.code, f.message) for f in preflight_findings(target_run, recipe, [], smoke=True, **kw)
                      if f.code in ("MM048", "MM049"))

    # a DeepSpeed file written for the full run: right for it, wrong for the smoke run that is launched
    launch(stage=2, ds_json={"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 4,
                             "gradient_accumulation_steps": 8, "bf16": {"enabled": True}})
    assert found() == []  # checked against the full run (what the preflight did): nothing to say
    got = found(launched=launched)
    assert [c for c, _ in got] == ["MM048", "MM048", "MM049"], got
    msgs = " | ".join(m for _, m in got)
    assert "gradient_accumulation_steps=8 and the launched --smoke run train.grad_accum=2" in msgs
    assert "train_micro_batch_size_per_gpu=4 and the launched --smoke run train.micro_batch_size=2" in msgs
    assert "enables bf16 and the launched --smoke run is fp32" in msgs
    with pytest.raises(MMTuneError, match="the run was not started"):
        preflight(target_run, recipe, [], skip_checks=False, smoke=True, launched=launched)

    # a file written for the smoke run: clean for it, though the full run would disagree with it
    launch(stage=2, ds_json={"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 2,
                             "gradient_accumulation_steps": 2, "bf16": {"enabled": "auto"}})
    assert found(launched=launched) == []
    assert [c for c, _ in found()] == ["MM048", "MM048"]
    assert preflight(target_run, recipe, [], skip_checks=False, smoke=True, launched=launched) is None
