"""`mmtune eval CONFIG checkpoint=DIR`: the run's eval set through a checkpoint; writes DIR/eval.json."""

from __future__ import annotations

from pathlib import Path

from ..errors import MMTuneError


def run_eval(config_path, overrides: list[str]) -> dict:
    import json

    from ..build import attach_eval_data, build_run
    from ..config import load_config
    from ..evaluate.run_eval import evaluate
    from ..resolve import local_target, resolve_run
    from ..train.checkpoint import check_base_weights, latest_checkpoint, load_trainable, resolve_checkpoint

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
    # Only the eval split is read: the training set may be large, elsewhere, or gone by now.
    run = build_run(resolve_run(cfg, local_target(cfg.train.device), for_training=True), with_data=False,
                    with_optimizer=False)
    attach_eval_data(run)
    if not run.eval_set.records:
        raise MMTuneError(f"no usable eval record ({dict(run.eval_set.skipped)} skipped)", where=str(cfg.data.eval),
                          fix="see `mmtune data inspect CONFIG --split eval` for the reasons")
    check_base_weights(ckpt, cfg.model.name)  # an adapter scored on another base of the same shapes says nothing
    load_trainable(run.unwrapped_model(), ckpt, strict=False)
    metrics, preds = evaluate(run, run.eval_set.records[: cfg.data.eval_max_samples or None])
    skipped = dict(run.eval_set.skipped)
    (ckpt / "eval.json").write_text(json.dumps({"metrics": metrics, "skipped_eval_records": skipped,
                                                "predictions": preds}, indent=2))
    if skipped:
        from ..console import console

        console.print(f"[yellow]{run.eval_set.n_skipped} eval record(s) skipped: {skipped}[/]")
    return metrics
