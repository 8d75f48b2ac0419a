"""data.streaming against loading in memory: memory held and the cost of an exact resume.

Writes a text-only JSONL of N records (no model, no media: this measures the record source alone), then in
separate child processes: (a) load_records of the whole file, (b) a RecordStream dealing the same number
of records, (c) a RecordStream resumed from the position at the half (the rows already drawn re-read
without converting). Prints peak RSS above a bare interpreter with mmtune imported, and seconds.

    PYTHONPATH=src python benchmarks/streaming.py --records 200000 [--out benchmarks/results/x.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

# What the results file holds beside the provenance (tests/test_benchmark_results.py).
RESULT_KEYS = ("records", "file_mib", "runs")

CHILD = r"""
import json, resource, sys, time
from mmtune.config.schema import DataConfig
from mmtune.data.sources import load_records
from mmtune.data.streaming import RecordStream
mode, path, n, mbs = sys.argv[1], sys.argv[2], int(sys.argv[3]), 8
cfg = DataConfig(train=path, streaming=mode != "memory", shuffle_buffer=1000)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if mode == "memory":
    got = len(load_records(path, DataConfig(train=path), "train").records)
elif mode == "stream":
    s = RecordStream(path, cfg, seed=0, micro_batch_size=mbs)
    got = sum(len(s.next_records()) for _ in range(n // mbs))
else:  # resume at the half, then deal one micro-batch
    s = RecordStream(path, cfg, seed=0, micro_batch_size=mbs,
                     position={"epoch": 0, "index": n // 2 // mbs, "rows": n // 2, "taken": 1})
    got = len(s.next_records())
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"mode": mode, "records": got, "seconds": round(dt, 2),
                  "peak_rss_above_start_mib": round((peak - base) / 1024, 1)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--out")
    args = ap.parse_args()
    from _provenance import dumps, provenance, write_results

    started = provenance()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.jsonl"
        with open(path, "w") as f:
            for i in range(args.records):
                f.write(json.dumps({"messages": [{"role": "user", "content": f"question {i} " + "words " * 30},
                                                 {"role": "assistant", "content": str(i)}]}) + "\n")
        size = path.stat().st_size
        rows = []
        for mode in ("memory", "stream", "resume"):
            out = subprocess.run([sys.executable, "-c", CHILD, mode, str(path), str(args.records)],
                                 capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    result = {"records": args.records, "file_mib": round(size / 2**20, 1), "runs": rows}
    print(dumps(result, started))
    if args.out:
        write_results(args.out, result, started)


if __name__ == "__main__":
    main()
