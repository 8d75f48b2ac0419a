"""data.packing on vs off (and vs data.group_by_length): tokens/s on a set whose lengths vary 5x.

    python benchmarks/packing.py [--steps 40] [--repeats 5] [--json]

The set (benchmarks/grouping.py's): N image+text records for tiny/qwen2-vl (a 56-px PNG each, a question of
16-100 words, a one-digit answer), ~55 to ~340 tokens. Every variant: LoRA r8, fp32, one thread, SDPA,
data.max_length=512, 1 micro-batch per step, its own process, interleaved (plain, grouped, packed, plain,
...). plain / grouped: micro-batches of --mbs records, padded to the longest; packed: micro-batches of
--pack-rows rows of up to 512 tokens, several records per row. tokens/s = non-pad tokens of the timed
steps (the first is a warm-up) / their step time; padding fraction = pad positions / all positions.
Median of the repeats, with the spread (min-max), and each variant over the plain run just before it.
Also tokens per CPU-second of this process over the same steps (batch drawing + optimizer step): on a CPU
shared with other work, wall-clock rates move with the others' load, CPU time for the same work far less.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grouping import _median, run_variants, train_rows, variant_config  # noqa: E402 - the same set and config

# What the results file holds beside the provenance (tests/test_benchmark_results.py).
RESULT_KEYS = ("model", "records", "steps", "micro_batch_size", "packed_rows_per_micro_batch", "repeats",
               "plain", "grouped", "packed")

VARIANTS = ("plain", "grouped", "packed")


def run_one(args, variant: str) -> dict:
    import time

    from mmtune.build import build_run
    from mmtune.train.loop import train

    out = Path(args.out) / variant
    mbs = args.pack_rows if variant == "packed" else args.mbs
    cfg = variant_config(args, out, mbs, "model.attn_implementation=sdpa",
                         f"data.group_by_length={str(variant == 'grouped').lower()}",
                         f"data.packing={str(variant == 'packed').lower()}")
    t0 = time.perf_counter()
    run = build_run(cfg)
    lengths = [x["total"] for x in run.train_lengths]
    cpu = _count_cpu_seconds()
    summary = train(run)
    rows = train_rows(out)
    timed = rows[1:]
    secs = sum(r["step_time_s"] for r in timed)
    tokens = sum(r["tokens_per_s"] * r["step_time_s"] for r in timed)
    cpu_s = sum(cpu[1:])  # the same timed steps: this process's CPU time drawing batches and stepping
    return {"tokens_per_s": tokens / secs, "tokens_per_cpu_s": tokens / cpu_s, "tokens_per_step": tokens / len(timed),
            "answer_tokens_per_step": sum(r["answer_tokens"] for r in timed) / len(timed),
            "step_time_s": secs / len(timed), "padding_fraction": summary["padding_fraction"],
            "data_wait_fraction": summary["data_wait_fraction"], "peak_rss_bytes": summary["peak_memory_bytes"],
            "wall_s": time.perf_counter() - t0, "final_loss": rows[-1]["loss"],
            "length_min": min(lengths), "length_max": max(lengths)}


def _count_cpu_seconds() -> list[float]:
    """Per step, the process CPU time spent in the loop's two parts of a step (drawing the micro-batches,
    the optimizer step). Wall-clock tokens/s on a CPU shared with other work moves with their load; this
    process's CPU time for the same work (one thread) moves far less, so both are reported."""
    import time

    import mmtune.train.loop as loop
    import mmtune.train.step as step

    per_step: list[float] = []
    draw, opt = loop.next_micro_batch, step.optimizer_step
    pending = [0.0]

    def timed_draw(*a, **k):
        t = time.process_time()
        try:
            return draw(*a, **k)
        finally:
            pending[0] += time.process_time() - t

    def timed_step(*a, **k):
        t = time.process_time()
        try:
            return opt(*a, **k)
        finally:
            per_step.append(pending[0] + time.process_time() - t)
            pending[0] = 0.0

    loop.next_micro_batch, step.optimizer_step = timed_draw, timed_step
    return per_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--mbs", type=int, default=8, help="records per micro-batch, unpacked")
    ap.add_argument("--pack-rows", type=int, default=4, help="rows of 512 tokens per micro-batch, packed")
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="tiny/qwen2-vl")
    ap.add_argument("--out", default="runs/bench_packing")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print("RESULT " + json.dumps(run_one(args, args.variant)))
        return
    from _provenance import dumps, provenance

    started = provenance()
    runs = run_variants(__file__, args, VARIANTS, "--pack-rows", str(args.pack_rows))
    res = {v: {**{k: _median([r[k] for r in rs]) for k in rs[0]},
               "tokens_per_s_spread": [min(r["tokens_per_s"] for r in rs), max(r["tokens_per_s"] for r in rs)],
               "tokens_per_cpu_s_spread": [min(r["tokens_per_cpu_s"] for r in rs), max(r["tokens_per_cpu_s"] for r in rs)]}
           for v, rs in runs.items()}
    pairs = {v: [x["tokens_per_s"] / p["tokens_per_s"] for p, x in zip(runs["plain"], runs[v])] for v in VARIANTS[1:]}
    cpu_pairs = {v: [x["tokens_per_cpu_s"] / p["tokens_per_cpu_s"] for p, x in zip(runs["plain"], runs[v])]
                 for v in VARIANTS[1:]}
    report = {"model": args.model, "records": args.records, "steps": args.steps, "micro_batch_size": args.mbs,
              "packed_rows_per_micro_batch": args.pack_rows, "repeats": args.repeats, **res,
              **{f"ratio_{v}_over_plain_pairwise_median": _median(p) for v, p in pairs.items()},
              **{f"ratio_{v}_over_plain_pairwise_runs": p for v, p in pairs.items()},
              **{f"cpu_ratio_{v}_over_plain_pairwise_median": _median(p) for v, p in cpu_pairs.items()},
              **{f"cpu_ratio_{v}_over_plain_pairwise_runs": p for v, p in cpu_pairs.items()}}
    if args.json:
        print(dumps(report, started))
        return
    for v in VARIANTS:
        r = res[v]
        print(f"{v:8} tokens/s {r['tokens_per_s']:8.0f} ({r['tokens_per_s_spread'][0]:.0f}-{r['tokens_per_s_spread'][1]:.0f})"
              f"  per CPU-s {r['tokens_per_cpu_s']:8.0f}"
              f" ({r['tokens_per_cpu_s_spread'][0]:.0f}-{r['tokens_per_cpu_s_spread'][1]:.0f})"
              f"  padding {r['padding_fraction']:.1%}  step {r['step_time_s'] * 1e3:.1f} ms"
              f"  tokens/step {r['tokens_per_step']:.0f}")
    for v, p in pairs.items():
        print(f"{v} / plain tokens/s (pairwise median): {_median(p):.2f}  runs {', '.join(f'{x:.2f}' for x in p)}")
        c = cpu_pairs[v]
        print(f"{v} / plain tokens per CPU-s (pairwise median): {_median(c):.2f}  runs {', '.join(f'{x:.2f}' for x in c)}")


if __name__ == "__main__":
    main()
