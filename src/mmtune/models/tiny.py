"""Tiny random models of real architectures, with processors made locally (no download).

Each tiny model is an instance of the real transformers class (Qwen2VLForConditionalGeneration,
...) built from a shrunk config, so the data pipeline, adapters, loss, eval and checkpointing run the
same code as on the full-size model. `--smoke` swaps a recipe's model for the tiny twin of its family.

Names: `tiny/qwen2`, `tiny/qwen2-vl`, ... (see TINY). `build_tiny(name)` returns (model, processor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .local_tokenizer import make_tokenizer

# Small enough for 2 CPU cores, big enough to learn the demo task.
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=False)
VISION_MAX_PIXELS = 112 * 112  # 16 merged tokens per image
VISION_MIN_PIXELS = 56 * 56


@dataclass(frozen=True)
class TinySpec:
    name: str
    family: str
    make_config: Callable  # (tokenizer, **overrides) -> PretrainedConfig
    make_processor: Callable  # (tokenizer) -> processor (or the tokenizer for text models)


def _ids(tok, *tokens):
    return [tok.convert_tokens_to_ids(t) for t in tokens]


def _text_common(tok, **over):
    cfg = dict(TEXT, vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
               bos_token_id=None)
    cfg.update(over)
    return cfg


def _qwen2_config(tok, **over):
    from transformers import Qwen2Config

    return Qwen2Config(**_text_common(tok, **over))


def _qwen_image_processor(**kw):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    kw.setdefault("min_pixels", VISION_MIN_PIXELS)
    kw.setdefault("max_pixels", VISION_MAX_PIXELS)
    return Qwen2VLImageProcessorPil(**kw)


def _qwen_video_processor(**kw):
    from .video_frames import FramesVideoProcessor, allow_processor_without_torchvision

    allow_processor_without_torchvision()
    kw.setdefault("min_pixels", VISION_MIN_PIXELS)
    kw.setdefault("max_pixels", VISION_MAX_PIXELS)
    return FramesVideoProcessor(**kw)


def _qwen2_vl_config(tok, **over):
    from transformers import Qwen2VLConfig

    text = _text_common(tok, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, embed_dim=32, hidden_size=text["hidden_size"], num_heads=2, mlp_ratio=2)
    image, video, vstart, vend = _ids(tok, "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    cfg = dict(text_config=text, vision_config=vision, image_token_id=image, video_token_id=video,
               vision_start_token_id=vstart, vision_end_token_id=vend, tie_word_embeddings=False)
    cfg.update(over)
    return Qwen2VLConfig(**cfg)


def _qwen2_vl_processor(tok):
    from transformers import Qwen2VLProcessor

    return Qwen2VLProcessor(image_processor=_qwen_image_processor(), tokenizer=tok,
                            video_processor=_qwen_video_processor(), chat_template=tok.chat_template)


TINY: dict[str, TinySpec] = {}


def register_tiny(spec: TinySpec) -> TinySpec:
    TINY[spec.name] = spec
    return spec


register_tiny(TinySpec("tiny/qwen2", "qwen2", _qwen2_config, lambda tok: tok))
register_tiny(TinySpec("tiny/qwen2-vl", "qwen2_vl", _qwen2_vl_config, _qwen2_vl_processor))


def is_tiny(name: str) -> bool:
    return name.startswith("tiny/")


def tiny_spec(name: str) -> TinySpec:
    if name not in TINY:
        from ..errors import ModelLoadError

        raise ModelLoadError(f"unknown tiny model {name!r}", where="model.name",
                             fix=f"one of: {', '.join(sorted(TINY))}")
    return TINY[name]


def tiny_config_and_processor(name: str, **config_overrides):
    spec = tiny_spec(name)
    tok = make_tokenizer()
    return spec.make_config(tok, **config_overrides), spec.make_processor(tok)


def build_tiny(name: str, seed: int = 0, attn_implementation: str | None = None, **config_overrides):
    """(model, processor) of the named tiny twin, weights random but reproducible from `seed`."""
    import torch
    import transformers

    from .families import get_family

    config, processor = tiny_config_and_processor(name, **config_overrides)
    family = get_family(tiny_spec(name).family)
    cls = getattr(transformers, family.model_class)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        kw = {"attn_implementation": attn_implementation} if attn_implementation else {}
        model = cls.from_config(config, **kw) if hasattr(cls, "from_config") else cls._from_config(config, **kw)
    return model, processor
