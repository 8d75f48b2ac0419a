"""Gemma 3n (`google/gemma-3n-E2B-it`, `google/gemma-3n-E4B-it`; Gemma3nForConditionalGeneration): a MobileNet-V5
vision tower (a timm model, 768 px, 256 soft tokens), a USM-style Conformer audio encoder (188 soft tokens a clip)
and a Gemma 3n decoder (AltUp, LAuReL, per-layer embeddings, KV sharing across the last layers).

Blocked on machines without timm: transformers builds the vision tower as `TimmWrapperModel`, which raises on
construction -- on `meta` too -- when timm is missing, and timm imports torchvision. So the family is known (its
config resolves, the embedded E4B config parses) and every build path stops first with one error naming both
packages and the install line (models/requirements.py, doctor MM127); there is no tiny twin (it would need timm
as well) and therefore no recipe and no contract-test run here. Not faked: a stand-in vision tower would make the
plan and the tests describe a model that is not Gemma 3n. docs/families.md says what is needed to finish it.

Names (read from transformers 5.24's modeling_gemma3n.py, not from a build): `model.vision_tower`,
`model.audio_tower`, `model.embed_vision` / `model.embed_audio` (the multimodal embedders: the projectors),
`model.language_model`; the decoder's attention and MLP linears have Llama's names (the default LoRA targets).
"""

from __future__ import annotations

from ..families import Family, register

FAMILY = register(Family(
    name="gemma3n",
    model_types=("gemma3n",),
    model_class="Gemma3nForConditionalGeneration",
    processor_class="Gemma3nProcessor",
    modalities=("text", "image", "audio"),
    components={
        "projector": ("model.embed_vision.", "model.embed_audio."),
        "audio": ("model.audio_tower.",),
        "vision": ("model.vision_tower.",),
        "decoder": ("model.language_model.",),
        "lm_head": ("lm_head.",),
    },
    hub_pattern=r"gemma-3n|gemma3n",
    expansion_adds_text=True,  # "\n\n<start_of_image>" + 256 soft tokens + "<end_of_image>\n\n", as Gemma 3
    requires=(("timm", "the vision tower is timm's mobilenetv5_300m_enc (transformers' TimmWrapperModel)"),
              ("torchvision", "timm imports it")),
))
