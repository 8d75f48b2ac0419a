"""A run of varying batch lengths through both CUDA allocator models: how far reserved memory grows past
the one-step plan with torch's fixed segments, and with expandable segments (mmtune's default).

The plan traces one worst-case step. A real run draws batches of other lengths, and the caching allocator
keeps what earlier steps' tensors left cached; with fixed segments a later step's tensors may not fit
those segments and new ones are added (published variable-length runs: 4-47 % above a one-step plan,
docs/plan.md). Here one fake-tensor run of N steps, each padded to its own batch's longest record drawn
from a length distribution, is traced once (`trace_config(step_batches=...)`) and its events replayed
through `allocator.replay` with and without expandable segments; the one-step worst-case plan is the
reference. Nothing runs on a GPU: this shows what the two allocator models predict, not a measurement.

    python benchmarks/allocator_varying_lengths.py [--model Qwen/Qwen2.5-7B-Instruct] [--steps 24]
        [--micro-batch 4] [--max-length 2048] [--seed 0] [--set KEY=VALUE ...] [--out results/NAME]
        [--images 640x480,480x640,... --text-tokens 40,160]

`--images`: an image model's run; each step's record is one image of a size drawn from the list plus
a text of a length drawn from `--text-tokens` (each micro-batch holds copies of that record).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

RESULT_KEYS = ("args", "lengths", "rows")  # what write_results puts beside the provenance
GIB = 2**30


def batch_lengths(n: int, micro_batch: int, max_length: int, seed: int) -> list[int]:
    """Each step's padded length: the longest of `micro_batch` records whose lengths follow a log-normal
    shape typical of chat SFT data (median ~ max_length / 5, a tail cut at max_length)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        recs = [min(max_length, max(32, int(rng.lognormvariate(0, 0.8) * max_length / 5))) for _ in range(micro_batch)]
        out.append(max(recs))
    return out


def image_steps(resolved, n: int, sizes: list[tuple[int, int]], text: tuple[int, int], seed: int):
    """(size, tokens) per step: a drawn image size and its record's tokens (the image's, as the run's
    processor counts them with the template, plus a drawn text length)."""
    from mmtune.data.encode import Encoder
    from mmtune.plan.batch import Declared, _declared_record

    enc = Encoder.for_run(resolved)
    media = {wh: int(enc.encode(_declared_record(Declared(images=[wh])), check_length=False)["input_ids"].shape[-1])
             for wh in sizes}
    rng = random.Random(seed)
    return [(wh, media[wh] + rng.randint(*text)) for wh in (rng.choice(sizes) for _ in range(n))]


def replay_curve(events, expandable: bool, capacity: int, ends: list[int]) -> list[int]:
    """Peak reserved after each step."""
    from mmtune.plan.allocator import CachingAllocatorModel, ExpandableAllocatorModel

    m = (ExpandableAllocatorModel if expandable else CachingAllocatorModel)(capacity)
    out, j = [], 0
    for end in ends:
        m.apply(events[j:end])
        j = end
        out.append(m.peak_reserved)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct")
    ap.add_argument("--gpu", default="a100-80gb")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], help="more config overrides (key=value)")
    ap.add_argument("--images", default=None, help="image sizes WxH,WxH,... (an image model's run)")
    ap.add_argument("--text-tokens", default="40,160", help="text tokens per image record: LO,HI")
    ap.add_argument("--out", default=None, help="write PREFIX.json and PREFIX.txt")
    args = ap.parse_args(argv)
    from _provenance import provenance, text_header, write_results

    started = provenance()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from mmtune.config import load_config
    from mmtune.plan.batch import Declared, worst_case_batch
    from mmtune.plan.planner import resolve_for_plan, trace_config

    over = [f"model.name={args.model}", f"data.max_length={args.max_length}", "train.grad_accum=1",
            f"train.micro_batch_size={args.micro_batch}", "train.precision=bf16",
            "model.gradient_checkpointing=true", *args.set]
    resolved = resolve_for_plan(load_config(None, over), args.gpu)
    capacity = resolved.target.gpu.total_bytes
    t0 = time.perf_counter()
    if args.images:
        sizes = [tuple(int(x) for x in wh.split("x")) for wh in args.images.split(",")]
        drawn = image_steps(resolved, args.steps, sizes, tuple(int(x) for x in args.text_tokens.split(",")), args.seed)
        decls = [Declared(images=[wh], tokens=n) for wh, n in drawn]
        lengths = [n for _, n in drawn]
        # the one-step plan: the largest image with the longest text drawn (the run's worst record)
        worst = max(drawn, key=lambda d: (d[0][0] * d[0][1], d[1]))
        worst_decl = Declared(images=[worst[0]], tokens=max(n for wh, n in drawn if wh == worst[0]))
    else:
        lengths = batch_lengths(args.steps, args.micro_batch, args.max_length, args.seed)
        decls = [Declared(tokens=n) for n in lengths]
        worst_decl = Declared(tokens=args.max_length)
    batches = [worst_case_batch(resolved, declared=d).micro_batch for d in decls]
    _, _, ex, _ = trace_config(resolved, step_batches=batches)
    run_events = ex.tracker.trace.events
    _, _, one, _ = trace_config(resolved, declared=worst_decl)
    one_events = one.tracker.trace.events
    traced_s = time.perf_counter() - t0
    from mmtune.plan.run_growth import step_ends

    ends = step_ends(run_events)
    rows = {}
    for name, expandable in (("fixed segments (torch default)", False), ("expandable segments (mmtune default)", True)):
        plan = replay_curve(one_events, expandable, capacity, [len(one_events)])[-1]
        curve = replay_curve(run_events, expandable, capacity, ends)
        rows[name] = {"plan_worst_step_gib": round(plan / GIB, 3), "run_gib": round(curve[-1] / GIB, 3),
                      "run_over_plan_pct": round(100 * (curve[-1] - plan) / plan, 2),
                      "after_steps_gib": {str(k): round(curve[k - 1] / GIB, 3)
                                          for k in (1, 2, 4, 8, 16, 24, 48) if k <= len(curve)}}
    what = f"images {args.images}, " if args.images else ""
    lines = [f"{args.model} {' '.join(args.set)} LoRA bf16, checkpointing, micro-batch {args.micro_batch}, {args.steps} "
             f"steps of {what}lengths {min(lengths)}..{max(lengths)} (median {sorted(lengths)[len(lengths) // 2]}), "
             f"planned for {args.gpu}",
             f"{'allocator':40s} {'1-step plan':>12s} {'run':>9s} {'run vs plan':>12s}  reserved after k steps"]
    for name, r in rows.items():
        lines.append(f"{name:40s} {r['plan_worst_step_gib']:9.2f} GiB {r['run_gib']:6.2f} GiB {r['run_over_plan_pct']:+10.1f} %  "
                     + ", ".join(f"{k}: {v:.2f}" for k, v in r["after_steps_gib"].items()))
    lines.append(f"(traced in {traced_s:.0f} s on this CPU; allocator models only, no GPU measurement)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        write_results(args.out + ".json", {"args": vars(args), "lengths": lengths, "rows": rows}, started)
        Path(args.out + ".txt").write_text(text_header(started) + "\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
