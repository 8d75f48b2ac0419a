"""Doctor data-scan speed: a generated N-record JSONL (default 100k) with image records, scanned once.

    python benchmarks/doctor_speed.py [N] [--images K]

Prints records/s, the scan's wall and CPU time and the process's peak RSS growth (bounded memory: the scan keeps
counters, a few examples and one int per record). Images are distinct PNGs of varying sizes, referenced
by several questions each as in VQA sets; every record's media header and token length is checked.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path


def make_dataset(folder: Path, n: int, n_images: int) -> Path:
    from PIL import Image

    rng = random.Random(0)
    for i in range(n_images):
        Image.new("RGB", (rng.randint(32, 1400), rng.randint(32, 1000)), (i % 255, 0, 0)).save(folder / f"img{i}.png")
    path = folder / "train.jsonl"
    with open(path, "w") as f:
        for i in range(n):
            if i % 10 == 9:  # some text-only records
                row = {"messages": [{"role": "user", "content": f"What is {i} plus one?"},
                                    {"role": "assistant", "content": str(i + 1)}]}
            else:
                row = {"messages": [{"role": "user", "content": f"<image>Question {i}: how many objects are there?"},
                                    {"role": "assistant", "content": str(i % 13)}],
                       "images": [f"img{rng.randrange(n_images)}.png"]}
            f.write(json.dumps(row) + "\n")
    return path


def main() -> None:
    from _provenance import provenance, text_header

    started = provenance()
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 100_000
    n_images = int(sys.argv[sys.argv.index("--images") + 1]) if "--images" in sys.argv else 2000
    from mmtune.config.loader import validate
    from mmtune.doctor.datascan import scan_dataset
    from mmtune.resolve import resolve_run, target_for

    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        path = make_dataset(Path(d), n, n_images)
        t_gen = time.perf_counter() - t0
        cfg = validate({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": str(path), "format": "messages"}})
        resolved = resolve_run(cfg, target_for(cfg, None, local=False))
        resolved.need_processor()
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0, c0 = time.perf_counter(), time.process_time()
        scan = scan_dataset(resolved, full="--full" in sys.argv)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        s = scan.splits[0]
        print(f"records: {s.ok + s.n_bad} ok={s.ok} bad={s.n_bad} images={n_images} (generated in {t_gen:.1f} s)")
        print(f"scan: {dt:.1f} s wall, {cpu:.1f} s CPU (the scan is one thread: its wall time on an idle machine), "
              f"{(s.ok + s.n_bad) / dt:,.0f} records/s; peak RSS growth {(rss1 - rss0) / 1024:.0f} MiB")
        print(f"load average at the end: {open('/proc/loadavg').read().split()[0]}")
        print(f"tokens/record: median {s.percentile(0.5)}, max {max(s.lengths)}")
        print(text_header(started))  # a results .txt made from this output starts... ends with its provenance


if __name__ == "__main__":
    main()
