"""One resolved run: train, plan, doctor and eval agree by construction (issue "One resolved run")."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmtune.config import load_config
from mmtune.resolve import gpu_target, local_target, resolve_run

ROOT = Path(__file__).resolve().parents[1]
STAGE2 = ROOT / "recipes" / "seed004_llava_clip_stage2.yaml"
T4_LINE = "train.precision: fp16 + GradScaler (bf16 unsupported on T4 (sm_75))"


def test_doctor_plan_and_train_smoke_report_the_same_precision_decision(tmp_path):
    """seed004 stage 2 with profile=t4_qlora and train.precision=bf16 on the command line (over the profile's fp16)
    on a T4: bf16 becomes fp16 + GradScaler, and doctor, plan and train --smoke all say so with the same reason."""
    from typer.testing import CliRunner

    from mmtune.cli import app
    from mmtune.doctor.runner import run_doctor
    ov = ["profile=t4_qlora", "train.precision=bf16", f"output_dir={tmp_path / 'run'}"]
    rep = run_doctor(STAGE2, ov, "t4", only=["MM005"])
    assert [f.severity for f in rep.findings] == ["info"] and T4_LINE in rep.findings[0].message
    planned = resolve_run(load_config(STAGE2, ov), gpu_target("t4"))
    assert planned.decision("train.precision").line() == T4_LINE and planned.loss_scaling
    # without model.composed_from (what the stage-1 folder will be), the plan has no model to trace
    res = CliRunner().invoke(app, ["plan", str(STAGE2), "--gpu", "t4", *ov, "model.composed_from=null"],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 2 and T4_LINE in res.output  # said, then: the stage-1 model is not there yet
    assert "does not exist" in res.output
    res = CliRunner().invoke(app, ["train", str(STAGE2), "--smoke", *ov], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert T4_LINE in res.output
    # where each overridden value came from: the start-up summary and config.resolved.yaml's header
    source = "config adapter.method: 'qlora' (profile t4_qlora (command line); was 'lora' from "
    assert source in res.output
    assert "config train.precision: 'bf16' (command line: train.precision=bf16; was 'fp16' from profile t4_qlora" \
        in res.output


def test_plan_decisions_are_printed_even_when_the_model_is_missing():
    """The stage-2 model folder does not exist until stage 1 ran: plan still says what it decided."""
    cfg = load_config(STAGE2, ["profile=t4_qlora", "train.precision=bf16", "model.composed_from=null"])
    r = resolve_run(cfg, gpu_target("t4"))
    assert r.processor is None and "does not exist" in r.processor_error.what
    assert r.decision("train.precision").line() == T4_LINE


def test_embedded_qwen2_vl_counts_391_tokens_for_640x480_without_max_pixels():
    from PIL import Image

    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record
    from mmtune.plan.batch import Declared, worst_case_batch

    cfg = load_config(None, ["model.name=Qwen/Qwen2-VL-7B-Instruct", "data.max_length=1024"])
    assert cfg.model.max_pixels is None
    r = resolve_run(cfg, gpu_target("a100-40gb"))
    assert r.media.max_pixels == 12845056 and r.decision("model.max_pixels").reason == "the processor's default"
    rec = Record("r", "test", [{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (640, 480))},
                                                             {"type": "text", "text": "What is it?"}]},
                               {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}])
    assert Encoder.for_run(r).measure(rec)["image"] == 391  # 644x476 -> 23x17 merged patches of 28 px
    assert worst_case_batch(r, declared=Declared(images=[(640, 480)])).media_tokens["image"]["max"] == 391


def test_typo_in_eval_metrics_fails_at_load_time():
    from mmtune.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config(None, ["model.name=tiny/qwen2", "eval.metrics=[exact_mach]"])
    assert "did you mean 'exact_match'" in str(e.value) and e.value.problems[0]["key"] == "eval.metrics"
    with pytest.raises(ConfigError) as e:
        load_config(None, ["model.name=tiny/qwen2", "eval.best_metric=anls"])
    assert "eval.best_metric='anls' is not computed" in str(e.value)


def test_unknown_component_for_the_family_fails_with_the_components_it_has():
    from mmtune.errors import ConfigError

    cfg = load_config(None, ["model.name=tiny/llava", "adapter.train_components=[audio]"])
    with pytest.raises(ConfigError) as e:
        resolve_run(cfg, local_target("cpu"))
    assert "llava has no audio component" in e.value.what and "projector" in e.value.fix


def test_one_pad_id_and_one_split_rule(tmp_path):
    (tmp_path / "train.jsonl").write_text("{}\n")
    (tmp_path / "val.jsonl").write_text("{}\n")
    cfg = load_config(None, ["model.name=tiny/qwen2-vl", f"data.train={tmp_path}", f"data.eval={tmp_path}"])
    r = resolve_run(cfg, local_target("cpu"))
    assert r.cfg.data.train == f"{tmp_path}::train" and r.cfg.data.eval == f"{tmp_path}::val"
    tok = r.processor.tokenizer
    assert r.pad_token_id == (tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)


def test_resolved_config_file_lists_every_decision(tmp_path):
    from mmtune.build import build_run
    from mmtune.train.loop import train

    cfg = load_config(None, ["model.name=tiny/qwen2", "data.train=synthetic:arithmetic", "train.max_steps=1",
                             "data.synthetic_train_size=4", "train.precision=fp16", "train.device=cpu",
                             f"output_dir={tmp_path}", "logging.tensorboard=false", "eval.generate=false"])
    run = build_run(cfg)
    assert run.resolved.precision == "fp16" and run.resolved.loss_scaling  # torch's CPU autocast + GradScaler
    train(run)
    text = (tmp_path / "config.resolved.yaml").read_text()
    assert "# train.precision: fp16 + GradScaler (requested, on CPU (train.device=cpu): torch's CPU fp16 autocast" in text
    assert load_config(tmp_path / "config.resolved.yaml").train.precision == "fp16"
