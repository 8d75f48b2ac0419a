"""Predicted peak memory vs sequence length, per attention implementation on its target GPU.

The planner traces each SDPA call with the kernel the target runs (resolved `attention.kernels`,
plan/attention.py): flash / memory-efficient keep O(seq) attention memory, the math kernel (SDPA on a
GPU without flash for a GQA model: mem-efficient refuses GQA) and eager attention keep O(seq^2) scores.
Prints one row per (implementation, sequence length): peak allocated / reserved / process total (GiB),
the phase of the peak and the kernels traced. Text-only records filling the sequence, micro-batch 1.

    python benchmarks/plan_seq_sweep.py [--model Qwen/Qwen2.5-7B-Instruct] [--seqs 512,1024,2048,4096,8192]
                                        [--only "chunked loss"]
With the full loss the 152k-word fp32 logits (and their gradient) set the peak up to ~4k tokens; the
chunked-loss cases show the attention kernels alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

CASES = [  # label, overrides, gpu
    ("eager / a100-80gb bf16", ["model.attn_implementation=eager", "train.precision=bf16"], "a100-80gb"),
    ("sdpa / a100-80gb bf16 (flash)", ["model.attn_implementation=sdpa", "train.precision=bf16"], "a100-80gb"),
    ("flash_attention_2 / a100-80gb bf16", ["model.attn_implementation=flash_attention_2", "train.precision=bf16"],
     "a100-80gb"),
    ("sdpa / quadro-rtx-6000 fp16 (mem-efficient; math for GQA)", ["model.attn_implementation=sdpa",
                                                                   "train.precision=fp16"], "quadro-rtx-6000"),
    ("sdpa / quadro-rtx-6000 fp16, chunked loss", ["model.attn_implementation=sdpa", "train.precision=fp16",
                                                   "train.loss_impl=chunked"], "quadro-rtx-6000"),
    ("sdpa / a100-80gb bf16 (flash), chunked loss", ["model.attn_implementation=sdpa", "train.precision=bf16",
                                                     "train.loss_impl=chunked"], "a100-80gb"),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct")
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192")
    ap.add_argument("--method", default="lora")
    ap.add_argument("--only", action="append", default=[], help="run only the cases whose label contains this")
    args = ap.parse_args(argv)
    from _provenance import provenance, text_header

    started = provenance()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from mmtune.config import load_config
    from mmtune.plan.batch import Declared
    from mmtune.plan.planner import predict

    gib = 2**30
    print(f"model {args.model}, {args.method} r=16, gradient checkpointing, micro-batch 1, text filling the sequence")
    print(f"{'implementation / target':58s} {'seq':>5s} {'allocated':>9s} {'reserved':>9s} {'process':>9s}  peak phase / kernels")
    for label, over, gpu in CASES:
        if args.only and not any(o in label for o in args.only):
            continue
        for seq in [int(s) for s in args.seqs.split(",")]:
            cfg = load_config(None, [f"model.name={args.model}", f"adapter.method={args.method}", "adapter.r=16",
                                     "model.gradient_checkpointing=true", f"data.max_length={seq}",
                                     "train.micro_batch_size=1", "train.grad_accum=1", *over])
            t0 = time.perf_counter()
            r = predict(cfg, gpu=gpu, declared=Declared(), plan_eval=False)
            kernels = next((d.split(": ", 1)[1].split(" (")[0] for d in r.decisions if d.startswith("attention: SDPA")),
                           "eager (model code)" if "eager" in label else "")
            print(f"{label:58s} {seq:5d} {r.peak_allocated_bytes / gib:9.2f} {r.peak_reserved_bytes / gib:9.2f} "
                  f"{r.process_total_bytes / gib:9.2f}  {r.peak_phase} / {kernels} ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    print(text_header(started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
