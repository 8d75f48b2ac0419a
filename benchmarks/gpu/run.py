"""Issue #12 on one GPU, in one command: every training path runs, the planner against the GPU, throughput vs peers.

    python benchmarks/gpu/run.py                      # all three, within --budget-s; run it again until it says done
    python benchmarks/gpu/run.py paths|planner|throughput [--only GLOB,..] [--rows N] [--budget-s S] [--dry-run]
    python benchmarks/gpu/run.py --device cpu --tiny  # the same rows on the tiny twins, on a CPU (how it is tested)

Each row runs in its own process (benchmarks/gpu/worker.py, or benchmarks/throughput.py's variant process) and
is written to the subcommand's JSON file as soon as it ends (atomic write, results.py); a later call skips the
rows already measured, so several 10-minute calls complete the set. Files, under --out (default
benchmarks/results on a GPU): gpu_paths.json, gpu_planner.json, gpu_throughput.json, each with the device,
driver, library versions, the optional packages found, and per row its exact command. A CPU or --tiny run
writes cpu_tiny_*.json (never gpu_*.json) under runs/gpu-harness/ unless --out says otherwise. README.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "src")]  # rows/env/results beside this file; mmtune from this checkout

from env import probe  # noqa: E402
from results import ResultsFile  # noqa: E402
from rows import Row, paths_rows, planner_rows, throughput_rows  # noqa: E402

# `all` runs the two files issue #12 is done with first (planner, throughput), then the long paths part
SUBCOMMANDS = ("planner", "throughput", "paths")
THROUGHPUT = {  # benchmarks/throughput.py settings: a realistic model on a GPU, the tiny twin on a CPU
    # the counting images (112 px) upscaled by the processor to 448x448: 256 image tokens, 277 a record, ~2.2k tokens
    # a micro-batch of 8, the same for every variant (the peers use the run's processor, caps set)
    "gpu": {"model": "Qwen/Qwen2-VL-7B-Instruct", "steps": 30, "mbs": 8, "accum": 2, "precision": "bf16", "workers": 2,
            "set": ["model.min_pixels=200704", "data.max_length=1024"]},
    "tiny": {"model": "tiny/qwen2-vl", "steps": 4, "mbs": 2, "accum": 2, "precision": "fp32", "workers": 0, "set": []},
}


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", nargs="?", default="all", choices=("all", *SUBCOMMANDS))
    ap.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda (refused without one: use --device cpu --tiny)")
    ap.add_argument("--tiny", action="store_true", help="the tiny twins, sequences and batches capped (CPU test)")
    ap.add_argument("--gpu", help="this GPU's catalogue id for the plans (default: detected, e.g. h100)")
    ap.add_argument("--only", help="comma-separated globs or substrings of row ids, e.g. 'paths/*/base,planner/text/*'")
    ap.add_argument("--rows", type=int, help="run at most N rows in this call")
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="stop starting rows once the next one's estimate would pass this many seconds (default 540)")
    ap.add_argument("--row-timeout-s", type=float, default=480.0, help="a row running longer is killed and recorded")
    ap.add_argument("--dry-run", action="store_true", help="list the rows, their state and estimated cost; run nothing")
    ap.add_argument("--out", help="folder of the JSON files (default: benchmarks/results on a GPU, runs/gpu-harness/ else)")
    ap.add_argument("--steps", type=int, default=20, help="paths: optimizer steps per row (issue #12: 20)")
    ap.add_argument("--repeats", type=int, default=3, help="throughput: runs per variant (interleaved)")
    ap.add_argument("--throughput-model", help="throughput: the model (default Qwen/Qwen2-VL-7B-Instruct; tiny/qwen2-vl)")
    ap.add_argument("--rerun", action="store_true", help="run the selected rows again even when already measured")
    ap.add_argument("--mirror", help="also write each results file into this folder after every row (a lent machine's "
                                     "$OUT, whose files come back even when the call is cut off)")
    ap.add_argument("--wheels", help="install every wheel in this folder first, offline (pip --no-index; README.md: "
                                     "bitsandbytes, liger-kernel, trl brought from a machine with network)")
    return ap.parse_args(argv)


def install_wheels(folder: str) -> None:
    """pip install the folder's wheels without any index (a GPU machine without network); what fails is said and
    the rows that need it are then skipped with the reason, never failed."""
    wheels = sorted(str(p) for p in Path(folder).glob("*.whl"))
    if not wheels:
        print(f"--wheels {folder}: no *.whl there; nothing installed", flush=True)
        return
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", folder, *wheels],
                       capture_output=True, text=True)
    print(f"--wheels {folder}: pip install of {len(wheels)} wheel(s) "
          + ("done" if p.returncode == 0 else f"FAILED (rc {p.returncode}):\n{p.stderr[-2000:]}"), flush=True)


def setup(args) -> tuple[str, str, Path, str, dict]:
    """(device, file prefix, output folder, GPU catalogue id or '', environment)."""
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else None)
    if device is None:
        sys.exit("no CUDA GPU here: this harness measures on one. To check the harness itself on this CPU: "
                 "python benchmarks/gpu/run.py --device cpu --tiny --out /tmp/gpu-harness")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda but torch.cuda.is_available() is False")
    real = device == "cuda" and not args.tiny
    prefix = "gpu" if real else f"{device}{'_tiny' if args.tiny else ''}"
    out = Path(args.out) if args.out else (ROOT / "benchmarks" / "results" if real else ROOT / "runs" / "gpu-harness")
    if not real and out.resolve() == (ROOT / "benchmarks" / "results").resolve():
        sys.exit("a CPU or --tiny run does not write into benchmarks/results (those files are a GPU's): pass --out")
    env = probe(device)
    gpu = ""
    if device == "cuda":
        gpu = args.gpu or env.get("gpu_id_detected") or ""
        if not gpu:
            sys.exit(f"{env['device']} is not in mmtune's GPU catalogue: pass --gpu with the closest id "
                     "(docs/plan.md lists them) so the plans are made for it")
    return device, prefix, out, gpu, env


def selected(rows: list[Row], only: str | None) -> list[Row]:
    if not only:
        return rows
    pats = [p.strip() for p in only.split(",") if p.strip()]
    return [r for r in rows if any(fnmatch.fnmatch(r.id, p) or p in r.id for p in pats)]


def missing_needs(row: Row, env: dict, device: str) -> str | None:
    """Why this row cannot run here, or None."""
    why = []
    for need in row.needs:
        if need == "cuda" and device != "cuda":
            why.append("needs CUDA")
        elif need == "gpus>=2" and device == "cuda" and env.get("device_count", 0) < 2:  # a CPU runs 2 gloo ranks
            why.append(f"needs 2+ GPUs (DDP); this machine has {env.get('device_count', 0)}")
        elif need in env["optional"] and env["optional"][need] is None:
            why.append(f"needs {need}, not importable here (benchmarks/gpu/README.md: bring its wheel)")
    return "; ".join(why) or None


def harness_command(sub: str, row: Row, args, device: str) -> str:
    cmd = ["python", "benchmarks/gpu/run.py", sub, "--only", row.id, "--rerun"]
    cmd += ["--device", device] if args.device else []
    cmd += ["--tiny"] if args.tiny else []
    cmd += ["--gpu", args.gpu] if args.gpu else []
    cmd += ["--steps", str(args.steps)] if sub == "paths" and args.steps != 20 else []
    return shlex.join(cmd)


def mmtune_command(row: Row, gpu: str) -> str:
    """The same row as a plain `mmtune` command line (paths: the harness stops after the last step instead of saving
    a final checkpoint, and runs no doctor preflight)."""
    if row.kind == "paths":
        ov = [o if not o.startswith("train.max_steps=") else f"train.max_steps={row.steps}" for o in row.overrides]
        env = f"# decoder cut to {row.layers} layers by the harness (no CLI key); " if row.layers else ""
        return env + shlex.join(["mmtune", "train", row.recipe, *ov])
    media = [a for w, h in row.declared.get("images", []) for a in ("--image", f"{w}x{h}")]
    media += [a for f, w, h in row.declared.get("videos", []) for a in ("--video", f"{f}x{w}x{h}")]
    media += [a for s in row.declared.get("audio_seconds", []) for a in ("--audio", str(s))]
    return shlex.join(["mmtune", "plan", row.recipe, *row.overrides, *(["--gpu", gpu] if gpu else []), "--verify",
                       "--json", *media, *(["--layers", str(row.layers)] if row.layers else [])])


def _throughput_module():
    spec = importlib.util.spec_from_file_location("mmtune_bench_throughput", ROOT / "benchmarks" / "throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def throughput_args(args, device: str, tmp: Path):
    t = dict(THROUGHPUT["tiny" if args.tiny else "gpu"])
    if args.throughput_model:
        t["model"] = args.throughput_model
    return _throughput_module().parser().parse_args(
        ["--model", t["model"], "--steps", str(t["steps"]), "--mbs", str(t["mbs"]), "--accum", str(t["accum"]),
         "--precision", t["precision"], "--device", device, "--workers", str(t["workers"]), "--out", str(tmp),
         *[a for kv in t["set"] for a in ("--set", kv)]])


def run_row(sub: str, row: Row, args, device: str, gpu: str, timeout: float) -> tuple[dict | None, str]:
    """(the worker's result, or None when it printed none; the tail of its output)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"mmtune-gpu-{sub}-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TRANSFORMERS_VERBOSITY": "error", "PYTHONUNBUFFERED": "1"}
    try:
        if sub == "throughput":
            cmd, env = _throughput_module().variant_command(throughput_args(args, device, tmp), row.variant)
        else:
            spec = json.dumps({**row.spec(), "out_dir": str(tmp / "run")})  # one folder for every DDP rank
            cmd = [sys.executable, str(HERE / "worker.py"), spec, device, gpu]
            if "gpus>=2" in row.needs:  # DDP: every GPU of this machine, one process each (a CPU: 2 gloo ranks)
                import torch

                n = torch.cuda.device_count() if device == "cuda" else 2
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", *cmd[1:]]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            return {"status": "timeout", "error": f"killed after {timeout:.0f} s"}, (out + err)[-4000:]
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        tail = (p.stdout + "\n" + p.stderr)[-4000:]
        if not lines:
            return None, tail
        res = json.loads(lines[0][7:])
        if sub == "throughput":  # benchmarks/throughput.py's own variant process: its command is the row's
            res = {"status": "pass", **res, "variant_command": shlex.join(cmd)}
        return res, tail
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rows_of(sub: str, args, device: str) -> list[Row]:
    if sub == "paths":
        return paths_rows(device, args.tiny, args.steps)
    if sub == "planner":
        return planner_rows(device, args.tiny)
    return throughput_rows(device, args.tiny, args.repeats)


def summarize(sub: str, rf: ResultsFile, args, device: str) -> dict:
    rows = rf.data["rows"]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    s: dict = {"rows": len(rows), "by_status": counts}
    if sub == "planner":
        errs = [r["error_pct"]["peak_reserved"] for r in rows if r.get("status") == "pass"
                and r.get("error_pct", {}).get("peak_reserved") is not None]
        times = [r["error_pct"]["step_time"] for r in rows if r.get("status") == "pass"
                 and r.get("error_pct", {}).get("step_time") is not None]
        if errs:
            s["peak_reserved_error_pct"] = {"median_abs": sorted(map(abs, errs))[len(errs) // 2], "max_abs": max(map(abs, errs)),
                                            "min": min(errs), "max": max(errs)}
        if times:
            s["step_time_error_pct"] = {"median_abs": sorted(map(abs, times))[len(times) // 2], "min": min(times),
                                        "max": max(times)}
        s["fit_agreement"] = {"agree": sum(r.get("planner_agrees") is True for r in rows),
                              "disagree": sum(r.get("planner_agrees") is False for r in rows)}
    if sub == "throughput":
        mod = _throughput_module()
        keep = ("tokens_per_s", "peak_memory_bytes", "final_loss", "data_wait_fraction", "build_s")
        runs = {v: [{k: r[k] for k in keep if k in r} for r in sorted(rows, key=lambda r: r["repeat"])
                    if r["variant"] == v and r["status"] == "pass"] for v in ("ours", "plain", "trainer", "sft")}
        peers = [v for v in ("plain", "trainer", "sft") if runs[v]]
        if runs["ours"]:
            results, ratios = mod.summarize(runs, peers)
            t = throughput_args(args, device, Path("runs/bench_throughput"))
            s.update(settings={k: getattr(t, k) for k in ("model", "steps", "mbs", "accum", "precision", "device", "workers",
                                                          "set")},
                     results=results, ratio_ours_over=ratios)
    return s


def run_sub(sub: str, args, env: dict, device: str, prefix: str, out: Path, gpu: str, clock: dict) -> bool:
    """Run (or list) the subcommand's rows; True when none is left to measure."""
    rows = selected(rows_of(sub, args, device), args.only)
    path = out / f"{prefix}_{sub}.json"
    rf = ResultsFile(path, {**env, "gpu_id": gpu or None, "harness": "benchmarks/gpu/run.py"}, mirror=args.mirror)
    todo = [r for r in rows if args.rerun or not rf.done(r.id)]
    if args.dry_run:
        print(f"== {sub}: {len(rows)} rows, {len(rows) - len(todo)} measured, {len(todo)} to run -> {path}")
        for r in rows:
            why = r.skip or missing_needs(r, env, device)
            state = "done" if not args.rerun and rf.done(r.id) else (f"skip: {why}" if why else "todo")
            print(f"  {r.id:58} ~{r.est_s:5.0f} s  {state}" + (f"  [layers {r.layers}]" if r.layers else ""))
        est = sum(r.est_s for r in todo if not (r.skip or missing_needs(r, env, device)))
        print(f"  estimated: {est / 60:.1f} min for the {len(todo)} rows to run (skips cost nothing)")
        return True
    left = 0
    for r in todo:
        common = {"id": r.id, "kind": r.kind, "recipe": r.recipe, "overrides": r.overrides, "layers": r.layers,
                  "layers_reason": r.layers_reason, "declared": r.declared or None, "notes": r.notes, "needs": r.needs,
                  "variant": r.variant, "repeat": r.repeat if r.kind == "throughput" else None,
                  "command": harness_command(sub, r, args, device),
                  "mmtune_command": mmtune_command(r, gpu) if r.kind != "throughput" else None,
                  "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        why = r.skip or missing_needs(r, env, device)
        if why:
            rf.put({**common, "status": "skipped", "reason": why})
            print(f"skip  {r.id}: {why}", flush=True)
            continue
        spent = time.monotonic() - clock["start"]
        if clock["rows"] is not None and clock["rows"] <= 0 or spent + r.est_s > args.budget_s:
            left += 1
            continue
        timeout = min(args.row_timeout_s, max(30.0, args.budget_s - spent))
        print(f"run   {r.id} (~{r.est_s:.0f} s) ...", flush=True)
        res, tail = run_row(sub, r, args, device, gpu, timeout)
        if clock["rows"] is not None:
            clock["rows"] -= 1
        if res is None:
            res = {"status": "fail", "error": "the worker printed no result (crashed?)", "log_tail": tail}
        elif res.get("status") == "timeout" and timeout < args.row_timeout_s:
            print(f"  stopped at the budget, not recorded: {r.id}", flush=True)
            left += 1
            continue
        elif res.get("status") != "pass":
            res["log_tail"] = tail[-2000:]
        rf.put({**common, **res, "command": common["command"]})
        print(f"  {res['status']}" + (f": {res.get('error')}" if res.get("error") else ""), flush=True)
    rf.data["summary"] = summarize(sub, rf, args, device)
    rf.write()
    print(f"{sub}: {rf.data['summary']['by_status']} -> {path}" + (f"; {left} row(s) left: run the same command again"
                                                                     if left else ""), flush=True)
    return left == 0


def main(argv=None) -> int:
    args = parse(argv)
    if args.wheels and not args.dry_run:
        install_wheels(args.wheels)
    device, prefix, out, gpu, env = setup(args)
    print(f"device: {env['device']} ({gpu or 'no catalogue id'}); optional packages: "
          + ", ".join(f"{k} {v or 'MISSING'}" for k, v in env["optional"].items()), flush=True)
    if env["required_missing"]:
        print(f"WARNING: mmtune's dependencies {', '.join(env['required_missing'])} do not import here: the rows that "
              "reach them fail naming them (README.md: bring their wheels like the optional ones)", flush=True)
    clock = {"start": time.monotonic(), "rows": args.rows}
    subs = SUBCOMMANDS if args.command == "all" else (args.command,)
    done = [run_sub(sub, args, env, device, prefix, out, gpu, clock) for sub in subs]
    if not args.dry_run:
        print("all rows measured" if all(done) else "rows left: run the same command again (rows already measured are kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
