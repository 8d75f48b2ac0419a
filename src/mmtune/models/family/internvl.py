"""InternVL 3 / 3.5, transformers-native (`OpenGVLab/InternVL3-*-hf`, InternVLForConditionalGeneration): an
InternViT encoder at 448 px, pixel shuffle (downsample_ratio 0.5: 1024 patches -> 256 tokens) and a 2-layer
MLP projector, and a Qwen2.5 decoder. (The original `OpenGVLab/InternVL3-*` checkpoints are remote code,
`internvl_chat`: not this family; use the `-hf` conversions.)

How media become tokens: the template writes `<IMG_CONTEXT>`; the processor cuts the image into up to
`max_patches` 448 px tiles (+ a thumbnail) and writes `<img>` + 256 x `<IMG_CONTEXT>` per tile + `</img>`.
The `<img>` / `</img>` tokens are text the count must include: expansion_adds_text.
"""

from __future__ import annotations

from ..families import HF_VLM_COMPONENTS, Family, register
from ..tiny import TinySpec, register_tiny

IMAGE = 56  # tiny twin: tiles of 56 px, 4 x 4 patches of 14 px, pixel-shuffled to 4 tokens per tile
TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
          "video_token": "<video>"}

FAMILY = register(Family(
    name="internvl",
    model_types=("internvl",),
    model_class="InternVLForConditionalGeneration",
    processor_class="InternVLProcessor",
    modalities=("text", "image"),
    components=dict(HF_VLM_COMPONENTS),
    tiny="tiny/internvl",
    unmasked_right_padding=True,
    hub_pattern=r"internvl3",
    expansion_adds_text=True,  # <img> ... </img> around each image's context tokens
))


def _tokenizer():
    from ..local_tokenizer import chat_template, make_tokenizer

    return make_tokenizer(template=chat_template(image="<IMG_CONTEXT>", video="<video>"),
                          extra_special_tokens=TOKENS)


def _config(tok, **over):
    from transformers import InternVLConfig

    from ..tiny import _text_common

    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": [IMAGE, IMAGE], "patch_size": [14, 14]}
    cfg = {"text_config": {**_text_common(tok), "model_type": "qwen2"}, "vision_config": vision,
           "image_token_id": tok.context_image_token_id, "image_seq_length": 4, "downsample_ratio": 0.5,
           "tie_word_embeddings": False}
    cfg.update(over)
    return InternVLConfig(**cfg)


def _processor(tok):
    from transformers import InternVLProcessor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    from ...compat.transformers_internals import make_processor
    from ..video_frames import FramesVideoProcessor

    # tiles of IMAGE px, up to 4 (+ a thumbnail), as the real 448 px tiles up to max_patches=12
    ip = GotOcr2ImageProcessorPil(size={"height": IMAGE, "width": IMAGE}, crop_to_patches=True, min_patches=1,
                                  max_patches=4, image_mean=(0.5,) * 3, image_std=(0.5,) * 3)
    # The class insists on a video processor; image records never call it (the Qwen twins' frames one).
    return make_processor(InternVLProcessor, image_processor=ip, tokenizer=tok, video_processor=FramesVideoProcessor(),
                          image_seq_length=4, chat_template=tok.chat_template)


register_tiny(TinySpec("tiny/internvl", "internvl", _config, _processor, make_tokenizer=_tokenizer))
