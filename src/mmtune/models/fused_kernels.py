"""Liger-Kernel's fused RMSNorm / SwiGLU / RoPE on a built model (`train.fused_kernels`).

What Liger's per-instance patch (`liger_kernel.transformers.apply_liger_kernel_to_<model_type>(model=...)`,
liger-kernel 0.8.5) replaces, by family:
- qwen2 family (model types qwen2, qwen3, llama, mistral): every decoder RMSNorm (input, post-attention,
  final; qwen3's q_norm / k_norm too), every decoder MLP (`LigerSwiGLUMLP`: silu(gate) x up in one
  kernel) and the module-level `apply_rotary_pos_emb` of the modeling file;
- qwen2_vl: the same in the text decoder, LayerNorm in the vision blocks, and `apply_multimodal_rotary_pos_emb`;
- qwen2_5_vl: the same, with the vision blocks' RMSNorms instead of LayerNorms;
- qwen3_vl: the decoder RMSNorms (with q_norm / k_norm) and RoPE; no SwiGLU (Liger's default);
- llava: its text model's patch (llama, qwen2, ...); the CLIP/SigLIP vision tower has none.
Other families (qwen2_audio, qwen2_5_omni, llava_next, llava_onevision, brought models): no patch.

The per-instance patch rebinds `forward` on each module instance; the RoPE patch (and the class swaps
Liger makes for models built later) are module-level, as Liger does them. Applied after adapters and
quantization, to peft's base model, as transformers' Trainer does since
https://github.com/huggingface/transformers/pull/35680 (a PeftModel itself is not patched: transformers
issue #34016; Liger handles peft's ModulesToSaveWrapper itself, and its MLP forward calls the LoRA / 4-bit
projections as before); the fused cross entropy stays `train.loss_impl=liger` (mmtune.loss), so
Liger's own loss forwards are not installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections import Counter

from .families import LigerPatch  # each family's patch is a fact of its Family (Family.liger)

# Said by both keys that need liger-kernel (train.fused_kernels, train.loss_impl) where it is missing.
LIGER_MISSING = "liger_kernel is not installed here (pip install 'mmtune[gpu]', or liger-kernel alone)"
_LIGER_CLASS = {"rms_norm": "LigerRMSNorm", "swiglu": "LigerSwiGLUMLP", "layer_norm": "LigerLayerNorm"}


def liger_family(family) -> LigerPatch | None:
    return None if family.custom else family.liger


def describe_patch(patch: LigerPatch) -> str:
    """What the patch fuses, e.g. "RMSNorm + SwiGLU + RoPE (Liger-Kernel)". RoPE only where this transformers
    still calls the function Liger replaces (transformers 5 recomposes Qwen2-VL's M-RoPE in the rotary
    embedding and calls the plain `apply_rotary_pos_emb`, which Liger's Qwen2-VL patch leaves alone)."""
    parts = ["RMSNorm"] + (["SwiGLU"] if patch.swiglu else [])
    modeling = "llama" if patch.liger_module == "llava" else patch.liger_module  # llava: its usual text model's
    try:
        rope = hasattr(_modeling_module(modeling), patch.rope)
    except ImportError:
        rope = False
    parts.append("RoPE" if rope else f"no RoPE (modeling_{modeling} has no {patch.rope})")
    if patch.vision_norm == "layer_norm":
        parts.append("vision LayerNorm")
    return " + ".join(parts) + " (Liger-Kernel)"


def liger_problem(family, *, probe: bool) -> str | None:
    """Why liger-kernel cannot patch `family` here, or None. `probe`: also import the module Liger's patch
    imports for this family (a liger-kernel release and a transformers release that do not fit fail here,
    e.g. liger-kernel 0.8.5's Qwen2-VL patch on transformers 5.23); only asked for CUDA targets."""
    if importlib.util.find_spec("liger_kernel") is None:
        return LIGER_MISSING
    patch = liger_family(family)
    if not probe or patch is None:
        return None
    try:
        importlib.import_module(f"liger_kernel.transformers.model.{patch.liger_module}")
    except Exception as e:  # noqa: BLE001 - any import failure means the patch cannot be applied
        from ..compat import installed_version

        return (f"liger-kernel {installed_version('liger-kernel')} cannot patch "
                f"{family.name} with transformers {installed_version('transformers')} "
                f"({type(e).__name__}: {str(e).splitlines()[0][:160]})")
    return None


def _base(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _norm_targets(module, path: str):
    """A norm as Liger patches it: peft's ModulesToSaveWrapper by its two inner copies."""
    inner = getattr(module, "modules_to_save", None)
    if inner is not None and hasattr(module, "original_module"):
        return [(f"{path}.modules_to_save.default", inner["default"]), (f"{path}.original_module", module.original_module)]
    return [(path, module)]


def liger_modules(model, patch: LigerPatch) -> dict[str, tuple[str, object]]:
    """The modules Liger's per-instance patch replaces on `model` (path in peft's base model -> (kind,
    module)), kind rms_norm | swiglu | layer_norm; the planner's twins replace the same ones."""
    from torch import nn

    out: dict[str, tuple[str, object]] = {}

    def add(path, mod, kind):
        for p, m in _norm_targets(mod, path) if kind != "swiglu" else [(path, mod)]:
            out[p] = (kind, m)

    for name, mod in _base(model).named_modules():
        prefix = f"{name}." if name else ""
        layers, blocks = getattr(mod, "layers", None), getattr(mod, "blocks", None)
        if isinstance(layers, nn.ModuleList) and len(layers) and hasattr(layers[0], "input_layernorm") \
                and getattr(mod, "norm", None) is not None:  # a text decoder
            if patch.rms_norm:
                add(f"{prefix}norm", mod.norm, "rms_norm")
            for i, layer in enumerate(layers):
                p = f"{prefix}layers.{i}"
                if patch.swiglu:
                    add(f"{p}.mlp", layer.mlp, "swiglu")
                if patch.rms_norm:
                    add(f"{p}.input_layernorm", layer.input_layernorm, "rms_norm")
                    add(f"{p}.post_attention_layernorm", layer.post_attention_layernorm, "rms_norm")
                    attn = getattr(layer, "self_attn", None)
                    for qk in ("q_norm", "k_norm"):
                        if getattr(attn, qk, None) is not None:
                            add(f"{p}.self_attn.{qk}", getattr(attn, qk), "rms_norm")
        elif patch.vision_norm and isinstance(blocks, nn.ModuleList) and len(blocks) and hasattr(blocks[0], "norm1"):
            for i, block in enumerate(blocks):
                add(f"{prefix}blocks.{i}.norm1", block.norm1, patch.vision_norm)
                add(f"{prefix}blocks.{i}.norm2", block.norm2, patch.vision_norm)
    return out


def patched_by_liger(model) -> dict[str, str]:
    """Modules whose forward Liger rebound (path in peft's base model -> Liger class), read from each
    instance's own `forward` (Liger's per-instance patch sets it in the instance's __dict__)."""
    out = {}
    for name, mod in _base(model).named_modules():
        fwd = mod.__dict__.get("forward")
        owner = getattr(getattr(fwd, "__func__", None), "__qualname__", "").split(".")[0]
        if owner.startswith("Liger"):
            out[name] = owner
    return out


def apply_liger(model, family) -> list[str]:
    """Liger's per-instance patch on the built model (adapters and quantization applied); the decision lines
    saying what it replaced. Raises ModelLoadError when liger-kernel cannot patch this model here."""
    from ..errors import ModelLoadError

    patch = liger_family(family)
    base = _base(model)
    model_type = getattr(base.config, "model_type", "")
    try:
        import liger_kernel.transformers as lk

        fn = getattr(lk, f"apply_liger_kernel_to_{model_type}", None)
        if patch is None or fn is None:
            raise ImportError(f"no apply_liger_kernel_to_{model_type} in liger_kernel.transformers")
        text_type = getattr(getattr(base.config, "text_config", None), "model_type", "") if model_type == "llava" else ""
        modeling = _modeling_module(text_type or model_type)  # llava: the RoPE is its text model's
        rope_before = getattr(modeling, patch.rope, None)
        params = inspect.signature(fn).parameters
        # mmtune computes the loss itself (train.loss_impl=liger is Liger's fused linear cross entropy)
        fn(model=base, **{k: False for k in ("fused_linear_cross_entropy", "cross_entropy") if k in params})
    except Exception as e:  # noqa: BLE001 - an import or API mismatch between liger-kernel and transformers
        raise ModelLoadError(f"train.fused_kernels=liger: liger-kernel could not patch {model_type} "
                             f"({type(e).__name__}: {str(e).splitlines()[0][:200]})", where="train.fused_kernels",
                             fix="train.fused_kernels=none, or a liger-kernel release that supports this "
                                 "transformers (pip install -U liger-kernel)") from None
    done = patched_by_liger(base)
    counts = Counter(done.values())
    expected = {p: _LIGER_CLASS[k] for p, (k, _) in liger_modules(base, patch).items()}
    rope_after = getattr(modeling, patch.rope, None)
    rope = (f"RoPE: {modeling.__name__.rsplit('.', 1)[-1]}.{patch.rope} replaced" if rope_before is not None
            and rope_after is not rope_before else
            f"RoPE not fused: {modeling.__name__.rsplit('.', 1)[-1]} has no {patch.rope} (transformers calls its "
            "own rotary function; Liger's patch targets the old one)")
    lines = ["fused kernels: Liger patched " + ", ".join(f"{n} {c}" for c, n in sorted(counts.items())) + f"; {rope}"]
    if done != expected:
        missing = sorted(set(expected) - set(done))[:3]
        extra = sorted(set(done) - set(expected))[:3]
        lines.append(f"fused kernels: the plan models other modules than Liger patched (not patched: {missing}, "
                     f"unplanned: {extra})")
    return lines


def _modeling_module(model_type: str):
    return importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
