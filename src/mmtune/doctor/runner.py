"""Run the checks: build pieces on demand, collect findings, never let a traceback through.

`run_doctor(config_path, overrides, gpu, fast=False) -> DoctorReport`. A check that needs a piece
that cannot be built is listed as not run with the reason; a check that crashes becomes an MM099
error naming the check (a bug in mmtune, reported as such instead of hiding the other findings).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .context import DoctorContext, NotAvailable
from .findings import Finding
from .registry import Check, all_checks

INTERNAL_ERROR = "MM099"
BUILD_ERROR = "MM098"
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass
class DoctorReport:
    findings: list[Finding] = field(default_factory=list)
    not_run: list[tuple[str, str, str]] = field(default_factory=list)  # (code, title, reason)
    seconds: dict[str, float] = field(default_factory=dict)  # per check
    total_seconds: float = 0.0
    tables: dict[str, object] = field(default_factory=dict)  # e.g. the data scan's ok/bad table
    pieces: dict[str, tuple[float, float]] = field(default_factory=dict)  # piece -> (wall, CPU) s to build it

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def codes(self, severity: str | None = None) -> set[str]:
        return {f.code for f in self.findings if severity is None or f.severity == severity}

    def to_json(self) -> dict:
        return {
            "findings": [f.to_dict() for f in self.findings],
            "not_run": [{"code": c, "title": t, "reason": r} for c, t, r in self.not_run],
            "seconds": round(self.total_seconds, 3),
        }


def run_checks(ctx: DoctorContext, checks: list[Check]) -> DoctorReport:
    report = DoctorReport()
    t_all = time.perf_counter()
    for chk in checks:
        if ctx.fast and not chk.fast:
            continue
        t0 = time.perf_counter()
        try:
            for piece in chk.needs:
                ctx.need(piece)
            produced = list(chk.fn(ctx) or ())
        except NotAvailable as e:
            mine = [b for b in ctx.build_errors if not b.claimed and _claims(chk, b)]
            produced = [Finding(chk.code, "error", b.what, b.where, b.fix) for b in mine]
            for b in mine:
                b.claimed = True
            if not produced:
                report.not_run.append((chk.code, chk.title, str(e)))
        except Exception as e:  # noqa: BLE001 - a crashing check must not hide the other findings
            produced = [Finding(INTERNAL_ERROR, "error",
                                f"check {chk.code} ({chk.title}) crashed: {type(e).__name__}: {e}",
                                where=f"mmtune.doctor.checks.{chk.area}.{chk.fn.__name__}",
                                fix="this is a bug in mmtune; please report it with this config")]
        report.findings.extend(f if f.code else f.with_code(chk.code) for f in produced)
        report.seconds[chk.code] = time.perf_counter() - t0
    # A build error whose cause a check already reported (e.g. MM024: the model is not on disk) is not
    # repeated as MM098.
    fired = {f.code for f in report.findings}
    for chk in checks:
        if chk.code in fired:
            for b in ctx.build_errors:
                b.claimed = b.claimed or _claims(chk, b)
    seen = {f.message for f in report.findings}
    for b in ctx.build_errors:  # a setup error no check claimed; said once, unless a check said it already
        if not b.claimed and b.what not in seen:
            report.findings.append(Finding(BUILD_ERROR, "error", f"{b.piece}: {b.what}", b.where, b.fix))
            seen.add(b.what)
    scan = ctx._cache.get("scan")
    if scan is not None:
        report.tables["data"] = scan
    report.pieces = dict(ctx.piece_seconds)
    report.findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.code))
    report.total_seconds = time.perf_counter() - t_all
    return report


def _claims(chk: Check, b) -> bool:
    """A claim is 'piece' (any error building it) or 'piece:ErrorClass'."""
    return b.piece in chk.claims or f"{b.piece}:{b.kind}" in chk.claims


def make_context(config_path, overrides=None, gpu: str | None = None, *, fast: bool = False,
                 write_clean: str | None = None, max_records: int | None = None, full: bool = False,
                 assume_installed: str = "gpu-extra") -> DoctorContext:
    from ..config.loader import split_overrides

    ov = overrides if isinstance(overrides, dict) else split_overrides(list(overrides or []))
    return DoctorContext(config_path=str(config_path) if config_path is not None else None, overrides=ov,
                         gpu_name=gpu, fast=fast, write_clean=write_clean, max_records=max_records,
                         full=full, assume_installed=assume_installed)


def run_doctor(config_path, overrides=None, gpu: str | None = None, *, fast: bool = False,
               write_clean: str | None = None, max_records: int | None = None, full: bool = False,
               only: list[str] | None = None, resolved=None, launched=None,
               assume_installed: str = "gpu-extra") -> DoctorReport:
    """All checks (or the fast subset `mmtune train` runs first) on CPU; see docs/doctor.md.
    `resolved`: the caller's resolved run (train's preflight), so doctor checks exactly that run;
    `launched`: the run this process launches where it is another (train --smoke: the tiny twin on the CPU),
    for the checks of the launch itself (the DeepSpeed setup against the batch sizes and precision it runs)."""
    from ..errors import ConfigError

    try:
        ctx = make_context(config_path, overrides, gpu, fast=fast, write_clean=write_clean, max_records=max_records,
                           full=full, assume_installed=assume_installed)
    except ConfigError as e:  # an override that is not key=value: the same finding form as any config error
        return DoctorReport(findings=[Finding("MM019", "error", e.what, e.where, e.fix)])
    if resolved is not None:
        ctx.put("resolved", resolved)
    if launched is not None:
        ctx.put("launched", launched)
    checks = [c for c in all_checks() if only is None or c.code in only]
    from ..compat.hub import offline_scope

    # The doctor reads only what is on disk: a hub lookup would hang on retries without network and
    # download gigabytes with it. The scope is mmtune's own (a context variable its loading code reads):
    # no environment variable or huggingface_hub constant changes.
    with offline_scope() as was_offline:
        ctx.user_offline = was_offline
        return run_checks(ctx, checks)
