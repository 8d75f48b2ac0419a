"""Planner accuracy: predicted vs independently measured peak allocated bytes of the same step.

Each run plans the config (fake tensors, `mmtune.plan.predict`, CPU target) and then executes the
same two optimizer steps for real (`mmtune.plan.measure.measure_step`): on CPU the peak comes from
torch.profiler's allocator events, on a GPU from torch.cuda.max_memory_allocated (with a GPU the
prediction targets that GPU and compares allocated bytes; untested here, no GPU was available).

    python benchmarks/planner_accuracy.py [--json] [--only NAME]
Targets on CPU: mean |error| <= 2 %, max <= 5 %.
"""

from __future__ import annotations

import argparse
import sys
import time

# what its --out file carries (tests/test_benchmark_results.py)
RESULT_KEYS = ("rows", "mean_abs_error_pct", "max_abs_error_pct", "runs")

# name, overrides, declared media
RUNS = [
    ("text-lora-ckpt", ["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=true"], {}),
    ("text-full-nockpt", ["model.name=tiny/qwen2", "adapter.method=full", "model.gradient_checkpointing=false"], {}),
    ("text-qlora-ckpt", ["model.name=tiny/qwen2", "adapter.method=qlora", "model.gradient_checkpointing=true"], {}),
    ("text-small-lora-mb2", ["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=false",
                             "data.max_length=1024", "train.micro_batch_size=2", "train.grad_accum=2"], {}),
    ("image-lora-ckpt", ["model.name=tiny/qwen2-vl", "adapter.method=lora", "model.gradient_checkpointing=true"],
     {"images": [(112, 112)]}),
    ("image-full-nockpt", ["model.name=tiny/qwen2-vl", "adapter.method=full", "model.gradient_checkpointing=false"],
     {"images": [(112, 112)]}),
    ("image-qlora-nockpt", ["model.name=tiny/qwen2-vl", "adapter.method=qlora", "model.gradient_checkpointing=false"],
     {"images": [(112, 112)]}),
    ("image-qwen3vl-lora", ["model.name=tiny/qwen3-vl", "adapter.method=lora", "model.gradient_checkpointing=false"],
     {"images": [(128, 128)]}),
    ("image-llava-lora-ckpt", ["model.name=tiny/llava", "adapter.method=lora", "model.gradient_checkpointing=true"],
     {"images": [(64, 64)]}),
    ("video-lora-nockpt", ["model.name=tiny/qwen2-vl", "adapter.method=lora", "model.gradient_checkpointing=false"],
     {"videos": [(4, 112, 112)]}),
    ("video-full-ckpt", ["model.name=tiny/qwen2.5-vl", "adapter.method=full", "model.gradient_checkpointing=true"],
     {"videos": [(4, 112, 112)]}),
    ("audio-lora-ckpt", ["model.name=tiny/qwen2-audio", "adapter.method=lora", "model.gradient_checkpointing=true"],
     {"audio_seconds": [3.0]}),
    ("audio-full-nockpt", ["model.name=tiny/qwen2-audio", "adapter.method=full", "model.gradient_checkpointing=false"],
     {"audio_seconds": [3.0]}),
    ("audio-qlora-ckpt", ["model.name=tiny/qwen2-audio", "adapter.method=qlora", "model.gradient_checkpointing=true"],
     {"audio_seconds": [3.0]}),
    # issue 11: long sequences (attention and logits grow with seq), large media, the loss path, k-bit and
    # 16-bit training choices. Tiny twins so the real CPU step can run.
    ("text-lora-ckpt-4k", ["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=true",
                           "data.max_length=4096"], {}),
    ("text-lora-nockpt-8k", ["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=false",
                             "data.max_length=8192"], {}),
    ("text-eager-ckpt-4k", ["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=true",
                            "model.attn_implementation=eager", "data.max_length=4096"], {}),
    ("text-qlora-ckpt-8k", ["model.name=tiny/qwen2", "adapter.method=qlora", "model.gradient_checkpointing=true",
                            "data.max_length=8192"], {}),
    ("text-chunked-nockpt-4k", ["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=false",
                                "train.loss_impl=chunked", "data.max_length=4096"], {}),
    ("text-full-bf16-pure", ["model.name=tiny/qwen2", "adapter.method=full", "model.gradient_checkpointing=true",
                             "train.precision=bf16", "train.fp32_trainable=false", "data.max_length=2048"], {}),
    ("text-full-bf16-master", ["model.name=tiny/qwen2", "adapter.method=full", "model.gradient_checkpointing=true",
                               "train.precision=bf16", "data.max_length=2048"], {}),
    ("text-qlora-bf16-upcast", ["model.name=tiny/qwen2", "adapter.method=qlora", "model.gradient_checkpointing=true",
                                "train.precision=bf16", "adapter.kbit_upcast=true", "data.max_length=2048"], {}),
    # issue 29: 8-bit LoRA (bitsandbytes Linear8bitLt; on the CPU its training path dequantizes each weight)
    ("text-lora8bit-ckpt", ["model.name=tiny/qwen2", "adapter.method=lora8bit", "model.gradient_checkpointing=true"], {}),
    ("text-lora8bit-nockpt", ["model.name=tiny/qwen2", "adapter.method=lora8bit", "model.gradient_checkpointing=false"],
     {}),
    ("image-lora8bit-ckpt", ["model.name=tiny/qwen2-vl", "adapter.method=lora8bit", "model.gradient_checkpointing=true"],
     {"images": [(112, 112)]}),
    ("image-lora-ckpt-448", ["model.name=tiny/qwen2-vl", "adapter.method=lora", "model.gradient_checkpointing=true",
                             "data.max_length=2048"], {"images": [(448, 448)]}),
    ("image-eager-nockpt-448", ["model.name=tiny/qwen2.5-vl", "adapter.method=lora", "model.gradient_checkpointing=false",
                                "model.attn_implementation=eager", "data.max_length=2048"], {"images": [(448, 448)]}),
    ("image-chunked-ckpt", ["model.name=tiny/qwen2-vl", "adapter.method=lora", "model.gradient_checkpointing=true",
                            "train.loss_impl=chunked", "data.max_length=2048"], {"images": [(448, 448)]}),
    ("image-qlora-bf16-ckpt", ["model.name=tiny/qwen2.5-vl", "adapter.method=qlora", "model.gradient_checkpointing=true",
                               "train.precision=bf16", "data.max_length=2048"], {"images": [(448, 448)]}),
    ("video-lora-ckpt-4k", ["model.name=tiny/qwen2.5-vl", "adapter.method=lora", "model.gradient_checkpointing=true",
                            "data.max_length=4096"], {"videos": [(8, 224, 224)]}),
    ("video-full-bf16-nockpt", ["model.name=tiny/qwen2-vl", "adapter.method=full", "model.gradient_checkpointing=false",
                                "train.precision=bf16", "data.max_length=2048"], {"videos": [(8, 224, 224)]}),
]
COMMON = ["data.max_length=512", "train.precision=fp32", "train.device=auto", "train.grad_accum=2"]


def run_one(name, overrides, declared, gpu=None):
    from mmtune.config import load_config
    from mmtune.plan.batch import Declared, worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    cfg = load_config(None, COMMON + overrides)  # later keys win: a row's precision / max_length
    decl = Declared(images=declared.get("images", []), videos=declared.get("videos", []),
                    audio_seconds=declared.get("audio_seconds", []))
    t0 = time.perf_counter()
    res = predict(cfg, gpu=gpu, declared=decl, plan_eval=False)  # the measured run is the train steps only
    plan_s = time.perf_counter() - t0
    batch = worst_case_batch(resolve_for_plan(cfg, gpu), declared=decl).micro_batch
    m = measure_step(cfg, batch)
    pred = res.peak_allocated_bytes if m.device == "cuda" else res.tensor_peak_bytes
    return {"name": name, "predicted_bytes": int(pred), "measured_bytes": int(m.peak_allocated_bytes),
            "error_pct": 100.0 * (pred - m.peak_allocated_bytes) / m.peak_allocated_bytes,
            "peak_phase": res.peak_phase, "plan_s": round(plan_s, 2), "device": m.device,
            **({"predicted_reserved_bytes": res.peak_reserved_bytes, "measured_reserved_bytes": m.peak_reserved_bytes}
               if m.device == "cuda" else {})}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--out", help="also write the JSON results to this file")
    args = ap.parse_args(argv)
    import os

    from _provenance import dumps, provenance, write_results

    started = provenance()

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch

    gpu = None
    if torch.cuda.is_available():
        gpu = None  # predict() reads the visible GPU
    rows = []
    for name, ov, decl in RUNS:
        if args.only and name not in args.only:
            continue
        rows.append(run_one(name, ov, decl, gpu))
        if not args.json:
            r = rows[-1]
            print(f"{r['name']:24s} predicted {r['predicted_bytes']:>12,d}  measured {r['measured_bytes']:>12,d}  "
                  f"error {r['error_pct']:+6.2f} %  ({r['peak_phase']}, plan {r['plan_s']} s)", flush=True)
    errs = [abs(r["error_pct"]) for r in rows]
    summary = {"mean_abs_error_pct": sum(errs) / len(errs), "max_abs_error_pct": max(errs), "runs": len(rows)}
    kinds: dict[str, list[float]] = {}
    for r in rows:  # text / image / video / audio, and the issue-11 features a row exercises
        tags = [r["name"].split("-")[0]] + [t for t in ("qlora", "full", "chunked", "eager", "4k", "8k", "bf16")
                                            if t in r["name"].split("-")]
        for t in tags:
            kinds.setdefault(t, []).append(abs(r["error_pct"]))
    summary["by_kind"] = {k: {"runs": len(v), "mean_abs_error_pct": round(sum(v) / len(v), 3),
                              "max_abs_error_pct": round(max(v), 3)} for k, v in sorted(kinds.items())}
    if args.out:
        write_results(args.out, {"rows": rows, **summary}, started)
    if args.json:
        print(dumps({"rows": rows, **summary}, started))
    else:
        print(f"mean |error| {summary['mean_abs_error_pct']:.2f} %, "
              f"max {summary['max_abs_error_pct']:.2f} % over {len(rows)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
