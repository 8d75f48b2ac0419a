"""A family's model class built from a config: random weights on the current device, or the structure on
`meta` (never allocated); and a real-size config's special-token ids pointed at a stand-in tokenizer's."""

from __future__ import annotations

from .families import Family


def model_class(family: Family):
    """The family's transformers class, once the packages it needs are known to be here (models/requirements.py)."""
    import transformers

    from .requirements import check_requirements

    check_requirements(family)
    return getattr(transformers, family.model_class)


def known_class(family: Family):
    """The family's transformers class where its attention flags can be read (None: an Auto class, a model brought
    by import path, a class this transformers lacks). transformers' lazy module imports the modeling file here (no
    weights, no optional package)."""
    if family.custom or not family.model_class or family.model_class.startswith("Auto"):
        return None
    import transformers

    try:
        return getattr(transformers, family.model_class, None)
    except (ImportError, RuntimeError):
        return None


def model_lacks_fa2(family: Family) -> str | None:
    """Why the family's model class cannot run FlashAttention-2 in the installed transformers (None: it can,
    or it is not known: an Auto class, a model brought by import path). One rule for the resolved run's
    attention decision and the doctor's MM071."""
    from ..compat.transformers_internals import flash_attention_support

    cls = known_class(family)
    if cls is None or flash_attention_support(cls) is not False:
        return None
    import transformers

    return (f"{family.model_class} does not support FlashAttention-2 in transformers {transformers.__version__} "
            "(from_pretrained: \"does not support Flash Attention 2.0 yet\")")


def model_lacks_sdpa(family: Family) -> str | None:
    """Why the family's model class cannot run SDPA attention in the installed transformers (None: it can, or it is
    not known). The resolved run then decides eager attention, for training, the plan's trace and the doctor alike."""
    from ..compat.transformers_internals import sdpa_support

    cls = known_class(family)
    if cls is None or sdpa_support(cls) is not False:
        return None
    import transformers

    return (f"{family.model_class} does not support SDPA attention in transformers {transformers.__version__} "
            "(its _supports_sdpa is False)")


def build_from_config(family: Family, config, dtype, attn: str):
    """The family's model class built from a config (random init; on whatever device is current)."""
    cls = model_class(family)
    if family.sub_config and hasattr(config, family.sub_config):  # e.g. the Thinker inside Qwen2.5-Omni
        config = getattr(config, family.sub_config)
    from ..compat.transformers_internals import model_from_config

    return model_from_config(cls, config, dtype=dtype, attn_implementation=attn)


def build_on_meta(family: Family, config, dtype, attn: str):
    """The model's structure with parameters on meta (never allocated); buffers real, so integer buffers
    such as CLIP's `position_ids` keep their values for the planner's fake step (they are small)."""
    from accelerate import init_empty_weights

    from ..compat.transformers_internals import zero3_init_lifted

    with init_empty_weights(include_buffers=False), zero3_init_lifted():  # never partitioned: it is for counting
        model = build_from_config(family, config, dtype, attn)
    # Tied input / output embeddings come out of accelerate's empty init as two meta tensors (checked on
    # transformers 5.24, accelerate 1.15): tie them again, or the plan counts Gemma 3's 262k x d embedding twice.
    model.tie_weights()
    return model


# Config keys that hold special token ids, and the processor attribute / token string they stand for.
_TOKEN_KEYS = {
    "image_token_id": ("image_token", "<|image_pad|>"), "image_token_index": ("image_token", "<|image_pad|>"),
    "video_token_id": ("video_token", "<|video_pad|>"), "video_token_index": ("video_token", "<|video_pad|>"),
    "audio_token_id": ("audio_token", "<|AUDIO|>"), "audio_token_index": ("audio_token", "<|AUDIO|>"),
    "vision_start_token_id": (None, "<|vision_start|>"), "vision_end_token_id": (None, "<|vision_end|>"),
    "audio_start_token_id": (None, "<|audio_bos|>"), "audio_end_token_id": (None, "<|audio_eos|>"),
    "boi_token_index": (None, "<start_of_image>"), "eoi_token_index": (None, "<end_of_image>"),  # Gemma 3
}


def remap_token_ids(config, processor) -> None:
    """Point the config's special-token ids at a stand-in tokenizer's ids for the same tokens.

    A real-size config names hub token ids (151655 = <|image_pad|>); a stand-in processor tokenizes
    with a local tokenizer whose ids differ. Ids only steer matching (which positions are media), so
    matching ids make the model find its media tokens exactly as with the real tokenizer.
    """
    tok = getattr(processor, "tokenizer", processor)
    for holder in [config] + [getattr(config, k) for k in ("text_config", "thinker_config") if hasattr(config, k)]:
        for key, (attr, default) in _TOKEN_KEYS.items():
            if getattr(holder, key, None) is None:
                continue
            kind = attr[:-len("_token")] if attr else None
            # the id the placeholder expands to (processor.<kind>_token_ids: Gemma 3's soft token, not its
            # <start_of_image> placeholder), else the placeholder's
            tid = (getattr(processor, f"{kind}_token_ids", None) or [None])[0] if kind else None
            if tid is None:
                token = getattr(processor, attr, None) if attr else None
                tid = tok.convert_tokens_to_ids(token or default)
            if tid is not None and tid != tok.unk_token_id:
                setattr(holder, key, tid)
