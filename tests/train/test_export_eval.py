"""`mmtune export` folders load with transformers / peft and give the trained logits; `mmtune eval` scores a checkpoint."""

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from mmtune.build import build_run
from mmtune.cli import app
from mmtune.config import load_config
from mmtune.train.loop import train


def _trained(tiny_vl_config, **sections):
    cfg = load_config(tiny_vl_config(train={"max_steps": 2, "lr": 5e-2}, **sections), [])
    run = build_run(cfg)
    train(run)
    model = run.unwrapped_model().eval()
    batch = run.collator([run.encoder.encode(run.train_set.records[0])])
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    return cfg, batch, logits


def test_export_adapter_and_merged_reload_with_same_logits(tiny_vl_config):
    from peft import PeftModel
    from transformers import Qwen2VLForConditionalGeneration

    from mmtune.models.tiny import build_tiny

    cfg, batch, logits = _trained(tiny_vl_config)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    r = CliRunner().invoke(app, ["export", cfg.output_dir])
    assert r.exit_code == 0, r.output
    adapter_dir = Path(cfg.output_dir) / "checkpoint-2" / "export"
    base, _ = build_tiny("tiny/qwen2-vl")  # the same seed rebuilds the same random base
    peft_model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    with torch.no_grad():
        torch.testing.assert_close(peft_model(**inputs).logits, logits, rtol=1e-4, atol=1e-4)

    r = CliRunner().invoke(app, ["export", cfg.output_dir, "--merge"])
    assert r.exit_code == 0, r.output
    merged = Qwen2VLForConditionalGeneration.from_pretrained(
        str(Path(cfg.output_dir) / "checkpoint-2" / "export-merged")).eval()
    assert not any("lora" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(**inputs).logits, logits, rtol=1e-4, atol=1e-4)


def test_export_full_finetune_is_a_from_pretrained_folder(tiny_vl_config):
    from transformers import Qwen2VLForConditionalGeneration

    cfg, batch, logits = _trained(tiny_vl_config, adapter={"method": "full"})
    r = CliRunner().invoke(app, ["export", cfg.output_dir])
    assert r.exit_code == 0, r.output
    m = Qwen2VLForConditionalGeneration.from_pretrained(str(Path(cfg.output_dir) / "checkpoint-2" / "export")).eval()
    with torch.no_grad():
        torch.testing.assert_close(m(**{k: v for k, v in batch.items() if k != "labels"}).logits, logits,
                                   rtol=1e-4, atol=1e-4)


def test_eval_command_scores_a_checkpoint(tiny_vl_config):
    cfg_path = tiny_vl_config(train={"max_steps": 2})
    cfg = load_config(cfg_path, [])
    train(build_run(cfg))
    ckpt = Path(cfg.output_dir) / "checkpoint-2"
    r = CliRunner().invoke(app, ["eval", str(cfg_path), f"checkpoint={ckpt}"])
    assert r.exit_code == 0, r.output
    saved = json.loads((ckpt / "eval.json").read_text())
    final = json.loads((Path(cfg.output_dir) / "summary.json").read_text())["eval"]
    # The same weights on the same eval records give the same eval loss as the run's own final eval.
    assert abs(saved["metrics"]["eval_loss"] - final["eval_loss"]) < 1e-5
    assert len(saved["predictions"]) == 4


def test_cli_config_typo_is_a_clean_error(tiny_vl_config):
    r = CliRunner().invoke(app, ["train", str(tiny_vl_config()), "train.max_stesp=3"])
    assert r.exit_code == 2
    assert "did you mean 'train.max_steps'" in r.output
    assert "Traceback" not in r.output


def test_train_runs_doctor_fast_checks_first_and_stops_on_errors(tiny_vl_config):
    cfg_path = tiny_vl_config()
    r = CliRunner().invoke(app, ["train", str(cfg_path), "train.gpu=t4", "train.precision=bf16",
                                 "model.attn_implementation=flash_attention_2"])
    assert r.exit_code == 2, r.output
    assert "MM025" in r.output and "model.attn_implementation=sdpa" in r.output
    assert "the run was not started" in r.output
    assert not (Path(load_config(cfg_path, []).output_dir) / "metrics.jsonl").exists()


def test_eval_command_reads_only_the_eval_split_and_counts_its_skipped_records(tiny_vl_config, tmp_path):
    """`mmtune eval` never opens data.train (it may be gone or huge); bad eval records under
    data.on_bad_record=skip are counted in eval.json and in the run's summary.json, never dropped silently."""
    data = Path(load_config(tiny_vl_config(), []).data.train)
    lines = data.read_text().splitlines()
    bad_eval = data.parent / "eval_with_bad.jsonl"  # beside the images its records name
    bad_eval.write_text("\n".join(lines[:4] + ['{"messages": "not a list"}', "{not json"]) + "\n")
    cfg_path = tiny_vl_config(train={"max_steps": 1, "grad_accum": 1},
                              data={"eval": str(bad_eval), "on_bad_record": "skip"})
    cfg = load_config(cfg_path, [])
    train(build_run(cfg))
    summary = json.loads((Path(cfg.output_dir) / "summary.json").read_text())
    assert sum(summary["skipped_eval_records"].values()) == 2, summary["skipped_eval_records"]
    from mmtune.report import write_report

    write_report([cfg.output_dir])  # the report draws the eval split's skips beside training's
    assert "skipped eval records by reason" in (Path(cfg.output_dir) / "plots" / "skipped_eval.svg").read_text()
    ckpt = Path(cfg.output_dir) / "checkpoint-1"
    r = CliRunner().invoke(app, ["eval", str(cfg_path), f"checkpoint={ckpt}", f"data.train={tmp_path / 'gone.jsonl'}"])
    assert r.exit_code == 0, r.output
    assert "2 eval record(s) skipped" in r.output
    saved = json.loads((ckpt / "eval.json").read_text())
    assert sum(saved["skipped_eval_records"].values()) == 2 and len(saved["predictions"]) == 4
