"""What a DataLoader worker's micro-batch costs to hand over to the training process: torch's shared memory
(every tensor a new shared-memory file, its descriptor passed over a socket) vs mmtune's by-value hand-over
(data/workers.py: ByValue, the tensors pickled as numpy arrays through the result pipe).

    python benchmarks/worker_handover.py [--data counting|short-text] [--batches 200] [--busy-ms 8] [--save FILE]

The loop's own dataset, collator and loader (train/feed.py) with one worker (train.num_workers=1, forked from
the fork server as a run's are), the records of benchmarks/throughput.py. Per way of handing over, two figures:
- worker-fed ms per micro-batch: the training process takes micro-batches as fast as they come (the worker's
  encode + collate + hand-over, i.e. the most a worker can feed);
- wait ms per micro-batch: the training process computes `--busy-ms` between micro-batches (a step's forward
  and backward on the image twin take ~8 ms a micro-batch), so the worker is ahead and what is left is the
  hand-over's own cost on the training process's side (the median).
Both after 20 warm-up micro-batches; one thread per process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import dumps, provenance, write_results  # noqa: E402

RESULT_KEYS = ("data", "batches", "busy_ms", "results")


def measure(way: str, args) -> dict:
    import throughput as T
    import torch

    from mmtune.build import build_run
    from mmtune.data.collate import make_dataloader
    from mmtune.data.workers import ByValue, received
    from mmtune.train.feed import EncodedDataset, SkippingCollator, _FromStream

    torch.set_num_threads(1)
    targs = T.parser().parse_args(["--data", args.data, "--steps", str(args.batches), "--out", args.out, "--workers", "1"])
    targs.model = T.DATA[targs.data][0]
    run = build_run(T._config(targs))
    dataset = EncodedDataset(run.train_set.records, run.train_encoder, run.encode_cache)
    collate = SkippingCollator(run.train_collator)
    if way == "by_value":
        collate = ByValue(collate)
    stream = dict(n=len(run.train_set.records), seed=0, micro_batch_size=targs.mbs, rank=0, world_size=1, lengths=None,
                  pack=None, epoch=0, index=0)
    loader = iter(make_dataloader(dataset, collate, _FromStream(stream), plan=run.resolved.loader, seed=0))
    for _ in range(20):
        received(next(loader))
    t = time.perf_counter()
    for _ in range(args.batches):
        received(next(loader))
    fed = (time.perf_counter() - t) / args.batches * 1000
    waits = []
    for _ in range(args.batches):
        t = time.perf_counter()
        received(next(loader))
        waits.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        while time.perf_counter() - t < args.busy_ms / 1000:  # the step's compute, on this process's core
            pass
    return {"worker_fed_ms_per_micro_batch": fed, "wait_ms_per_micro_batch": median(waits)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="counting", choices=["counting", "short-text"])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--busy-ms", type=float, default=8.0)
    ap.add_argument("--out", default="runs/bench_worker_handover")
    ap.add_argument("--way", choices=["torch", "by_value"], help=argparse.SUPPRESS)
    ap.add_argument("--save")
    args = ap.parse_args()
    if args.way:  # one way, in a fresh process (its own fork server and worker)
        import json

        print("RESULT " + json.dumps(measure(args.way, args)))
        return
    import json
    import subprocess

    started = provenance()
    results = {}
    for way in ("torch", "by_value"):
        cmd = [sys.executable, os.path.abspath(__file__), "--way", way, "--data", args.data, "--batches", str(args.batches),
               "--busy-ms", str(args.busy_ms), "--out", args.out]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if out.returncode or not line:
            sys.exit(f"{way} failed:\n{out.stderr[-3000:]}")
        results[way] = json.loads(line[0][7:])
    report = {"data": args.data, "batches": args.batches, "busy_ms": args.busy_ms, "results": results}
    if args.save:
        write_results(args.save, report, started)
    print(dumps(report, started))


if __name__ == "__main__":
    main()
