"""End-to-end loop tests on a tiny Qwen2-VL: the logged loss, exact resume, checkpoints, eval, export."""

import json
from pathlib import Path

import pytest
import torch

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train


def _metrics(out: Path, kind="train"):
    return [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if json.loads(ln)["kind"] == kind]


def test_logged_loss_equals_an_independent_computation(tiny_vl_config):
    """Step 1's logged loss is the token-weighted mean over all 4 records of the accumulated step,
    computed here with the model's own per-record loss (transformers' shift + mean), before the update."""
    from mmtune.data.batches import BatchStream

    cfg = load_config(tiny_vl_config(train={"max_steps": 1, "lr": 1e-2}), [])
    run = build_run(cfg)
    model = run.unwrapped_model()
    stream = BatchStream(len(run.train_set.records), seed=cfg.train.seed, micro_batch_size=2)
    ids = stream.next() + stream.next()
    total, tokens = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in ids:
            enc = run.encoder.encode(run.train_set.records[i])
            batch = run.collator([enc])
            n = int((batch["labels"][:, 1:] != -100).sum())
            out = model(**batch)
            total += float(out.loss) * n
            tokens += n
    model.train()
    expected = total / tokens
    train(run)
    logged = _metrics(Path(cfg.output_dir))[0]
    assert logged["answer_tokens"] == tokens
    assert logged["loss"] == pytest.approx(expected, rel=1e-5)
    assert logged["loss"] > 0.1  # never a scaled or zero value


def test_resume_continues_identically(tiny_vl_config, tmp_path):
    """2N steps straight == N steps, stop (as a kill would), resume N more: same final loss within 1e-6."""
    n = 3
    straight = load_config(tiny_vl_config(train={"max_steps": 2 * n, "save_every": n}, adapter={"dropout": 0.1}),
                           [f"output_dir={tmp_path / 'straight'}"])
    train(build_run(straight))
    broken = load_config(tiny_vl_config(train={"max_steps": 2 * n, "save_every": n}, adapter={"dropout": 0.1}),
                         [f"output_dir={tmp_path / 'broken'}"])
    assert train(build_run(broken), stop_after=n) is None
    assert (tmp_path / "broken" / f"checkpoint-{n}").is_dir()
    assert not (tmp_path / "broken" / "summary.json").exists()
    train(build_run(broken))  # a fresh process would do the same: build, find the checkpoint, continue
    a = _metrics(tmp_path / "straight")
    b = _metrics(tmp_path / "broken")
    assert [r["step"] for r in b] == list(range(1, 2 * n + 1))
    for x, y in zip(a, b):
        assert x["step"] == y["step"]
        assert abs(x["loss"] - y["loss"]) < 1e-6, (x, y)
        assert x["lr"] == pytest.approx(y["lr"])


def test_checkpoints_eval_best_and_summary(tiny_vl_config):
    cfg = load_config(tiny_vl_config(train={"max_steps": 4, "keep_last": 1},
                                     eval={"every": 2, "best_metric": "eval_loss"}), [])
    summary = train(build_run(cfg))
    out = Path(cfg.output_dir)
    assert {"eval", "peak_memory_bytes", "tokens_per_s", "wall_s", "baseline"} <= set(summary)
    assert {"eval_loss", "exact_match"} <= set(summary["eval"])
    assert summary["peak_memory_bytes"] > 0 and summary["tokens_per_s"] > 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 4
    ckpts = sorted(p.name for p in out.glob("checkpoint-*"))
    best = summary["best"]["step"]
    assert "checkpoint-4" in ckpts and f"checkpoint-{best}" in ckpts and len(ckpts) <= 2
    assert (out / "best").resolve().name == f"checkpoint-{best}"
    assert (out / "config.resolved.yaml").is_file()
    assert len(_metrics(out, "eval")) == 2
    assert (out / "checkpoint-4" / "adapter" / "adapter_config.json").is_file()


def test_bf16_run_keeps_one_compute_dtype_and_fp32_trainables(tiny_vl_config):
    cfg = load_config(tiny_vl_config(train={"max_steps": 2, "precision": "bf16"},
                                     adapter={"train_components": ["projector"]}), [])
    run = build_run(cfg)
    model = run.unwrapped_model()
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad and p.is_floating_point()}
    trainable = {p.dtype for p in model.parameters() if p.requires_grad}
    assert frozen == {torch.bfloat16} and trainable == {torch.float32}
    summary = train(run)
    losses = [r["loss"] for r in _metrics(Path(cfg.output_dir))]
    assert all(0 < x < 100 for x in losses) and summary["steps"] == 2


def test_fresh_start_in_a_reused_folder_does_not_mix_runs(tiny_vl_config):
    cfg = load_config(tiny_vl_config(train={"max_steps": 3, "resume": False}), [])
    train(build_run(cfg))
    cfg2 = load_config(tiny_vl_config(train={"max_steps": 2, "resume": False}), [])
    train(build_run(cfg2))
    out = Path(cfg.output_dir)
    assert [r["step"] for r in _metrics(out)] == [1, 2]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
