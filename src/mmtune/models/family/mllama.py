"""Llama 3.2 Vision (`meta-llama/Llama-3.2-11B-Vision(-Instruct)`, 90B; MllamaForConditionalGeneration): a
tiled ViT (560 px tiles, up to 4 per image, a local and a global encoder whose intermediate layers are
concatenated) feeding a Llama 3.1 decoder through *cross-attention layers* interleaved with its
self-attention layers (every 5th layer: 8 of 40 in the 11B). Image features never enter the token
sequence: the text holds one `<|image|>` token per image, and a per-token `cross_attention_mask`
(tokens x images x tiles) says which images each token may attend to.

What that means here: the sequence length does not grow with the image (one token), but every
cross-attention layer attends over images x tiles x 1601 patch features; LoRA's default targets
(q/k/v/o/gate/up/down) also match the cross-attention layers' projections (`cross_attn.q_proj`, ...),
which is what PEFT and LLaMA-Factory train. The collator pads `cross_attention_mask` along its token
axis like `attention_mask` and along images/tiles with zeros (a padded tile is attended by no token).

Packing is off: the cross-attention mask is per batch row.
"""

from __future__ import annotations

from ..families import Family, register
from ..tiny import TinySpec, register_tiny

TILE = 28  # tiny twin: 2 x 2 patches of 14 px per tile, up to 4 tiles per image
TOKENS = {"image_token": "<|image|>", "python_token": "<|python_tag|>", "bos_token_marker": "<|begin_of_text|>"}

FAMILY = register(Family(
    name="mllama",
    model_types=("mllama",),
    model_class="MllamaForConditionalGeneration",
    processor_class="MllamaProcessor",
    modalities=("text", "image"),
    components={
        "projector": ("model.multi_modal_projector.",),
        "vision": ("model.vision_model.",),
        "decoder": ("model.language_model.",),
        "lm_head": ("lm_head.",),
    },
    tiny="tiny/mllama",
    unmasked_right_padding=True,
    hub_pattern=r"llama-3\.2-(?:11b|90b)-vision|mllama",
))


def _tokenizer():
    from ..local_tokenizer import chat_template, make_tokenizer

    # Llama 3's template opens with <|begin_of_text|>; without it MllamaProcessor rewrites the text (it moves
    # leading image tokens and prepends the BOS), which the real template never makes it do.
    tok = make_tokenizer(template="<|begin_of_text|>" + chat_template(image="<|image|>"), extra_special_tokens=TOKENS)
    tok.bos_token = "<|begin_of_text|>"
    return tok


def _config(tok, **over):
    from transformers import MllamaConfig

    from ..tiny import _text_common

    text = _text_common(tok, head_dim=16, num_hidden_layers=3, cross_attention_layers=[1],
                        bos_token_id=tok.bos_token_id)
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_global_layers": 1,
              "attention_heads": 2, "image_size": TILE, "patch_size": 14, "max_num_tiles": 4,
              "intermediate_layers_indices": [0], "vision_output_dim": 64}
    cfg = {"text_config": text, "vision_config": vision, "image_token_index": tok.convert_tokens_to_ids("<|image|>")}
    cfg.update(over)
    return MllamaConfig(**cfg)


def _processor(tok):
    from transformers import MllamaProcessor
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    ip = MllamaImageProcessorPil(size={"height": TILE, "width": TILE}, max_image_tiles=4)
    return MllamaProcessor(image_processor=ip, tokenizer=tok, chat_template=tok.chat_template)


def _open_gates(model) -> None:
    """Cross-attention gates at tanh(0.5), not 0: the real checkpoint's are trained open."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("cross_attn_attn_gate", "cross_attn_mlp_gate")):
                p.fill_(0.5)


register_tiny(TinySpec("tiny/mllama", "mllama", _config, _processor, make_tokenizer=_tokenizer, post_build=_open_gates))
