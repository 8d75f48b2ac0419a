"""Scale sweep: step time and peak memory over sequence length x micro-batch, mmtune's loop and the
plain transformers + peft loop side by side, with the planner's prediction for each cell.

    python benchmarks/scale_sweep.py [--model tiny/qwen2] [--seqs 256,512,1024,2048,4096] [--batches 1,2,4,8]
        [--steps 4] [--repeats 2] [--out runs/bench_scale] [--json FILE]

Each cell trains on text-only records that fill the sequence exactly (no padding), LoRA r8 on every
projection, fp32, no gradient checkpointing, one micro-batch per step, one thread per process. One
process per (variant, sequence length) runs that length's batch sizes in turn, each cell on a fresh model
and optimizer (interleaved: ours, plain / plain, ours on the next repeat). Per cell and variant:
  - step time: the median wall time of steps 2..N (step 1 warms up) of an unprofiled run, and the median
    process CPU seconds of the same steps (mmtune's from metrics.jsonl `cpu_s`; the machine is shared: CPU
    seconds say how much work a step did, wall time also counts the waits for a core);
  - peak memory: the storage of the weights plus the CPU allocator's peak above it over a separate
    2-step run under torch.profiler's memory events (plan/measure.py's `cpu_peak`, the figure the planner
    is checked against): batch, activations, logits, gradients and the optimizer state;
  - mmtune runs its own loop (`mmtune.train.loop.train`) on the records; the plain loop is
    benchmarks/throughput.py's (`plain_model` / `plain_micro_batch` / `plain_step`); mmtune's loss is on
    the answer tokens, the plain loop's on every token (same forward and backward work).
  - predicted: `mmtune.plan.predict` for the same config on this CPU (tensor peak; step time from its
    CPU throughput model).
Then fits peak = m0 + m1*tokens + m2*(batch*seq^2) and step = t0 + t1*tokens + t2*(batch*seq^2) per
variant (least squares) to show which term grows: tokens are batch*seq, batch*seq^2 is the attention
score work (and its memory where the kernel keeps the scores: eager; SDPA's CPU flash kernel does not).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import plain_micro_batch, plain_model, plain_step  # noqa: E402 - the same plain loop

# what its --json file carries (tests/test_benchmark_results.py)
RESULT_KEYS = ("model", "attn", "steps", "repeats", "cells", "fits")

WORD = "red"  # one token of the tiny twins' tokenizer: a record's length is set a token at a time


def make_records(folder: Path, model: str, seq: int, n: int) -> tuple[Path, int]:
    """n identical-length text records whose chat-template encoding is `seq` tokens (the plain loop's
    count; mmtune's own count is reported separately). Returns (jsonl path, tokens per record)."""
    from mmtune.models.tiny import build_tiny

    _, processor = build_tiny(model)
    tok = getattr(processor, "tokenizer", processor)

    def length(k: int) -> int:
        msgs = [{"role": "user", "content": " ".join([WORD] * k)}, {"role": "assistant", "content": "3"}]
        return len(tok.apply_chat_template(msgs, tokenize=True))

    lo, hi = 1, seq
    while lo < hi:  # the largest k whose record fits seq tokens
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if length(mid) <= seq else (lo, mid - 1)
    row = {"messages": [{"role": "user", "content": " ".join([WORD] * lo)}, {"role": "assistant", "content": "3"}]}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"text_{seq}.jsonl"
    path.write_text((json.dumps(row) + "\n") * n)
    return path, length(lo)


def _config(args, data: Path, out: Path, steps: int, max_length: int):
    from mmtune.config import load_config

    return load_config(None, [
        f"model.name={args.model}", "model.gradient_checkpointing=false",
        f"data.train={data}", "data.eval=null", f"data.max_length={max_length}", "adapter.method=lora", "adapter.r=8",
        "adapter.dropout=0.0", f"train.max_steps={steps}", f"train.micro_batch_size={args.batch}", "train.grad_accum=1",
        "train.precision=fp32", "train.lr=1e-4", "train.warmup_steps=0", "train.scheduler=constant",
        "train.max_grad_norm=null", "train.device=cpu", "logging.tensorboard=false", f"output_dir={out}",
        "train.resume=false", "eval.every=null", "train.num_workers=0"])


def _weights_bytes(model) -> int:
    from mmtune.plan.measure import _storage_bytes

    return _storage_bytes(list(model.parameters()) + list(model.buffers()))


def run_ours(args) -> dict:
    from mmtune.build import build_run
    from mmtune.compat.torch_internals import cpu_allocator_peak
    from mmtune.train.loop import train

    data, out = Path(args.data), Path(args.out) / f"ours_{args.seq}_{args.batch}"
    run = build_run(_config(args, data, out, args.steps, args.seq + 64))
    tokens = run.train_lengths[0]["total"]
    c0 = time.process_time()
    train(run)
    cpu_s = (time.process_time() - c0) / args.steps
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    times = [r["step_time_s"] for r in rows if r["kind"] == "train"][1:]
    cpu = [r["cpu_s"] for r in rows if r["kind"] == "train"][1:]
    run = build_run(_config(args, data, out, 2, args.seq + 64))
    weights = _weights_bytes(run.model)
    peak = cpu_allocator_peak(lambda: train(run))
    res = {"tokens_per_record": tokens, "step_s": median(times), "step_s_runs": times, "cpu_s": median(cpu),
           "cpu_s_per_step_whole_run": cpu_s,
           "peak_bytes": weights + peak}
    if args.predict:
        from mmtune.plan.batch import Declared
        from mmtune.plan.planner import predict

        p = predict(_config(args, data, out, 2, tokens), gpu=None, declared=Declared(), plan_eval=False)
        res.update(predicted_peak_bytes=p.tensor_peak_bytes, predicted_step_s=p.step_time_s,
                   predicted_peak_phase=p.peak_phase)
    return res


def run_plain(args) -> dict:
    from mmtune.compat.torch_internals import cpu_allocator_peak
    from mmtune.data.sources import load_records

    cfg = _config(args, Path(args.data), Path(args.out) / "plain", args.steps, args.seq + 64)
    records = load_records(str(args.data), cfg.data, split="train").records

    def steps(model, processor, opt, n: int, times: list, cpu: list):
        for i in range(n):  # records are identical: which ones a step takes does not matter
            t0, c0 = time.perf_counter(), time.process_time()
            batch, n_tok = plain_micro_batch(processor, records[i * args.batch:(i + 1) * args.batch], "cpu")
            plain_step(model, opt, [batch])
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        return n_tok

    model, processor, opt = plain_model(args.model, "cpu")
    times: list[float] = []
    cpu: list[float] = []
    c0 = time.process_time()
    n_tok = steps(model, processor, opt, args.steps, times, cpu)
    cpu_s = (time.process_time() - c0) / args.steps
    model, processor, opt = plain_model(args.model, "cpu")
    weights = _weights_bytes(model)
    peak = cpu_allocator_peak(lambda: steps(model, processor, opt, 2, [], []))
    return {"tokens_per_record": n_tok // args.batch, "step_s": median(times[1:]), "step_s_runs": times[1:],
            "cpu_s": median(cpu[1:]), "cpu_s_per_step_whole_run": cpu_s, "peak_bytes": weights + peak}


def _fit(cells: list[dict], key: str) -> dict:
    """Least squares y = c0 + c1*tokens + c2*batch*seq^2 over the cells; coefficients and R^2."""
    import numpy as np

    x = np.array([[1.0, c["batch"] * c["seq"], c["batch"] * c["seq"] ** 2] for c in cells])
    y = np.array([c[key] for c in cells])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    r2 = 1 - float(resid @ resid) / float(((y - y.mean()) ** 2).sum())
    return {"const": float(coef[0]), "per_token": float(coef[1]), "per_batch_seq2": float(coef[2]), "r2": r2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny/qwen2")
    ap.add_argument("--seqs", default="256,512,1024,2048,4096")
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--steps", type=int, default=4, help="steps per timed run (the first is a warm-up)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="runs/bench_scale")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--variant", choices=["ours", "plain"], help=argparse.SUPPRESS)
    ap.add_argument("--seq", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)  # set per cell in the variant's process
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--predict", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        import torch

        torch.set_num_threads(1)
        results = []
        for b in [int(b) for b in args.batches.split(",")]:
            args.batch = b
            results.append((run_ours if args.variant == "ours" else run_plain)(args))
        print("RESULT " + json.dumps(results))
        return
    from _provenance import provenance, write_results

    started = provenance()
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    seqs, batches = [int(s) for s in args.seqs.split(",")], [int(b) for b in args.batches.split(",")]
    cells = []
    print(f"{'seq':>5} {'batch':>5} {'ours step s':>11} {'plain step s':>12} {'ratio':>6} {'ours MiB':>9} "
          f"{'plain MiB':>9} {'ratio':>6} {'pred MiB':>9} {'pred/ours':>9} {'ours cpu s':>10} {'plain cpu s':>11} {'ratio':>6} "
          f"{'load':>5}",
          flush=True)
    mib = 2**20
    for seq in seqs:
        data, tokens = make_records(Path(args.out) / "data", args.model, seq, (args.steps + 1) * max(batches))
        runs: dict[str, list[list[dict]]] = {"ours": [], "plain": []}  # [repeat][batch index]
        load = []
        for rep in range(args.repeats):
            for variant in (["ours", "plain"] if rep % 2 == 0 else ["plain", "ours"]):
                cmd = [sys.executable, __file__, "--variant", variant, "--seq", str(seq), "--batches", args.batches,
                       "--data", str(data), "--model", args.model, "--steps", str(args.steps),
                       "--out", args.out] + (["--predict"] if variant == "ours" and rep == 0 else [])
                load.append(os.getloadavg()[0])
                out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
                if out.returncode != 0 or not line:
                    sys.exit(f"{variant} seq={seq} failed:\n{out.stderr[-3000:]}")
                runs[variant].append(json.loads(line[0][7:]))
        for j, batch in enumerate(batches):
            o, p = [r[j] for r in runs["ours"]], [r[j] for r in runs["plain"]]
            cell = {"seq": seq, "batch": batch, "tokens_per_record_plain": tokens,
                    "tokens_per_record_ours": o[0]["tokens_per_record"],
                    "ours_step_s": median(r["step_s"] for r in o), "plain_step_s": median(r["step_s"] for r in p),
                    "ours_cpu_s": median(r["cpu_s"] for r in o), "plain_cpu_s": median(r["cpu_s"] for r in p),
                    "ours_peak_bytes": median(r["peak_bytes"] for r in o), "plain_peak_bytes": median(r["peak_bytes"] for r in p),
                    "predicted_peak_bytes": o[0]["predicted_peak_bytes"], "predicted_step_s": o[0]["predicted_step_s"],
                    "predicted_peak_phase": o[0]["predicted_peak_phase"],
                    # each repeat's ours/plain pair ran back to back, under the same load
                    "step_ratio_pairwise": [a["step_s"] / b["step_s"] for a, b in zip(o, p)],
                    "loadavg_1min_at_process_starts": load, "runs": {"ours": o, "plain": p}}
            cell["step_ratio"] = cell["ours_step_s"] / cell["plain_step_s"]
            cell["cpu_ratio"] = cell["ours_cpu_s"] / cell["plain_cpu_s"]
            cell["cpu_ratio_pairwise"] = [a["cpu_s"] / b["cpu_s"] for a, b in zip(o, p)]
            cell["peak_ratio"] = cell["ours_peak_bytes"] / cell["plain_peak_bytes"]
            cell["predicted_over_ours_peak"] = cell["predicted_peak_bytes"] / cell["ours_peak_bytes"]
            cells.append(cell)
            print(f"{seq:5d} {batch:5d} {cell['ours_step_s']:11.4f} {cell['plain_step_s']:12.4f} {cell['step_ratio']:6.2f} "
                  f"{cell['ours_peak_bytes'] / mib:9.1f} {cell['plain_peak_bytes'] / mib:9.1f} {cell['peak_ratio']:6.2f} "
                  f"{cell['predicted_peak_bytes'] / mib:9.1f} {cell['predicted_over_ours_peak']:9.2f} "
                  f"{cell['ours_cpu_s']:10.4f} {cell['plain_cpu_s']:11.4f} {cell['cpu_ratio']:6.2f} {median(load):5.2f}",
                  flush=True)
    fits = {f"{v}_{k}": _fit(cells, f"{v}_{k}") for v in ("ours", "plain")
            for k in ("step_s", "cpu_s", "peak_bytes")}
    fits["predicted_peak_bytes"] = _fit(cells, "predicted_peak_bytes")
    print("least-squares fits y = const + per_token*tokens + per_batch_seq2*batch*seq^2:")
    for k, f in fits.items():
        print(f"  {k:22s} const {f['const']:.4g}  per token {f['per_token']:.4g}  per batch*seq^2 "
              f"{f['per_batch_seq2']:.4g}  R^2 {f['r2']:.4f}")
    report = {"model": args.model, "attn": "sdpa", "steps": args.steps, "repeats": args.repeats,
              "cells": cells, "fits": fits}
    if args.json:
        write_results(args.json, report, started)


if __name__ == "__main__":
    main()
