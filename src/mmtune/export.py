"""`mmtune export`: a folder that transformers or peft loads.

- adapter runs, no --merge: the PEFT adapter folder (+ processor) -> `PeftModel.from_pretrained(base, DIR)`.
- adapter runs, --merge: base model with LoRA merged in, saved in the run's compute dtype
  -> `<ModelClass>.from_pretrained(DIR)`.
- full runs: the model folder as saved; a run trained under `train.strategy=fsdp` saved its weights as
  shards (`sharded/`, one file per rank): they are gathered here into a `from_pretrained` folder.
The base model is rebuilt from the run's resolved config (config.resolved.yaml), so tiny random
models, local folders and hub ids all export the same way.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .errors import MMTuneError
from .train.checkpoint import resolve_checkpoint


def run_config_of(ckpt: Path):
    from .config import load_config

    for candidate in (ckpt / "config.resolved.yaml", ckpt.parent / "config.resolved.yaml"):
        if candidate.is_file():
            return load_config(candidate, [])
    raise MMTuneError(f"no config.resolved.yaml beside {ckpt}", where=str(ckpt),
                      fix="export from a folder written by mmtune train")


def export(checkpoint: Path, *, merge: bool = False, out: Path | None = None) -> Path:
    ckpt = resolve_checkpoint(Path(checkpoint))
    _refuse_random_weights(ckpt)
    out = Path(out) if out else ckpt / ("export-merged" if merge else "export")
    if out.exists():
        shutil.rmtree(out)
    if (ckpt / "model").is_dir():
        shutil.copytree(ckpt / "model", out)
        return out
    if not (ckpt / "adapter").is_dir():
        return _gather_full_model(ckpt, out)
    if not merge:
        shutil.copytree(ckpt / "adapter", out)
        return out
    from peft import PeftModel

    from .build import load_model
    from .resolve import local_target, resolve_run

    cfg = run_config_of(ckpt)
    if cfg.adapter.method == "qlora":
        # Merging into 4-bit weights would round the update away; merge into the compute dtype instead.
        cfg = cfg.model_copy(update={"adapter": cfg.adapter.model_copy(update={"method": "lora"})})
    from .console import TaskBar

    with TaskBar("export: base model, adapter, merge, save", 4) as bar:
        resolved = resolve_run(cfg, local_target("cpu"), for_training=True)  # merged on the CPU, in the compute dtype
        dtype = resolved.compute_dtype
        loaded = load_model(resolved, device="cpu")
        bar.advance()
        model = PeftModel.from_pretrained(loaded.model, str(ckpt / "adapter"))
        bar.advance()
        merged = model.merge_and_unload()
        merged.to(dtype)
        bar.advance()
        merged.save_pretrained(str(out), safe_serialization=True)
        if loaded.processor is not None and hasattr(loaded.processor, "save_pretrained"):
            loaded.processor.save_pretrained(str(out))
        bar.advance()
    return out


def _refuse_random_weights(ckpt: Path) -> None:
    """A run trained on random weights (model.weights=random: a memory/speed measurement) exported would read as
    a fine-tuned model; refused, whatever the checkpoint holds."""
    try:
        cfg = run_config_of(ckpt)
    except MMTuneError:
        return  # no resolved config beside it: nothing says how it was trained (the paths below need none)
    if cfg.model.weights == "random":
        raise MMTuneError(f"{ckpt} was trained from random weights (model.weights=random): a measurement of memory "
                          "and speed, not a model to export", where=f"{ckpt}: model.weights",
                          fix="train with the pretrained weights (model.weights=pretrained, the default) to export")


def _gather_full_model(ckpt: Path, out: Path) -> Path:
    """A full fine-tune saved as shards: the base model rebuilt from the run's config, the trained
    weights read from the shards onto it (torch.distributed.checkpoint reshards to one process), saved."""
    from .build import build_model_and_adapters
    from .resolve import local_target, resolve_run
    from .train.checkpoint import load_trainable
    from .train.sharded_checkpoint import has_sharded

    if not has_sharded(ckpt):
        raise MMTuneError(f"{ckpt} holds neither model/, adapter/ nor sharded weights", where=str(ckpt),
                          fix="export a checkpoint written by mmtune train")
    cfg = run_config_of(ckpt)
    resolved = resolve_run(cfg, local_target("cpu"), for_training=True)
    loaded, adapters = build_model_and_adapters(resolved, device="cpu")
    model = adapters.model
    load_trainable(model, ckpt, strict=False)
    model.to(resolved.compute_dtype)
    model.save_pretrained(str(out), safe_serialization=True)
    if loaded.processor is not None and hasattr(loaded.processor, "save_pretrained"):
        loaded.processor.save_pretrained(str(out))
    return out
