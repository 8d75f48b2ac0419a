"""The real entry point: `mmtune serve MODEL --port P` in its own process, answered by the openai client."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from mmtune.serve.server import free_port

from .conftest import client

SRC = Path(__file__).resolve().parents[2] / "src"


def test_mmtune_serve_command_serves_until_stopped():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mmtune.cli", "serve", "tiny/qwen2", "--port", str(port),
                             "--max-new-tokens", "4"], env={**os.environ, "PYTHONPATH": str(SRC)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 300  # a hang becomes a failure; no timing is asserted
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < end, "the server never answered /health"
                time.sleep(0.3)
        r = client(f"http://127.0.0.1:{port}").chat.completions.create(
            model="tiny/qwen2", messages=[{"role": "user", "content": "Hello"}])
        assert r.usage.completion_tokens <= 5 and r.choices[0].finish_reason in ("stop", "length")
    finally:
        proc.terminate()
        out = proc.communicate(timeout=60)[0]
    assert f"serving tiny/qwen2 on http://127.0.0.1:{port}/v1" in out
    assert "default max_tokens: 4" in out and "local media: refused" in out


def test_port_in_use_is_an_error_before_the_model_loads():
    import socket

    from typer.testing import CliRunner

    from mmtune.cli import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = CliRunner().invoke(app, ["serve", "tiny/qwen2", "--port", str(port), "--host", "0.0.0.0"])
    assert res.exit_code == 2 and "cannot listen on 0.0.0.0" in res.output and "--port" in res.output
    assert "no --api-key" in res.output  # answering the network without a key is warned about first
