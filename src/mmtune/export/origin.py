"""Where an mmtune export came from: its marker (`.mmtune-export.json`) names the checkpoint it was written
from. `mmtune chat`, `mmtune serve` and `mmtune serve --backend vllm` read it so that an export answers as its
run did (the run's system prompt, media settings, answer length; an adapter export on its run's base), as the
export's card promises: without it a merged export was chatted with as a published model (no system prompt,
16 new tokens) and an adapter export was refused outright.
"""

from __future__ import annotations

import json
from pathlib import Path

MARKER = ".mmtune-export.json"


def export_checkpoint(path: Path) -> Path | None:
    """The checkpoint an mmtune export was written from, where it is still there; None for any other folder
    (or an export whose run was moved or deleted)."""
    marker = Path(path) / MARKER
    if not marker.is_file():
        return None
    try:
        ckpt = Path(json.loads(marker.read_text()).get("checkpoint") or "")
    except (OSError, ValueError, AttributeError):
        return None
    return ckpt if str(ckpt) not in ("", ".") and ckpt.is_dir() else None


def is_adapter_export(path: Path) -> bool:
    return (Path(path) / MARKER).is_file() and (Path(path) / "adapter_config.json").is_file()


def as_exported_model(cfg, folder: Path):
    """The run's config for chatting with its merged / full export: the export folder as model.name, nothing
    trained on top (LoRA with B = 0 keeps the weights frozen in their dtype), the rest (data.system_prompt,
    media caps, video frames, eval.max_new_tokens) as the run had it."""
    adapter = type(cfg.adapter)(method="lora")
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": str(folder)}), "adapter": adapter})
