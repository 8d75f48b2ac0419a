"""Planned vs published GPU memory of real fine-tuning runs (benchmarks/published/runs.yaml).

Each row of the YAML is a run someone measured on a GPU and published (ms-swift's benchmark table, the
Qwen README's profiling table, ms-swift's example scripts, torchtune's README): the planner plans the same
run through the library API `mmtune.plan.predict` (what `mmtune plan` calls) and the script prints the
planned figure that matches what the row measures (`max_memory_reserved` -> peak reserved;
`peak_memory_active` -> peak allocated; `unstated` -> process total, what nvidia-smi shows), the published
one and the signed error, then mean / max |error| per group and over
every published figure once ("all": rows marked `bound`, a second plan of a figure already in the table,
are left out of it; rows marked `held_out`, figures collected after the planner was tuned, have their own
"all held-out" line and kinds), and the same per kind of run (long sequence, 4-bit, multimodal, full FT, LoRA). Rows
whose source states the time of an optimizer step (`published_step_s`) are compared with the planned step
time too. A source that publishes its dataset's token statistics (`lengths:` in runs.yaml) has them drawn
as record lengths (`record_lengths`) and declared with the plan, which then replays the run's micro-batches
at those lengths through the fixed-segment allocator (plan/run_growth.py).

    python benchmarks/published_runs.py [--only ID_OR_GROUP ...] [--layers N] [--out results/NAME]

`--layers N` cuts every decoder to N layers (a quick check that rows run; the figures are then not
comparable). `--out PREFIX` writes PREFIX.json and PREFIX.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
RUNS = HERE / "published" / "runs.yaml"
GIB = 2**30
# what the row's figure measures -> the planned figure it is compared with. peak_memory_active is
# torchtune's torch.cuda.memory_stats()["active_bytes.all.peak"]: the bytes of blocks in use, which on one
# stream is max_memory_allocated.
MEASURES = {"max_memory_reserved": "peak_reserved_bytes", "unstated": "process_total_bytes",
            "nvidia_smi": "process_total_bytes", "peak_memory_active": "peak_allocated_bytes",
            "oom_lower_bound": "process_total_bytes"}
# `measures: oom_lower_bound`: a run that ran out of memory. Its figure is not the run's peak but a floor under
# it, read from the OOM message: "X GiB is allocated by PyTorch" + "Tried to allocate Y GiB" (bound_on:
# allocated, the planned peak allocated must reach X + Y), "this process has P GiB memory in use" + Y
# (bound_on: process_total), or, where the message gives no numbers, the card's capacity itself (bound_on:
# process_total: an OOM says the process needed more than the card). Such a row has no signed error: it is
# reported as "bound held" (planned >= bound) or "bound violated" (the plan is below what the run is known to
# have needed), with the plan's fits / does not fit on the row's card, and never enters the error summaries.
BOUND_ON = {"allocated": "peak_allocated_bytes", "reserved": "peak_reserved_bytes", "process_total": "process_total_bytes"}
UNITS = {"GiB": 1.0, "G": 1e9 / GIB}  # "G": a table that does not say; read as 10^9 bytes
REQUIRED = ("id", "group", "source", "model", "method", "seq", "quote", "published", "measures")
RESULT_KEYS = ("rows", "summary", "step_summary", "kind_summary", "layers", "alloc_conf")


def kinds_of(row: dict) -> list[str]:
    """The kinds of run a row belongs to, for the per-kind summary (a row can be several: a 4-bit run at 8k)."""
    out = []
    tokens = row.get("record_tokens") or row["seq"]  # the planned record (multimodal rows: shorter than the cap)
    if tokens >= 4096:
        out.append("long sequence (>= 4,096 tokens)")
    if row["method"] == "qlora":
        out.append("4-bit / QLoRA")
    if row.get("image"):
        out.append("multimodal (image)")
    if row["method"] == "full":
        out.append("full fine-tuning")
    if row["method"] == "lora":
        out.append("LoRA (16-bit)")
    return out


def load_runs(path: Path = RUNS) -> dict:
    """The YAML, checked: every row has the required keys, a known source/measure and a unique id."""
    import yaml

    spec = yaml.safe_load(path.read_text())
    problems, seen = [], set()
    for i, row in enumerate(spec.get("rows", [])):
        where = f"{path.name} row {i} ({row.get('id', '?')})"
        problems += [f"{where}: missing {k}" for k in REQUIRED if k not in row]
        if row.get("source") not in spec.get("sources", {}):
            problems.append(f"{where}: unknown source {row.get('source')!r}")
        if row.get("measures") not in MEASURES:
            problems.append(f"{where}: measures {row.get('measures')!r} is not one of {sorted(MEASURES)}")
        if row.get("measures") == "oom_lower_bound" and row.get("bound_on", "process_total") not in BOUND_ON:
            problems.append(f"{where}: bound_on {row.get('bound_on')!r} is not one of {sorted(BOUND_ON)}")
        if row.get("unit", "GiB") not in UNITS:
            problems.append(f"{where}: unit {row.get('unit')!r} is not one of {sorted(UNITS)}")
        if row.get("id") in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(row.get("id"))
    if problems:
        raise ValueError("; ".join(problems))
    return spec


def model_folder(name: str, models: dict, root: Path) -> str:
    """A hub id of an embedded config as is; a config under `models:` written to a folder with the local
    tokenizer (token ids only steer matching; the planned sizes come from the config)."""
    if name not in models:
        return name
    folder = root / name
    if not (folder / "config.json").is_file():
        from mmtune.models.local_tokenizer import make_tokenizer

        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(models[name]["config"]))
        make_tokenizer().save_pretrained(folder)
    return str(folder)


def overrides_for(row: dict, model: str) -> list[str]:
    tokens = row.get("record_tokens") or row["seq"]
    return [f"model.name={model}", f"adapter.method={row['method']}",
            f"model.gradient_checkpointing={str(row.get('grad_ckpt', True)).lower()}",
            f"model.attn_implementation={row.get('attn', 'flash_attention_2')}",
            f"data.max_length={max(tokens, row['seq'])}", f"train.micro_batch_size={row.get('batch', 1)}",
            f"train.grad_accum={row.get('grad_accum', 16)}", f"train.precision={row.get('precision', 'bf16')}",
            # No published run used Liger-Kernel (ms-swift 1.x and the Qwen README predate it; torchtune runs its
            # own modules; ms-swift 3.x's --use_liger defaults to false and no example sets it), while the
            # planner's `train.fused_kernels=auto` picks Liger on a CUDA target with mmtune[gpu] assumed: the
            # runs are planned with transformers' own modules unless a row says otherwise.
            "train.fused_kernels=none", *row.get("overrides", [])]


def record_lengths(stats: dict | None, max_length: int) -> list[int] | None:
    """The record lengths of a source's dataset as its publication states them (`lengths:` in runs.yaml: mean,
    std, min, max tokens; nothing more is published): `n` lengths drawn from the log-normal of that mean and
    std, clipped to [min, max], seeded; then the run's truncation: `delete` drops records over max_length
    (ms-swift 1.x's default truncation_strategy), `truncate` cuts them to it. The planner replays the run's
    micro-batches at these lengths (plan/run_growth.py); None where the source states no lengths."""
    if not stats:
        return None
    import math
    import random

    rng = random.Random(stats.get("seed", 0))
    s2 = math.log(1 + (stats["std"] / stats["mean"]) ** 2)
    mu = math.log(stats["mean"]) - s2 / 2
    drawn = [min(stats["max"], max(stats["min"], round(rng.lognormvariate(mu, math.sqrt(s2)))))
             for _ in range(stats.get("n", 4000))]
    if stats.get("truncation", "delete") == "delete":
        return [n for n in drawn if n <= max_length]
    return [min(n, max_length) for n in drawn]


def plan_row(row: dict, spec: dict, root: Path, layers: int | None = None, alloc_conf: str | None = None) -> dict:
    from mmtune.config import load_config
    from mmtune.models.model_config import DECODER_LAYERS
    from mmtune.plan.batch import Declared
    from mmtune.plan.planner import predict

    model = model_folder(row["model"], spec.get("models", {}), root)
    cfg = load_config(None, overrides_for(row, model))
    declared = Declared(images=[tuple(row["image"])] if row.get("image") else [],
                        audio_seconds=[float(row["audio_s"])] if row.get("audio_s") else [],
                        tokens=row.get("record_tokens") or row["seq"],
                        lengths=record_lengths(spec["sources"][row["source"]].get("lengths"), row["seq"]))
    token = DECODER_LAYERS.set(layers) if layers else None
    # The published runs used torch's default allocator (fixed segments) unless the row says otherwise;
    # mmtune's own runs default to expandable segments (resolve/decisions.decide_cuda_allocator), so the
    # run is planned with the allocator it was measured under, through the same decision.
    alloc = alloc_conf or row.get("alloc_conf", "expandable_segments:False")
    saved = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = alloc
    t0 = time.perf_counter()
    try:
        r = predict(cfg, gpu=row.get("gpu", "a100-80gb"), declared=declared, plan_eval=False)
    finally:
        if token is not None:
            DECODER_LAYERS.reset(token)
        if saved is None:
            os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        else:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = saved
    oom = row["measures"] == "oom_lower_bound"
    field = BOUND_ON[row.get("bound_on", "process_total")] if oom else MEASURES[row["measures"]]
    planned = getattr(r, field) / GIB
    published = row["published"] * UNITS[row.get("unit", "GiB")]
    out = {"id": row["id"], "group": row["group"], "published": row["published"], "unit": row.get("unit", "GiB"),
           "published_gib": round(published, 3), "measures": row["measures"], "compared_with": field,
           "planned_gib": round(planned, 3)}
    if oom:  # a floor under the run's peak, not the peak: held or violated, never a signed error
        out["oom_bound"] = oom_verdict(planned, published, r.fits)
    else:
        out["error_pct"] = round(100 * (planned - published) / published, 2)
    if row.get("unit") == "G":  # the other reading of an unstated unit
        out["error_pct_if_gib"] = round(100 * (planned - row["published"]) / row["published"], 2)
    out["kinds"] = kinds_of(row)
    out["planned_step_s"] = round(r.step_time_s, 3)
    if row.get("published_step_s"):
        out["published_step_s"] = row["published_step_s"]
        out["step_error_pct"] = round(100 * (r.step_time_s - row["published_step_s"]) / row["published_step_s"], 2)
    return {**out, "bound": bool(row.get("bound")), "held_out": bool(row.get("held_out")), "alloc_conf": alloc,
            "peak_allocated_gib": round(r.peak_allocated_bytes / GIB, 3),
            "peak_reserved_gib": round(r.peak_reserved_bytes / GIB, 3),
            "process_total_gib": round(r.process_total_bytes / GIB, 3),
            "tokens": r.batch.get("tokens_per_record"),
            "media_tokens": {k: v["max"] for k, v in r.media_tokens.items() if v["max"]},
            "breakdown_gib": {k: round(v / GIB, 3) for k, v in r.breakdown.items() if v},
            "peak_phase": r.peak_phase, "plan_s": round(time.perf_counter() - t0, 1)}


def oom_verdict(planned_gib: float, bound_gib: float, plan_fits: bool) -> dict:
    """An out-of-memory row: the bound held when the plan reaches what the run is known to have needed
    (planned >= bound); `plan_fits` is the plan's verdict on the row's card (a right call on an OOM is "does not
    fit"); `below_bound_pct` how far under the bound a violated plan is."""
    held = planned_gib >= bound_gib
    return {"held": held, "plan_fits": bool(plan_fits),
            "below_bound_pct": 0.0 if held else round(100 * (bound_gib - planned_gib) / bound_gib, 2)}


def oom_summary(results: list[dict]) -> dict | None:
    rows = [r for r in results if "oom_bound" in r]
    if not rows:
        return None
    return {"rows": len(rows), "bound_held": sum(r["oom_bound"]["held"] for r in rows),
            "plan_says_does_not_fit": sum(not r["oom_bound"]["plan_fits"] for r in rows)}


def _line(group: str, e: list[float]) -> dict:
    return {"group": group, "rows": len(e), "mean_abs_error_pct": round(sum(map(abs, e)) / len(e), 2),
            "max_abs_error_pct": round(max(map(abs, e)), 2), "mean_signed_error_pct": round(sum(e) / len(e), 2)}


def summarise(results: list[dict], key: str = "error_pct", by: str = "group") -> list[dict]:
    """Mean / max |error| of `key` per `by` ("group", or "kinds": a row counted in each of its kinds) and
    over every published figure once ("all": `bound` rows left out). Rows marked `held_out` (figures the
    planner was not developed against) are kept apart: their kinds are prefixed "held-out", and they have
    their own "all held-out" line instead of entering "all"."""
    groups: dict[str, list[float]] = {}
    for res in results:
        if key not in res:
            continue
        for g in (res[by] if by == "kinds" else [res[by]]):
            if by == "kinds" and res["bound"]:
                continue
            if by == "kinds" and res.get("held_out"):
                g = f"held-out {g}"
            groups.setdefault(g, []).append(res[key])
    out = [_line(g, e) for g, e in groups.items()]
    for name, held in (("all", False), ("all held-out", True)):  # each published figure once
        every = [r[key] for r in results if not r["bound"] and key in r and bool(r.get("held_out")) == held]
        if every:
            out.append(_line(name, every))
    return out


def _table(title: str, summary: list[dict]) -> list[str]:
    lines = ["", title, f"{'group':42s} {'rows':>4s} {'mean |err|':>10s} {'max |err|':>9s} {'mean signed':>11s}"]
    for s in summary:
        lines.append(f"{s['group']:42s} {s['rows']:4d} {s['mean_abs_error_pct']:9.2f}% {s['max_abs_error_pct']:8.2f}% "
                     f"{s['mean_signed_error_pct']:+10.2f}%")
    return lines


def _held(b: dict) -> str:
    fit = "plan: fits" if b["plan_fits"] else "plan: does not fit"
    return f"held, {fit}" if b["held"] else f"VIOLATED by {b['below_bound_pct']:.1f} %, {fit}"


def render(results: list[dict], summary: list[dict], kind_summary: list[dict] = (), step_summary: list[dict] = ()) -> str:
    lines = [f"{'row':32s} {'compared with':>13s} {'published':>9s} {'planned':>8s} {'error':>8s}  "
             f"{'step s pub':>10s} {'planned':>7s} {'error':>8s}  tokens  peak phase",
             f"{'':32s} {'':>13s} {'GiB':>9s} {'GiB':>8s}"]
    for r in results:
        step = (f"{r['published_step_s']:10.2f} {r['planned_step_s']:7.2f} {r['step_error_pct']:+7.1f}%"
                if "step_error_pct" in r else f"{'-':>10s} {r['planned_step_s']:7.2f} {'':>8s}")
        err = f"{r['error_pct']:+7.1f}%" if "error_pct" in r else f"{'-':>8s}"
        lines.append(f"{r['id']:32s} {r['compared_with'].split('_bytes')[0]:>13s} {r['published_gib']:9.2f} "
                     f"{r['planned_gib']:8.2f} {err}  {step}  {r['tokens']!s:>6s}  {r['peak_phase']}"
                     + (f"  (published read as GiB: {r['error_pct_if_gib']:+.1f}%)" if "error_pct_if_gib" in r else "")
                     + (f"  [OOM bound {_held(r['oom_bound'])}]" if "oom_bound" in r else ""))
    oom = oom_summary(results)
    if oom:
        lines += ["", f"out-of-memory rows (published = a lower bound on the run's peak): {oom['rows']} rows, bound held "
                      f"on {oom['bound_held']}, plan says does not fit on {oom['plan_says_does_not_fit']}"]
    lines += _table("peak memory, by source group", summary)
    if kind_summary:
        lines += _table("peak memory, by kind of run (a row in each of its kinds)", kind_summary)
    if step_summary:
        lines += _table("step time (rows whose source states one)", step_summary)
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default=str(RUNS))
    ap.add_argument("--only", action="append", default=[], help="a row id or group (repeatable)")
    ap.add_argument("--layers", type=int, default=None, help="cut decoders to N layers (a smoke run)")
    ap.add_argument("--out", default=None, help="write PREFIX.json and PREFIX.txt")
    ap.add_argument("--alloc-conf", default=None,
                    help="plan every row under this PYTORCH_CUDA_ALLOC_CONF (default: the allocator each row was "
                         "measured under, torch's fixed segments unless the row says)")
    args = ap.parse_args(argv)
    from _provenance import provenance, text_header, write_results

    started = provenance()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    spec = load_runs(Path(args.runs))
    rows = [r for r in spec["rows"] if not args.only or r["id"] in args.only or r["group"] in args.only]
    if not rows:
        print(f"no row matches {args.only}", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="mmtune_published_") as tmp:
        for row in rows:
            res = plan_row(row, spec, Path(tmp), layers=args.layers, alloc_conf=args.alloc_conf)
            results.append(res)
            what = f"{res['error_pct']:+.1f} %" if "error_pct" in res else f"OOM bound {_held(res['oom_bound'])}"
            print(f"{res['id']:32s} published {res['published_gib']:6.2f} planned {res['planned_gib']:6.2f} GiB "
                  f"({what}) [{res['plan_s']} s]", flush=True)
    summary = summarise(results)
    kind_summary = summarise(results, by="kinds")
    step_summary = summarise(results, key="step_error_pct")
    text = render(results, summary, kind_summary, step_summary)
    print("\n" + text)
    if args.out:
        write_results(args.out + ".json", {"layers": args.layers, "alloc_conf": args.alloc_conf,
                                           "rows": results, "summary": summary, "kind_summary": kind_summary,
                                           "step_summary": step_summary, "oom_summary": oom_summary(results)},
                      started)
        Path(args.out + ".txt").write_text(text_header(started) + "\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
