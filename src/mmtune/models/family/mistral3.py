"""Mistral 3 (Mistral Small 3.1 / 3.2, `mistralai/Mistral-Small-3.1-24B-Instruct-2503`, `...-3.2-24B-Instruct-2506`;
Mistral3ForConditionalGeneration): a Pixtral vision tower (2-D RoPE over the image's own patch grid, 14 px
patches, any aspect ratio up to 1540 px on the long edge), a projector that RMS-norms the features, merges
each 2 x 2 block of patches into one (`patch_merger`, spatial_merge_size 2) and maps them with a 2-layer MLP,
and a Mistral decoder (24B: 40 layers, 5120 wide).

How media become tokens: the template writes `[IMG]`; the processor resizes the image so its long edge is at
most `size.longest_edge` (never up), rounds each side up to a multiple of patch_size x spatial_merge_size (28 px)
and writes, for each row of merged patches, one `[IMG]` per column then `[IMG_BREAK]`, the last row ending in
`[IMG_END]` instead: (cols + 1) x rows tokens. Only the `[IMG]` positions receive image features; the
`[IMG_BREAK]` / `[IMG_END]` tokens are counted as text by the encoder (it counts the image token), while the
processor's arithmetic counts all three, so a record's length is measured by a real encode
(`expansion_adds_text`, as for InternVL's `<img>` / `</img>`), not by that arithmetic.

The processor is transformers' own `PixtralProcessor` with the PIL image processor
(`PixtralImageProcessorPil`), built through `mmtune.compat.pixtral`: in transformers 5.24 the processor's
module imports one sizing helper from the torchvision image processor module, so without torchvision (this
project does not depend on it) the class cannot be imported; compat imports it with the PIL module's identical
helper instead. A re-implementation of the expansion was not written: the real class keeps the real
expansion, the token arithmetic (`_get_num_multimodal_tokens`) and a saved processor_config.json that
`AutoProcessor` loads where torchvision is installed. Without torchvision a saved folder (an export, a hub
download) is rebuilt from its parts (models/processor_loading.py `pixtral_without_torchvision`), since
`AutoProcessor` reaches the placeholder class there.

Packing is off: not verified exact on packed rows (tests/data/test_packing.py covers packable families).

Pixtral-12B (`mistral-community/pixtral-12b`, the transformers port of Mistral's Pixtral) is registered here
too, as family `pixtral`: its config is `model_type: llava` (LlavaForConditionalGeneration, the same module
names as LLaVA) with a `pixtral` vision_config, 16 px patches, no patch merger (spatial_merge_size 1), long
edge 1024, and the same PixtralProcessor. LLaVA's facts do not fit it (CLIP's fixed crop, packing verified
only for CLIP towers, a count without [IMG_BREAK] / [IMG_END]), so `vision_model_types=("pixtral",)` makes the
resolver pick this family for a llava config with a pixtral tower; every other llava config stays `llava`.
"""

from __future__ import annotations

from ..families import HF_VLM_COMPONENTS, Family, register
from ..tiny import TinySpec, register_tiny

EDGE = 112  # tiny twin: long edge <= 112 px -> at most 8 x 8 patches of 14 px, merged 2 x 2 -> 4 x 4 (+ breaks)
TOKENS = {"image_token": "[IMG]", "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]"}

FAMILY = register(Family(
    name="mistral3",
    model_types=("mistral3",),
    model_class="Mistral3ForConditionalGeneration",
    processor_class="PixtralProcessor",
    modalities=("text", "image"),
    # model.multi_modal_projector holds the projector's RMSNorm, patch_merger and the 2-layer MLP
    components=dict(HF_VLM_COMPONENTS),
    tiny="tiny/mistral3",
    unmasked_right_padding=True,
    hub_pattern=r"mistral-small-3\.[12]|mistral3",
    expansion_adds_text=True,  # [IMG_BREAK] after each row of [IMG], [IMG_END] last: text around the image tokens
    # Mistral's decoder names its linears like Llama's, so the default LoRA targets fit.
))

PIXTRAL = register(Family(
    name="pixtral",
    model_types=("llava",),
    vision_model_types=("pixtral",),
    model_class="LlavaForConditionalGeneration",
    processor_class="PixtralProcessor",
    modalities=("text", "image"),
    components=dict(HF_VLM_COMPONENTS),
    tiny="tiny/pixtral",
    unmasked_right_padding=True,
    hub_pattern=r"pixtral",
    expansion_adds_text=True,
))
PIXTRAL_EDGE, PIXTRAL_PATCH = 64, 16  # tiny twin: at most 4 x 4 patches of 16 px, no merge


def _tokenizer():
    from ..local_tokenizer import chat_template, make_tokenizer

    return make_tokenizer(template=chat_template(image=TOKENS["image_token"]), extra_special_tokens=TOKENS)


def _config(tok, **over):
    from transformers import Mistral3Config

    from ..tiny import _text_common

    text = _text_common(tok, head_dim=16, model_type="mistral", sliding_window=None)
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "head_dim": 16, "image_size": EDGE, "patch_size": 14, "model_type": "pixtral"}
    cfg = {"text_config": text, "vision_config": vision, "spatial_merge_size": 2, "vision_feature_layer": -1,
           "multimodal_projector_bias": False, "image_token_index": tok.convert_tokens_to_ids(TOKENS["image_token"]),
           "tie_word_embeddings": False}
    cfg.update(over)
    return Mistral3Config(**cfg)


def _pixtral_config(tok, **over):
    from transformers import LlavaConfig

    from ..tiny import _text_common

    text = _text_common(tok, head_dim=16, model_type="mistral", sliding_window=None)
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "head_dim": 16, "image_size": PIXTRAL_EDGE, "patch_size": PIXTRAL_PATCH, "model_type": "pixtral"}
    cfg = {"text_config": text, "vision_config": vision, "vision_feature_layer": -1,
           "vision_feature_select_strategy": "full", "image_token_index": tok.convert_tokens_to_ids(TOKENS["image_token"]),
           "tie_word_embeddings": False}
    cfg.update(over)
    return LlavaConfig(**cfg)


def _image_processor(**kw):
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    return PixtralImageProcessorPil(**kw)


def _processor(tok):
    from ...compat.pixtral import pixtral_processor_class

    ip = _image_processor(size={"longest_edge": EDGE}, patch_size={"height": 14, "width": 14})
    return pixtral_processor_class()(image_processor=ip, tokenizer=tok, patch_size=14, spatial_merge_size=2,
                                     chat_template=tok.chat_template, **TOKENS)


def _pixtral_processor(tok):
    from ...compat.pixtral import pixtral_processor_class

    ip = _image_processor(size={"longest_edge": PIXTRAL_EDGE}, patch_size={"height": PIXTRAL_PATCH, "width": PIXTRAL_PATCH})
    return pixtral_processor_class()(image_processor=ip, tokenizer=tok, patch_size=PIXTRAL_PATCH, spatial_merge_size=1,
                                     chat_template=tok.chat_template, **TOKENS)


register_tiny(TinySpec("tiny/mistral3", "mistral3", _config, _processor, make_tokenizer=_tokenizer))
register_tiny(TinySpec("tiny/pixtral", "pixtral", _pixtral_config, _pixtral_processor, make_tokenizer=_tokenizer))
