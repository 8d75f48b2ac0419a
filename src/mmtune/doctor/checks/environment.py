"""The installed packages where the run executes, against what mmtune was installed for (MM188).

- MM188: mmtune's core requirements met (a later pip install of another tool can downgrade transformers or
  peft under it with only a warning), and its compiled media readers import (PyAV and soundfile built for numpy
  1 stop under numpy 2 with "numpy.core.multiarray failed to import").
"""

from __future__ import annotations

from ..findings import error
from ..registry import check

# Core packages with compiled extensions that mmtune imports only when a record needs them (video, audio):
# a build for another numpy fails there, mid-scan or mid-run, blamed on the record.
COMPILED_READERS = {"av": "av", "soundfile": "soundfile"}


@check("MM188", "the installed packages meet mmtune's requirements and its compiled media readers import",
       needs=("cfg",), fast=True)
def installed_packages(ctx):
    from ...resolve.installed import import_problem, rebuild_hint, unmet_requirements

    unmet = unmet_requirements()
    if unmet is None:
        from ..context import NotAvailable

        raise NotAvailable("mmtune's package metadata is not installed (run from a source tree): pip install -e .")
    for name, req, have in unmet:
        now = f"{name} {have} is installed" if have else f"{name} is not installed"
        yield error(f"{now}; mmtune needs {req} (its requirements: another install replaced it, and the run would "
                    f"stop inside {name}, e.g. a model class or argument this version lacks)",
                    f"{name} (installed package)", f"pip install '{req}' (then pip check: the tool that pinned it "
                    "needs its own environment)")
    import importlib.util

    missing = {n for n, _, have in unmet if have is None}
    for module, package in COMPILED_READERS.items():
        if package in missing or importlib.util.find_spec(module) is None:
            continue
        problem = import_problem(module)
        if problem is not None:
            yield error(f"{package} is installed but does not import here ({problem}): every video / audio record "
                        "would fail to decode", f"{package} (installed package)", rebuild_hint(module, package, "numpy"))
