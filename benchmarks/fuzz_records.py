"""Run the seeded fuzzer of users' data (tests/data/fuzz_records.py) and write its counts with provenance.

    python benchmarks/fuzz_records.py --seed 0 --out benchmarks/results/fuzz_records_after_seed0_cpu2_<date>.json
    python benchmarks/fuzz_records.py --seed 0 --src /tmp/base84/src --out benchmarks/results/fuzz_records_before_...

--src puts another checkout's src/ first on sys.path (and on the CLI subprocesses' PYTHONPATH), so the same
fuzzer measures older code (a `git worktree add /tmp/base84 84192f2`). The file records both commits: the
provenance `commit` is this script's and the fuzzer's tree, `measured` is the mmtune that was fuzzed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _provenance import provenance, write_results  # noqa: E402

RESULT_KEYS = ("measured", "seed", "records", "inputs", "cases", "raw_exceptions_or_hangs", "by_stage", "stats",
               "examples", "wall_s")


def _measured(src: Path) -> dict:
    """Which mmtune was fuzzed: the path imported, its checkout's commit and whether that tree was dirty."""
    import mmtune

    pkg = Path(mmtune.__file__).resolve().parent

    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(pkg), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    if not str(pkg).startswith(str(src.resolve())):  # --src named a tree that did not win the import
        raise SystemExit(f"mmtune was imported from {pkg}, not from {src}")
    return {"path": str(pkg), "commit": git("rev-parse", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", "."))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--records", type=int, default=1100)
    ap.add_argument("--src", default=str(ROOT / "src"), help="the mmtune src/ to fuzz (default: this checkout's)")
    ap.add_argument("--show", type=int, default=10)
    ap.add_argument("--out", help="write the results (JSON) here")
    a = ap.parse_args()
    src = Path(a.src).resolve()
    if not (src / "mmtune").is_dir():
        raise SystemExit(f"--src {a.src}: no mmtune package there")
    # The tree measured first, then this checkout (for tests.data); subprocesses (the CLI runs) inherit it.
    sys.path[:0] = [str(src), str(ROOT)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = provenance()
    measured = _measured(src)

    from tests.data import fuzz_records as fz

    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        env = fz.make_env(Path(d))
        cases = fz.build(Path(d) / "fuzz", a.seed, a.records)
        tried, found, examples = fz.run_all(env, cases)
        extra = fz.config_problems(Path(d)) + fz.cli_problems(env, Path(d) / "fuzz" / "sharegpt.jsonl")
        tried += len(fz.CONFIGS) + 2
        found.update(e.split(":")[0] for e in extra)
        examples += extra
        if hasattr(fz, "check_kinds"):  # the named kinds' outcomes (tests/data/fuzz_kinds.py), in stats
            n_kinds, off = fz.check_kinds(Path(d) / "named")
            fz.STATS["named kinds"], fz.STATS["named kinds not as expected"] = n_kinds, len(off)
            examples += off
    wall = time.perf_counter() - t
    print(f"mmtune {measured['commit']} ({measured['path']}), seed {a.seed}: {tried} malformed records/files in "
          f"{len(cases)} cases, {sum(found.values())} raw exceptions or hangs ({wall:.0f} s); {dict(fz.STATS)}")
    for k, n in found.most_common():
        print(f"  {n:4d}  {k}")
    for ex in examples[: a.show]:
        print("   e.g.", ex)
    if a.out:
        payload = {"measured": measured, "seed": a.seed, "records": a.records, "inputs": tried, "cases": len(cases),
                   "raw_exceptions_or_hangs": sum(found.values()), "by_stage": dict(found.most_common()),
                   "stats": dict(fz.STATS), "examples": examples[:40], "wall_s": round(wall, 1)}
        print("written:", write_results(a.out, payload, started))


if __name__ == "__main__":
    main()
