"""Config checks: schema problems with did-you-mean, files that do not exist, inconsistent settings.

All are fast (no model, no data scan): `mmtune train` runs them before starting.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from ...data.splits import split_alias_of
from ..findings import error, info, warning
from ..registry import check

# Keys that would spread the model over devices or offload it to CPU: wrong for training
# (failure mode 7). Handled by MM007 with its own explanation, so MM019 does not repeat them.
PLACEMENT_KEYS = {"device_map", "offload_folder", "offload_state_dict", "max_memory", "llm_int8_enable_fp32_cpu_offload"}


@check("MM019", "config validates: no unknown keys, right types, required keys present", needs=(),
       fast=True, failure_mode=19)
def config_schema(ctx):
    ctx.has("cfg")  # builds the tree and validates it; a failure is stored on ctx.config_error
    err = ctx.config_error
    if err is None:
        return
    problems = getattr(err, "problems", None) or []
    if not problems:  # unreadable file, bad YAML, unknown profile: one problem
        yield error(err.what, err.where, err.fix)
        return
    for p in problems:
        if p["key"].split(".")[-1] in PLACEMENT_KEYS:
            continue
        yield error(p["message"], p["where"], p["fix"])


def _walk(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            key = f"{prefix}{k}"
            yield key, v
            yield from _walk(v, key + ".")


@check("MM007", "no device_map / CPU offload for training", needs=("tree",), fast=True, failure_mode=7)
def no_offload(ctx):
    for key, value in _walk(ctx.need("tree")):
        leaf = key.split(".")[-1]
        if leaf in PLACEMENT_KEYS and value not in (None, False):
            yield error(
                f"{key}={value!r}: spreading or offloading the model across devices breaks training "
                "(gradient checkpointing recomputes on `meta` -> 'expected device meta but got cuda:0')",
                where=key,
                fix=f"remove {key}; mmtune places the whole model on each process's GPU. If it does not fit, "
                    "use adapter.method=qlora or a larger GPU (see `mmtune plan`)")


def _did_you_mean_file(p: Path) -> str | None:
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return None
    names = [c.name for c in parent.iterdir()]
    close = difflib.get_close_matches(p.name, names, n=1, cutoff=0.6)
    return str(parent / close[0]) if close else None


def _data_paths(tree: dict):
    """Data paths from the raw tree, so they are checked even when another key fails validation."""
    data = tree.get("data") if isinstance(tree.get("data"), dict) else {}
    for key in ("train", "eval"):
        spec = data.get(key)
        if isinstance(spec, str) and spec and not spec.startswith("synthetic:"):
            names = spec.split(",") if data.get("dataset_info") else [spec]  # LLaMA-Factory's `a,b`
            for name in names:
                yield f"data.{key}", Path(name.strip().partition("::")[0])  # PATH::SPLIT names a split of PATH
        elif isinstance(spec, list):  # a mixture: every source's path (and its own eval path)
            for i, src in enumerate(spec):
                for field in ("path", "eval"):
                    p = src.get(field) if isinstance(src, dict) else None
                    if isinstance(p, str) and p and not p.startswith("synthetic:"):
                        yield f"data.{key}[{i}].{field}", Path(p.partition("::")[0])


@check("MM026", "data files and media_root exist", needs=("tree",), fast=True)
def data_files_exist(ctx):
    from ...data.globs import is_pattern, pattern_files
    from ...data.hub import cached_snapshot, is_hub_id, offline
    from ...errors import DataError

    tree = ctx.need("tree")
    registry = tree["data"].get("dataset_info") if isinstance(tree.get("data"), dict) else None
    for key, p in _data_paths(tree):
        if p.exists() or split_alias_of(p) is not None:  # a split alias is MM015's finding
            continue
        if is_pattern(str(p)):  # shards/part-*.jsonl: it must match data files (data/globs.py)
            try:
                pattern_files(str(p), key)
            except DataError as e:
                yield error(f"{key}: {e.what}", where=key, fix=e.fix)
            continue
        if registry:  # a name in LLaMA-Factory's registry: the entry and its file are checked
            from ...data.dataset_info import entry

            try:
                entry(registry, str(p))
                continue
            except DataError as e:
                if not is_hub_id(str(p)) or "no dataset" not in e.what:
                    yield error(e.what, where=e.where or key, fix=e.fix)
                    continue
        if is_hub_id(str(p)):
            if cached_snapshot(str(p)) is None and offline():
                yield error(f"{key}: dataset {str(p)!r} is not in the Hub cache and the Hub is off", where=key,
                            fix=f"fetch it once online: hf download --repo-type dataset {p}")
            continue
        close = _did_you_mean_file(p)
        yield error(f"{key}: {str(p)!r} does not exist", where=key,
                    fix=f"{key}={close}" if close else f"point {key} at a JSONL/JSON/parquet file or dataset folder")
    data = tree.get("data") if isinstance(tree.get("data"), dict) else {}
    root = data.get("media_root")
    if isinstance(root, str) and root and not Path(root).is_dir():
        close = _did_you_mean_file(Path(root))
        yield error(f"data.media_root: {root!r} is not a folder", where="data.media_root",
                    fix=f"data.media_root={close}" if close else "point data.media_root at the folder of the media files")
    if not data.get("train"):
        # A warning, not an error: planning recipes ship without data (`mmtune plan` uses the sequence
        # cap's worst case); `mmtune train` itself refuses to start without it.
        yield warning("data.train is not set: `mmtune train` needs it (the data checks did not run)", where="data.train",
                    fix="data.train=PATH (JSONL/JSON/parquet/dataset folder) or data.train=synthetic:counting")


@check("MM015", "split names: which file / split data.train and data.eval read (val vs validation resolved "
       "like train)", needs=("tree",), fast=True, failure_mode=15)
def split_names(ctx):
    """What the resolved run reads for data.train / data.eval, where a split alias decided it (the same
    rule `train` uses: mmtune.data.splits.resolve_split)."""
    from ...data.splits import resolve_split

    for key, p in _data_paths(ctx.need("tree")):
        chosen, note = resolve_split(str(p), "train" if key == "data.train" else "eval")
        if note and chosen != str(p):
            yield info(f"{key}: reads {chosen} ({note})", where=key, fix=f"{key}={chosen} to say so in the config")

@check("MM028", "eval settings are consistent", fast=True)
def eval_settings(ctx):
    cfg = ctx.need("cfg")
    if cfg.eval.every is not None and cfg.data.eval is None:
        yield warning("eval.every is set but data.eval is not: no evaluation will run", where="eval.every",
                      fix="data.eval=PATH (or remove eval.every)")
    from ...errors import ConfigError
    from ...evaluate.best_metric import best_is_higher, generated_off, not_computed_reason
    from ...evaluate.per_source import reported_metrics

    known = reported_metrics(cfg)
    if cfg.eval.best_metric not in known:
        yield error(f"eval.best_metric={cfg.eval.best_metric!r} is not computed (metrics: {sorted(known)}"
                    f"{not_computed_reason(cfg)})", where="eval.best_metric",
                    fix="eval.best_metric=eval_loss, or add it to eval.metrics"
                        + (", or eval.generate=true" if generated_off(cfg) else ""))
        return
    try:  # the direction `mmtune train` refuses at start: a best checkpoint that is the worst one
        best_is_higher(cfg)
    except ConfigError as e:
        yield error(e.what, where=e.where, fix=e.fix)


@check("MM029", "adapter settings are consistent", fast=True)
def adapter_settings(ctx):
    cfg = ctx.need("cfg")
    a = cfg.adapter
    both = sorted(set(a.train_components) & set(a.freeze_components))
    if both:
        yield error(f"components {both} are both in adapter.train_components and adapter.freeze_components",
                    where="adapter.train_components", fix="list each component in only one of them")
    frozen = set(a.freeze_components)
    for comp, mult in a.lr_multipliers.items():
        trained = comp in a.train_components or (comp == "lora" and a.method != "full") or (
            a.method == "full" and comp not in frozen)
        if not trained:
            yield warning(f"adapter.lr_multipliers.{comp}={mult} has no effect: {comp} is not trained",
                          where=f"adapter.lr_multipliers.{comp}",
                          fix=f"adapter.train_components=[{comp}] to train it, or remove the multiplier")
    if a.method == "full" and (a.use_dora or a.target_modules not in ("auto",)):
        yield warning("adapter.method=full trains every weight; LoRA settings (target_modules/use_dora) are ignored",
                      where="adapter.method", fix="adapter.method=lora to use them")


@check("MM032", "learning rate fits the method", fast=True)
def lr_fits_method(ctx):
    from ...models.tiny import is_tiny

    cfg = ctx.need("cfg")
    if is_tiny(cfg.model.name):  # random init: there are no pretrained weights to protect
        return
    if cfg.adapter.method == "full" and cfg.train.lr >= 1e-4:
        # What full fine-tuning actually trains (the resolved trainable set: frozen components left out).
        # A projector alone (small; LLaVA trains it at 1e-3 in its stage 1) learns at LoRA-sized rates; a pretrained tower
        # or decoder trained in full does not.
        pretrained = _pretrained_in_full(ctx, cfg)
        if pretrained is None or pretrained:
            what = (f"{', '.join(pretrained)} trained in full" if pretrained else "every weight is trained")
            yield warning(f"train.lr={cfg.train.lr:g} with full fine-tuning ({what}): LoRA-sized rates usually "
                          "diverge or destroy the pretrained weights", where="train.lr", fix="train.lr=1e-5")
    yield from _lora_lr_too_small(cfg)


def _lora_lr_too_small(cfg):
    """The other direction: a full fine-tuning rate (1e-5, a transformers / Qwen README habit) on LoRA, or a rate
    shrunk by adapter.alpha < adapter.r. LoRA's B starts at zero and its update is scaled by alpha / r, so what the
    adapter learns goes with lr * alpha / r; LoRA recipes train at 1e-4..2e-4 with alpha = 2r (ours and peft's
    examples). Supervised runs only: DPO / GRPO on LoRA train at 1e-6..1e-5 on purpose."""
    from ...config.schema import LORA_METHODS

    a = cfg.adapter
    if a.method not in LORA_METHODS or cfg.train.objective != "sft":
        return
    scale = a.lora_alpha / a.r
    at_default = cfg.train.lr * scale / 2  # the same update at alpha = 2r
    if at_default > 1.001e-5:
        return
    shrunk = (f"; adapter.alpha={a.lora_alpha} / adapter.r={a.r} scales each update by {scale:g}, so it acts like "
              f"lr {at_default:.2g} at alpha = 2r" if scale < 2 else "")
    yield warning(f"train.lr={cfg.train.lr:g} with {a.method}: a full fine-tuning rate for a LoRA adapter{shrunk}; "
                  "an adapter starts at zero and at this rate barely moves (loss flat, outputs like the base model)",
                  where="train.lr",
                  fix="train.lr=1e-4 (LoRA rates are 1e-4..2e-4 with adapter.alpha = 2 * adapter.r)"
                      + (f", or adapter.alpha={2 * a.r}" if scale < 2 else ""))


def _pretrained_in_full(ctx, cfg) -> list[str] | None:
    """The large pretrained components full fine-tuning trains (all but the projector: a few million weights, fresh
    in a LLaVA-style composition), or None when the model's family cannot be had here."""
    from ...errors import MMTuneError
    from ...models.model_config import resolve_family
    from ...resolve.decisions import trained_set

    try:
        family = resolve_family(cfg)
    except MMTuneError:
        return None
    return [c for c, how in trained_set(cfg.adapter, family, cfg.train.stages).items()
            if how.startswith("in full") and c != "projector"]
