"""Faults a long GPU run meets, repeated as a user would meet them, on the tiny Qwen2-VL (CPU).

    python benchmarks/reliability.py [--kills 8] [--corrupt 6] [--signals 3] [--fuzz 1000] [--out DIR]

- kill: `mmtune train` is SIGKILLed at a random moment (half of the trials just as a checkpoint save
  has started, i.e. inside the save), then the same command is run again until it finishes;
- corrupt: a finished run's newest checkpoint is damaged (truncated, zero-byte, flipped bytes, a file
  deleted, a leftover .tmp save beside it) and the command is run again;
- signal: SIGTERM at a random moment, then the same command again;
- lock: a second `mmtune train` on a folder in use;
- fuzz: >= 1,000 malformed records of every format (JSONL of each data.format, a JSON list, parquet
  bytes) through load + encode, under skip and under error.

A trial *survived* when the run finished with final weights bit-identical to an uninterrupted run's,
every step logged exactly once with identical losses, and no more steps redone than the work since
the last save; *lost* when anything differs; *blocked* when the command failed to go on. For fuzz,
a traceback (anything but mmtune's own DataError) counts as lost.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS, SAVE_EVERY = 12, 2


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_config(work: Path, out: Path) -> Path:
    import yaml

    data = work / "data" / "data.jsonl"
    if not data.exists():
        _load(ROOT / "tests" / "train" / "conftest.py", "train_conftest").make_dataset(work / "data", 12)
    cfg = {"output_dir": str(out), "model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": False},
           "data": {"train": str(data), "max_length": 256},
           "adapter": {"method": "lora", "r": 4, "dropout": 0.1},
           "train": {"max_steps": STEPS, "micro_batch_size": 2, "grad_accum": 2, "lr": 1e-3, "precision": "fp32",
                     "device": "cpu", "warmup_steps": 2, "seed": 0, "save_every": SAVE_EVERY, "keep_last": 3,
                     "save_every_minutes": None},
           "logging": {"tensorboard": False}}
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start(cfg: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "mmtune.cli", "train", str(cfg), "--skip-checks"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def steps_logged(out: Path) -> list[int]:
    if not (out / "metrics.jsonl").exists():
        return []
    rows = []
    for line in (out / "metrics.jsonl").read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("kind") == "train":
            rows.append(r)
    return rows


def outcome(out: Path, reference: dict) -> tuple[str, str]:
    rows = steps_logged(out)
    final = out / f"checkpoint-{STEPS}" / "trainable.safetensors"
    if not final.exists() or not (out / "summary.json").exists():
        return "lost", "no final checkpoint or summary"
    if [r["step"] for r in rows] != list(range(1, STEPS + 1)):
        return "lost", f"steps logged {[r['step'] for r in rows]}"
    if [r["loss"] for r in rows] != reference["losses"]:
        return "lost", "losses differ from the uninterrupted run"
    if final.read_bytes() != reference["weights"]:
        return "lost", "final weights differ"
    return "survived", "bit-identical"


def finish(cfg: Path, out: Path, attempts: int = 3) -> tuple[bool, str]:
    for _ in range(attempts):
        p = start(cfg)
        so, se = p.communicate(timeout=900)
        if p.returncode == 0:
            return True, so + se
    return False, (so + se)[-800:]


def resumed_step(text: str) -> int | None:
    flat = " ".join(text.split())
    if "resumed from" not in flat:
        return None
    return int(flat.split("resumed from")[1].split(" at step ")[1].split()[0])


def kill_trial(work: Path, i: int, reference: dict, rng: random.Random, in_save: bool) -> dict:
    out = work / f"kill{i}"
    cfg = write_config(work, out)
    p = start(cfg)
    while not steps_logged(out) and p.poll() is None:
        time.sleep(0.02)
    saving = False
    if in_save:  # wait for a save to begin, then kill within its first ~50 ms
        target = rng.randrange(1, STEPS // SAVE_EVERY) * SAVE_EVERY
        while p.poll() is None and not (out / f".tmp-checkpoint-{target}").exists():
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.05))
        saving = any(out.glob(".tmp-checkpoint-*"))
    else:  # a random step, then a random moment within the next step or save
        k = rng.randrange(1, STEPS)
        while p.poll() is None and len(steps_logged(out)) < k:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, reference["train_s"] / STEPS))
    at = len(steps_logged(out))
    if p.poll() is not None:
        return {"trial": f"kill {i}", "result": "not killed (finished first)", "detail": ""}
    p.send_signal(signal.SIGKILL)
    p.wait()
    saving = saving or any(out.glob(".tmp-checkpoint-*"))
    ok, text = finish(cfg, out)
    if not ok:
        return {"trial": f"kill {i}", "result": "blocked", "detail": text[-300:]}
    result, detail = outcome(out, reference)
    back = resumed_step(text)
    redone = at - (back or 0)
    if result == "survived" and redone > SAVE_EVERY:
        result, detail = "lost", f"{redone} steps redone, more than save_every={SAVE_EVERY}"
    return {"trial": f"kill {i}", "killed_at_step": at, "inside_save": saving, "resumed_at": back,
            "result": result, "detail": detail}


def _damage(ckpt: Path, how: str, rng: random.Random) -> str:
    files = sorted(p for p in ckpt.rglob("*") if p.is_file() and p.name != "manifest.json")
    f = rng.choice([p for p in files if p.stat().st_size > 64])
    if how == "truncate":
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif how == "zero":
        f.write_bytes(b"")
    elif how == "flip":
        b = bytearray(f.read_bytes())
        for _ in range(8):
            b[rng.randrange(len(b))] ^= 0xFF
        f.write_bytes(bytes(b))
    elif how == "delete":
        f.unlink()
    return f"{how} {f.relative_to(ckpt)}"


def corrupt_trial(work: Path, i: int, reference: dict, rng: random.Random) -> dict:
    out = work / f"corrupt{i}"
    shutil.copytree(reference["folder"], out)
    (out / ".mmtune.lock").unlink(missing_ok=True)
    cfg = write_config(work, out)
    how = ["truncate", "zero", "flip", "delete"][i % 4]
    what = _damage(out / f"checkpoint-{STEPS}", how, rng)
    (out / "summary.json").unlink()
    (out / f".tmp-checkpoint-{STEPS + 2}").mkdir()  # and the leftover of a save killed later
    ok, text = finish(cfg, out, attempts=1)
    if not ok:
        return {"trial": f"corrupt {i}", "damage": what, "result": "blocked", "detail": text[-300:]}
    result, detail = outcome(out, reference)
    said = "passed over" in text
    if result == "survived" and (not said or (out / f".tmp-checkpoint-{STEPS + 2}").exists()):
        result, detail = "lost", "damage not reported or leftover not removed"
    return {"trial": f"corrupt {i}", "damage": what, "resumed_at": resumed_step(text), "result": result,
            "detail": detail}


def signal_trial(work: Path, i: int, reference: dict, rng: random.Random) -> dict:
    out = work / f"sigterm{i}"
    cfg = write_config(work, out)
    p = start(cfg)
    while not steps_logged(out) and p.poll() is None:
        time.sleep(0.02)
    k = rng.randrange(1, STEPS - 1)  # a random step, then a random moment within the next one
    while p.poll() is None and len(steps_logged(out)) < k:
        time.sleep(0.002)
    time.sleep(rng.uniform(0, reference["train_s"] / STEPS))
    if p.poll() is not None:
        return {"trial": f"sigterm {i}", "result": "not signalled (finished first)", "detail": ""}
    p.send_signal(signal.SIGTERM)
    so, se = p.communicate(timeout=300)
    flat = " ".join((so + se).split())
    done = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    if p.returncode in (0, -signal.SIGTERM) and done.get("steps") == STEPS and not done.get("interrupted"):
        # The signal came after the run's work was done (while the process was exiting): not a trial.
        return {"trial": f"sigterm {i}", "result": "not signalled (finished first)", "detail": ""}
    elif "stopped by SIGTERM at step" in flat:
        stopped = int(flat.split("stopped by SIGTERM at step ")[1].split()[0])
    else:
        return {"trial": f"sigterm {i}", "result": "lost", "detail": f"exit {p.returncode}: {flat[-300:]}"}
    ok, text = finish(cfg, out)
    if not ok:
        return {"trial": f"sigterm {i}", "result": "blocked", "detail": text[-300:]}
    result, detail = outcome(out, reference)
    back = resumed_step(text)
    if result == "survived" and stopped < STEPS and back != stopped:
        result, detail = "lost", f"stopped at {stopped} but resumed at {back}"
    return {"trial": f"sigterm {i}", "stopped_at": stopped, "resumed_at": back, "exit": p.returncode,
            "result": result, "detail": detail}


def lock_trial(work: Path) -> dict:
    """A long run holds the folder; a second process is refused; the first then stops on SIGTERM with
    every step logged once."""
    import yaml

    out = work / "lock"
    cfg = write_config(work, out)
    c = yaml.safe_load(cfg.read_text())
    c["train"]["max_steps"] = 100000  # never ends by itself: stopped by SIGTERM below
    cfg.write_text(yaml.safe_dump(c))
    first = start(cfg)
    while not steps_logged(out) and first.poll() is None:
        time.sleep(0.02)
    second = start(cfg)
    so, se = second.communicate(timeout=300)
    refused = second.returncode == 2 and f"PID {first.pid}" in " ".join((so + se).split())
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=300)
    steps = [r["step"] for r in steps_logged(out)]
    clean = steps == list(range(1, len(steps) + 1))
    result = "survived" if refused and clean else "lost"
    return {"trial": "lock", "second_refused": refused, "first_steps_logged_once": clean, "result": result,
            "detail": "" if result == "survived" else f"refused={refused} steps={steps[:20]}"}


def fuzz(work: Path, n: int) -> dict:
    """Malformed records through the real loader and encoder; counts tracebacks (non-DataError)."""
    import traceback

    import yaml

    from mmtune.config import load_config
    from mmtune.data.encode import Encoder
    from mmtune.data.inspect import scan_records
    from mmtune.data.sources import load_records
    from mmtune.errors import MMTuneError

    sys.path.insert(0, str(ROOT))
    from tests.data.malformed import GOOD, cases, fuzz_lines, tiny_processor, write_media

    folder = work / "fuzz"
    write_media(folder)
    base = folder / "cfg.yaml"
    base.write_text(yaml.safe_dump({"output_dir": str(folder / "out"), "model": {"name": "tiny/qwen2-vl"},
                                    "data": {"train": "x", "max_length": 512}}))
    processor = tiny_processor("tiny/qwen2-vl")
    per = max(1, (n - len(cases())) // len(GOOD))
    records = [(fmt, line) for fmt, line, _ in cases()] + [(fmt, line) for fmt in GOOD
                                                           for line in fuzz_lines(fmt, per, seed=1)]
    stats = {"records": len(records), "loaded": 0, "skipped": 0, "errors": 0, "tracebacks": 0, "examples": []}

    def run(fmt, path, policy):
        cfg = load_config(base, [f"data.format={fmt}", f"data.train={path}", f"data.on_bad_record={policy}"])
        return scan_records(load_records(str(path), cfg.data, "train"), Encoder(*processor, cfg), policy).records

    def guarded(label, *args):
        try:
            return run(*args)
        except MMTuneError:
            stats["errors"] += 1
        except Exception as e:  # noqa: BLE001 - counting what escapes is the point of this benchmark
            stats["tracebacks"] += 1
            if len(stats["examples"]) < 5:
                stats["examples"].append(f"{label}: {''.join(traceback.format_exception_only(e)).strip()[:200]}")
        return None

    good = {fmt: json.dumps(row).encode() for fmt, row in GOOD.items()}
    for k, (fmt, line) in enumerate(records):
        f = folder / f"r{k % 50}.jsonl"
        f.write_bytes(good[fmt] + b"\n" + line + b"\n")
        kept = guarded(f"{fmt} skip", fmt, f, "skip")
        if kept is not None:
            stats["skipped"] += kept.n_skipped
            stats["loaded"] += len(kept.records) - (2 if fmt == "ocrvqa" else 1)
        guarded(f"{fmt} error", fmt, f, "error")
        try:  # the same row in a JSON list file, when it is JSON at all
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        jf = folder / f"r{k % 50}.json"
        try:
            jf.write_text(json.dumps([GOOD[fmt], row]))
        except (ValueError, RecursionError):
            continue
        guarded(f"{fmt} json skip", fmt, jf, "skip")
    # parquet: image bytes that are not an image, and an empty bytes value
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(0)
    rows = [{"image": {"bytes": bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))), "path": "x.png"},
             "question": "q", "answer": "1"} for _ in range(20)]
    pq.write_table(pa.Table.from_pylist(rows), folder / "bytes.parquet")
    stats["records"] += len(rows)
    kept = guarded("parquet skip", "vqa", folder / "bytes.parquet", "skip")
    stats["skipped"] += kept.n_skipped if kept is not None else 0
    guarded("parquet error", "vqa", folder / "bytes.parquet", "error")
    return stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--corrupt", type=int, default=4)
    ap.add_argument("--signals", type=int, default=3)
    ap.add_argument("--fuzz", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--json", default=None, help="also write the trials as JSON to this file")
    args = ap.parse_args()
    from _provenance import provenance, write_results

    started = provenance()
    rng = random.Random(args.seed)
    work = Path(args.out or tempfile.mkdtemp(prefix="mmtune-reliability-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    ref_out = work / "reference"
    cfg = write_config(work, ref_out)
    t = time.time()
    ok, text = finish(cfg, ref_out, attempts=1)
    assert ok, text
    rows = steps_logged(ref_out)
    train_s = sum(r["step_time_s"] for r in rows) + 0.3 * (STEPS // SAVE_EVERY)
    reference = {"folder": ref_out, "losses": [r["loss"] for r in rows], "train_s": train_s,
                 "weights": (ref_out / f"checkpoint-{STEPS}" / "trainable.safetensors").read_bytes()}
    print(f"reference run: {STEPS} steps, {time.time() - t:.1f} s wall (training ~{train_s:.1f} s)", flush=True)

    trials = []
    for i in range(args.kills):
        trials.append(kill_trial(work, i, reference, rng, in_save=i % 2 == 0))
        print(trials[-1], flush=True)
    for i in range(args.corrupt):
        trials.append(corrupt_trial(work, i, reference, rng))
        print(trials[-1], flush=True)
    for i in range(args.signals):
        trials.append(signal_trial(work, i, reference, rng))
        print(trials[-1], flush=True)
    trials.append(lock_trial(work))
    print(trials[-1], flush=True)
    fz = fuzz(work, args.fuzz)
    print(fz, flush=True)

    print(f"\nmachine: {os.cpu_count()} CPU cores, python {sys.version.split()[0]}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {time.time() - t0:.0f} s in all")
    print(f"{'fault':<34}{'trials':>7}{'survived':>10}{'lost':>6}{'blocked':>9}  notes")
    kinds = [("SIGKILL at a random moment", "kill", lambda r: not r.get("inside_save")),
             ("SIGKILL inside a checkpoint save", "kill", lambda r: r.get("inside_save")),
             ("damaged newest checkpoint", "corrupt", lambda r: True),
             ("SIGTERM, then run again", "sigterm", lambda r: True),
             ("second process on the folder", "lock", lambda r: True)]
    for label, prefix, sel in kinds:
        rs = [r for r in trials if r["trial"].split()[0] == prefix and sel(r) and r["result"] in
              ("survived", "lost", "blocked")]
        n = {k: sum(r["result"] == k for r in rs) for k in ("survived", "lost", "blocked")}
        note = {"kill": "resumed bit-identical, <= save_every steps redone",
                "corrupt": "fell back to the previous checkpoint, said why",
                "sigterm": "saved at the step it stopped, resumed there",
                "lock": "refused with the holder's PID and host"}[prefix]
        print(f"{label:<34}{len(rs):>7}{n['survived']:>10}{n['lost']:>6}{n['blocked']:>9}  {note}")
    print(f"{'malformed records (fuzz)':<34}{fz['records']:>7}{fz['records'] - fz['tracebacks']:>10}"
          f"{fz['tracebacks']:>6}{0:>9}  {fz['skipped']} counted skips, {fz['errors']} DataErrors, "
          f"{fz['loaded']} records the mutation left valid, {fz['tracebacks']} tracebacks")
    missed = [r["trial"] for r in trials if r["result"].startswith("not ")]
    if missed:
        print(f"not counted (the run had finished before the kill/signal landed): {', '.join(missed)}")
    if args.json:
        write_results(args.json, json.loads(json.dumps({"trials": trials, "fuzz": fz}, default=str)), started)


if __name__ == "__main__":
    main()
