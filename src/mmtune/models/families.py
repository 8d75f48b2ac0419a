"""The family registry: how each model family is loaded and what its parts are called.

A family names its transformers class, its modalities, and its components by module-name prefix:
`vision` (encoder), `audio` (encoder), `projector` (vision/audio -> LM bridge), `decoder` (the
language model) and `lm_head`. Adapters, freezing, the trainable-parameter table, the doctor and the
planner all read components from here, so one table decides what "LoRA on the decoder" means for
every family (failure mode 10: LoRA on the vision tower by accident).

Prefixes are matched against names of the unwrapped model *before* any peft/DDP wrapping; code that
selects parameters does it once, by identity, before wrapping (failure mode 12).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..compat.layouts import QWEN2_5_OMNI_THINKER_5_17, with_layouts

# Linear layers of a Llama/Qwen-style decoder block: the default LoRA targets.
DECODER_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Families with 3-D M-RoPE positions (the model's get_rope_index): a packed row carries them per record.
MROPE_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]  # config.model_type values that map to this family
    model_class: str  # attribute of `transformers` (a custom family: its import path)
    modalities: tuple[str, ...]  # subset of ("text", "image", "video", "audio")
    # component -> module-name prefixes. The first matching component wins, in this order:
    # projector, audio, vision, lm_head, decoder (so a projector nested in the vision tower is a projector).
    components: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tiny: str | None = None  # name of the tiny random twin in models.tiny
    processor_class: str | None = None
    # When the hub checkpoint's config wraps the part we train (Qwen2.5-Omni: the Thinker inside
    # the Omni config), the attribute holding the sub-config.
    sub_config: str | None = None
    # A model brought by import path (models/custom.py): model_class is then `pkg.module:Class` (or empty
    # with a factory), and `factory` the import path of its build function.
    factory: str | None = None

    @property
    def custom(self) -> bool:
        return self.name.startswith("custom:")

    def component_of(self, param_name: str) -> str:
        for comp in ("projector", "audio", "vision", "lm_head", "decoder"):
            for prefix in self.components.get(comp, ()):
                if param_name.startswith(prefix):
                    return comp
        return "other"

    def decoder_lora_regex(self, targets: tuple[str, ...] | list[str] = DECODER_LINEARS) -> str:
        """A peft `target_modules` regex that selects the given linear layers inside the decoder only."""
        prefixes = "|".join(p.rstrip(".").replace(".", r"\.") for p in self.components["decoder"])
        names = "|".join(targets)
        return rf"^(?:{prefixes})\..*\.(?:{names})$"


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    FAMILIES[family.name] = family
    return family


register(Family(
    name="qwen2",
    model_types=("qwen2", "qwen2_5", "qwen3", "llama", "mistral"),
    model_class="AutoModelForCausalLM",
    modalities=("text",),
    components={"decoder": ("model.",), "lm_head": ("lm_head.",)},
    tiny="tiny/qwen2",
))

register(Family(
    name="qwen2_vl",
    model_types=("qwen2_vl",),
    model_class="Qwen2VLForConditionalGeneration",
    processor_class="Qwen2VLProcessor",
    modalities=("text", "image", "video"),
    components={
        "projector": ("model.visual.merger.",),
        "vision": ("model.visual.",),
        "decoder": ("model.language_model.",),
        "lm_head": ("lm_head.",),
    },
    tiny="tiny/qwen2-vl",
))


_QWEN_VL_COMPONENTS = {
    "projector": ("model.visual.merger.", "model.visual.deepstack_merger_list."),
    "vision": ("model.visual.",),
    "decoder": ("model.language_model.",),
    "lm_head": ("lm_head.",),
}

register(Family(
    name="qwen2_5_vl",
    model_types=("qwen2_5_vl",),
    model_class="Qwen2_5_VLForConditionalGeneration",
    processor_class="Qwen2_5_VLProcessor",
    modalities=("text", "image", "video"),
    components=_QWEN_VL_COMPONENTS,
    tiny="tiny/qwen2.5-vl",
))

register(Family(
    name="qwen3_vl",
    model_types=("qwen3_vl",),
    model_class="Qwen3VLForConditionalGeneration",
    processor_class="Qwen3VLProcessor",
    modalities=("text", "image", "video"),
    # DeepStack mergers feed intermediate vision features into early decoder layers: projectors too.
    components=_QWEN_VL_COMPONENTS,
    tiny="tiny/qwen3-vl",
))

register(Family(
    name="qwen2_audio",
    model_types=("qwen2_audio",),
    model_class="Qwen2AudioForConditionalGeneration",
    processor_class="Qwen2AudioProcessor",
    modalities=("text", "audio"),
    components={
        "projector": ("model.multi_modal_projector.",),
        "audio": ("model.audio_tower.",),
        "decoder": ("model.language_model.",),
        "lm_head": ("lm_head.",),
    },
    tiny="tiny/qwen2-audio",
))

register(Family(
    name="qwen2_5_omni",
    model_types=("qwen2_5_omni_thinker", "qwen2_5_omni"),
    model_class="Qwen2_5OmniThinkerForConditionalGeneration",
    processor_class="Qwen2_5OmniProcessor",
    modalities=("text", "image", "video", "audio"),
    components=with_layouts({
        # The audio encoder ends in ln_post + proj (to the LM width): that pair is the audio projector.
        "projector": ("model.visual.merger.", "model.audio_tower.proj.", "model.audio_tower.ln_post."),
        "audio": ("model.audio_tower.",),
        "vision": ("model.visual.",),
        "decoder": ("model.language_model.",),
        "lm_head": ("lm_head.",),
    }, QWEN2_5_OMNI_THINKER_5_17),  # transformers 5.17 names the same parts differently
    tiny="tiny/qwen2.5-omni",
    sub_config="thinker_config",
))

_LLAVA_COMPONENTS = {
    "projector": ("model.multi_modal_projector.", "model.image_newline"),
    "vision": ("model.vision_tower.",),
    "decoder": ("model.language_model.",),
    "lm_head": ("lm_head.",),
}

register(Family(
    name="llava",
    model_types=("llava",),
    model_class="LlavaForConditionalGeneration",
    processor_class="LlavaProcessor",
    modalities=("text", "image"),
    components=_LLAVA_COMPONENTS,
    tiny="tiny/llava",
))

register(Family(
    name="llava_next",
    model_types=("llava_next",),
    model_class="LlavaNextForConditionalGeneration",
    processor_class="LlavaNextProcessor",
    modalities=("text", "image"),
    components=_LLAVA_COMPONENTS,
    tiny="tiny/llava-next",
))


# LLaVA-OneVision: a SigLIP tower, 2-layer MLP projector and a Qwen2 decoder; images are split into
# "anyres" views (a base view plus crops from image_grid_pinpoints), each view's features joined with
# the learned `image_newline`. Same module names as LLaVA, so the same components.
register(Family(
    name="llava_onevision",
    model_types=("llava_onevision",),
    model_class="LlavaOnevisionForConditionalGeneration",
    processor_class="LlavaOnevisionProcessor",
    modalities=("text", "image"),
    components=_LLAVA_COMPONENTS,
    tiny="tiny/llava-onevision",
))


def family_for_model_type(model_type: str) -> Family:
    for fam in FAMILIES.values():
        if model_type in fam.model_types:
            return fam
    from ..errors import ModelLoadError

    known = sorted(t for f in FAMILIES.values() for t in f.model_types)
    raise ModelLoadError(
        f"model_type {model_type!r} is not a family mmtune knows",
        fix=f"use a model of a known type ({', '.join(known)}), or set model.family explicitly",
    )


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        from ..errors import ModelLoadError

        raise ModelLoadError(f"unknown model family {name!r}", where="model.family",
                             fix=f"one of: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]
