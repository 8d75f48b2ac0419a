"""Build the run's model for a plan: real architecture and size, weights never materialised.

The structure comes from the same pieces `train` uses (`models.loading` builds the class from its config
with the resolved attention and checkpointing; `adapters.apply_adapters` applies LoRA/QLoRA/full and
selects trainable parameters; trainable weights in fp32 as `build.build_model_and_adapters` does), built
on `meta`, then every parameter and buffer becomes a fake tensor of the same shape and dtype.

Config sources, in order: a tiny twin (`tiny/...`), a folder on disk with a config.json, an embedded
public config (`mmtune.models.configs`, e.g. Qwen/Qwen2-VL-7B-Instruct), the local HF cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError


@dataclass
class PlannedModel:
    model: Any
    family: Any
    hf_config: Any
    processor: Any
    param_groups: list
    adapter_table: Any
    quantized_layers: int = 0
    decisions: list[str] = field(default_factory=list)
    processor_facts: dict = field(default_factory=dict)


# Config keys that hold special token ids, and the processor attribute / token string they stand for.
_TOKEN_KEYS = {
    "image_token_id": ("image_token", "<|image_pad|>"), "image_token_index": ("image_token", "<|image_pad|>"),
    "video_token_id": ("video_token", "<|video_pad|>"), "video_token_index": ("video_token", "<|video_pad|>"),
    "audio_token_id": ("audio_token", "<|AUDIO|>"), "audio_token_index": ("audio_token", "<|AUDIO|>"),
    "vision_start_token_id": (None, "<|vision_start|>"), "vision_end_token_id": (None, "<|vision_end|>"),
    "audio_start_token_id": (None, "<|audio_bos|>"), "audio_end_token_id": (None, "<|audio_eos|>"),
}


def _remap_token_ids(config, processor) -> None:
    """Point the config's special-token ids at the planning tokenizer's ids for the same tokens.

    A real-size config names hub token ids (151655 = <|image_pad|>); the plan tokenizes with the local
    tokenizer, whose ids differ. Ids only steer matching (which positions are media), so matching ids
    make the model find its media tokens exactly as with the real tokenizer; vocab size is unchanged.
    """
    tok = getattr(processor, "tokenizer", processor)
    for holder in [config] + [getattr(config, k) for k in ("text_config", "thinker_config") if hasattr(config, k)]:
        for key, (attr, default) in _TOKEN_KEYS.items():
            if getattr(holder, key, None) is None:
                continue
            token = getattr(processor, attr, None) if attr else None
            tid = tok.convert_tokens_to_ids(token or default)
            if tid is not None and tid != tok.unk_token_id:
                setattr(holder, key, tid)


def _size_get(size, key):
    return size.get(key) if isinstance(size, dict) else getattr(size, key, None)


def _planning_processor(family, facts: dict):
    """The family's processor class with the local tokenizer, configured with the real model's media facts."""
    from ..models.tiny import tiny_config_and_processor

    if not family.tiny:
        raise ModelLoadError(f"no planning processor for family {family.name!r} (it has no tiny twin)",
                             where="model.name", fix="point model.name at a local model folder that has its processor files")
    _, proc = tiny_config_and_processor(family.tiny)
    for part in ("image_processor", "video_processor"):
        p = getattr(proc, part, None)
        if p is None:
            continue
        for key in ("patch_size", "merge_size", "temporal_patch_size", "min_pixels", "max_pixels"):
            if key in facts and hasattr(p, key):
                setattr(p, key, facts[key])
        if hasattr(p, "size") and isinstance(p.size, dict) and "max_pixels" in facts:
            p.size = {"shortest_edge": facts["min_pixels"], "longest_edge": facts["max_pixels"]}
        elif getattr(p, "size", None) is not None and "image_size" in facts:
            # Fixed-size towers (CLIP / SigLIP in LLaVA families): the real input size, not the twin's.
            n, kind = facts["image_size"], type(p.size)  # a dict or transformers' SizeDict
            square = kind(height=n, width=n)
            p.size = square if _size_get(p.size, "height") else kind(shortest_edge=n)
            if getattr(p, "crop_size", None) is not None:
                p.crop_size = type(p.crop_size)(height=n, width=n)
        if "image_grid_pinpoints" in facts and hasattr(p, "image_grid_pinpoints"):
            p.image_grid_pinpoints = facts["image_grid_pinpoints"]  # multi-view ("anyres") crops
    if "num_image_tokens" in facts and hasattr(proc, "num_image_tokens"):
        proc.num_image_tokens = facts["num_image_tokens"]
    fe = getattr(proc, "feature_extractor", None)
    keys = ("feature_size", "sampling_rate", "hop_length", "chunk_length", "n_fft")
    if fe is not None and any(k in facts for k in keys):
        # Rebuilt, not patched: the mel filter bank is computed from feature_size at construction, so
        # setting the attribute afterwards would still produce the tiny twin's mel count.
        proc.feature_extractor = type(fe)(**{k: facts.get(k, getattr(fe, k)) for k in keys if hasattr(fe, k)})
    return proc


def resolve_source(cfg):
    """(hf_config, processor or None, family, facts, description) for the config's model.name."""
    from ..models.configs import embedded, hf_config
    from ..models.families import family_for_model_type, get_family
    from ..models.tiny import is_tiny, tiny_config_and_processor, tiny_spec

    name = cfg.model.name
    if is_tiny(name):
        config, proc = tiny_config_and_processor(name)
        fam = get_family(cfg.model.family or tiny_spec(name).family)
        return config, proc, fam, {}, f"{name} (tiny twin)"
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(path), trust_remote_code=cfg.model.trust_remote_code)
        fam = get_family(cfg.model.family) if cfg.model.family else family_for_model_type(config.model_type)
        proc = None
        if (path / "tokenizer_config.json").is_file() or (path / "tokenizer.json").is_file():
            from ..models.loading import _load_processor

            proc = _load_processor(str(path), fam, cfg)
        return config, proc, fam, {}, f"{name} (config from disk)"
    spec = embedded(name)
    if spec is not None:
        config = hf_config(spec)
        fam = get_family(cfg.model.family) if cfg.model.family else family_for_model_type(config.model_type)
        return config, None, fam, dict(spec.get("processor", {})), f"{spec['hub_id']} (embedded public config)"
    from ..models.loading import load_hf_config

    try:
        config = load_hf_config(name, cfg.model.revision, cfg.model.trust_remote_code)
    except ModelLoadError as e:
        from ..models.configs import embedded_names

        raise ModelLoadError(f"no config for {name!r}: not a tiny twin, a folder with config.json, an embedded "
                             f"config, or a cached model ({e.what})", where="model.name",
                             fix="use one of the embedded configs (" + ", ".join(embedded_names()) +
                                 ") or a folder holding the model's config.json") from None
    fam = get_family(cfg.model.family) if cfg.model.family else family_for_model_type(config.model_type)
    return config, None, fam, {}, f"{name} (cached config)"


def plan_attention(requested: str) -> str:
    """Attention the plan traces. FlashAttention-2 cannot run on CPU; SDPA's memory-efficient kernels keep
    the same O(seq) memory (no seq x seq scores), so FA2 runs are planned with SDPA."""
    return "eager" if requested == "eager" else "sdpa"


def build_planned_model(cfg, compute_dtype) -> PlannedModel:
    import torch

    from ..adapters import apply_adapters
    from ..models.loading import _build_from_config, enable_checkpointing
    from .qlora import replace_decoder_linears

    config, processor, family, facts, desc = resolve_source(cfg)
    decisions = [f"model: {desc}, built on meta (weights never materialised)"]
    if processor is None:
        processor = _planning_processor(family, facts)
        _remap_token_ids(config, processor)
        decisions.append("tokenizer: local planning tokenizer; media token counts from the family's processor "
                         "with this model's patch sizes and pixel caps")
    if cfg.model.max_pixels or cfg.model.min_pixels:
        for part in ("image_processor", "video_processor"):
            p = getattr(processor, part, None)
            if p is not None:
                if cfg.model.max_pixels:
                    p.max_pixels = cfg.model.max_pixels
                if cfg.model.min_pixels:
                    p.min_pixels = cfg.model.min_pixels
                if isinstance(getattr(p, "size", None), dict):
                    p.size = {"shortest_edge": p.min_pixels, "longest_edge": p.max_pixels}
    attn = plan_attention(cfg.model.attn_implementation)
    from accelerate import init_empty_weights

    # Parameters on meta (never allocated); buffers real, so integer buffers such as CLIP's
    # `position_ids` keep their values for the fake step (they are small).
    with init_empty_weights(include_buffers=False):
        model = _build_from_config(family, config, compute_dtype, attn)
    for p in model.parameters():  # `_keep_in_fp32_modules` aside, one compute dtype (as load_model does)
        if p.is_floating_point() and p.dtype != compute_dtype:
            p.data = p.data.to(compute_dtype)
    if cfg.model.gradient_checkpointing and getattr(model, "supports_gradient_checkpointing", False):
        enable_checkpointing(model)
        model.config.use_cache = False
        decisions.append("gradient checkpointing: on (non-reentrant)")
    nq = 0
    if cfg.adapter.method == "qlora":
        nq = replace_decoder_linears(model, family, compute_dtype, cfg.adapter.bnb_4bit_double_quant)
        decisions.append(f"qlora: {nq} decoder linear layers planned at packed 4-bit storage")
    with torch.device("meta"):  # new LoRA weights on meta too: nothing allocated, no init computed
        result = apply_adapters(model, family, cfg.adapter, cfg.train)
    model = result.model
    for p in model.parameters():  # trainable weights in fp32, as build.build_model_and_adapters does
        if p.requires_grad and p.dtype != torch.float32 and p.is_floating_point():
            p.data = p.data.float()
    return PlannedModel(model=model, family=family, hf_config=config, processor=processor,
                        param_groups=result.param_groups, adapter_table=result.table, quantized_layers=nq,
                        decisions=decisions, processor_facts=facts)


def materialize_fake(model, mode, param_groups: list) -> list:
    """Replace every meta parameter/buffer by a fake tensor of the same shape/dtype (shared ones once).

    Returns `param_groups` rewritten to the new parameter objects (groups are selected by identity).
    """
    import torch
    from torch import nn

    new_of: dict[int, Any] = {}

    def fake_like(t):
        if mode.is_our_fake(t):
            return t
        if t.device.type != "meta":
            # a real buffer: integer ones stay real (index values), floating ones become fake
            return t if not t.is_floating_point() else mode.with_value(t)
        with mode:
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")

    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in new_of:
                new_of[id(p)] = nn.Parameter(fake_like(p.data), requires_grad=p.requires_grad)
            mod._parameters[name] = new_of[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in new_of:
                new_of[id(b)] = fake_like(b)
            mod._buffers[name] = new_of[id(b)]
    groups = []
    for g in param_groups:
        groups.append(dict(g, params=[new_of[id(p)] for p in g["params"]]))
    return groups
