"""Where a training step's CPU time goes, mmtune vs the plain transformers + peft loop, phase by phase.

    python benchmarks/step_cpu.py [--models tiny/qwen2-vl,tiny/qwen2] [--steps 12] [--repeats 5] [--json OUT]

Phases of one optimizer step (micro-batch --mbs, accumulation --accum), each timed on its own:
- encode: ours `encode_many` on a micro-batch's records, as the loop's dataset calls it for records not in its
  cache (data.cache_mb): per record the chat template, answer spans and checks, one processor call for the
  micro-batch split back per record, each record's label mask; plain: the seeds' chat template + one processor
  call on the raw records (which pads as well);
- collate: ours `Collator` (padding, media concatenation); plain: its label mask (every non-pad token);
- fwd+bwd: ours `mmtune.loss.loss_sum_and_output` + `accelerator.backward` of the token-normalised sum
  (train/step.py's arithmetic, fp32 logits copy included); plain: the model's own loss / accum, backward;
- optimizer: ours optimizer + scheduler step, zero grads; plain: AdamW step, zero grads;
- step: ours the loop's real `train.step.optimizer_step` on the batches built above (the phases' sum
  without the data), plain `plain_step` (throughput.py): a check that the split phases add up.
Then "micro-batch" = encode + collate and "whole step" = micro-batch building + step.
A last row times one long text record (--long-words words in its answer): ours `Encoder.encode` vs the
plain template + tokenizer call.

The same records, model size and LoRA rank as benchmarks/throughput.py (its `_config`, `plain_model`).
One thread; ours and plain alternate within each repeat (order flipped every repeat), each phase's
per-step mean is taken per repeat, and the median over repeats is reported with the ratio ours / plain.

A before/after comparison on a shared machine (the load changes from minute to minute):
    python benchmarks/step_cpu.py --before-src /tmp/before/src --rounds 3 --repeats 3 \
        --save benchmarks/results/step_cpu_{}_cpu2_DATE
runs this script for the other checkout's code and this one's alternately (before, after, after, before,
...), one process each, and writes each side's figures as the median over its rounds ({} -> before / after,
.json and .txt), the after/before ratios with them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))

PHASES = ("encode", "collate", "fwd_bwd", "optimizer")
# The top-level keys of a results file (tests/test_benchmark_results.py), beside the provenance keys
# (--before-src files also carry "rounds").
RESULT_KEYS = ("header", "results")
DATA = {"tiny/qwen2": "synthetic:arithmetic"}  # text twins; the others take the counting images


def _args_for(args, model):
    ns = argparse.Namespace(**vars(args))
    ns.model, ns.device, ns.precision, ns.workers, ns.set = model, "cpu", "fp32", 0, [
        f"data.train={DATA.get(model, 'synthetic:counting')}", "data.cache_mb=0"]
    ns.out = f"{args.out}/{model.replace('/', '_')}"
    return ns


class Ours:
    def __init__(self, args):
        from throughput import _config

        from mmtune.build import build_run
        from mmtune.data.sources import load_records

        self.run = build_run(_config(args))
        self.records = load_records(self.run.cfg.data.train, self.run.cfg.data, split="train").records
        self.args = args

    def step(self, recs_per_mb, t: dict) -> None:
        from mmtune.data.encode_batch import encode_many
        from mmtune.loss import loss_sum_and_output
        from mmtune.train.step import count_answer_tokens, optimizer_step

        run, acc = self.run, self.run.accelerator
        t0 = time.perf_counter()
        items = [encode_many(run.encoder, recs) for recs in recs_per_mb]  # the loop's path (train/feed.py)
        t1 = time.perf_counter()
        mbs = [run.collator(it) for it in items]
        t2 = time.perf_counter()
        scale = 1 / sum(count_answer_tokens(mb["labels"]) for mb in mbs)
        for mb in mbs:
            total, _, _ = loss_sum_and_output(run.model, mb, impl=run.cfg.train.loss_impl)
            acc.backward(total * scale)
        t3 = time.perf_counter()
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        optimizer_step(run.model, run.optimizer, run.scheduler, mbs, accelerator=acc,
                       max_grad_norm=run.cfg.train.max_grad_norm, trainable_params=run.trainable_params,
                       loss_impl=run.cfg.train.loss_impl)
        t5 = time.perf_counter()
        for k, v in zip(PHASES + ("step",), (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            t[k] = t.get(k, 0.0) + v

    def encode_one(self, record):
        return self.run.encoder.encode(record, check_length=False)  # longer than the recipe's data.max_length


class Plain:
    def __init__(self, args):
        from throughput import _base_model, plain_model

        self.model, self.processor, self.opt = plain_model(args.model, "cpu", base=_base_model(args))
        self.pad = getattr(self.processor, "tokenizer", self.processor).pad_token_id

    def _batch(self, recs):
        from throughput import _text_only

        texts, images = [], []
        for r in recs:
            texts.append(self.processor.apply_chat_template(_text_only(r.messages), tokenize=False))
            images.extend(p["image"] for m in r.messages for p in m["content"] if p["type"] == "image")
        return self.processor(text=texts, **({"images": images} if images else {}), padding=True,
                              return_tensors="pt")

    def step(self, recs_per_mb, t: dict) -> None:
        from throughput import plain_step

        t0 = time.perf_counter()
        batches = [self._batch(recs) for recs in recs_per_mb]
        t1 = time.perf_counter()
        for b in batches:
            b["labels"] = b["input_ids"].masked_fill(b["input_ids"] == self.pad, -100)
        t2 = time.perf_counter()
        for b in batches:
            loss = self.model(**b).loss / len(batches)
            loss.backward()
        t3 = time.perf_counter()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        plain_step(self.model, self.opt, batches)
        t5 = time.perf_counter()
        for k, v in zip(PHASES + ("step",), (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            t[k] = t.get(k, 0.0) + v

    def encode_one(self, record):
        from throughput import _text_only

        text = self.processor.apply_chat_template(_text_only(record.messages), tokenize=False)
        return self.processor(text=[text], return_tensors="pt")


def _long_record(words: int):
    from mmtune.data.records import Record

    answer = " ".join(f"item {i} weighs {i * 7 % 13} units" for i in range(words // 5))
    return Record("long", "bench:long", [{"role": "user", "content": [{"type": "text", "text": "List the items."}]},
                                         {"role": "assistant", "content": [{"type": "text", "text": answer}]}])


def bench_model(args, model: str) -> dict:
    import torch

    torch.manual_seed(0)
    a = _args_for(args, model)
    ours, plain = Ours(a), Plain(a)
    records, n_mb = ours.records, args.mbs
    per_step = args.mbs * args.accum
    runs: dict[str, list[dict]] = {"ours": [], "plain": []}
    for rep in range(args.repeats):
        order = [("ours", ours), ("plain", plain)] if rep % 2 == 0 else [("plain", plain), ("ours", ours)]
        for name, variant in order:
            t: dict = {}
            for s in range(args.steps + 1):  # step 0 warms up and is not timed
                base = (s * per_step) % max(1, len(records) - per_step)
                recs = [records[base + i * n_mb: base + (i + 1) * n_mb] for i in range(args.accum)]
                variant.step(recs, t if s else {})
            runs[name].append({k: v / args.steps * 1e3 for k, v in t.items()})  # ms per step
    out = {"model": model, "data": DATA.get(model, "synthetic:counting"), "ms_per_step": {}, "ratio": {}}
    for name in runs:
        for rows in (runs[name],):
            for row in rows:
                row["micro_batch"] = row["encode"] + row["collate"]
                row["whole_step"] = row["micro_batch"] + row["step"]
        out["ms_per_step"][name] = {k: {"median": round(median(r[k] for r in runs[name]), 3),
                                        "min": round(min(r[k] for r in runs[name]), 3),
                                        "max": round(max(r[k] for r in runs[name]), 3)} for k in runs[name][0]}
    ratios = {}
    for k in out["ms_per_step"]["ours"]:
        per_rep = [o[k] / p[k] for o, p in zip(runs["ours"], runs["plain"]) if p[k] > 0]
        ratios[k] = {"median": round(median(per_rep), 2), "min": round(min(per_rep), 2),
                     "max": round(max(per_rep), 2)} if per_rep else None
    out["ratio"] = ratios
    if model in DATA:  # a text model: one long record
        rec = _long_record(args.long_words)
        n = int(ours.encode_one(rec)["input_ids"].numel())
        times: dict[str, list[float]] = {"ours": [], "plain": []}
        for rep in range(args.repeats):
            for name, variant in ([("ours", ours), ("plain", plain)] if rep % 2 == 0 else [("plain", plain), ("ours", ours)]):
                t0 = time.perf_counter()
                for _ in range(args.long_calls):
                    variant.encode_one(rec)
                times[name].append((time.perf_counter() - t0) / args.long_calls * 1e3)
        out["long_record"] = {"tokens": n, "ours_ms": round(median(times["ours"]), 3),
                              "plain_ms": round(median(times["plain"]), 3),
                              "ratio": round(median(o / p for o, p in zip(times["ours"], times["plain"])), 2)}
    return out


def render(results: list[dict], header: str) -> str:
    rows = [header]
    for r in results:
        rows.append(f"\n{r['model']} ({r['data']}): ms per optimizer step (median of repeats), ours / plain")
        rows.append(f"  {'phase':<12} {'ours':>9} {'plain':>9} {'ratio':>7}  ratio min-max")
        for k in ("encode", "collate", "micro_batch", "fwd_bwd", "optimizer", "step", "whole_step"):
            o, p, q = r["ms_per_step"]["ours"][k], r["ms_per_step"]["plain"][k], r["ratio"][k]
            span = f"{q['min']:.2f}-{q['max']:.2f}" if q else "-"
            rows.append(f"  {k:<12} {o['median']:>9.2f} {p['median']:>9.2f} "
                        f"{(q['median'] if q else float('nan')):>7.2f}  {span}")
        if "long_record" in r:
            lr = r["long_record"]
            rows.append(f"  one {lr['tokens']}-token text record: ours {lr['ours_ms']:.2f} ms, plain template + "
                        f"tokenizer {lr['plain_ms']:.2f} ms (ratio {lr['ratio']:.2f})")
    return "\n".join(rows)


def _median_of(runs: list):
    """Figures of several runs of the same side: the median of each number, position by position."""
    first = runs[0]
    if isinstance(first, dict):
        return {k: _median_of([r[k] for r in runs]) for k in first}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        m = median(runs)
        return round(m, 3) if isinstance(m, float) else m
    return first


def compare(args, argv, started: dict) -> None:
    """--before-src: this script in a process per side and round, alternating, then the medians."""
    import os
    import subprocess
    import tempfile

    from _provenance import text_header, write_results

    here = str(Path(__file__).resolve().parents[1] / "src")
    sides = {"before": args.before_src, "after": here}
    got: dict[str, list] = {"before": [], "after": []}
    skip = {"--before-src", "--rounds", "--save", "--note"}  # (the note is said once, in the header)
    passed, it = [], iter(argv)
    for a in it:
        if a in skip:
            next(it, None)
        elif not a.startswith(tuple(f"{k}=" for k in skip)):
            passed.append(a)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
                out = Path(tmp) / f"{side}{r}.json"
                env = {**os.environ, "PYTHONPATH": sides[side], "OMP_NUM_THREADS": "1"}
                subprocess.run([sys.executable, __file__, *passed, "--json", str(out)], env=env, check=True,
                               stdout=subprocess.DEVNULL)
                got[side].append(json.loads(out.read_text()))
    elapsed = time.perf_counter() - t0
    merged = {side: [_median_of([run["results"][i] for run in got[side]]) for i in range(len(got[side][0]["results"]))]
              for side in got}
    for side in got:
        header = (f"# {side.upper()}: benchmarks/step_cpu.py {' '.join(passed)} --before-src {args.before_src} "
                  f"--rounds {args.rounds}: mmtune from {sides[side]}; each figure the median over {args.rounds} "
                  f"rounds (one process per side per round, sides alternating), {elapsed:.0f} s for both sides"
                  + (f"\n# {args.note}" if args.note else ""))
        text = render(merged[side], header)
        if side == "after":
            text += ("\n\nafter / before, ours' ms per step: the median over rounds of each round's back-to-back pair "
                     "(the plain loop, the same code on both sides, is the load check; 'vs plain' divides it out):")
            for i, a in enumerate(merged["after"]):
                for k in ("encode", "micro_batch", "step", "whole_step"):
                    ours, plain = ([ra["results"][i]["ms_per_step"][who][k]["median"]
                                    / rb["results"][i]["ms_per_step"][who][k]["median"]
                                    for ra, rb in zip(got["after"], got["before"])] for who in ("ours", "plain"))
                    text += (f"\n  {a['model']:<14} {k:<12} ours {median(ours):.2f}x, plain {median(plain):.2f}x, "
                             f"ours vs plain {median(o / p for o, p in zip(ours, plain)):.2f}x "
                             f"(rounds: {', '.join(f'{o:.2f}/{p:.2f}' for o, p in zip(ours, plain))})")
                if "long_record" in a:
                    lr = [ra["results"][i]["long_record"]["ours_ms"] / rb["results"][i]["long_record"]["ours_ms"]
                          for ra, rb in zip(got["after"], got["before"])]
                    text += (f"\n  {a['model']:<14} one {a['long_record']['tokens']}-token record: ours "
                             f"{merged['before'][i]['long_record']['ours_ms']:.2f} -> {a['long_record']['ours_ms']:.2f} "
                             f"ms (pairs: {median(lr):.2f}x)")
        print(text + "\n")
        if args.save:
            base = args.save.format(side)
            Path(base + ".txt").write_text(text_header(started) + "\n" + text + "\n")
            write_results(base + ".json", {"header": header, "results": merged[side],
                                           "rounds": [run["results"] for run in got[side]]}, started)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny/qwen2-vl,tiny/qwen2")
    ap.add_argument("--steps", type=int, default=12, help="timed steps per repeat (after one warm-up step)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--long-words", type=int, default=300, help="words in the long record's answer")
    ap.add_argument("--long-calls", type=int, default=20)
    ap.add_argument("--note", default="", help="a line saying where and how it ran (shared machine, ...)")
    ap.add_argument("--out", default="runs/bench_step_cpu")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--before-src", help="compare with the mmtune of this src folder (see the module docstring)")
    ap.add_argument("--rounds", type=int, default=3, help="with --before-src: processes per side")
    ap.add_argument("--save", help="with --before-src: write PATH.{json,txt} per side, {} in PATH -> before/after")
    args = ap.parse_args(argv)
    from _provenance import provenance, write_results

    started = provenance()
    if args.before_src:
        compare(args, list(sys.argv[1:] if argv is None else argv), started)
        return
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    results = [bench_model(args, m) for m in args.models.split(",")]
    import mmtune

    header = (f"# benchmarks/step_cpu.py --steps {args.steps} --repeats {args.repeats} --mbs {args.mbs} --accum "
              f"{args.accum}; mmtune from {Path(mmtune.__file__).resolve().parent}; torch {torch.__version__}, "
              f"1 thread; {time.perf_counter() - t0:.0f} s" + (f"\n# {args.note}" if args.note else ""))
    print(render(results, header))
    if args.json:
        write_results(args.json, {"header": header, "results": results}, started)


if __name__ == "__main__":
    main()
