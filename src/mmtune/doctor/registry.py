"""The check registry: `@check("MM0xx", title, needs=...)` registers one small function.

A check takes the DoctorContext and returns (or yields) findings. `needs` names the context pieces
it reads; when one cannot be built (the config is invalid, the model cannot be loaded, the planner is
not installed) the check is reported as not run, with the reason, instead of guessing.
`fast=True` marks the checks `mmtune train` runs before starting: no model build, no data scan.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

AREAS = ("config", "schedule", "hardware", "loading", "adapters", "data", "generation", "runtime", "memory",
         "model_setup", "training_setup", "distributed", "media_setup", "objectives",
         "quantization", "offload", "remote_code", "attention", "speed", "environment", "workers", "trackers")
CHECK_MODULES = tuple(f"mmtune.doctor.checks.{a}" for a in AREAS)


@dataclass(frozen=True)
class Check:
    code: str
    title: str
    fn: Callable
    needs: tuple[str, ...]
    fast: bool
    area: str
    failure_mode: int | None  # entry of FAILURE_MODES.md it covers, None for checks found elsewhere
    claims: tuple[str, ...] = ()  # pieces whose build errors are this check's findings


CHECKS: dict[str, Check] = {}


def check(code: str, title: str, *, needs: tuple[str, ...] = ("cfg",), fast: bool = False,
          failure_mode: int | None = None, claims: tuple[str, ...] = ()):
    def deco(fn):
        if code in CHECKS:
            raise ValueError(f"check code {code} registered twice ({CHECKS[code].fn.__qualname__}, {fn.__qualname__})")
        area = fn.__module__.rsplit(".", 1)[-1]
        CHECKS[code] = Check(code, title, fn, tuple(needs), fast, area, failure_mode, tuple(claims))
        return fn

    return deco


def all_checks() -> list[Check]:
    for mod in CHECK_MODULES:
        importlib.import_module(mod)
    return [CHECKS[c] for c in sorted(CHECKS)]



# Codes the runner itself reports (not registered checks); README.md and docs/doctor.md list them too.
RUNNER_CODES = ("MM098", "MM099")
