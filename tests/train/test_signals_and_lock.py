"""SIGTERM/SIGINT end a run cleanly (step finished, checkpoint, summary so far, how to resume, non-zero
exit); a second signal exits at once; one process per output_dir, with a stale-lock rule."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.errors import MMTuneError
from mmtune.train import lock
from mmtune.train.loop import train


def _wait_for(cond, timeout=240, proc=None):
    t = time.time()
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process ended early: {proc.communicate()}")
        if time.time() - t > timeout:
            raise AssertionError("timed out")
        time.sleep(0.1)


def _train_rows(out: Path) -> list[dict]:
    if not (out / "metrics.jsonl").exists():
        return []
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]
    return [r for r in rows if r["kind"] == "train"]


def _cli(cfg, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "mmtune.cli", "train", str(cfg), "--skip-checks", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow  # two `mmtune train` processes (about 30 s on 2 cores)
def test_sigterm_saves_and_says_how_to_resume_and_a_second_process_is_locked_out(tiny_vl_config):
    cfg_path = tiny_vl_config(train={"max_steps": 100000, "save_every": None, "grad_accum": 1})  # never ends by itself
    out = Path(load_config(cfg_path, []).output_dir)
    first = _cli(cfg_path)
    _wait_for(lambda: len(_train_rows(out)) >= 2, proc=first)
    # A second run on the same folder is refused before it builds anything, naming the holder.
    second = _cli(cfg_path)
    _, err = second.communicate(timeout=240)
    assert second.returncode == 2
    assert f"PID {first.pid} on host {socket.gethostname()}" in " ".join(err.split())
    first.send_signal(signal.SIGTERM)
    stdout, err = first.communicate(timeout=240)
    said = " ".join((stdout + err).split())
    assert first.returncode == 2, said[-3000:]
    step = int(said.split("stopped by SIGTERM at step ")[1].split()[0])
    assert "run the same command again" in said and "SIGTERM received" in said
    assert 2 <= step < 100000 and (out / f"checkpoint-{step}" / "manifest.json").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] == "SIGTERM" and summary["steps"] == step
    assert not (out / lock.LOCK_NAME).exists()  # released on the way out
    # And it resumes from there (in this process, one more step).
    assert train(build_run(load_config(cfg_path, [])), stop_after=step + 1) is None
    assert [r["step"] for r in _train_rows(out)] == list(range(1, step + 2))


def test_second_signal_exits_at_once(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        "import os, signal, time\n"
        "from mmtune.train.signals import StopRequest\n"
        "with StopRequest() as stop:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    assert stop.requested and stop.signal_name == 'SIGINT'\n"
        "    print('first handled', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "print('not reached')\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 128 + signal.SIGTERM
    assert res.stdout.strip() == "first handled"
    assert "SIGTERM again: exiting now" in res.stderr


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / lock.LOCK_NAME
    path.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "earlier"}))
    with lock.output_dir_lock(tmp_path):
        assert json.loads(path.read_text())["pid"] == os.getpid()
        with lock.output_dir_lock(tmp_path):  # re-entrant: run_training, then train
            pass
        assert path.exists()
    assert not path.exists()
    assert f"removed a stale lock of PID {dead.pid}" in capsys.readouterr().out


def test_lock_held_on_another_host_is_an_error_naming_it(tmp_path):
    path = tmp_path / lock.LOCK_NAME
    path.write_text(json.dumps({"pid": 4242, "host": "gpu-node-7", "started": "2026-01-01 10:00:00 UTC"}))
    with pytest.raises(MMTuneError, match="PID 4242 on host gpu-node-7") as e, lock.output_dir_lock(tmp_path):
        pass
    assert f"delete {path}" in e.value.fix
    assert json.loads(path.read_text())["host"] == "gpu-node-7"  # not ours to remove
