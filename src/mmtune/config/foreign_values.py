"""Values other tools give our choices (transformers' `optim` / `lr_scheduler_type` names, dtype names), and a
section written as one value (axolotl's `adapter: qlora`), so a choice refused by the schema is answered with ours.

Like config/aliases.py these are hints, not accepted spellings: `train.optimizer: adamw_torch` stays an error that
says `train.optimizer=adamw`, so a config read by mmtune means one thing.
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

# our key's last segment -> {their value: (our value, whose name / what to know)}
FOREIGN_VALUES: dict[str, dict[str, tuple[str, str]]] = {
    "optimizer": {
        "adamw_torch": ("adamw", "transformers' torch AdamW"),
        "adamw_torch_fused": ("adamw", "transformers' fused torch AdamW; mmtune picks the fused kernel itself"),
        "adamw_hf": ("adamw", "transformers' own AdamW (removed there)"),
        "adamw_bnb_8bit": ("adamw_8bit", "transformers' bitsandbytes 8-bit AdamW"),
        "paged_adamw_32bit": ("paged_adamw", "transformers / axolotl's paged 32-bit AdamW"),
    },
    "scheduler": {
        "constant_with_warmup": ("constant", "transformers' name; train.warmup_steps / warmup_ratio warm up every "
                                             "scheduler here"),
        "cosine_with_warmup": ("cosine", "warmup is train.warmup_steps / warmup_ratio for every scheduler"),
        "linear_with_warmup": ("linear", "warmup is train.warmup_steps / warmup_ratio for every scheduler"),
        "cosine_with_restarts": ("cosine", "there are no restarts: one warmup, then one cosine decay to zero"),
        "cosine_with_min_lr": ("cosine", "the decay ends at zero (no minimum lr)"),
    },
    "precision": {
        "bfloat16": ("bf16", "the torch dtype's name"),
        "float16": ("fp16", "the torch dtype's name"),
        "half": ("fp16", "the torch dtype's name"),
        "float32": ("fp32", "the torch dtype's name"),
        "no": ("fp32", "accelerate's mixed_precision=no"),
        "auto": ("bf16", "the default; on a GPU without bf16 the run itself switches to fp16 + GradScaler, reported"),
        **dict.fromkeys(("fp8", "float8", "float8_e4m3fn", "float8_e5m2", "mxfp4", "fp4"),
                        ("bf16", "mmtune does not train in 8 or 4-bit floats (no transformer-engine / torchao "
                                 "float8): bf16 is its fastest precision; an FP8 / MXFP4 checkpoint as model.name "
                                 "loads as its quantization_config says")),
    },
}


def value_hint(key: str, value: Any) -> str | None:
    """`did you mean ...` for a value another tool gives one of our choices, else None."""
    if not isinstance(value, str):
        return None
    leaf = key.split(".")[-1]
    hit = FOREIGN_VALUES.get(leaf, {}).get(value.strip().lower())
    if hit is None:
        return None
    ours, note = hit
    return f"did you mean {key}={ours}?" + (f" ({value!r}: {note})" if note else "")


def section_hint(root_cls, key: str, value: Any) -> str | None:
    """A section given as one value (`adapter: qlora`): the field of the section that takes that value."""
    section_cls = root_cls
    for part in key.split("."):
        field = getattr(section_cls, "model_fields", {}).get(part)
        if field is None:
            return None
        section_cls = field.annotation
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or not hasattr(section_cls, "model_fields"):
        return None
    for name, field in section_cls.model_fields.items():
        ann = field.annotation
        if get_origin(ann) is Literal and value in get_args(ann):
            return (f"{key} is a section of keys, not one value: write `{key}: {{{name}: {value}}}` "
                    f"(or {key}.{name}={value} on the command line)")
    return (f"{key} is a section of keys ({', '.join(list(section_cls.model_fields)[:6])}, ...), not one value; "
            "see docs/config.md")
