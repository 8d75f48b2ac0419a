"""Each automatic decision of a run, as a pure function of (config, target, processor).

One rule per decision, used by every command through `resolve_run`: precision and loss scaling,
attention kernel, quantization, pad id, media caps, data splits, evaluation metrics, trainable
components. Each returns its value and a `Decision` saying why, for the start-up summary and
`config.resolved.yaml`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from ..errors import ConfigError, ModelLoadError


@dataclass(frozen=True)
class Decision:
    key: str  # the config key it settles, e.g. train.precision
    value: str  # what was chosen
    reason: str  # why ("requested", "bf16 unsupported on T4 (sm_75) -> fp16 + GradScaler", ...)
    changed: bool = False  # the value differs from what the config asked for

    def line(self) -> str:
        return f"{self.key}: {self.value} ({self.reason})"


# --------------------------------------------------------------------------- precision

def decide_precision(requested: str, target) -> tuple[str, bool, Decision]:
    """(precision, loss scaling, decision). bf16 where the GPU lacks it becomes fp16 + GradScaler
    (failure mode 5); fp16 on the CPU becomes fp32 (no fp16 autocast + scaler path there)."""
    gpu = target.gpu
    if gpu is not None and requested == "bf16" and not gpu.bf16:
        return "fp16", True, Decision("train.precision", "fp16 + GradScaler",
                                      f"bf16 unsupported on {gpu.name} ({target.sm})", changed=True)
    if gpu is None and requested == "fp16":
        return "fp32", False, Decision("train.precision", "fp32", "fp16 autocast with GradScaler is a GPU path; "
                                       "on the CPU", changed=True)
    scaled = requested == "fp16"
    return requested, scaled, Decision("train.precision", requested + (" + GradScaler" if scaled else ""),
                                       f"requested, on {target.describe()}")


# --------------------------------------------------------------------------- attention

def decide_attention(requested: str, target, precision: str) -> tuple[str, Decision]:
    """'sdpa' unless FlashAttention-2 is asked for, or 'auto' and usable (flash_attn here, sm80+, 16-bit)."""
    why_not = None
    if importlib.util.find_spec("flash_attn") is None:
        why_not = "flash_attn is not installed here (pip install 'mmtune[gpu]')"
    elif target.gpu is None:
        why_not = "FlashAttention-2 needs a CUDA GPU"
    elif not target.gpu.fa2:
        why_not = f"{target.gpu.name} is {target.sm}, FlashAttention-2 needs sm80+ (failure mode 5)"
    elif precision == "fp32":
        why_not = "FlashAttention-2 needs fp16/bf16 and the run is fp32"
    key = "model.attn_implementation"
    if requested == "flash_attention_2":
        if why_not and target.local:
            raise ConfigError(f"model.attn_implementation=flash_attention_2 cannot be used: {why_not}",
                              where=key, fix="model.attn_implementation=sdpa (or auto)")
        if why_not:  # planned for another machine: the doctor's MM025 says whether that machine can
            return "flash_attention_2", Decision(key, "flash_attention_2", f"requested; here: {why_not}")
        return "flash_attention_2", Decision(key, "flash_attention_2", "requested")
    if requested == "auto":
        if why_not is None:
            return "flash_attention_2", Decision(key, "flash_attention_2", f"auto: flash_attn installed, "
                                                 f"{target.sm}, {precision}", changed=True)
        return "sdpa", Decision(key, "sdpa", f"auto: {why_not}", changed=True)
    return requested, Decision(key, requested, "requested")


# --------------------------------------------------------------------------- quantization

def decide_quantization(adapter) -> tuple[str | None, Decision | None]:
    if adapter.method != "qlora":
        return None, None
    q = f"4-bit {adapter.bnb_4bit_quant_type}" + (" double-quant" if adapter.bnb_4bit_double_quant else "")
    return q, Decision("adapter.method", f"qlora: decoder linear layers {q}",
                       "vision/audio/projector/lm_head stay in the compute dtype (failure mode 4)")


# --------------------------------------------------------------------------- pad id

def decide_pad_id(processor) -> tuple[int, Decision]:
    tok = getattr(processor, "tokenizer", processor)
    if tok.pad_token_id is not None:
        return int(tok.pad_token_id), Decision("pad_token_id", str(tok.pad_token_id),
                                               f"the tokenizer's pad token {tok.pad_token!r}")
    if tok.eos_token_id is not None:
        return int(tok.eos_token_id), Decision("pad_token_id", str(tok.eos_token_id),
                                               f"no pad token: the eos token {tok.eos_token!r} (labels mask it)",
                                               changed=True)
    raise ModelLoadError("the tokenizer has neither a pad nor an eos token", where="model.name",
                         fix="use a tokenizer with a pad token")


# --------------------------------------------------------------------------- evaluation

def decide_best_metric(ev) -> tuple[bool, Decision]:
    from ..evaluate.metrics import greater_is_better

    if ev.greater_is_better is not None:
        return ev.greater_is_better, Decision("eval.greater_is_better", str(ev.greater_is_better), "requested")
    g = greater_is_better(ev.best_metric)
    return g, Decision("eval.greater_is_better", str(g), f"inferred from {ev.best_metric!r}", changed=True)


# --------------------------------------------------------------------------- components

def trainable_components(adapter, family) -> tuple[str, ...]:
    """What the optimizer updates, by component: LoRA on the decoder (or everything for full), plus
    components trained in full, minus frozen ones."""
    have = set(family.components)
    for key in ("train_components", "freeze_components"):
        missing = [c for c in getattr(adapter, key) if c not in have]
        if missing:
            raise ConfigError(f"adapter.{key}: {family.name} has no {', '.join(missing)} component",
                              where=f"adapter.{key}", fix=f"components of {family.name}: {', '.join(sorted(have))}")
    if adapter.method == "full":
        comps = [c for c in family.components if c not in adapter.freeze_components]
    else:
        comps = ["decoder (LoRA)"] + [c for c in adapter.train_components if c not in adapter.freeze_components]
    return tuple(comps)


# --------------------------------------------------------------------------- sequence packing

# Families whose packed rows are verified exact against unpacked ones (tests/data/test_packing.py: same
# loss and gradients on the tiny twins): the attention reads record boundaries from position_ids, the
# media towers see whole items, and M-RoPE positions come from the model's own get_rope_index per record.
PACKABLE = ("qwen2", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava", "llava_next", "llava_onevision")


def decide_packing(cfg, family, attn: str) -> Decision | None:
    """data.packing: on where it is exact; a ConfigError saying why where it is not."""
    if not cfg.data.packing:
        return None
    key = "data.packing"
    why_not = None
    if family.name not in PACKABLE:
        why_not = (f"{family.name} is not verified exact under packing (audio encoders and Omni's interleaved "
                   f"time positions are per batch row); packable: {', '.join(PACKABLE)}")
    elif cfg.train.aux_losses:
        why_not = "auxiliary losses read their targets per batch row, and a packed row holds several records"
    elif cfg.data.group_by_length:
        why_not = "packing already fills rows; data.group_by_length would only reorder them"
    if why_not:
        raise ConfigError(f"data.packing=true cannot be used: {why_not}", where=key, fix="data.packing=false")
    how = {"flash_attention_2": "FlashAttention-2 varlen over the records, found from position_ids",
           "sdpa": "SDPA with a block-diagonal causal mask built from position_ids",
           "eager": "a block-diagonal causal mask built from position_ids"}[attn]
    rope = " and 3-D M-RoPE positions per record" if family.name in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl") else ""
    return Decision(key, f"rows of up to {cfg.data.max_length} tokens (data.max_length), "
                         f"{cfg.train.micro_batch_size} per micro-batch",
                    f"requested; {how}; positions restart per record{rope}; loss summed over the same answer tokens")
