"""Phi-4-multimodal (`microsoft/Phi-4-multimodal-instruct`, transformers-native Phi4MultimodalForCausalLM): a
Phi-4-mini decoder (3.8B, fused `qkv_proj` and `gate_up_proj`), a SigLIP tower on 448 px "dynamic HD" crops
(2x2 average-pooled, a 2-layer MLP projector) and a 24-block Conformer speech encoder (8x time reduction, a
2-layer MLP projector per mode). The towers live inside the decoder's embedding
(`model.embed_tokens_extend.{image,audio}_embed`); the decoder itself is `model.layers` + `model.embed_tokens`.

How media become tokens: the template writes `<|image|>` / `<|audio|>`; the processor repeats each
`num_img_tokens` / `audio_embed_sizes` times (image: a global view of (crop/28)^2 tokens plus its row
separators, one separator, and the HD crops' unpadded tokens with theirs; audio: ceil(mel frames / 8), 12.5 a
second). No text is written around them. The count has no pixel-free arithmetic in transformers: records
are measured by encoding them (data/encode.py falls back to it).

LoRA: Microsoft ships the model's vision and speech skills as two LoRA adapters (`vision-lora/`, r=256 and
`speech-lora/`, r=320, in the hub repo) over the decoder's qkv_proj / o_proj / gate_up_proj / down_proj, loaded
with `model.load_adapter(...)`; the base weights alone are the frozen language model. mmtune's LoRA targets the
same four linears of the decoder (the default q/k/v/gate/up names do not exist in this decoder), as a new
adapter on the base weights: it does not load or continue the shipped ones (docs/families.md).

Image pixels: transformers' image processor imports torchvision; without it the twin (and a saved folder,
models/processor_loading.py) uses models/phi4mm_images.py, the same algorithm on torch alone.

Batches: the model picks the audio projector per *batch* ("vision" mode when the batch holds any image), so an
image record next to an audio record changes the audio's projection; the twin's records hold one medium.
Packing is off (not verified on packed rows).
"""

from __future__ import annotations

from ..families import Family, register
from ..tiny import TinySpec, register_tiny

CROP = 56  # tiny twin: crops of 4 x 4 patches of 14 px, pooled to 2 x 2 tokens; at most 4 HD crops
MELS = 32  # the real extractor has 80 mel bins; the count only sizes the encoder's first conv
TOKENS = {"image_token": "<|image|>", "audio_token": "<|audio|>"}
LORA_TARGETS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")

FAMILY = register(Family(
    name="phi4_multimodal",
    model_types=("phi4_multimodal",),
    model_class="Phi4MultimodalForCausalLM",
    processor_class="Phi4MultimodalProcessor",
    modalities=("text", "audio", "image"),  # audio first: the contract tests' medium (the twin's images run too)
    components={
        # whole module names (peft's modules_to_save takes modules): the image MLP, the speech and vision-speech MLPs
        "projector": tuple(f"model.embed_tokens_extend.{m}." for m in (
            "image_embed.img_projection_up", "image_embed.img_projection_down",
            "audio_embed.up_proj_for_speech", "audio_embed.down_proj_for_speech",
            "audio_embed.up_proj_for_vision_speech", "audio_embed.down_proj_for_vision_speech")),
        "audio": ("model.embed_tokens_extend.audio_embed.",),
        "vision": ("model.embed_tokens_extend.image_embed.",),
        "decoder": ("model.layers.", "model.embed_tokens.", "model.norm."),
        "lm_head": ("lm_head.",),
    },
    tiny="tiny/phi4-multimodal",
    unmasked_right_padding=True,
    hub_pattern=r"phi-4-multimodal|phi4_multimodal|phi4mm",
    lora_targets=LORA_TARGETS,
    media_keys={"image": "image_pixel_values", "audio": "audio_input_features"},
    audio_frames_mask=("audio_input_features", "audio_attention_mask"),
    rebuild_processor="mmtune.models.family.phi4_multimodal:processor_from_folder",
))


def _tokenizer():
    from ..local_tokenizer import chat_template, make_tokenizer

    return make_tokenizer(template=chat_template(image=TOKENS["image_token"], audio=TOKENS["audio_token"]),
                          extra_special_tokens=TOKENS)


def _config(tok, **over):
    from transformers import Phi4MultimodalConfig

    from ..tiny import _text_common

    # the real model: 3072 wide, 24 heads of 128, 3/4 of each head rotated
    text = _text_common(tok, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75})
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": CROP, "crop_size": CROP, "patch_size": 14, "image_token_id": tok.image_token_id}
    audio = {"hidden_size": 32, "intermediate_size": 64, "num_blocks": 2, "num_attention_heads": 2, "input_size": MELS,
             "ext_pw_out_channel": 32, "depthwise_separable_out_channel": 32, "nemo_conv_channels": 32,
             "audio_token_id": tok.audio_token_id}
    cfg = {**text, "vision_config": vision, "audio_config": audio}
    cfg.update(over)
    return Phi4MultimodalConfig(**cfg)


def _parts(tok, image: dict | None = None, audio: dict | None = None):
    from transformers import Phi4MultimodalProcessor
    from transformers.models.phi4_multimodal.feature_extraction_phi4_multimodal import (
        Phi4MultimodalFeatureExtractor,
    )

    from ..phi4mm_images import Phi4MMImageProcessorTorch

    ip = Phi4MMImageProcessorTorch(**(image or {}))
    fe = Phi4MultimodalFeatureExtractor(**(audio or {}))
    return Phi4MultimodalProcessor(image_processor=ip, audio_processor=fe, tokenizer=tok, chat_template=tok.chat_template)


def _processor(tok):
    return _parts(tok, image={"size": {"height": CROP, "width": CROP}, "patch_size": 14, "dynamic_hd": 4},
                  audio={"feature_size": MELS})


def processor_from_folder(folder):
    """A saved Phi-4-multimodal processor rebuilt where transformers' own cannot load (no torchvision): its
    tokenizer, its audio feature extractor, and the saved image settings in the torch-only image processor."""
    import json
    from pathlib import Path

    from transformers import AutoTokenizer

    spec = json.loads((Path(folder) / "processor_config.json").read_text())
    keep = ("size", "patch_size", "dynamic_hd", "image_mean", "image_std")
    image = {k: v for k, v in spec.get("image_processor", {}).items() if k in keep}
    audio = {k: v for k, v in spec.get("audio_processor", {}).items()
             if k in ("feature_size", "sampling_rate", "hop_length", "n_fft", "win_length", "preemphasis",
                      "audio_compression_rate", "audio_downsample_rate", "audio_feat_stride")}
    tok = AutoTokenizer.from_pretrained(str(folder))
    template = Path(folder) / "chat_template.jinja"
    if template.is_file():
        tok.chat_template = template.read_text()
    return _parts(tok, image=image, audio=audio)


register_tiny(TinySpec("tiny/phi4-multimodal", "phi4_multimodal", _config, _processor, make_tokenizer=_tokenizer))
