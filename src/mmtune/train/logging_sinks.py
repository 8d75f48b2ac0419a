"""Where step metrics go: metrics.jsonl always, TensorBoard by default, W&B / MLflow when asked.

Optional trackers are imported only when enabled; a missing one is an error with the pip extra.
"""

from __future__ import annotations

import json
from pathlib import Path


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
        if lg.wandb:
            wandb = _optional("wandb")
            self._wandb = wandb.init(project=lg.project, name=lg.run_name, dir=str(output_dir),
                                     config=cfg.model_dump(mode="json"), resume="allow")
        if lg.mlflow:
            mlflow = _optional("mlflow")
            mlflow.set_experiment(lg.project)
            mlflow.start_run(run_name=lg.run_name)
            self._mlflow = mlflow

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
            self._wandb.log(scalars, step=step)
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


def _optional(name: str):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        from ..errors import ConfigError

        raise ConfigError(f"logging.{name}=true but {name} is not installed", where=f"logging.{name}",
                          fix=f"pip install 'mmtune[track]' (or pip install {name}), or logging.{name}=false") from None
