"""train.objective=dpo through the one loop: logged rewards, the reference (adapters off / frozen copy),
exact resume of a run killed mid-way, and the decision in the start-up summary and config.resolved.yaml."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train


def make_pairs(folder: Path, n: int, seed: int = 0) -> Path:
    """n preference pairs over small images: the chosen answer is the right count, the rejected a wrong one."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        img = Image.new("RGB", (56 + 28 * (i % 2), 56), (rng.randrange(256), 200, 100))
        k = rng.randint(1, 4)
        d = ImageDraw.Draw(img)
        for j in range(k):
            d.ellipse([4 + 12 * j, 20, 12 + 12 * j, 28], fill=(0, 0, 0))
        img.save(folder / f"img{i}.png")
        wrong = rng.choice([c for c in range(1, 6) if c != k])
        rows.append({"images": [f"img{i}.png"], "prompt": "<image>How many circles are there?",
                     "chosen": str(k), "rejected": f"{wrong} circles" if i % 2 else str(wrong)})
    path = folder / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _cfg(tmp_path, out: str, *extra):
    data = make_pairs(tmp_path / "data", 8)
    return load_config(None, [
        "model.name=tiny/qwen2-vl", "model.gradient_checkpointing=false", f"data.train={data}",
        "data.format=preference", "data.max_length=256", "adapter.r=4", "adapter.dropout=0",
        "train.objective=dpo", "train.max_steps=4", "train.micro_batch_size=2", "train.grad_accum=2",
        "train.lr=5e-3", "train.precision=fp32", "train.device=cpu", "train.warmup_steps=0", "train.save_every=2",
        "train.scheduler=constant", "logging.tensorboard=false", f"output_dir={tmp_path / out}", *extra])


def _rows(out: Path):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def test_dpo_trains_and_logs_rewards(tmp_path):
    cfg = _cfg(tmp_path, "run")
    run = build_run(cfg)
    assert any(d.startswith("train.objective: dpo (sigmoid, beta=0.1)") for d in run.decisions)
    assert any(d.startswith("reference model: the base model with the adapters disabled") for d in run.decisions)
    train(run)
    out = Path(cfg.output_dir)
    resolved = (out / "config.resolved.yaml").read_text()
    assert "objective: dpo" in resolved and "reference model" in resolved
    rows = _rows(out)
    first, last = rows[0], rows[-1]
    # step 1: the policy is the reference (LoRA B = 0), so every reward is 0 and the loss is log 2
    assert first["loss"] == pytest.approx(0.693147, abs=1e-5) and first["rewards/margins"] == 0
    for k in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen"):
        assert k in last
    assert last["rewards/margins"] > 0 and last["loss"] < first["loss"]
    assert last["rewards/margins"] == pytest.approx(last["rewards/chosen"] - last["rewards/rejected"], abs=1e-6)
    from mmtune.report.build import write_report

    html = write_report([out]).read_text()  # report.html: the objective's decision and the rewards chart
    assert "train.objective: dpo" in html and "DPO rewards" in html


def test_a_dpo_run_killed_mid_way_resumes_bit_identically(tmp_path):
    straight = _cfg(tmp_path, "straight")
    train(build_run(straight))
    broken = _cfg(tmp_path, "broken")
    assert train(build_run(broken), stop_after=3) is None  # killed after step 3; checkpoint-2 is the last
    train(build_run(broken))
    a, b = _rows(tmp_path / "straight"), _rows(tmp_path / "broken")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for x, y in zip(a, b):
        for k in ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "grad_norm"):
            assert x[k] == y[k], (k, x, y)
    wa = load_file(str(tmp_path / "straight" / "checkpoint-4" / "trainable.safetensors"))
    wb = load_file(str(tmp_path / "broken" / "checkpoint-4" / "trainable.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_full_fine_tuning_takes_a_frozen_copy_of_the_starting_weights(tmp_path):
    """adapter.method=full: the reference is a copy made before step 1 and never trained; a resumed run takes it
    from the starting weights again (not from the checkpoint), so it equals the run that never stopped."""
    extra = ("adapter.method=full", "train.lr=1e-4", "train.max_steps=3")
    cfg = _cfg(tmp_path, "full", *extra)
    run = build_run(cfg)
    assert any(d.startswith("reference model: a frozen copy") for d in run.decisions)
    ref = run.objective.reference_model
    assert ref is not None and not any(p.requires_grad for p in ref.parameters())
    before = {n: p.detach().clone() for n, p in ref.named_parameters()}
    train(run)
    assert all(torch.equal(before[n], p) for n, p in ref.named_parameters())
    rows = _rows(Path(cfg.output_dir))
    assert rows[0]["rewards/margins"] == 0 and rows[-1]["rewards/margins"] != 0
    broken = _cfg(tmp_path, "full_broken", *extra)
    assert train(build_run(broken), stop_after=3 - 1) is None  # checkpoint-2 saved, then killed
    train(build_run(broken))
    for x, y in zip(rows, _rows(tmp_path / "full_broken")):
        assert x["loss"] == y["loss"] and x["rewards/margins"] == y["rewards/margins"]
