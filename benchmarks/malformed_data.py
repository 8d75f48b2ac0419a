"""An adversary of malformed data, run through the commands a user runs: `mmtune data inspect`, `mmtune doctor`
and a short `mmtune train` (tiny twins, random weights, CPU), each a fresh `mmtune` process.

    python benchmarks/malformed_data.py --out benchmarks/results/malformed_data_cpu2_<date>_<commit>.json
    python benchmarks/malformed_data.py --only bom,nul --no-train        # a few cases, inspect + doctor only

Independent of the seeded fuzzer (tests/data/fuzz_records.py), which calls the readers and checks in-process:
every case here is a small data folder (a good record or two beside the bad input) written at run time, and
every verdict is read from what the command printed and wrote. An outcome is

- `clean`: the command finished (exit 0, 1 for inspect's bad records under `error`, or 2 for a user error),
  and either every record of the case is accounted for (inspect: ok + bad by reason = records in; train:
  `train_records` + `skipped_records` = records in) with each bad record's problem naming the file and a line
  or record index, or a whole-file error names the file and says what to do (`fix:`);
- `traceback`: a Python traceback, an internal error (the doctor's MM099) or an unexpected exit code;
- `silent drop`: records in != records accounted for, or a bad count with no located problem;
- `hang`: the command ran past its timeout.

The script refuses to write results from a tree with uncommitted changes (a dirty run's figures belong to no
commit) unless --allow-dirty, and then marks them dirty (the provenance's `dirty`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _malformed_cases import CASES, Case, write_case  # noqa: E402
from _provenance import provenance, write_results  # noqa: E402

RESULT_KEYS = ("cases", "commands", "outcomes", "clean", "bad", "rows", "wall_s")
IMAGE_MODEL, AV_MODEL = "tiny/qwen2-vl", "tiny/qwen2.5-omni"


def _config(folder: Path, case: Case) -> Path:
    model = AV_MODEL if case.angle in ("audio", "video") else IMAGE_MODEL
    text = (f"output_dir: {folder / 'out'}\nmodel: {{name: {model}, gradient_checkpointing: false, video_frames: 2}}\n"
            "data: {train: x, max_length: 512, on_bad_record: skip}\nadapter: {method: full}\n"
            "train: {device: cpu, max_steps: 2, micro_batch_size: 1, precision: fp32, save_every: 1000,"
            " warmup_steps: 0}\n")
    path = folder / "run.yaml"
    path.write_text(text)
    return path


def _mmtune(args: list[str], seconds: int) -> tuple[int | None, str]:
    code = "import sys; from mmtune.cli import main; sys.argv = ['mmtune'] + sys.argv[1:]; main()"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "COLUMNS": "200", "NO_COLOR": "1"}
    try:
        p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=seconds,
                           env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, ""
    return p.returncode, p.stdout + "\n" + p.stderr


def _raw(rc: int | None, out: str) -> str | None:
    if rc is None:
        return "hang"
    if "Traceback (most recent call last)" in out or "MM099" in out or rc not in (0, 1, 2):
        tail = [ln for ln in out.strip().splitlines() if ln.strip()][-1:] or [""]
        return f"traceback: exit {rc}: {tail[0][:200]}"
    return None


def _file_error(out: str, case: Case) -> str | None:
    """A whole-file error must name the file (or folder) and say what to do."""
    names = {Path(case.spec.lstrip("=").split("::")[0]).name, *(Path(k).name for k in case.files if k != "red.png")}
    if "error:" not in out:
        return "exit 2 without an error line"
    if not any(n in out for n in names):
        return f"the error does not name {' or '.join(sorted(names))}"
    if "fix:" not in out:
        return "the error gives no fix"
    return None


def _located(problems: list[dict], case: Case) -> str | None:
    for p in problems:
        where = p.get("where", "")
        if not any(ch.isdigit() for ch in where) or not p.get("what"):
            return f"problem without a line/index or reason: {p}"
    return None


def run_inspect(cfg: Path, spec: str, case: Case, seconds: int) -> tuple[str, str]:
    rc, out = _mmtune(["data", "inspect", str(cfg), f"data.train={spec}", *case.overrides, "--json",
                       "--examples", "1"], seconds)
    raw = _raw(rc, out)
    if raw:
        return raw.split(":")[0], raw
    if rc == 2:
        bad = _file_error(out, case)
        if case.records is not None and case.good:
            return "silent drop", f"whole file refused though {case.good} record(s) are good: {out.strip()[:200]}"
        return ("clean", "file error: " + _first_error(out)) if not bad else ("silent drop", bad)
    start = out.find("{")
    try:
        report = json.JSONDecoder().raw_decode(out[start:])[0]
    except ValueError:
        return "traceback", f"no JSON report: {out[:200]}"
    n_bad = sum(report["bad"].values())
    seen = report["ok"] + n_bad
    detail = f"{report['ok']} ok, bad {report['bad']}"
    if case.records is not None and seen != case.records:
        return "silent drop", f"{case.records} records in, {seen} accounted for ({detail})"
    if case.good is not None and report["ok"] < case.good:
        return "silent drop", f"{case.good} good records in, {report['ok']} kept ({detail})"
    if n_bad and not report["problems"]:
        return "silent drop", f"bad records counted but none located ({detail})"
    if n_bad and (e := _located(report["problems"], case)):
        return "silent drop", e
    first = report["problems"][0] if report["problems"] else None
    return "clean", detail + (f"; e.g. {first['where']}: {first['what'][:120]}" if first else "")


def _first_error(out: str) -> str:
    return next((ln.strip() for ln in out.splitlines() if ln.strip().startswith("error:")), out.strip()[:160])[:200]


def run_doctor(cfg: Path, spec: str, case: Case, seconds: int) -> tuple[str, str]:
    rc, out = _mmtune(["doctor", str(cfg), f"data.train={spec}", *case.overrides, "--json"], seconds)
    raw = _raw(rc, out)
    if raw:
        return raw.split(":")[0], raw
    if rc == 2:
        return ("clean", "error: " + _first_error(out)) if not _file_error(out, case) else ("silent drop",
                                                                                          _file_error(out, case))
    start = out.find("{")
    try:
        report = json.JSONDecoder().raw_decode(out[start:])[0]
    except ValueError:
        return "traceback", f"no JSON report: {out[:200]}"
    data = [f for f in report["findings"] if f["severity"] in ("error", "warning") and f["code"] != "MM035"]
    return "clean", "; ".join(f"{f['code']} {f['message'][:90]}" for f in data[:2]) or "no data findings"


def run_train(cfg: Path, spec: str, case: Case, seconds: int) -> tuple[str, str]:
    out_dir = cfg.parent / "out"
    shutil.rmtree(out_dir, ignore_errors=True)
    rc, out = _mmtune(["train", str(cfg), f"data.train={spec}", *case.overrides], seconds)
    raw = _raw(rc, out)
    if raw:
        return raw.split(":")[0], raw
    if rc != 0:
        bad = _file_error(out, case)
        if case.records is not None and case.good:
            return "silent drop", f"refused though {case.good} record(s) are good: {_first_error(out)}"
        return ("clean", "refused: " + _first_error(out)) if not bad else ("silent drop", bad)
    summary = json.loads((out_dir / "summary.json").read_text())
    kept, skipped = summary.get("train_records"), summary.get("skipped_records") or {}
    seen = (kept or 0) + sum(skipped.values())
    detail = f"trained on {kept}, skipped {skipped}" + (f", eval skipped {summary.get('skipped_eval_records')}"
                                                        if summary.get("skipped_eval_records") else "")
    if case.records is not None and seen != case.records:
        return "silent drop", f"{case.records} records in, {seen} accounted for ({detail})"
    if case.good is not None and (kept or 0) < case.good:
        return "silent drop", f"{case.good} good records in, {kept} trained ({detail})"
    return "clean", detail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated substrings of case names")
    ap.add_argument("--no-train", action="store_true", help="inspect and doctor only")
    ap.add_argument("--no-doctor", action="store_true")
    ap.add_argument("--doctor-angles", help="run the doctor only on these angles (file,record,media,audio,video)")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (each command is its own process)")
    ap.add_argument("--timeout", type=int, default=180, help="seconds per command before it counts as a hang")
    ap.add_argument("--out", help="write the results (JSON) here; the name must start with malformed_data")
    ap.add_argument("--allow-dirty", action="store_true", help="write results from a tree with uncommitted changes")
    a = ap.parse_args()
    started = provenance()
    if a.out and started["dirty"] and not a.allow_dirty:
        raise SystemExit("the tree has uncommitted changes: commit first (or --allow-dirty, recorded as dirty)")
    if a.out and not Path(a.out).name.startswith("malformed_data"):
        raise SystemExit("--out: a results file's name starts with the script's name (malformed_data...)")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    cases = [c for c in CASES if not a.only or any(s in c.name for s in a.only.split(","))]
    rows, t0 = [], time.perf_counter()
    commands = [("inspect", run_inspect)] + ([] if a.no_doctor else [("doctor", run_doctor)]) + \
        ([] if a.no_train else [("train", run_train)])
    def one(case: Case, tmp: str) -> list[dict]:
        folder = Path(tmp) / case.name
        spec = write_case(folder, case)
        case = dataclasses.replace(case, overrides=[o.replace("__DIR__", str(folder)) for o in case.overrides])
        cfg, out = _config(folder, case), []
        for cmd, fn in commands:
            if (cmd == "train" and not case.train) or (cmd == "doctor" and a.doctor_angles
                                                       and case.angle not in a.doctor_angles.split(",")):
                continue
            t = time.perf_counter()
            outcome, detail = fn(cfg, spec, case, a.timeout)
            out.append({"case": case.name, "angle": case.angle, "command": cmd, "outcome": outcome,
                        "detail": detail.replace(tmp, "TMP"), "s": round(time.perf_counter() - t, 1)})
            mark = "  " if outcome == "clean" else "!!"
            print(f"{mark} {case.angle:7s} {case.name:34s} {cmd:8s} {outcome:12s} {out[-1]['detail'][:150]}", flush=True)
        return out

    from concurrent.futures import ThreadPoolExecutor

    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(a.jobs) as pool:
        for got in pool.map(lambda c: one(c, tmp), cases):  # each case its own folder; rows in case order
            rows += got
    wall = time.perf_counter() - t0
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    bad = [r for r in rows if r["outcome"] != "clean"]
    print(f"\n{len(cases)} cases, {len(rows)} command runs: {outcomes} ({wall:.0f} s)")
    for r in bad:
        print(f"  BAD {r['case']} / {r['command']}: {r['outcome']}: {r['detail'][:200]}")
    if a.out:
        payload = {"cases": len(cases), "commands": len(rows), "outcomes": outcomes, "clean": len(rows) - len(bad),
                   "bad": len(bad), "rows": rows, "wall_s": round(wall, 1)}
        print("written:", write_results(a.out, payload, started))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
