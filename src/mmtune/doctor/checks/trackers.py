"""The experiment trackers the run logs to can start (MM278).

- MM278: each tracker switched on in `logging.*` is installed, and W&B can log in without asking. The trackers
  start in the training loop, after the model is loaded and the records are checked (train/logging_sinks.py): a
  tracker that cannot start stopped the run there, minutes into a rented GPU, and W&B without an API key on a
  machine without a terminal raises "api_key not configured (no-tty)" from wandb.init
  (https://github.com/unslothai/unsloth/issues/1914, https://github.com/OptimalScale/LMFlow/issues/436,
  https://github.com/ByteDance-Seed/VeOmni/issues/284). Fast, so `mmtune train` stops on it in seconds.
"""

from __future__ import annotations

import os
import sys

from ..findings import error, info, warning
from ..registry import check

# logging key -> (the module the loop imports, the pip line that installs it)
TRACKERS = {"tensorboard": ("tensorboard", "pip install 'tensorboard>=2.14'"),
            "wandb": ("wandb", "pip install 'mmtune[track]' (or pip install wandb)"),
            "mlflow": ("mlflow", "pip install 'mmtune[track]' (or pip install mlflow)")}
WANDB_QUIET_MODES = ("offline", "disabled", "dryrun")  # WANDB_MODE values that need no login


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent package, or a module object without a spec
        return False


def wandb_login_source() -> str | None:
    """Where wandb.init would find its API key without asking: the variable, or a netrc entry for the W&B host
    (where `wandb login` writes it); None when it has none and would prompt (or, without a terminal, fail)."""
    if os.environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    import netrc
    from pathlib import Path
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = Path(os.environ["NETRC"]) if os.environ.get("NETRC") else Path.home() / ".netrc"
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return f"{path} (machine {host})" if entry and entry[2] else None


@check("MM278", "the trackers in logging.* are installed and can start without asking (W&B's API key or "
       "WANDB_MODE=offline)", needs=("cfg",), fast=True)
def trackers_can_start(ctx):
    lg = ctx.need("cfg").logging
    for key, (module, pip) in TRACKERS.items():
        if getattr(lg, key) and not _installed(module):
            yield error(f"logging.{key}=true but {module} is not installed: the run would stop when the trackers "
                        "start, after the model is loaded and before step 1", f"logging.{key}",
                        f"{pip}, or logging.{key}=false (metrics.jsonl and report.html are written either way)")
    if lg.wandb and _installed("wandb"):
        mode = (os.environ.get("WANDB_MODE") or "").lower()
        disabled = (os.environ.get("WANDB_DISABLED") or "").lower() in ("1", "true", "yes")
        if mode not in WANDB_QUIET_MODES and not disabled and wandb_login_source() is None:
            tty = sys.stdin is not None and sys.stdin.isatty()
            what = ("logging.wandb=true and no W&B API key is set (WANDB_API_KEY, or `wandb login`'s netrc entry)"
                    + (": wandb.init will ask for one when the trackers start, after the model is loaded; a run "
                       "left alone waits there" if tty else
                       ": without a terminal (a batch job, nohup, a container) wandb.init stops the run with "
                       "\"api_key not configured (no-tty)\" after the model is loaded, before step 1"))
            fix = ("WANDB_API_KEY=<your key> (or run `wandb login` once on this machine); WANDB_MODE=offline logs "
                   "to OUTPUT_DIR/wandb without an account (wandb sync uploads it later); or logging.wandb=false")
            yield (warning if tty else error)(what, "logging.wandb", fix)
    if lg.mlflow and _installed("mlflow") and not os.environ.get("MLFLOW_TRACKING_URI"):
        yield info("logging.mlflow=true without MLFLOW_TRACKING_URI: MLflow writes the run into the folder "
                   "`mmtune train` is started from (./mlruns or ./mlflow.db), not into output_dir",
                   "logging.mlflow", "MLFLOW_TRACKING_URI=http://your-server:5000 (or a local store of your "
                   "choosing) to find the run where you look for it")
