"""GLM-4.1V (`THUDM/GLM-4.1V-9B-Thinking`, `zai-org/GLM-4.1V-9B-Base`, Glm4vForConditionalGeneration): a
Qwen2-VL-style native-resolution ViT (14 px patches, 2 x 2 merge, 2-frame temporal patches) with a merger
into a GLM-4 decoder with 3-D M-RoPE positions (the model's own get_rope_index).

How media become tokens: the template writes `<|begin_of_image|><|image|><|end_of_image|>`; the processor
repeats `<|image|>` once per merged patch (grid t*h*w / 4), adding no text, so lengths come from the
processor's own arithmetic as for Qwen2-VL. Images only here: GLM's video prompts carry per-frame
timestamps (time-aware) and are not wired to mmtune's CPU frames processor yet.
"""

from __future__ import annotations

from ..families import Family, register
from ..tiny import TinySpec, register_tiny

TOKENS = {"image_token": "<|image|>", "video_token": "<|video|>"}
MARKERS = ("<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>")

FAMILY = register(Family(
    name="glm4v",
    patch_embed_matmul=True,
    model_types=("glm4v",),
    model_class="Glm4vForConditionalGeneration",
    processor_class="Glm4vProcessor",
    modalities=("text", "image"),
    components={
        "projector": ("model.visual.merger.", "model.visual.downsample."),
        "vision": ("model.visual.",),
        "decoder": ("model.language_model.",),
        "lm_head": ("lm_head.",),
    },
    tiny="tiny/glm4v",
    unmasked_right_padding=True,
    hub_pattern=r"glm-4\.1v|glm4v",
    mrope=True,
))


def _tokenizer():
    from ..local_tokenizer import chat_template, make_tokenizer

    extra = {**TOKENS, **{f"marker_{i}": t for i, t in enumerate(MARKERS)}}
    return make_tokenizer(template=chat_template(image="<|begin_of_image|><|image|><|end_of_image|>",
                                                 video="<|begin_of_video|><|video|><|end_of_video|>"),
                          extra_special_tokens=extra)


def _config(tok, **over):
    from transformers import Glm4vConfig

    from ..tiny import _text_common

    # half the head dim rotates (partial_rotary_factor 0.5, as the real model): M-RoPE sections sum to 16 * 0.5 / 2
    text = _text_common(tok, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                           "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.5})
    cfg = tiny_config_around(tok, text)
    cfg.update(over)
    return Glm4vConfig(**cfg)


def tiny_config_around(tok, text: dict) -> dict:
    """A tiny twin's config keys around its `text` config: GLM-4.1V's vision tower at twin size and the special
    tokens' ids (GLM-4.5V's twin shares both: models/family/glm4v_moe.py)."""
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": text["hidden_size"],
              "patch_size": 14, "image_size": 56, "spatial_merge_size": 2, "temporal_patch_size": 2}
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in (
        ("image_token_id", "<|image|>"), ("video_token_id", "<|video|>"), ("image_start_token_id", MARKERS[0]),
        ("image_end_token_id", MARKERS[1]), ("video_start_token_id", MARKERS[2]), ("video_end_token_id", MARKERS[3]))}
    return {"text_config": text, "vision_config": vision, "tie_word_embeddings": False, **ids}


def _processor(tok):
    from transformers import Glm4vProcessor
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    from ...compat.transformers_internals import make_processor
    from ..tiny import VISION_MAX_PIXELS, VISION_MIN_PIXELS
    from ..video_frames import FramesVideoProcessor

    ip = Glm4vImageProcessorPil(size={"shortest_edge": VISION_MIN_PIXELS, "longest_edge": VISION_MAX_PIXELS},
                                patch_size=14, merge_size=2, temporal_patch_size=2)
    return make_processor(Glm4vProcessor, image_processor=ip, tokenizer=tok, video_processor=FramesVideoProcessor(),
                          chat_template=tok.chat_template)


register_tiny(TinySpec("tiny/glm4v", "glm4v", _config, _processor, make_tokenizer=_tokenizer))
