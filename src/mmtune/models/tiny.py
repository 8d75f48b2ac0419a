"""Tiny random models of real architectures, with processors made locally (no download).

Each tiny model is an instance of the real transformers class (Qwen2VLForConditionalGeneration,
...) built from a shrunk config, so the data pipeline, adapters, loss, eval and checkpointing run the
same code as on the full-size model. `--smoke` swaps a recipe's model for the tiny twin of its family.

Names: `tiny/qwen2`, `tiny/qwen2-vl`, ... (see TINY). `build_tiny(name)` returns (model, processor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..compat.transformers_internals import make_processor, model_from_config
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
    make_tokenizer: Callable = make_tokenizer  # () -> tokenizer with this family's placeholders
    # (model) -> None: what random init leaves at a value a trained checkpoint never has and that would hide the
    # media from the loss (Mllama's cross-attention gates start at 0: tanh(0) shuts the image out)
    post_build: Callable | None = None


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
    from .video_frames import FramesVideoProcessor

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

    return make_processor(Qwen2VLProcessor, image_processor=_qwen_image_processor(), tokenizer=tok,
                            video_processor=_qwen_video_processor(), chat_template=tok.chat_template)


# --- Qwen2.5-VL: windowed-attention ViT with a full-attention block, same processor layout as Qwen2-VL.

def _mrope_text(tok, **over):
    return _text_common(tok, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "mrope_section": [2, 3, 3]}, **over)


def _vision_ids(tok):
    image, video, vstart, vend = _ids(tok, "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    return dict(image_token_id=image, video_token_id=video, vision_start_token_id=vstart, vision_end_token_id=vend)


def _qwen2_5_vl_config(tok, **over):
    from transformers import Qwen2_5_VLConfig

    text = _mrope_text(tok)
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text["hidden_size"],
                  window_size=56, fullatt_block_indexes=[1])
    cfg = dict(text_config=text, vision_config=vision, tie_word_embeddings=False, **_vision_ids(tok))
    cfg.update(over)
    return Qwen2_5_VLConfig(**cfg)


def _qwen2_5_vl_processor(tok):
    from transformers import Qwen2_5_VLProcessor

    return make_processor(Qwen2_5_VLProcessor, image_processor=_qwen_image_processor(), tokenizer=tok,
                               video_processor=_qwen_video_processor(), chat_template=tok.chat_template)


# --- Qwen3-VL: 16-pixel patches, learned position embeddings, DeepStack features, timestamped video.

QWEN3_MEAN = (0.5, 0.5, 0.5)


def _qwen3_vl_config(tok, **over):
    from transformers import Qwen3VLConfig

    text = _text_common(tok, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                           "mrope_section": [2, 3, 3], "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text["hidden_size"],
                  patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0])
    cfg = dict(text_config=text, vision_config=vision, tie_word_embeddings=False, **_vision_ids(tok))
    cfg.update(over)
    return Qwen3VLConfig(**cfg)


def qwen3_media_kwargs() -> dict:
    """The Qwen3 towers' twin image / video settings (16 px patches merged 2 x 2: 2 x 2 to 4 x 4 merged tokens),
    shared by the Qwen3-VL and Qwen3-Omni twins."""
    side = 16 * 2  # patch * merge
    return dict(patch_size=16, image_mean=QWEN3_MEAN, image_std=QWEN3_MEAN,
                min_pixels=2 * side * 2 * side, max_pixels=4 * side * 4 * side)


def _qwen3_vl_processor(tok):
    from transformers import Qwen3VLProcessor

    kw = qwen3_media_kwargs()
    return make_processor(Qwen3VLProcessor, image_processor=_qwen_image_processor(**kw), tokenizer=tok,
                            video_processor=_qwen_video_processor(**kw), chat_template=tok.chat_template)


# --- Qwen2-Audio: Whisper-style encoder (30 s windows, as the real model), average-pooled, linear projector.

AUDIO_MELS = 32  # the real model uses 128; the mel count only sizes the first conv


def _whisper_features(**kw):
    from transformers import WhisperFeatureExtractor

    kw.setdefault("feature_size", AUDIO_MELS)
    return WhisperFeatureExtractor(**kw)


def _qwen2_audio_config(tok, **over):
    from transformers import Qwen2AudioConfig

    audio = dict(num_mel_bins=AUDIO_MELS, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64,
                 d_model=32, max_source_positions=1500)
    cfg = dict(text_config=dict(_text_common(tok), model_type="qwen2"), audio_config=audio,
               audio_token_index=tok.convert_tokens_to_ids("<|AUDIO|>"))
    cfg.update(over)
    return Qwen2AudioConfig(**cfg)


def _qwen2_audio_processor(tok):
    from transformers import Qwen2AudioProcessor

    return Qwen2AudioProcessor(feature_extractor=_whisper_features(), tokenizer=tok, chat_template=tok.chat_template)


# --- Qwen2.5-Omni Thinker: Qwen2.5-VL vision tower + Whisper-style audio encoder + Qwen2 decoder.

OMNI_TOKENS = {"image_token": "<|IMAGE|>", "video_token": "<|VIDEO|>", "audio_token": "<|AUDIO|>",
               "vision_bos_token": "<|vision_bos|>", "vision_eos_token": "<|vision_eos|>",
               "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>"}


def _omni_tokenizer(tokens: dict | None = None):
    """An Omni twin's tokenizer: each medium's placeholder between its start / end markers (`tokens`: the
    family's names for them, Qwen2.5-Omni's by default; Qwen3-Omni renamed them)."""
    from .local_tokenizer import chat_template

    t = tokens or OMNI_TOKENS
    return make_tokenizer(template=chat_template(image=t["vision_bos_token"] + t["image_token"] + t["vision_eos_token"],
                                                 video=t["vision_bos_token"] + t["video_token"] + t["vision_eos_token"],
                                                 audio=t["audio_bos_token"] + t["audio_token"] + t["audio_eos_token"]),
                          extra_special_tokens=t)


def _qwen2_5_omni_config(tok, **over):
    from transformers import Qwen2_5OmniThinkerConfig

    text = _mrope_text(tok)
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text["hidden_size"],
                  window_size=56, fullatt_block_indexes=[1])
    audio = dict(num_mel_bins=AUDIO_MELS, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64,
                 d_model=32, output_dim=text["hidden_size"], max_source_positions=1500, n_window=100)
    cfg = dict(text_config=text, vision_config=vision, audio_config=audio,
               audio_token_index=tok.audio_token_id, image_token_index=tok.image_token_id,
               video_token_index=tok.video_token_id, vision_start_token_id=tok.vision_bos_token_id,
               vision_end_token_id=tok.vision_eos_token_id, audio_start_token_id=tok.audio_bos_token_id,
               audio_end_token_id=tok.audio_eos_token_id,
               user_token_id=tok.convert_tokens_to_ids("user"), tie_word_embeddings=False)
    cfg.update(over)
    return Qwen2_5OmniThinkerConfig(**cfg)


def _qwen2_5_omni_processor(tok):
    from transformers import Qwen2_5OmniProcessor

    return make_processor(Qwen2_5OmniProcessor, image_processor=_qwen_image_processor(), video_processor=_qwen_video_processor(),
                                feature_extractor=_whisper_features(), tokenizer=tok, chat_template=tok.chat_template)


# --- LLaVA 1.5 / LLaVA-NeXT: CLIP ViT + 2-layer MLP projector + a Llama decoder.

CLIP_IMAGE = 56  # 4x4 patches of 14 px (+ CLS): 16 image tokens
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _clip_vision(**over):
    cfg = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
               image_size=CLIP_IMAGE, patch_size=14, projection_dim=32, model_type="clip_vision_model")
    cfg.update(over)
    return cfg


def _llama_text(tok):
    return dict(_text_common(tok), model_type="llama")


def _llava_tokenizer():
    from .local_tokenizer import chat_template

    return make_tokenizer(template=chat_template(image="<image>\n"), extra_special_tokens={"image_token": "<image>"})


def _llava_config(tok, **over):
    from transformers import LlavaConfig

    cfg = dict(vision_config=_clip_vision(), text_config=_llama_text(tok),
               image_token_index=tok.convert_tokens_to_ids("<image>"), image_seq_length=(CLIP_IMAGE // 14) ** 2,
               projector_hidden_act="gelu", vision_feature_layer=-2, vision_feature_select_strategy="default",
               tie_word_embeddings=False)
    cfg.update(over)
    return LlavaConfig(**cfg)


def _clip_image_processor():
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    return CLIPImageProcessorPil(size={"shortest_edge": CLIP_IMAGE}, crop_size={"height": CLIP_IMAGE, "width": CLIP_IMAGE},
                                 image_mean=CLIP_MEAN, image_std=CLIP_STD)


def _llava_processor(tok):
    from transformers import LlavaProcessor

    return LlavaProcessor(image_processor=_clip_image_processor(), tokenizer=tok, patch_size=14,
                          vision_feature_select_strategy="default", num_additional_image_tokens=1,
                          image_token="<image>", chat_template=tok.chat_template)


LLAVA_NEXT_PINPOINTS = [[CLIP_IMAGE, 2 * CLIP_IMAGE], [2 * CLIP_IMAGE, CLIP_IMAGE], [2 * CLIP_IMAGE, 2 * CLIP_IMAGE]]


def _llava_next_config(tok, **over):
    from transformers import LlavaNextConfig

    cfg = dict(vision_config=_clip_vision(), text_config=_llama_text(tok),
               image_token_index=tok.convert_tokens_to_ids("<image>"), image_grid_pinpoints=LLAVA_NEXT_PINPOINTS,
               image_seq_length=(CLIP_IMAGE // 14) ** 2, projector_hidden_act="gelu", vision_feature_layer=-2,
               vision_feature_select_strategy="default", tie_word_embeddings=False)
    cfg.update(over)
    return LlavaNextConfig(**cfg)


def _llava_next_processor(tok):
    from transformers import LlavaNextProcessor
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    ip = LlavaNextImageProcessorPil(size={"shortest_edge": CLIP_IMAGE},
                                    crop_size={"height": CLIP_IMAGE, "width": CLIP_IMAGE},
                                    image_grid_pinpoints=LLAVA_NEXT_PINPOINTS, image_mean=CLIP_MEAN, image_std=CLIP_STD)
    return LlavaNextProcessor(image_processor=ip, tokenizer=tok, patch_size=14, vision_feature_select_strategy="default",
                              num_additional_image_tokens=1, image_token="<image>", chat_template=tok.chat_template)


# --- LLaVA-OneVision: SigLIP + MLP projector + Qwen2, "anyres" multi-view images.

SIGLIP_IMAGE = 28  # 2x2 patches of 14 px per view; a base view + up to 4 crops: at most 5 views
ONEVISION_PINPOINTS = [[SIGLIP_IMAGE, 2 * SIGLIP_IMAGE], [2 * SIGLIP_IMAGE, SIGLIP_IMAGE],
                       [2 * SIGLIP_IMAGE, 2 * SIGLIP_IMAGE]]


def _onevision_tokenizer():
    from .local_tokenizer import chat_template

    return make_tokenizer(template=chat_template(image="<image>\n", video="<video>\n"),
                          extra_special_tokens={"image_token": "<image>", "video_token": "<video>"})


def _onevision_config(tok, **over):
    from transformers import LlavaOnevisionConfig

    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": SIGLIP_IMAGE, "patch_size": 14, "model_type": "siglip_vision_model",
              "vision_use_head": False}
    cfg = {"vision_config": vision, "text_config": {**_text_common(tok), "model_type": "qwen2"},
           "image_token_index": tok.convert_tokens_to_ids("<image>"),
           "video_token_index": tok.convert_tokens_to_ids("<video>"), "image_grid_pinpoints": ONEVISION_PINPOINTS,
           "projector_hidden_act": "gelu", "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
           "vision_aspect_ratio": "anyres_max_9", "tie_word_embeddings": False}
    cfg.update(over)
    return LlavaOnevisionConfig(**cfg)


def _onevision_processor(tok):
    from transformers import LlavaOnevisionProcessor
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )

    from .video_frames import FramesVideoProcessor

    ip = LlavaOnevisionImageProcessorPil(size={"height": SIGLIP_IMAGE, "width": SIGLIP_IMAGE},
                                         image_grid_pinpoints=ONEVISION_PINPOINTS, image_mean=(0.5,) * 3,
                                         image_std=(0.5,) * 3, do_pad=True)
    # The family is trained on images only here; the processor class insists on a video processor,
    # so it gets the frames processor the Qwen twins use (never called for image records).
    return make_processor(LlavaOnevisionProcessor, image_processor=ip, tokenizer=tok,
                          video_processor=FramesVideoProcessor(), num_image_tokens=(SIGLIP_IMAGE // 14) ** 2,
                          vision_feature_select_strategy="full", chat_template=tok.chat_template)


TINY: dict[str, TinySpec] = {}


def register_tiny(spec: TinySpec) -> TinySpec:
    TINY[spec.name] = spec
    return spec


register_tiny(TinySpec("tiny/qwen2", "qwen2", _qwen2_config, lambda tok: tok))
register_tiny(TinySpec("tiny/qwen2-vl", "qwen2_vl", _qwen2_vl_config, _qwen2_vl_processor))
register_tiny(TinySpec("tiny/qwen2.5-vl", "qwen2_5_vl", _qwen2_5_vl_config, _qwen2_5_vl_processor))
register_tiny(TinySpec("tiny/qwen3-vl", "qwen3_vl", _qwen3_vl_config, _qwen3_vl_processor))
register_tiny(TinySpec("tiny/qwen2-audio", "qwen2_audio", _qwen2_audio_config, _qwen2_audio_processor))
register_tiny(TinySpec("tiny/qwen2.5-omni", "qwen2_5_omni", _qwen2_5_omni_config, _qwen2_5_omni_processor,
                       make_tokenizer=_omni_tokenizer))
register_tiny(TinySpec("tiny/llava", "llava", _llava_config, _llava_processor, make_tokenizer=_llava_tokenizer))
register_tiny(TinySpec("tiny/llava-next", "llava_next", _llava_next_config, _llava_next_processor,
                       make_tokenizer=_llava_tokenizer))
register_tiny(TinySpec("tiny/llava-onevision", "llava_onevision", _onevision_config, _onevision_processor,
                       make_tokenizer=_onevision_tokenizer))


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
    tok = spec.make_tokenizer()
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
        model = model_from_config(cls, config, **kw)
        spec = tiny_spec(name)
        if spec.post_build is not None:
            spec.post_build(model)
    return model, processor


# The family modules (models/family/*.py) register their own twins when the registry loads: load it, so TINY
# is complete whichever of the two modules is imported first.
from . import families as _families  # noqa: E402,F401
