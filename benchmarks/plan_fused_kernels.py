"""Planned effect of Liger's fused RMSNorm + SwiGLU (train.fused_kernels) on real-size models, on a CPU.

For each model: `mmtune plan` of the same run with train.fused_kernels=none and =liger (liger's kernels
planned by their torch twins, plan/fused_kernels.py), and the difference in the bytes alive when backward
starts (what autograd saved) and in the planned peak. Also the analytic figure the twins model: per decoder
layer, silu(gate) (tokens x intermediate x 2 bytes) and, under bf16, tokens x hidden x 2 bytes per RMSNorm
that autograd records. Prints figures only; no GPU, nothing downloaded (embedded configs).

    PYTHONPATH=src python benchmarks/plan_fused_kernels.py [--seq 4096] [--gpu a100-80gb]
"""

from __future__ import annotations

import argparse
import time

MODELS = ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B")


def _live_before_backward(ex) -> int:
    tr = ex.tracker.trace
    first = next(i for i, ev in enumerate(tr.events) if ev.phase == "backward")
    return sum(ev.nbytes for ev in tr.events[:first])


def main() -> None:
    from mmtune.config import load_config
    from mmtune.plan.planner import trace_config
    from mmtune.resolve import gpu_target, resolve_run

    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--gpu", default="a100-80gb")
    ap.add_argument("--ckpt", default="false", help="model.gradient_checkpointing")
    args = ap.parse_args()
    from _provenance import provenance, text_header

    started = provenance()
    gib = 2 ** 30
    print(f"LoRA r16 bf16, micro batch 1 x {args.seq} tokens, gradient checkpointing {args.ckpt}, planned for "
          f"{args.gpu}; liger-kernel's RMSNorm + SwiGLU planned by torch twins")
    for name in MODELS:
        out = {}
        for fused in ("none", "liger"):
            cfg = load_config(None, [f"model.name={name}", "train.precision=bf16", f"data.max_length={args.seq}",
                                     "train.micro_batch_size=1", f"model.gradient_checkpointing={args.ckpt}",
                                     f"train.fused_kernels={fused}"])
            r = resolve_run(cfg, gpu_target(args.gpu))
            t0 = time.perf_counter()
            pm, pb, ex, _ = trace_config(r)
            out[fused] = (_live_before_backward(ex), ex.tracker.trace.peak_bytes, time.perf_counter() - t0)
        hf = pm.hf_config
        hf = getattr(hf, "text_config", hf)
        rows = pb.micro_batch["input_ids"].numel()
        # silu(gate) per layer + 2 norms per layer (layer 0's input norm sees frozen embeddings: not recorded;
        # the final norm is): tokens x hidden x 2 bytes each
        modelled = hf.num_hidden_layers * rows * (hf.intermediate_size * 2 + 2 * hf.hidden_size * 2)
        saved = out["none"][0] - out["liger"][0]
        print(f"{name}: {hf.num_hidden_layers} layers, hidden {hf.hidden_size}, intermediate {hf.intermediate_size}, "
              f"{rows} tokens")
        print(f"  saved for backward: none {out['none'][0] / gib:.2f} GiB, liger {out['liger'][0] / gib:.2f} GiB, "
              f"drop {saved / gib:.3f} GiB")
        print(f"  modelled without checkpointing (under it, the final norm only): layers x tokens x "
              f"(2 x intermediate + 2 x 2 x hidden) bytes = {modelled / gib:.3f} GiB")
        print(f"  planned peak: none {out['none'][1] / gib:.2f} GiB, liger {out['liger'][1] / gib:.2f} GiB "
              f"({(out['liger'][1] - out['none'][1]) / gib:+.3f} GiB); plan took {out['none'][2]:.1f} s / "
              f"{out['liger'][2]:.1f} s")

    print(text_header(started))


if __name__ == "__main__":
    main()
