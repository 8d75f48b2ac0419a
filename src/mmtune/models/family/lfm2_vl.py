"""LFM2-VL (`LiquidAI/LFM2-VL-450M`, `LiquidAI/LFM2-VL-1.6B`, `LiquidAI/LFM2-VL-3B`; Lfm2VlForConditionalGeneration):
a SigLIP2 NaFlex vision tower (16 px patches at each image's own aspect ratio, learned position embeddings
resized per image), a pixel-unshuffle projector (2 x 2 patches -> one token: layer norm + a 2-layer MLP) and the
LFM2 *hybrid* decoder: most layers are short gated convolutions (`conv`: in_proj -> B * x -> a depthwise causal
conv1d of 3 taps -> C * . -> out_proj), the rest grouped-query attention (q/k layer norms, RoPE); every layer has a
SwiGLU MLP (`feed_forward.w1 / w3 / w2`).

How media become tokens (transformers' Lfm2VlProcessor): an image is smart-resized so each side is a multiple of
32 px and its pixels lie between `min_image_tokens` and `max_image_tokens` tokens (64..256 published), one token
per 32 x 32 px; an image over `max_image_tokens` x `max_pixels_tolerance` is tiled instead: 512 px tiles on the
closest-aspect grid of 2..10 tiles (256 tokens each), `<|img_row_r_col_c|>` before each, then a thumbnail
(`<|img_thumbnail|>`, the smart-resized view) when `use_thumbnail`; the whole is wrapped in `<|image_start|>` /
`<|image_end|>`. So the count depends on the image's size only, and the expansion writes special tokens around
the image tokens (`expansion_adds_text`: a record's length is a real encode). The image processor needs
torchvision in transformers; mmtune's twin and a saved folder use the same algorithm on torch alone
(models/lfm2vl_images.py).

Kernels: the conv layers ask transformers for Dao's causal-conv1d (CUDA) and otherwise take its torch path (logged
once as "much slower"): one depthwise `F.conv1d` of 3 taps per conv layer, the B / C gating outside it either way --
not a recurrence in a Python loop like Qwen3.5's gated delta rule fallback, and no public measurement of the gap was
found, so no `linear_attention` decision and no doctor note. The planner traces the torch path.

Packing is off: a conv layer's 3-tap window reads the two previous positions of the row, so in a packed row the
first two tokens of record 2 read record 1's last two. transformers hands the conv no record boundaries (the torch
path takes none; position_ids reach only the attention layers), and the collator's 2-D mask is absent in a packed
row, so nothing zeroes them.

Padding: the collator pads on the right. The conv is causal (left-padded by kernel-1 zeros inside F.conv1d), so a
real token never reads a later pad, and the attention layers are causal too: exact without the mask
(tests/train/test_padding_mask.py), so the mask is left out under SDPA. With the mask (left padding, generation)
the conv input of pads is zeroed (apply_mask_to_padding_states), so a row's first real tokens read zeros as at the
start of a row.

LoRA default targets: every Linear of the decoder -- the attention q/k/v and `out_proj` (the attention output and
the conv block's output share the name), the conv block's `in_proj` (B, C and x, 3 x hidden) and the SwiGLU MLPs
(`w1`, `w3`, `w2`): Liquid's own LFM2 LoRA default (leap-finetune configs/peft_configs.py
LFM2_LORA_DEFAULT_CONFIG: GLU w1/w2/w3 + MHA q/k/v/out_proj + conv in_proj/out_proj). Its VLM config also
adapts the vision tower's fc1/fc2 and the projector; here LoRA stays in the decoder as for every family, and the
projector or tower train in full with adapter.train_components. The conv1d weights are not Linear; they train with
adapter.method=full.
"""

from __future__ import annotations

from ..families import Family, register
from ..tiny import TinySpec, register_tiny

COMPONENTS = {
    "projector": ("model.multi_modal_projector.",),
    "vision": ("model.vision_tower.",),
    "decoder": ("model.language_model.",),
    "lm_head": ("lm_head.",),
}

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3")

UNPACKABLE = ("its conv layers' 3-tap causal convolution reads the two previous positions of the row, and "
              "transformers gives it no record boundaries (position_ids reach only the attention layers), so a packed "
              "record's first two tokens would read the previous record's last two")

FAMILY = register(Family(
    name="lfm2_vl",
    model_types=("lfm2_vl",),
    model_class="Lfm2VlForConditionalGeneration",
    processor_class="Lfm2VlProcessor",
    modalities=("text", "image"),
    components=COMPONENTS,
    tiny="tiny/lfm2-vl",
    unmasked_right_padding=True,
    hub_pattern=r"lfm2-vl|lfm2\.5-vl",
    expansion_adds_text=True,  # <|image_start|>, <|img_row_r_col_c|>, <|img_thumbnail|>, <|image_end|>
    lora_targets=LORA_TARGETS,
    unpackable_reason=UNPACKABLE,
    rebuild_processor="mmtune.models.family.lfm2_vl:processor_from_folder",
))

TOKENS = {"image_token": "<image>", "image_start_token": "<|image_start|>", "image_end_token": "<|image_end|>",
          "image_thumbnail_token": "<|img_thumbnail|>"}
# every grid position up to the published max_tiles (10 x 1 .. 1 x 10): one token each in the stand-in's text too
ROW_COL = [f"<|img_row_{r}_col_{c}|>" for r in range(1, 11) for c in range(1, 11)]
# twin geometry: 16 px patches, 2 x 2 unshuffle -> one token per 32 px; one-tile images 2..16 tokens (64..128 px
# a side), larger ones tiled into 64 px tiles (4 tokens each) on 2..4 tiles plus the thumbnail
TWIN_IMAGES = dict(min_image_tokens=2, max_image_tokens=16, tile_size=64, min_tiles=2, max_tiles=4, use_thumbnail=True)


def _tokenizer():
    from ..local_tokenizer import chat_template, make_tokenizer

    extra = {**TOKENS, **{f"row_col_{i}": t for i, t in enumerate(ROW_COL)}}
    return make_tokenizer(template=chat_template(image="<image>"), extra_special_tokens=extra)


def _config(tok, **over):
    from transformers import Lfm2VlConfig

    from ..tiny import _text_common

    # 4 layers: conv, conv, attention, conv (the published schedule's start: conv, conv, full_attention, ...);
    # layer_types: a test's all-attention twin (the same decoder without the conv layers)
    layers = over.pop("layer_types", ["conv", "conv", "full_attention", "conv"])
    text = _text_common(tok, head_dim=16, model_type="lfm2", layer_types=layers, num_hidden_layers=4,
                        block_auto_adjust_ff_dim=False, conv_L_cache=3, norm_eps=1e-5)
    text.pop("head_dim")  # LFM2 derives it: hidden / heads = 16
    vision = {"model_type": "siglip2_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2, "patch_size": 16, "num_patches": 64, "vision_use_head": False}
    cfg = {"text_config": text, "vision_config": vision, "projector_hidden_size": 64, "downsample_factor": 2,
           "image_token_id": tok.convert_tokens_to_ids("<image>"), "tie_word_embeddings": False}
    cfg.update(over)
    return Lfm2VlConfig(**cfg)


def _parts(tok, image: dict | None = None):
    from transformers import Lfm2VlProcessor

    from ..lfm2vl_images import Lfm2VlImageProcessorTorch

    return Lfm2VlProcessor(image_processor=Lfm2VlImageProcessorTorch(**(image or {})), tokenizer=tok,
                           chat_template=tok.chat_template)


def _processor(tok):
    return _parts(tok, TWIN_IMAGES)


def processor_from_folder(folder):
    """A saved LFM2-VL processor rebuilt from its parts (transformers' image processor imports torchvision): its
    tokenizer, its chat template and the saved image settings in the torch-only image processor."""
    import json
    from pathlib import Path

    from transformers import AutoTokenizer

    from ..lfm2vl_images import SETTINGS

    # the image settings: a separate preprocessor_config.json (the hub's layout) or nested in processor_config.json
    # (what transformers 5 saves)
    separate = Path(folder) / "preprocessor_config.json"
    spec = json.loads((separate if separate.is_file() else Path(folder) / "processor_config.json").read_text())
    image = {k: v for k, v in spec.get("image_processor", spec).items() if k in SETTINGS}
    tok = AutoTokenizer.from_pretrained(str(folder))
    template = Path(folder) / "chat_template.jinja"
    if template.is_file():
        tok.chat_template = template.read_text()
    return _parts(tok, image)


register_tiny(TinySpec("tiny/lfm2-vl", "lfm2_vl", _config, _processor, make_tokenizer=_tokenizer))
