"""`mmtune serve TARGET`: an OpenAI-compatible server (native FastAPI + uvicorn, or vLLM's own)."""

from __future__ import annotations

from pathlib import Path

import typer

from .server import LOCALHOST


def register(app: typer.Typer) -> None:
    from ..console import console, user_errors

    @app.command("serve")
    @user_errors
    def serve_cmd(
        target: str = typer.Argument(..., help="a run folder (its best checkpoint), a checkpoint, an export or a model id"),
        host: str = typer.Option(LOCALHOST, "--host", help="address to bind; the default answers this machine only"),
        port: int = typer.Option(8000, "--port"),
        api_key: str | None = typer.Option(None, "--api-key", envvar="MMTUNE_API_KEY",
                                           help="require 'Authorization: Bearer KEY' on /v1 routes"),
        allow_local_media: Path | None = typer.Option(None, "--allow-local-media",
                                                      help="folder that image/video paths in requests may name"),
        backend: str = typer.Option("native", "--backend", help="native (FastAPI + uvicorn) | vllm"),
        served_model_name: str | None = typer.Option(None, "--served-model-name",
                                                     help="the model id clients send (default: the target's name)"),
        max_model_len: int | None = typer.Option(None, "--max-model-len",
                                                 help="prompt + answer tokens (default: the model's context)"),
        max_new_tokens: int | None = typer.Option(None, "--max-new-tokens",
                                                  help="max_tokens when a request gives none (default: eval.max_new_tokens)"),
        max_batch: int | None = typer.Option(None, "--max-batch", help="requests per generate call (default: eval.batch_size)"),
        batch_window_ms: float = typer.Option(10.0, "--batch-window-ms", help="how long a request waits for others"),
        max_pending: int = typer.Option(64, "--max-pending", help="requests in flight before 503 + Retry-After"),
        max_media_per_prompt: int | None = typer.Option(
            None, "--max-media-per-prompt",
            help="images (videos, audios) per request (default: 4, or the most one trained record held)"),
        max_body_mb: float = typer.Option(64.0, "--max-body-mb", help="largest request body (images inline)"),
        device: str | None = typer.Option(None, "--device", help="auto | cpu | cuda (default: the run's train.device)"),
        dry_run: bool = typer.Option(False, "--dry-run", help="vllm: print the command instead of running it"),
    ):
        """Serve a trained model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/models, /health)."""
        from ..errors import MMTuneError
        from . import ServeOptions

        if backend not in ("native", "vllm"):
            raise MMTuneError(f"unknown --backend {backend}", where="--backend", fix="--backend native or --backend vllm")
        for name, value in (("--max-batch", max_batch), ("--max-pending", max_pending), ("--port", port),
                            ("--max-media-per-prompt", max_media_per_prompt)):
            if value is not None and value < 1:
                raise MMTuneError(f"{name} must be at least 1", where=f"{name} {value}")
        if allow_local_media is not None and not allow_local_media.is_dir():
            raise MMTuneError(f"--allow-local-media {allow_local_media} is not a folder", where="--allow-local-media",
                              fix="name the folder requests may read images from")
        options = ServeOptions(served_name=served_model_name, max_model_len=max_model_len, max_new_tokens=max_new_tokens,
                               max_batch=max_batch, window_ms=batch_window_ms, max_pending=max_pending,
                               media_per_prompt=max_media_per_prompt, allow_local_media=allow_local_media,
                               api_key=api_key, max_body_mb=max_body_mb)
        if host not in (LOCALHOST, "localhost", "::1") and not api_key:
            console.print(f"[yellow]warning:[/] --host {host} answers other machines and no --api-key is set: "
                          "anyone who reaches this port can use the model")
        if backend == "vllm":
            from .vllm import run_vllm

            run_vllm(target, options, host=host, port=port, dry_run=dry_run)
            return
        from . import build_server
        from .server import check_port, serve_forever

        check_port(host, port)
        engine, batcher, http = build_server(target, options, device=device)
        for what, value, why in engine.settings.decisions:
            console.print(f"[dim]{what}: {value}  ({why})[/]")
        console.print(f"serving {engine.settings.served_name} on http://{host}:{port}/v1  (OpenAI-compatible)")
        serve_forever(http, batcher, host=host, port=port)
