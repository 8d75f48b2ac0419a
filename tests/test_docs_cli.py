"""The command lines README.md and docs/ show use flags the commands have (a documented `mmtune doctor
--limit` once did not exist): every `--flag` after `mmtune CMD` on a line, and every backticked `--flag` in
a command's own page (docs/doctor.md, plan.md, chat.md, report.md, serve.md), is an option of that command."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from mmtune.cli import app

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = "train|eval|export|plan|doctor|download|compose|report|chat|serve|data inspect"
PAGES = {"doctor.md": "doctor", "plan.md": "plan", "chat.md": "chat", "report.md": "report", "serve.md": "serve"}


def _options(path: str) -> set[str]:
    cmd = typer.main.get_command(app)
    for part in path.split():
        cmd = cmd.commands[part]
    return {o for p in cmd.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]} | {"--help"}


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_flags_on_documented_command_lines_exist():
    bad = []
    for doc in _docs():
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            for m in re.finditer(rf"\bmmtune ({COMMANDS})\b([^`#\n]*)", line):
                segment = m.group(2).split(" | ")[0]  # `a | b` lists alternatives, each its own command
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", segment):
                    if flag not in _options(m.group(1)):
                        bad.append(f"{doc.name}:{i}: mmtune {m.group(1)} {flag}")
    assert not bad, bad


def test_flags_named_on_a_commands_own_page_exist():
    bad = []
    for page, command in PAGES.items():
        for i, line in enumerate((ROOT / "docs" / page).read_text().splitlines(), 1):
            bad += [f"{page}:{i}: {flag}" for flag in re.findall(r"`(--[a-z][a-z0-9-]*)", line)
                    if flag not in _options(command)]
    assert not bad, bad


def test_help_texts_survive_rich_markup():
    """typer renders help as rich markup, where `[key=value ...]` is a tag and vanishes (`mmtune eval --help`
    said "checkpoint=DIR ."): every command's and option's help prints as written."""
    from rich.markup import render

    lost = []

    def walk(cmd, path):
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {sub_name}")
        for text in [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]:
            if render(text).plain != text:
                lost.append(f"{path}: {text!r}")

    walk(typer.main.get_command(app), "mmtune")
    assert not lost, lost
