"""`mmtune serve`: an OpenAI-compatible HTTP server over a run, a checkpoint or an exported model.

A sibling of `mmtune chat` above build: the model is loaded by chat's `load_session` (the run's resolved
description: template, processor caps, pad id), answers come from evaluation's `generate_batch`, and the
HTTP layer is FastAPI on uvicorn (`serve/app.py`). `--backend vllm` instead starts vLLM's own server with
flags derived from the same run (`serve/vllm.py`).
"""

from __future__ import annotations

from .engine import Engine, ServeOptions, ServeSettings, decide


def missing_serve_deps() -> list[str]:
    """The `serve` extra's packages that are not installed (imported lazily: `import mmtune` stays light)."""
    from importlib.util import find_spec

    return [name for name in ("fastapi", "uvicorn") if find_spec(name) is None]


def build_server(target: str, options: ServeOptions, *, device: str | None = None):
    """(engine, batcher, app) for TARGET; nothing listens yet."""
    from ..chat import load_session
    from ..errors import MMTuneError

    missing = missing_serve_deps()
    if missing:
        raise MMTuneError(f"mmtune serve needs {', '.join(missing)}, which is not installed",
                          fix="pip install 'mmtune[serve]'")
    return server_for(load_session(target, device=device, max_new_tokens=options.max_new_tokens), target, options)


def server_for(session, target: str, options: ServeOptions):
    """(engine, batcher, app) over an already loaded chat session (tests serve one model several ways)."""
    from .app import create_app
    from .batcher import Batcher

    settings = decide(target, session.encoder.cfg, session.model.config, session.encoder.modalities, options)
    engine = Engine(session, settings)
    batcher = Batcher(session, max_batch=settings.max_batch, window_s=settings.window_s,
                      max_pending=settings.max_pending)
    return engine, batcher, create_app(engine, batcher)


__all__ = ["Engine", "ServeOptions", "ServeSettings", "build_server", "decide", "server_for", "missing_serve_deps"]
