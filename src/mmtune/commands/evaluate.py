"""`mmtune eval CONFIG checkpoint=DIR`: the run's eval set through a checkpoint; writes DIR/eval.json."""

from __future__ import annotations

from pathlib import Path

from ..errors import MMTuneError


def run_eval(config_path, overrides: list[str]) -> dict:
    import json

    from ..build import build_run
    from ..config import load_config
    from ..evaluate.run_eval import evaluate
    from ..resolve import local_target, resolve_run
    from ..train.checkpoint import latest_checkpoint, load_trainable, resolve_checkpoint

    ov = list(overrides)
    ckpt = None
    for o in list(ov):
        if o.startswith("checkpoint="):
            ckpt = Path(o.split("=", 1)[1])
            ov.remove(o)
    cfg = load_config(config_path, ov)
    if ckpt is None:
        ckpt = latest_checkpoint(cfg.output_dir)
        if ckpt is None:
            raise MMTuneError("no checkpoint given and none found in output_dir", where=cfg.output_dir,
                              fix="mmtune eval CONFIG checkpoint=runs/.../checkpoint-N")
    ckpt = resolve_checkpoint(ckpt)
    if cfg.data.eval is None:
        raise MMTuneError("the config has no eval set", where="data.eval", fix="data.eval=path/to/eval.jsonl")
    run = build_run(resolve_run(cfg, local_target(cfg.train.device), for_training=True), with_optimizer=False)
    load_trainable(run.unwrapped_model(), ckpt, strict=False)
    metrics, preds = evaluate(run, run.eval_set.records[: cfg.data.eval_max_samples or None])
    (ckpt / "eval.json").write_text(json.dumps({"metrics": metrics, "predictions": preds}, indent=2))
    return metrics
