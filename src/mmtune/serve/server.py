"""uvicorn around the app: `serve_forever` for the command line, `Running` (a background thread on a free
localhost port) for tests and the load benchmark, so both exercise the same server over real HTTP."""

from __future__ import annotations

import socket
import threading
import time

LOCALHOST = "127.0.0.1"


def _config(app, host: str, port: int, log_level: str):
    import uvicorn

    # One worker process: the model lives in this process, and the batcher is what makes it concurrent.
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, workers=1, timeout_graceful_shutdown=5)


def serve_forever(app, batcher, *, host: str, port: int, log_level: str = "info") -> None:
    import uvicorn

    batcher.start()
    try:
        uvicorn.Server(_config(app, host, port, log_level)).run()
    finally:
        batcher.stop()


def check_port(host: str, port: int) -> None:
    """Before the model loads (a minute for a large one): the address can be bound, or an error that says why."""
    from ..errors import MMTuneError

    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a TIME_WAIT socket is no conflict
            s.bind((host, port))
    except OSError as e:
        raise MMTuneError(f"cannot listen on {host}:{port}: {e.strerror}", where=f"--host {host} --port {port}",
                          fix="another process holds the port: pick another --port (or stop that process)"
                          if e.errno == 98 else "give an address of this machine (--host 127.0.0.1)") from None


def free_port(host: str = LOCALHOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Running:
    """`with Running(app, batcher) as url:` the server listens on 127.0.0.1:<free port> until the block ends."""

    def __init__(self, app, batcher, *, host: str = LOCALHOST, port: int | None = None, log_level: str = "warning"):
        import uvicorn

        self.batcher = batcher
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.server = uvicorn.Server(_config(app, host, self.port, log_level))
        self.thread = threading.Thread(target=self.server.run, name="mmtune-serve-http", daemon=True)

    def __enter__(self) -> str:
        self.batcher.start()
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.batcher.stop()
