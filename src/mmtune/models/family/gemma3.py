"""Gemma 3 (4B / 12B / 27B, `google/gemma-3-*-it`): SigLIP-So400m at 896 px, a pooled linear projector
(4096 patches average-pooled to 256 soft tokens, RMS-normed, one matrix), a Gemma 3 decoder with 5 local
(sliding-window) layers to each global one. The 1B is text-only and is not this family.

How media become tokens: the template writes `<start_of_image>` (the tokenizer's `boi_token`, the
processor's `image_token`); the processor turns each into "\\n\\n<start_of_image>" + 256 x
`<image_soft_token>` + "<end_of_image>\\n\\n", so the token counted as image is the soft token
(`processor.image_token_ids`), not the placeholder. The batch also carries `token_type_ids` (1 on image
tokens): the decoder attends bidirectionally within an image, so it must reach the model in training.

Packing is off: the bidirectional image mask is built per batch row from `token_type_ids`, not from
position_ids, so a packed row was not verified exact (tests/data/test_packing.py covers packable families).
"""

from __future__ import annotations

from ..families import HF_VLM_COMPONENTS, Family, register
from ..tiny import TinySpec, register_tiny

IMAGE = 56  # tiny twin: 4 x 4 patches of 14 px, pooled to 2 x 2 = 4 soft tokens per image
TOKENS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}

FAMILY = register(Family(
    name="gemma3",
    model_types=("gemma3",),
    model_class="Gemma3ForConditionalGeneration",
    processor_class="Gemma3Processor",
    modalities=("text", "image"),
    components=dict(HF_VLM_COMPONENTS),
    tiny="tiny/gemma3",
    unmasked_right_padding=True,
    hub_pattern=r"gemma-3-(?:4b|12b|27b)|gemma3",
    expansion_adds_text=True,  # "\n\n" + <start_of_image> ... <end_of_image> + "\n\n" around the soft tokens
    # Gemma's MLP names its linears like Llama's (gate/up/down_proj), so the default LoRA targets fit.
))


def _tokenizer():
    from ..local_tokenizer import chat_template, make_tokenizer

    return make_tokenizer(template=chat_template(image=TOKENS["boi_token"]), extra_special_tokens=TOKENS)


def _config(tok, **over):
    from transformers import Gemma3Config

    from ..tiny import TEXT, _text_common

    n = TEXT["num_hidden_layers"]
    text = _text_common(tok, head_dim=16, query_pre_attn_scalar=16, sliding_window=16,
                        layer_types=["sliding_attention"] * (n - 1) + ["full_attention"], model_type="gemma3_text")
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": IMAGE, "patch_size": 14, "model_type": "siglip_vision_model", "vision_use_head": False}
    cfg = {"text_config": text, "vision_config": vision, "mm_tokens_per_image": 4,
           "boi_token_index": tok.boi_token_id, "eoi_token_index": tok.eoi_token_id,
           "image_token_index": tok.image_token_id, "tie_word_embeddings": False}
    cfg.update(over)
    return Gemma3Config(**cfg)


def _processor(tok):
    from transformers import Gemma3Processor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    ip = Gemma3ImageProcessorPil(size={"height": IMAGE, "width": IMAGE}, image_mean=(0.5,) * 3, image_std=(0.5,) * 3)
    return Gemma3Processor(image_processor=ip, tokenizer=tok, image_seq_length=4, chat_template=tok.chat_template)


register_tiny(TinySpec("tiny/gemma3", "gemma3", _config, _processor, make_tokenizer=_tokenizer))
