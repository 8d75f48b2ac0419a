"""The contracts every registered family keeps, parametrised over the registry (tests/family_registry.py):
a family added as one module is held to all of them without editing a list.

- the step's logged loss equals an independent computation with the model's own loss;
- the planner's tensor peak matches a real CPU step of the same run;
- `mmtune export --merge` writes a folder the family's transformers class loads, with the trained logits;
- full fine-tuning and QLoRA train with gradient checkpointing and write a checkpoint.
(Also over the registry: scan length == encoded length in tests/data/test_lengths.py, the doctor silent on
each family's default setups in tests/doctor/test_issue_checks_recipes.py, loss falls and the adapter
round-trips in tests/test_families_e2e.py, the twin's class and components in tests/models/test_tiny_families.py.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train
from tests.family_registry import DATA, DATA_FILE, TWINS, family_of_twin, first_medium

sys.path.insert(0, str(Path(__file__).resolve().parent / "train"))
from equivalence_runs import video_only  # noqa: E402


def _data(twin: str, tmp_path: Path, n: int = 2) -> str:
    medium = first_medium(twin)
    if DATA_FILE[medium] is None:
        return "synthetic:arithmetic"
    rows = [json.loads(ln) for ln in (DATA / DATA_FILE[medium]).read_text().splitlines() if ln.strip()]
    if medium == "video":
        rows = [video_only(r) for r in rows]
    out = tmp_path / "fixed.jsonl"
    out.write_text("\n".join(json.dumps(r) for r in rows[:n]) + "\n")
    return str(out)


def _config(twin: str, tmp_path: Path, **train_over) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"),
        "model": {"name": twin},
        "data": {"train": _data(twin, tmp_path), "media_root": str(DATA), "max_length": 2048,
                 "synthetic_train_size": 2},
        "adapter": {"method": "lora", "r": 8, "dropout": 0.0},
        "train": {"max_steps": 1, "micro_batch_size": 1, "grad_accum": 2, "lr": 1e-2, "precision": "fp32",
                  "device": "cpu", "scheduler": "constant", "seed": 0, **train_over},
        "logging": {"tensorboard": False},
    }))
    return path


@pytest.mark.parametrize("twin", TWINS)
def test_logged_loss_equals_an_independent_computation(twin, tmp_path):
    """Step 1's logged loss is the token-weighted mean of the model's own per-record loss over the step's
    records (before the update): the loop's normalisation is the same for every family."""
    run = build_run(load_config(_config(twin, tmp_path), []))
    model = run.unwrapped_model()
    total, tokens = 0.0, 0
    model.eval()
    with torch.no_grad():
        for r in run.train_set.records:
            batch = run.collator([run.encoder.encode(r)])
            n = int((batch["labels"][:, 1:] != -100).sum())
            total += float(model(**batch).loss) * n
            tokens += n
    model.train()
    train(run)
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert logged["answer_tokens"] == tokens
    assert logged["loss"] == pytest.approx(total / tokens, rel=1e-5)


@pytest.mark.parametrize("twin", TWINS)
def test_plan_matches_a_real_cpu_step(twin, tmp_path):
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    cfg = load_config(_config(twin, tmp_path), ["model.gradient_checkpointing=true"])
    res = predict(cfg, plan_eval=False)
    batch = worst_case_batch(resolve_for_plan(cfg)).micro_batch
    measured = measure_step(cfg, batch).peak_allocated_bytes
    assert abs(res.tensor_peak_bytes - measured) / measured <= 0.02, (res.tensor_peak_bytes, measured)


@pytest.mark.parametrize("twin", TWINS)
def test_merged_export_loads_with_the_family_class(twin, tmp_path):
    import transformers
    from typer.testing import CliRunner

    from mmtune.cli import app

    cfg = load_config(_config(twin, tmp_path, max_steps=2, micro_batch_size=2, grad_accum=1), [])
    run = build_run(cfg)
    train(run)
    model = run.unwrapped_model().eval()
    batch = run.collator([run.encoder.encode(run.train_set.records[0])])
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        trained = model(**inputs).logits
    r = CliRunner().invoke(app, ["export", cfg.output_dir, "--merge"])
    assert r.exit_code == 0, r.output
    cls = getattr(transformers, family_of_twin(twin).model_class)
    merged = cls.from_pretrained(str(Path(cfg.output_dir) / "checkpoint-2" / "export-merged")).eval()
    assert not any("lora" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(**inputs).logits, trained, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["full", "qlora"])
@pytest.mark.parametrize("twin", TWINS)
def test_full_and_qlora_train_and_checkpoint(twin, method, tmp_path):
    """Every family also trains in full and with QLoRA (4-bit decoder + LoRA), with gradient checkpointing,
    and writes a checkpoint a run resumes from."""
    cfg = load_config(_config(twin, tmp_path, max_steps=2, save_every=2),
                      [f"adapter.method={method}", "model.gradient_checkpointing=true"])
    train(build_run(cfg))
    losses = [json.loads(ln)["loss"] for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and all(x == x and x > 0 for x in losses), losses
    assert (tmp_path / "run" / "checkpoint-2").is_dir()
