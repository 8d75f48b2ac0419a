"""The vision patch embedding as transformers builds it (a non-overlapping Conv3d) vs as mmtune runs it
(one matmul on the same weight, models/patch_embed.py), on the module itself.

    python benchmarks/patch_embed.py [--device cpu|cuda] [--dtype fp32|bf16] [--repeats 5] [--save FILE]

Rows: the tiny Qwen2-VL twin's embedding (3x2x14x14 -> 32) and Qwen2-VL-7B's (3x2x14x14 -> 1280, the vision
config's embed_dim), each at 256 and 1,024 flattened patches (a 224- and a 448-pixel image), forward only (a
frozen tower: LoRA) and forward + backward of its weight (a trained tower). Each figure is the median over
--repeats of the mean over 50 calls after 10 warm-up calls, the two ways alternating; one thread on a CPU.
The outputs of the two ways are compared too (max abs difference).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import dumps, provenance, write_results  # noqa: E402

RESULT_KEYS = ("device", "dtype", "repeats", "rows")
SHAPES = {"tiny/qwen2-vl": 32, "Qwen/Qwen2-VL-7B-Instruct": 1280}  # embed_dim; in: 3 channels, 2 frames, 14 px


def _module(dim: int, device, dtype):
    import torch

    from mmtune.models.patch_embed import run_patch_embeds_as_matmul

    class PatchEmbed(torch.nn.Module):  # transformers' Qwen2-VL PatchEmbed, as built
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Conv3d(3, dim, kernel_size=(2, 14, 14), stride=(2, 14, 14), bias=False)

        def forward(self, x):
            return self.proj(x.view(-1, 3, 2, 14, 14).to(self.proj.weight.dtype)).view(-1, dim)

    conv = torch.nn.Module()
    conv.patch_embed = PatchEmbed().to(device=device, dtype=dtype)
    mat = torch.nn.Module()
    mat.patch_embed = PatchEmbed().to(device=device, dtype=dtype)
    mat.patch_embed.load_state_dict(conv.patch_embed.state_dict())
    assert run_patch_embeds_as_matmul(mat) == ["patch_embed"]
    return conv.patch_embed, mat.patch_embed


def _time(fn, device) -> float:
    import torch

    for _ in range(10):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(50):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / 50 * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--save")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1) if args.device == "cpu" else None
    started = provenance()
    device, dtype = torch.device(args.device), {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    rows = []
    for model, dim in SHAPES.items():
        conv, mat = _module(dim, device, dtype)
        for patches in (256, 1024):
            x = torch.randn(patches, 3 * 2 * 14 * 14, device=device, dtype=dtype)
            for mode in ("forward", "forward+backward"):
                conv.requires_grad_(mode != "forward")
                mat.requires_grad_(mode != "forward")

                def run(m, x=x, mode=mode):
                    if mode == "forward":
                        with torch.no_grad():
                            return m(x)
                    out = m(x)
                    out.sum().backward()
                    return out

                ms = {"conv3d": [], "matmul": []}
                for _ in range(args.repeats):
                    for name, m in (("conv3d", conv), ("matmul", mat)):
                        ms[name].append(_time(lambda m=m: run(m), device))
                with torch.no_grad():
                    diff = float((conv(x) - mat(x)).abs().max())
                row = {"model": model, "patches": patches, "mode": mode, "conv3d_ms": median(ms["conv3d"]),
                       "matmul_ms": median(ms["matmul"]), "max_abs_diff": diff}
                row["conv3d_over_matmul"] = row["conv3d_ms"] / row["matmul_ms"]
                rows.append(row)
                print(f"{model:28s} {patches:5d} {mode:17s} conv3d {row['conv3d_ms']:8.3f} ms  matmul "
                      f"{row['matmul_ms']:8.3f} ms  x{row['conv3d_over_matmul']:.1f}  diff {diff:.1e}", flush=True)
    report = {"device": args.device, "dtype": args.dtype, "repeats": args.repeats, "rows": rows}
    if args.save:
        write_results(args.save, report, started)
    else:
        print(dumps(report, started))


if __name__ == "__main__":
    main()
