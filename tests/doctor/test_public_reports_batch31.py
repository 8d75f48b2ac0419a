"""Broken setups from the thirty-first batch of public bug reports (docs/doctor.md, "Public bug reports, batch 31:
interruptions: kills, preemption, full disks and damaged run folders"): a spot instance's or a cluster's SIGTERM
(SIGKILL some seconds later), a signal sent to every process of the job, a resumed or requeued run, an interrupted
export. Each is rebuilt with real `mmtune train` processes on the CPU and real signals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from doctor_helpers import sums_jsonl


def _config(tmp_path: Path, **sections) -> Path:
    """A LoRA run of the tiny Qwen2 (fp32, CPU) that never ends by itself; `sections` update the tree."""
    import yaml

    tree = {"output_dir": str(tmp_path / "run"), "model": {"name": "tiny/qwen2", "gradient_checkpointing": False},
            "data": {"train": sums_jsonl(tmp_path), "max_length": 64},
            "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
            "train": {"max_steps": 100000, "micro_batch_size": 2, "grad_accum": 1, "lr": 1e-3, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 0, "seed": 0, "save_every": None},
            "eval": {"every": None}, "logging": {"tensorboard": False}}
    for k, v in sections.items():
        tree[k] = {**tree.get(k, {}), **v} if isinstance(v, dict) else v
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _start(cfg: Path) -> subprocess.Popen:
    """`mmtune train CFG` in a session of its own (so the whole group can be signalled, as a scheduler does)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "250"}
    return subprocess.Popen([sys.executable, "-m", "mmtune.cli", "train", str(cfg), "--skip-checks"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)


def _rows(out: Path, kind: str) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    return [r for r in rows if r.get("kind") == kind]


def _wait_for_step(proc, out: Path, step: int, timeout: float = 300) -> None:
    t = time.monotonic()
    while not any(r["step"] >= step for r in _rows(out, "train")):
        if proc.poll() is not None:
            raise AssertionError(f"ended early: {proc.communicate()[0][-3000:]}")
        if time.monotonic() - t > timeout:
            raise AssertionError("timed out")
        time.sleep(0.05)


# ----------------------------------------------------------------------------- a stop during the evaluation
# https://github.com/goodfire-ai/spd/issues/677, https://github.com/goodfire-ai/spd/issues/741: the SIGTERM flag was
# read only between steps, so a preemption during an evaluation waited for it, the grace period ran out and the run
# fell back to its last periodic checkpoint (0 of 6 preemptions saved). GKE's spot grace is ~30 s
# (https://github.com/ray-project/ray/issues/63968); an in-training evaluation with generation takes minutes.
@pytest.mark.slow  # one `mmtune train` process (about 30 s on 2 cores)
def test_a_stop_during_the_evaluation_saves_within_the_grace_period(tmp_path):
    """SIGTERM right after step 2's row, while step 2's evaluation (200 records, 48 new tokens each) runs: the
    evaluation is given up between two batches and checkpoint-2 is written at once, as a spot instance's grace
    period needs; before, the process went on through the whole evaluation (and a third step) first."""
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    (tmp_path / "eval").mkdir()
    cfg = _config(tmp_path, data={"eval": sums_jsonl(tmp_path / "eval", 200), "eval_max_samples": 200},
                  eval={"every": 2, "metrics": ["exact_match"], "max_new_tokens": 48, "batch_size": 2})
    out = tmp_path / "run"
    proc = _start(cfg)
    _wait_for_step(proc, out, 2)
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)  # what a scheduler sends: every process of the job
    said, _ = proc.communicate(timeout=600)
    took = time.monotonic() - sent
    said = " ".join(said.split())
    assert proc.returncode == 2, said[-3000:]
    assert "stopped by SIGTERM at step 2 of 100000" in said and "evaluation was given up for the stop" in said
    assert f"mmtune eval CONFIG checkpoint={out}/checkpoint-2" in said
    assert (out / "checkpoint-2" / "manifest.json").is_file() and not (out / "checkpoint-3").exists()
    assert _rows(out, "eval") == []  # no half-made evaluation is logged
    assert took < 20, f"{took:.1f} s from SIGTERM to exit"
    # The same command resumes from step 2 (in this process, one more step).
    assert train(build_run(load_config(cfg, [])), stop_after=3) is None
    assert [r["step"] for r in _rows(out, "train")] == [1, 2, 3]


# ----------------------------------------------------------------------------- the terminal goes away
# https://github.com/hiyouga/LlamaFactory/issues/3036, https://github.com/open-mmlab/mmsegmentation/issues/1998,
# https://github.com/meta-pytorch/torchtune/issues/371, https://github.com/borgbackup/borg/issues/1593: an ssh
# connection drops and SIGHUP ends the training (or leaves its lock behind) with nothing saved since the last
# checkpoint.
def _in_a_terminal(cfg: Path):
    """`mmtune train CFG` as the session leader of a fresh pseudo-terminal, as an ssh login runs it; returns the
    process and the terminal's master end (closing it hangs the terminal up)."""
    import fcntl
    import pty
    import termios
    import threading

    master, slave = pty.openpty()

    def own_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "mmtune.cli", "train", str(cfg), "--skip-checks"], stdin=slave,
                            stdout=slave, stderr=slave, preexec_fn=own_terminal, env=env)
    os.close(slave)

    def drain():  # a terminal nobody reads fills up and blocks the writer
        while True:
            try:
                if not os.read(master, 1 << 16):
                    return
            except OSError:
                return

    threading.Thread(target=drain, daemon=True).start()
    return proc, master


@pytest.mark.slow  # one `mmtune train` process (about 20 s on 2 cores)
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no terminals' hangup on this platform")
def test_a_terminal_hangup_saves_like_sigterm(tmp_path):
    """The terminal closes at step 3: the run finishes its step, saves and ends (exit 2) with summary.json saying
    SIGHUP and its lock released; before, SIGHUP's default action killed it with no checkpoint at all."""
    cfg = _config(tmp_path)
    out = tmp_path / "run"
    proc, master = _in_a_terminal(cfg)
    _wait_for_step(proc, out, 3)
    os.close(master)  # the ssh connection drops: the kernel sends SIGHUP to the session leader
    assert proc.wait(timeout=300) == 2
    saved = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert saved and saved[-1] >= 3 and (out / f"checkpoint-{saved[-1]}" / "manifest.json").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] == "SIGHUP" and summary["steps"] == saved[-1]
    assert not (out / ".mmtune.lock").exists()


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no terminals' hangup on this platform")
def test_a_run_started_under_nohup_keeps_ignoring_the_hangup():
    """`nohup mmtune train ...` starts with SIGHUP ignored: the run's stop handler leaves it so (a hangup must not
    stop what the user detached on purpose), and SIGTERM is still handled."""
    from mmtune.train.signals import StopRequest

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopRequest() as stop:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == stop._handle
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


# ----------------------------------------------------------------------------- an export killed half-way
# https://github.com/unslothai/unsloth/issues/1122 (a merged folder missing shards and its index, loaded later),
# https://github.com/unslothai/unsloth/issues/2761 and https://github.com/huggingface/peft/issues/2405
# ("SafetensorError: Error while deserializing header: MetadataIncompleteBuffer" on a merged save).
@pytest.mark.slow  # a two-step run and two exports (about 40 s on 2 cores)
def test_a_killed_merge_leaves_no_half_export_and_its_staging_is_removed_next_time(tmp_path, capsys):
    """`mmtune export --merge` SIGKILLed while it writes: nothing appears under export-merged (the export is staged
    and renamed when complete); the staging folder it leaves is removed by the next export to the same place, which
    says so, and that export is whole."""
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.export import export
    from mmtune.train.durable import verify_manifest
    from mmtune.train.loop import train

    cfg = _config(tmp_path, train={"max_steps": 2, "save_every": 2})
    train(build_run(load_config(cfg, [])))
    ckpt = tmp_path / "run" / "checkpoint-2"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "mmtune.cli", "export", str(ckpt), "--merge"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.monotonic()
    while not list(ckpt.glob(".export-merged.partial-*")):
        assert proc.poll() is None and time.monotonic() - t < 300, "the export ended before it was killed"
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    assert not (ckpt / "export-merged").exists()
    left = list(ckpt.glob(".export-merged.partial-*"))
    assert len(left) == 1 and verify_manifest(ckpt) is None  # the checkpoint itself is not damaged by it
    capsys.readouterr()
    out = export(ckpt, merge=True)
    said = " ".join(capsys.readouterr().out.split())
    assert out == ckpt / "export-merged" and (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert not left[0].exists() and list(ckpt.glob(".export-merged.partial-*")) == []
    assert "the staging folder of an export that was killed" in said and left[0].name in said


# ----------------------------------------------------------------------------- a signal to every process of the job
# https://github.com/KempnerInstitute/KempnerForge/issues/177, https://github.com/KempnerInstitute/KempnerForge/pull/203,
# https://github.com/allenai/olmoearth_pretrain/pull/604: SLURM signals every process of the job step; the DataLoader
# workers die first, the main process fails fetching its next batch and the emergency checkpoint is never written.
@pytest.mark.slow  # one `mmtune train` process with a DataLoader worker (about 40 s on 2 cores)
def test_sigterm_to_every_process_with_a_dataloader_worker_still_saves(tmp_path):
    """SIGTERM to the whole process group (training process, fork server, worker) in the middle of a run whose
    steps take four micro-batches each: the step is finished or given up whole, checkpoint-N is saved and the
    stop message says how to resume."""
    cfg = _config(tmp_path, train={"num_workers": 1, "grad_accum": 4})
    out = tmp_path / "run"
    proc = _start(cfg)
    _wait_for_step(proc, out, 2)
    os.killpg(proc.pid, signal.SIGTERM)
    said, _ = proc.communicate(timeout=300)
    said = " ".join(said.split())
    assert proc.returncode == 2, said[-3000:]
    step = int(said.split("stopped by SIGTERM at step ")[1].split()[0])
    assert step >= 2 and (out / f"checkpoint-{step}" / "manifest.json").is_file()
    assert "run the same command again" in said and "Traceback" not in said


# ----------------------------------------------------------------------------- a second training into the same folder
# https://github.com/zai-org/ChatGLM-6B/issues/1074, https://github.com/LibreYOLO/libreyolo/issues/833,
# https://github.com/Emmi-AI/noether/pull/220: a second training with other data in the same output folder silently
# overwrote the first run's checkpoints.
def test_a_second_training_with_other_data_into_a_finished_run_is_refused(tmp_path):
    """A finished two-step run, then the same output_dir with another data file: refused before any step, naming
    the data change; the first run's checkpoint is untouched."""
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.errors import MMTuneError
    from mmtune.train.loop import train

    cfg = _config(tmp_path, train={"max_steps": 2, "save_every": 2})
    train(build_run(load_config(cfg, [])))
    saved = (tmp_path / "run" / "checkpoint-2" / "manifest.json").read_bytes()
    (tmp_path / "other").mkdir()
    other = sums_jsonl(tmp_path / "other", 12)
    with pytest.raises(MMTuneError) as e:
        train(build_run(load_config(cfg, [f"data.train={other}", "train.max_steps=4"])))
    said = " ".join(str(e.value).split())
    assert "resuming from checkpoint-2 with a config or data that changes the run: data.train:" in said, said
    assert "train.resume=false / a new output_dir to start over" in said
    assert (tmp_path / "run" / "checkpoint-2" / "manifest.json").read_bytes() == saved
    assert not (tmp_path / "run" / "checkpoint-4").exists()


# ----------------------------------------------------------------------------- killed at the very end
# https://github.com/ultralytics/hub/issues/83: Colab disconnected during the last epoch, and the resume crashed
# ("UnboundLocalError: local variable 'epoch' referenced before assignment").
def test_a_run_killed_after_its_last_checkpoint_finishes_on_the_same_command(tmp_path):
    """The last checkpoint saved, then the process gone before summary.json: the same command loads it, trains
    nothing more and writes the summary with the last evaluation."""
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    (tmp_path / "eval").mkdir()
    cfg = _config(tmp_path, train={"max_steps": 2, "save_every": 2},
                  data={"eval": sums_jsonl(tmp_path / "eval", 4)}, eval={"every": 2, "max_new_tokens": 2})
    first = train(build_run(load_config(cfg, [])))
    (tmp_path / "run" / "summary.json").unlink()  # as a kill between the last checkpoint and the summary leaves it
    again = train(build_run(load_config(cfg, [])))
    assert again["steps"] == 2 and again["eval"] == first["eval"]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 2
    assert [r["step"] for r in _rows(tmp_path / "run", "train")] == [1, 2]
