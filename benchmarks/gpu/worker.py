"""One row, in its own process (so its peak memory is its own and an out-of-memory ends only it).

    python benchmarks/gpu/worker.py '{"kind": "paths", ...}' DEVICE GPU_ID   -> last line: RESULT {json}

paths:   the recipe with the row's overrides through `mmtune train`'s own code (prepare_config, resolve_run,
         build_run, the start-up summary, train.loop.train), stopped right after step 20 (`stop_after`: the
         final checkpoint of a full 7B model would be tens of GB written for nothing); the doctor's preflight is
         not run (it is `mmtune doctor`'s, not a training path). Losses from metrics.jsonl (logged each step).
planner: mmtune.plan.predict for this GPU, recorded before anything is measured; then
         mmtune.plan.verify.verify with that plan (`mmtune plan --verify`'s code) on the device.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def error_fields(e: BaseException) -> dict:
    """The error's first line and where: mmtune's `where` when it has one, the innermost frame, and the
    innermost frame inside mmtune (where the cause usually is)."""
    tb = traceback.extract_tb(e.__traceback__)
    inner = f"{tb[-1].filename}:{tb[-1].lineno} in {tb[-1].name}" if tb else None
    ours = next((f"{f.filename.split('/src/')[-1]}:{f.lineno} in {f.name}" for f in reversed(tb)
                 if "/mmtune/" in f.filename), None)
    lines = str(e).strip().splitlines() or [""]
    first = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]  # "the config has 1 problem(s):" + the problem
    return {"error": f"{type(e).__name__}: {first}"[:500], "where": getattr(e, "where", None) or inner,
            "where_frame": inner, "where_mmtune": ours}


def _is_oom(e: BaseException) -> bool:
    import torch

    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def _peaks(device: str) -> dict:
    import torch

    if device != "cuda":
        import resource

        return {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(), "peak_reserved_bytes": torch.cuda.max_memory_reserved()}


def run_paths(row: dict, device: str, gpu: str | None) -> dict:
    import torch

    from mmtune.build import build_run
    from mmtune.commands.train import prepare_config
    from mmtune.models.model_config import DECODER_LAYERS
    from mmtune.resolve import local_target, resolve_run
    from mmtune.train.loop import train
    from mmtune.train.summary import print_start_summary

    steps = row["steps"]
    # the harness's folder (the same for every DDP rank; it removes it), else one of our own
    own = not row.get("out_dir")
    out = Path(tempfile.mkdtemp(prefix="mmtune-gpu-paths-")) if own else Path(row["out_dir"]).parent
    token = DECODER_LAYERS.set(row.get("layers"))
    t0 = time.perf_counter()
    res: dict = {}
    try:
        cfg, run_cfg, notes = prepare_config(ROOT / row["recipe"], row["overrides"] + [f"output_dir={out / 'run'}"])
        here = resolve_run(run_cfg, local_target(run_cfg.train.device), for_training=True)
        res["decisions"] = here.summary_lines()
        run = build_run(here)
        res["build_s"] = round(time.perf_counter() - t0, 2)
        print_start_summary(run, notes)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        train(run, stop_after=steps)
        rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
        train_rows = [r for r in rows if r.get("kind") == "train"]
        losses = [r["loss"] for r in train_rows]
        res.update(steps=len(train_rows), losses=losses, losses_finite=bool(losses) and all(math.isfinite(x) for x in losses),
                   skipped_updates=sum(bool(r.get("skipped_update")) for r in train_rows),
                   steps_s=round(sum(r["step_time_s"] for r in train_rows), 3),
                   tokens_per_s_median=statistics.median(r["tokens_per_s"] for r in train_rows) if train_rows else None,
                   **_peaks(device))
        ok = res["steps"] == steps and res["losses_finite"]
        res["status"] = "pass" if ok else "fail"
        if not ok:
            res["error"] = f"{res['steps']} of {steps} steps logged, losses finite: {res['losses_finite']}"
    except BaseException as e:  # noqa: BLE001 -- every failure is a row, never a crash of the harness
        res.update(status="oom" if _is_oom(e) else "fail", **error_fields(e), **_peaks(device))
        traceback.print_exc()
    finally:
        DECODER_LAYERS.reset(token)
        if own:
            shutil.rmtree(out, ignore_errors=True)
    res["seconds"] = round(time.perf_counter() - t0, 2)
    return res


def run_planner(row: dict, device: str, gpu: str | None) -> dict:
    from mmtune.config import load_config
    from mmtune.models.model_config import DECODER_LAYERS
    from mmtune.plan.batch import Declared
    from mmtune.plan.planner import predict
    from mmtune.plan.verify import verify

    t0 = time.perf_counter()
    res: dict = {}
    d = row.get("declared") or {}
    declared = Declared(images=[tuple(x) for x in d.get("images", [])], videos=[tuple(x) for x in d.get("videos", [])],
                        audio_seconds=list(d.get("audio_seconds", []))) if d else None
    layers = row.get("layers")
    try:
        cfg = load_config(ROOT / row["recipe"], row["overrides"])
        token = DECODER_LAYERS.set(layers)
        try:
            plan = predict(cfg, gpu=gpu, declared=declared, plan_eval=False)
        finally:
            DECODER_LAYERS.reset(token)
        res["plan_s"] = round(time.perf_counter() - t0, 2)
        res["predicted"] = {"peak_allocated_bytes": plan.peak_allocated_bytes, "peak_reserved_bytes": plan.peak_reserved_bytes,
                            "tensor_peak_bytes": plan.tensor_peak_bytes, "process_total_bytes": plan.process_total_bytes,
                            "step_time_s": plan.step_time_s, "fits": plan.fits, "margin_pct": plan.margin_pct,
                            "peak_phase": plan.peak_phase, "gpu_id": plan.gpu_id, "batch": plan.batch,
                            "breakdown": plan.breakdown}
        res["decisions"] = plan.decisions
    except BaseException as e:  # noqa: BLE001
        res.update(status="fail", stage="plan", **error_fields(e), seconds=round(time.perf_counter() - t0, 2))
        traceback.print_exc()
        return res
    try:
        v = verify(cfg, gpu=gpu, declared=declared, device=device, layers=layers, plan=plan)
        res["measured"] = v.measured
        res["error_pct"] = v.error_pct
        res["device_name"] = v.device_name
        res["status"] = "pass"
    except BaseException as e:  # noqa: BLE001
        res.update(status="oom" if _is_oom(e) else "fail", stage="measure", **error_fields(e))
        traceback.print_exc()
    if res.get("status") == "oom":
        res["planner_agrees"] = not plan.fits  # the plan said it would not fit, and it did not
    elif res.get("status") == "pass" and device == "cuda":
        res["planner_agrees"] = bool(plan.fits)
    res["seconds"] = round(time.perf_counter() - t0, 2)
    return res


def main() -> None:
    row, device, gpu = json.loads(sys.argv[1]), sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    fn = {"paths": run_paths, "planner": run_planner}[row["kind"]]
    res = fn(row, device, gpu)
    sys.stdout.flush()
    if os.environ.get("RANK", "0") == "0":  # under DDP, the main rank's metrics and result
        print("RESULT " + json.dumps(res, default=str), flush=True)


if __name__ == "__main__":
    main()
