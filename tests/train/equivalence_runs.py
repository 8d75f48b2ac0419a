"""Tiny-twin runs whose steps see the same records whatever the number of processes, for comparing
ddp, fsdp and one process (tests/train/test_fsdp.py). Also a torchrun worker:

    python -m torch.distributed.run --nproc_per_node 2 tests/train/equivalence_runs.py JOBS.json OUT.json DIR

runs each job of JOBS.json (`{"case", "strategy", "tag", "train": {...}, "adapter": {...}, "stop_after"}`)
in one launch (one process group, many runs, in order) and writes the main rank's per-step losses to
OUT.json under each job's tag. Runs with the same tag share an output_dir: a later one resumes. A job
`{"measure": [overrides], "images": [[W, H]]}` measures every rank's peak memory of the planner's two
steps instead (`mmtune.plan.measure.measure_sharded_step`) and records the list of peaks.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parents[2] / "src" / "mmtune" / "recipes" / "data"
RECORDS = 4  # each step takes the whole (shuffled) set: 1 rank x 4 micro-batches = 2 ranks x 2 = 4 records
STEPS = 5


def video_only(row: dict, i: int = 0) -> dict:
    """The record without its audio, asking about the video (tests/test_families_e2e.py uses it too)."""
    row = json.loads(json.dumps(row))
    user = row["messages"][0]
    user["content"] = [p for p in user["content"] if p["type"] != "audio"]
    user["content"].append({"type": "text", "text": "Which way does the dot move?"})
    return row


def _text_only_odd(row: dict, i: int) -> dict:
    """Records 1 and 3 without their image: batches mixing text-only and image records across ranks."""
    if i % 2 == 0:
        return row
    row = json.loads(json.dumps(row))
    for m in row["messages"]:
        if isinstance(m["content"], list):
            m["content"] = [p for p in m["content"] if p.get("type") != "image"]
    return row


CASES = {
    # name: (tiny twin, data file or None for synthetic text, record transform, adapter method)
    "text-lora": ("tiny/qwen2", None, None, "lora"),
    "image-lora": ("tiny/qwen2-vl", "image_qa.jsonl", None, "lora"),
    "image-full": ("tiny/qwen2-vl", "image_qa.jsonl", None, "full"),
    "video-lora": ("tiny/qwen2-vl", "video_audio_qa.jsonl", video_only, "lora"),
    "mixed-lora": ("tiny/qwen2-vl", "image_qa.jsonl", _text_only_odd, "lora"),
}


def write_config(case: str, strategy: str, folder: Path, world: int, tag: str | None = None,
                 adapter: dict | None = None, evaluate: bool = False, **train) -> Path:
    twin, src, transform, method = CASES[case]
    folder.mkdir(parents=True, exist_ok=True)
    data = "synthetic:arithmetic"
    if src is not None:
        rows = [json.loads(ln) for ln in (DATA / src).read_text().splitlines() if ln.strip()][:RECORDS]
        data = str(folder / "data.jsonl")
        _write_atomic(Path(data), "\n".join(json.dumps(transform(r, i) if transform else r)
                                             for i, r in enumerate(rows)) + "\n")
    cfg = {
        "output_dir": str(folder / f"run-{tag or f'{strategy}-{world}'}"),
        "model": {"name": twin, "gradient_checkpointing": True},  # activation checkpointing inside the units
        "data": {"train": data, "media_root": str(DATA), "max_length": 2048, "synthetic_train_size": RECORDS},
        "adapter": {"method": method, "r": 4, "dropout": 0.0, **(adapter or {})},
        "train": {"max_steps": STEPS, "micro_batch_size": 1, "grad_accum": RECORDS // world, "lr": 1e-2,
                  "precision": "fp32", "device": "cpu", "scheduler": "constant", "seed": 0, "strategy": strategy,
                  "save_every_minutes": None, **train},
        "logging": {"tensorboard": False},
    }
    if evaluate:  # at the end, on 3 records: uneven shards over 2 ranks (2 + 1, one filled with a repeat)
        cfg["data"].update({"eval": data, "eval_max_samples": 3})
        cfg["eval"] = {"every": STEPS, "metrics": ["exact_match", "anls"], "max_new_tokens": 4, "batch_size": 1}
    path = folder / f"cfg-{tag or strategy}-{world}.yaml"
    _write_atomic(path, yaml.safe_dump(cfg))
    return path


def _write_atomic(path: Path, text: str) -> None:
    """Every rank writes the same file: each through its own temporary name and an atomic rename, so no
    rank ever reads another's half-written copy (seen as "missing required key 'model'" under load)."""
    import os

    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def losses(run_dir: Path) -> list[float]:
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "train"]


def run_case(case: str, strategy: str, folder: Path, world: int, *, tag: str | None = None, adapter=None,
             stop_after: int | None = None, evaluate: bool = False, **train_overrides) -> list[float]:
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    cfg = load_config(write_config(case, strategy, folder / case, world, tag, adapter, evaluate, **train_overrides), [])
    train(build_run(cfg), stop_after=stop_after)
    return losses(Path(cfg.output_dir))


def measure_peaks(overrides: list[str], images: list) -> list[int]:
    """Every rank's peak bytes in the planner's two steps of the run, on the plan's worst-case batch."""
    import torch.distributed as dist

    from mmtune.config import load_config
    from mmtune.plan.batch import Declared, worst_case_batch
    from mmtune.plan.measure import measure_sharded_step
    from mmtune.plan.planner import resolve_for_plan

    cfg = load_config(None, overrides)
    batch = worst_case_batch(resolve_for_plan(cfg), declared=Declared(images=[tuple(i) for i in images])).micro_batch
    peak = measure_sharded_step(cfg, batch).peak_allocated_bytes
    peaks = [None] * dist.get_world_size()
    dist.all_gather_object(peaks, peak)
    return peaks


def main(argv: list[str]) -> None:
    import torch.distributed as dist

    jobs, out, folder = json.loads(Path(argv[0]).read_text()), Path(argv[1]), Path(argv[2])
    results = {}
    for job in jobs:
        job = dict(job)
        key = job.pop("key")
        if "measure" in job:
            results[key] = measure_peaks(job["measure"], job.get("images", []))
            continue
        results[key] = run_case(job.pop("case"), job.pop("strategy"), folder, 2, **job)
    if not dist.is_initialized() or dist.get_rank() == 0:
        out.write_text(json.dumps(results))
    if dist.is_initialized():
        dist.barrier()  # both ranks are done with their collectives before either tears down
        dist.destroy_process_group()
    if any("measure" in job for job in jobs):
        # A measure job ran torch.profiler (kineto). Kineto's exit-time destructors can abort a process whose
        # work is complete ("terminate called without an active exception": SIGABRT on rank 0 once in a
        # fresh-clone CI run, after both measurements; cf. pytorch/pytorch#195837, pytorch/kineto#1051).
        # Everything is written: leave without running them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
