"""Where step metrics go: metrics.jsonl always, TensorBoard by default, W&B / MLflow when asked.

Optional trackers are imported only when enabled; a missing one is an error with the pip extra.

A resumed run continues the same tracker run: the W&B run id and the MLflow run id are kept in
OUTPUT_DIR/trackers.json and given back when a checkpoint is resumed (without them every resume opened a new W&B /
MLflow run and the history was split in pieces). W&B plots against mmtune's own `step` (define_metric), not its
internal counter, which only grows: the steps a resume does again (after the last checkpoint) are logged at their
own step instead of being dropped as "step less than the current step".
"""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager
from pathlib import Path

TRACKERS = "trackers.json"  # {"wandb": run id, "mlflow": run id}: what a resume continues


def _tracker_ids(output_dir: Path) -> dict:
    """The tracker runs an earlier session of this run logged to; {} when none (or the file is damaged: a new run)."""
    try:
        ids = json.loads((output_dir / TRACKERS).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in ids.items() if isinstance(v, str) and v} if isinstance(ids, dict) else {}


class Sinks:
    def __init__(self, cfg, output_dir: Path, enabled: bool = True, purge_step: int | None = None):
        # purge_step: a resumed run drops TensorBoard events from that step on (done again now).
        self.enabled = enabled
        self._jsonl = open(output_dir / "metrics.jsonl", "a") if enabled else None
        self._tb = self._wandb = self._mlflow = None
        if not enabled:
            return
        lg = cfg.logging
        if lg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(output_dir / "tensorboard"), purge_step=purge_step)
        ids = _tracker_ids(output_dir) if purge_step is not None else {}  # a resume continues the same runs
        if lg.wandb:
            wandb = _optional("wandb")
            ids["wandb"] = ids.get("wandb") or uuid.uuid4().hex[:12]
            with _starting("wandb"):
                self._wandb = wandb.init(project=lg.project, name=lg.run_name, dir=str(output_dir), id=ids["wandb"],
                                         config=cfg.model_dump(mode="json"), resume="allow")
                self._wandb.define_metric("step")
                self._wandb.define_metric("*", step_metric="step")
        if lg.mlflow:
            mlflow = _optional("mlflow")
            with _starting("mlflow"):
                mlflow.set_experiment(lg.project)
                ids["mlflow"] = _mlflow_run(mlflow, ids.get("mlflow"), lg.run_name)
            self._mlflow = mlflow
        if ids:
            (output_dir / TRACKERS).write_text(json.dumps(ids) + "\n")

    def log(self, step: int, values: dict, kind: str = "train") -> None:
        if not self.enabled:
            return
        self._jsonl.write(json.dumps({"kind": kind, "step": step, **values}) + "\n")
        self._jsonl.flush()
        scalars = {f"{kind}/{k}": v for k, v in values.items() if isinstance(v, (int, float)) and v == v}
        if self._tb:
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb:
            self._wandb.log({**scalars, "step": step})
        if self._mlflow:
            self._mlflow.log_metrics(scalars, step=step)

    def close(self) -> None:
        if self._jsonl:
            self._jsonl.close()
        if self._tb:
            self._tb.close()
        if self._wandb:
            self._wandb.finish()
        if self._mlflow:
            self._mlflow.end_run()


def _mlflow_run(mlflow, run_id: str | None, name: str | None) -> str:
    """Continue MLflow run `run_id` (a resume), or start one; a run the tracking store no longer has (another
    MLFLOW_TRACKING_URI than before the stop) is started anew rather than stopping the resume."""
    if run_id:
        try:
            return mlflow.start_run(run_id=run_id).info.run_id
        except Exception as e:  # mlflow's MlflowException: "Run ... not found"
            print(f"MLflow run {run_id} is not in this tracking store ({str(e)[:120]}): logging to a new run")
    return mlflow.start_run(run_name=name).info.run_id


@contextmanager
def _starting(name: str):
    """A tracker that is installed but cannot start (W&B offline from its server, MLflow's store URI unsupported by
    the installed package) is one message naming logging.<name>, not the tracker's own traceback."""
    from ..errors import ConfigError, MMTuneError

    try:
        yield
    except (MMTuneError, KeyboardInterrupt):
        raise
    except Exception as e:
        fix = {"wandb": "check the W&B login and network, WANDB_MODE=offline to log locally (wandb sync later), or "
                        "logging.wandb=false",
               "mlflow": "set MLFLOW_TRACKING_URI to a store the installed mlflow supports (a server's http(s)://...; "
                         "mlflow-skinny has no sqlite store: pip install mlflow), or logging.mlflow=false"}[name]
        raise ConfigError(f"logging.{name}=true but {name} could not start: {type(e).__name__}: {str(e)[:300]}",
                          where=f"logging.{name}", fix=fix) from e


def _optional(name: str):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        from ..errors import ConfigError

        raise ConfigError(f"logging.{name}=true but {name} is not installed", where=f"logging.{name}",
                          fix=f"pip install 'mmtune[track]' (or pip install {name}), or logging.{name}=false") from None
