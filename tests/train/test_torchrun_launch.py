"""The tests' 2-rank launcher (tests/train/torchrun.py): a launch that lost its port to another process is
launched again on a fresh port; any other failure is returned as it is."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torchrun import failure, launch, torchrun_cmd  # noqa: E402


@pytest.mark.distributed  # ~10 s: two real torchrun launches
def test_a_launch_whose_port_was_taken_runs_again_on_a_fresh_port(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("print('ran')\n")
    ports = []
    with socket.socket() as taken:  # someone else listens here: torchrun's store cannot bind it
        taken.bind(("127.0.0.1", 0))
        taken.listen()

        def make_cmd(port):
            ports.append(taken.getsockname()[1] if not ports else port)
            return torchrun_cmd(ports[-1], str(script))

        res = launch(make_cmd, timeout=300)
    assert res.returncode == 0, failure(res)
    assert len(ports) == 2 and ports[0] != ports[1] and "ran" in res.stdout


def test_any_other_failure_is_returned_at_once_with_both_streams(tmp_path):
    calls = []

    def make_cmd(port):
        calls.append(port)
        return [sys.executable, "-c", "import sys; print('out'); sys.exit('boom')"]

    res = launch(make_cmd, timeout=60)
    assert res.returncode == 1 and len(calls) == 1
    assert "out" in failure(res) and "boom" in failure(res)
