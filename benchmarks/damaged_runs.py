"""Damage every file of a run folder, one at a time and four ways, then resume it and export it: count raw exceptions.

A tiny Qwen2-VL LoRA run (3 steps, a checkpoint after each) is stopped after step 2, as a kill would leave it: two
checkpoints, logs, no summary. Then, for each file of the folder (checkpoint-2's, the logs, the resolved config; the
older checkpoint-1 is the fallback and left whole) and each damage -- emptied, cut in half (a kill mid-write), one
byte in 50 flipped (a bad disk), deleted -- a copy of the folder is resumed (`mmtune train`'s API: build_run + train)
and exported (`mmtune export RUN`, the CLI). Each outcome is one of:
- `ok`: the command finished (a resume from checkpoint-2, or from checkpoint-1 when checkpoint-2 did not verify:
  `fell_back`);
- `refused`: an mmtune error saying what, where and the fix;
- `raw`: any other exception (its type and the line that raised it) -- what this script exists to find.

    python benchmarks/damaged_runs.py --out benchmarks/results/damaged_runs_cpu2_<date>_<commit>.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from _provenance import provenance, write_results  # noqa: E402

DAMAGES = ("empty", "half", "flip", "delete")
COMMANDS = ("export", "resume")
RESULT_KEYS = ("files", "damages", "commands", "cases", "counts", "raw", "wall_s")


def damage(path: Path, how: str, rng: random.Random) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "half":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flip":
        flipped = bytearray(data)
        for _ in range(max(1, len(flipped) // 50)):
            if flipped:
                flipped[rng.randrange(len(flipped))] ^= 0xFF
        path.write_bytes(bytes(flipped))
    elif how == "delete":
        path.unlink()


def make_run(root: Path) -> tuple[Path, Path]:
    import yaml

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train
    from tests.train.conftest import make_dataset

    data = make_dataset(root / "data", 6)
    cfg = root / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(root / "run"), "model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": False},
        "data": {"train": str(data), "eval": str(data), "max_length": 256, "eval_max_samples": 2},
        "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
        "train": {"max_steps": 3, "micro_batch_size": 2, "grad_accum": 1, "precision": "fp32", "device": "cpu",
                  "warmup_steps": 0, "save_every": 1, "keep_last": 2},
        "eval": {"every": None, "metrics": ["exact_match"], "max_new_tokens": 2, "batch_size": 2},
        "logging": {"tensorboard": False}}))
    train(build_run(load_config(cfg, [])), stop_after=2)  # killed after step 2: checkpoints 1 and 2, no summary
    return cfg, root / "run"


class Refused(Exception):
    """A CLI command that exited non-zero with its own message (no traceback)."""


def outcome(fn) -> tuple[str, str]:
    from mmtune.errors import MMTuneError

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            fn()
    except (MMTuneError, Refused) as e:
        return "refused", " ".join(str(e).split())[:200]
    except Exception as e:  # noqa: BLE001 -- anything else is a finding
        last = traceback.extract_tb(e.__traceback__)[-1]
        return "raw", f"{type(e).__name__} at {last.filename.split('site-packages/')[-1]}:{last.lineno}: {str(e)[:160]}"
    said = out.getvalue()
    return ("fell_back", "resumed from checkpoint-1") if "checkpoint-1 at step 1" in said else ("ok", "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=[], help="files whose path contains one of these (default: all)")
    ap.add_argument("--out", help="write the results (JSON) here")
    a = ap.parse_args()
    started = provenance()
    from typer.testing import CliRunner

    from mmtune.build import build_run
    from mmtune.cli import app
    from mmtune.config import load_config
    from mmtune.train.loop import train

    t0 = time.perf_counter()
    rng, cases, runner = random.Random(0), [], CliRunner()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        cfg, run = make_run(root)
        files = sorted(str(p.relative_to(run)) for p in run.rglob("*")
                       if p.is_file() and not str(p.relative_to(run)).startswith("checkpoint-1"))
        files = [f for f in files if not a.only or any(o in f for o in a.only)]

        def export(copy: Path):
            r = runner.invoke(app, ["export", str(copy), "--out", str(root / "export")])
            shutil.rmtree(root / "export", ignore_errors=True)
            if r.exception is not None and not isinstance(r.exception, SystemExit):
                raise r.exception
            if r.exit_code:
                if "Traceback" in r.output:
                    raise RuntimeError(r.output[-300:])
                raise Refused(" ".join(r.output.split())[:200] or f"exit {r.exit_code}")

        for f in files:
            for how in DAMAGES:
                for command in COMMANDS:
                    copy = root / "copy"
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.copytree(run, copy, symlinks=True)
                    damage(copy / f, how, rng)
                    fn = (lambda c=copy: export(c)) if command == "export" else (
                        lambda c=copy: train(build_run(load_config(cfg, [f"output_dir={c}"]))))
                    kind, said = outcome(fn)
                    cases.append({"file": f, "damage": how, "command": command, "outcome": kind, "said": said})
                    print(f"{f:45s} {how:6s} {command:6s} {kind:9s} {said[:90]}", flush=True)
    counts: dict[str, int] = {}
    for c in cases:
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    raw = [c for c in cases if c["outcome"] == "raw"]
    wall = round(time.perf_counter() - t0, 1)
    print(f"{len(files)} files x {len(DAMAGES)} damages x {len(COMMANDS)} commands = {len(cases)} cases: {counts} "
          f"({wall} s)")
    if a.out:
        payload = {"files": files, "damages": list(DAMAGES), "commands": list(COMMANDS), "cases": cases,
                   "counts": counts, "raw": len(raw), "wall_s": wall}
        print("written:", write_results(a.out, payload, started))


if __name__ == "__main__":
    main()
