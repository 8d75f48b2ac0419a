"""`mmtune chat TARGET ["question"] [--image F] [--video F] [--audio F]`: one answer, or a conversation
read line by line from stdin."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

HELP_LINES = ("empty line or /exit: stop  |  /reset: forget the conversation  |  "
              "/image F, /video F, /audio F: attach to the next question")


def register(app: typer.Typer) -> None:
    from ..console import console, user_errors

    @app.command("chat")
    @user_errors
    def chat_cmd(
        target: str = typer.Argument(..., help="a run folder (its best checkpoint), a checkpoint, a model folder or id"),
        question: str | None = typer.Argument(None, help="ask once and exit; without it, read questions from stdin"),
        image: list[Path] = typer.Option([], "--image", help="an image for the question (repeatable)"),
        video: list[Path] = typer.Option([], "--video", help="a video file or frames folder (repeatable)"),
        audio: list[Path] = typer.Option([], "--audio", help="an audio file (repeatable)"),
        system: str | None = typer.Option(None, "--system", help="system prompt (default: the run's data.system_prompt)"),
        max_new_tokens: int | None = typer.Option(None, "--max-new-tokens",
                                                  help="default: the run's eval.max_new_tokens"),
        device: str | None = typer.Option(None, "--device", help="auto | cpu | cuda (default: the run's train.device)"),
    ):
        """Talk to a trained model with the run's own chat template, media caps and generation settings."""
        from rich.markup import escape

        from ..errors import MMTuneError
        from . import load_session

        session = load_session(target, device=device, system=system, max_new_tokens=max_new_tokens)
        media = [session.media_part(k, p) for k, ps in (("image", image), ("video", video), ("audio", audio))
                 for p in ps]
        if question is not None:
            session.ask(question, media, streamer=session.streamer())
            return
        interactive = sys.stdin.isatty()
        console.print(f"[dim]chat with {session.source}; {HELP_LINES}[/]")
        while True:
            if interactive:
                console.print("[bold]you>[/] ", end="")
            line = sys.stdin.readline()
            if not line or not line.strip() or line.strip() == "/exit":
                return
            line = line.strip()
            cmd, _, arg = line.partition(" ")
            if cmd == "/reset":
                session.reset()
                continue
            if cmd.lstrip("/") in ("image", "video", "audio") and cmd.startswith("/"):
                try:
                    media.append(session.media_part(cmd[1:], arg.strip()))
                except MMTuneError as e:  # a bad attachment ends nothing: said, and the conversation goes on
                    console.print(f"[red]error:[/] {escape(e.what)}  [dim](not attached; {escape(e.fix or '')})[/]")
                continue
            if interactive:
                console.print("[bold]model>[/] ", end="")
            session.ask(line, media, streamer=session.streamer())
            media = []
