"""The family registry: how each model family is loaded and what its parts are called.

A family names its transformers class, its modalities, and its components by module-name prefix:
`vision` (encoder), `audio` (encoder), `projector` (vision/audio -> LM bridge), `decoder` (the
language model) and `lm_head`. Adapters, freezing, the trainable-parameter table, the doctor and the
planner all read components from here, so one table decides what "LoRA on the decoder" means for
every family (failure mode 10: LoRA on the vision tower by accident).

Prefixes are matched against names of the unwrapped model *before* any peft/DDP wrapping; code that
selects parameters does it once, by identity, before wrapping (failure mode 12).

A `Family` is the one home of a family's facts: the rest of mmtune reads attributes (`packable`, `mrope`,
`time_aware_video`, `liger`, ...) and never tests `family.name`. The families of the first waves are
defined below; newer ones are one module each in `mmtune/models/family/` (the Family, its tiny twin and
its notes together), found by `_discover()` -- docs/internals.md "Adding a model family" lists the steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..compat.layouts import QWEN2_5_OMNI_THINKER_5_17, with_layouts

# Linear layers of a Llama/Qwen-style decoder block: the default LoRA targets. A decoder that fuses them
# (GLM-4's `gate_up_proj`, Phi-3's `qkv_proj` and `gate_up_proj`) has those names instead: without them
# `target_modules=auto` silently left GLM-4.1V's gate/up projection, 2/3 of each MLP, without LoRA.
DECODER_LINEARS = ("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj", "gate_up_proj", "down_proj")
MEDIA_KEYS = {"image": "pixel_values", "video": "pixel_values_videos", "audio": "input_features"}


@dataclass(frozen=True)
class LigerPatch:
    """What Liger-Kernel's patch for a family fuses (apply_liger_kernel_to_<type> in its monkey_patch.py);
    models/fused_kernels.py applies and describes it."""
    rms_norm: bool = True  # decoder RMSNorms (and q_norm / k_norm where the attention has them)
    swiglu: bool = True  # decoder MLPs: LigerSwiGLUMLP
    rope: str = "apply_rotary_pos_emb"  # the modeling-module function Liger's RoPE patch replaces
    vision_norm: str = ""  # "rms_norm" / "layer_norm": the vision blocks' norm1 / norm2
    liger_module: str = "qwen2"  # liger_kernel.transformers.model.<this>: what its patch imports


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
    # Hub ids (lower-cased) matching this regex belong to the family when no config says so (`--smoke` on a
    # name with nothing on disk); the longest match over all families wins ("llava-onevision" over "llava").
    hub_pattern: str | None = None
    # vision_config.model_type values that pick this family over the one model_type alone names: a config of a
    # shared type whose tower changes the family's facts (Pixtral-12B: `llava` with a `pixtral` tower and processor)
    vision_model_types: tuple[str, ...] = ()
    # --- what the data pipeline, planner and doctor need to know
    # Packed rows verified exact against unpacked ones (tests/data/test_packing.py: same loss and gradients on
    # the tiny twin): the attention reads record boundaries from position_ids, media towers see whole items.
    packable: bool = False
    # Why packing is not exact for this family, where the shared reason (decide_packing's) does not fit it
    unpackable_reason: str | None = None
    # Right-padded batches verified exact without their attention_mask (tests/train/test_padding_mask.py: same loss and
    # gradients on the tiny twin): each real token attends only to earlier real tokens, and the positions do not read
    # the mask. The training collator then leaves the mask out under SDPA (resolve: attention.padding_mask), which
    # runs its causal kernel instead of a masked one over a (seq x seq) mask built every forward. Not the Omnis:
    # their get_rope_index reads the mask (other positions without it).
    unmasked_right_padding: bool = False
    # Its vision tower's patch embedding (a Conv3d, kernel == stride, over flattened patches) verified to give the
    # same outputs and gradients as one matmul (tests/models/test_patch_embed.py): run so (models/patch_embed.py).
    patch_embed_matmul: bool = False
    mrope: bool = False  # 3-D M-RoPE positions (the model's get_rope_index): a packed row carries them per record
    # Video positions or prompts depend on the frames' rate in seconds (Qwen2.5-VL / Omni scale the temporal
    # M-RoPE axis by second_per_grid_ts; Qwen3-VL writes "<t seconds>" stamps): doctor MM066 applies.
    time_aware_video: bool = False
    video_timestamps_in_text: bool = False  # the stamps are text: a video's length needs a real encode
    # The processor writes text around each item's media tokens (Gemma 3: "\n\n<boi>...<eoi>\n\n"), whose
    # token count depends on the neighbouring text: a record's length needs a real encode.
    expansion_adds_text: bool = False
    default_fps: float = 24.0  # the rate the processor assumes for a video given without one (VideoMetadata)
    # Audio tokens from the Whisper arithmetic (data.media_tokens.whisper_audio_tokens) instead of the processor's
    # own count (Qwen2-Audio's processor has none that matches its expansion).
    audio_tokens_by_whisper: bool = False
    lora_targets: tuple[str, ...] = DECODER_LINEARS  # adapter.target_modules=auto: these leaves in the decoder
    # (features key, mask key): variable-length audio features whose frame mask the processor writes only for a batch
    # of clips of unequal length (Phi-4-multimodal: none for one clip). The encoder writes it for every record (all
    # frames real), so the collator's zero padding of shorter clips marks their padded frames in a batch.
    audio_frames_mask: tuple[str, str] | None = None
    # media kind -> the batch key of its media tensor (transformers' common names unless the model has its own)
    media_keys: dict[str, str] = field(default_factory=lambda: dict(MEDIA_KEYS))
    # "module:function" (folder) -> processor: a saved processor rebuilt from its parts where transformers' own
    # cannot load on this machine (its image processor imports torchvision: Phi-4-multimodal)
    rebuild_processor: str | None = None
    # (package, why) the model class needs beyond mmtune's dependencies (Gemma 3n's vision tower is a timm model):
    # checked before any build, named with its install line by the error and doctor MM096
    requires: tuple[tuple[str, str], ...] = ()
    liger: LigerPatch | None = None  # Liger-Kernel's patch for this family, None where it has none
    # A hybrid decoder with linear-attention (gated delta net) layers: (module, pip distribution, what it runs) of
    # each fast kernel transformers looks for; without one it runs its slow torch reference (resolve/linear_attention)
    linear_attention: tuple[tuple[str, str, str], ...] = ()
    # Reported fp16 overflow of the vision tower (inf/NaN features, "!!!!" output): (severity, sources) for
    # doctor MM041. Qwen2.5-VL: still reported after the Qwen2-VL fix, in three runtimes (MiMo-VL#8,
    # llama.cpp#17534 NaN in the vision embeddings, ollama#18070 forcing fp32 for this family only): a warning.
    # Qwen2-VL: transformers#33294, fixed for transformers' eager attention by #33312 (#35151): an info.
    # Text-only Qwen2.5 LoRA in fp16 is seed 001's own setup and is not flagged.
    fp16_overflow: tuple[str, str] | None = None
    # The space grounding boxes are written in (doctor MM273 reads the records' boxes against it): "grid1000", x and y
    # scaled to 0-1000 of the image whatever its size (Qwen2-VL, Qwen3-VL: QwenLM/Qwen3-VL#663, #1486, #1987);
    # "resized_pixels", absolute pixels of the image the processor's smart_resize made (Qwen2.5-VL: QwenLM/Qwen3-VL#721,
    # #1161). None: not known for the family, not checked.
    box_coordinates: str | None = None
    # Set by the day-0 path (models/generic.py): facts inferred from the model, not written down, and what
    # was inferred from what: (key, value, reason) each, printed as decisions of the resolved run.
    inferred: bool = False
    inferred_notes: tuple[tuple[str, str, str], ...] = ()

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
    unmasked_right_padding=True,
    hub_pattern=r"qwen|llama|mistral|smollm|tinyllama",
    packable=True,
    liger=LigerPatch(),
))

register(Family(
    name="qwen2_vl",
    patch_embed_matmul=True,
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
    unmasked_right_padding=True,
    hub_pattern=r"qwen2-vl",
    packable=True,
    mrope=True,
    liger=LigerPatch(rope="apply_multimodal_rotary_pos_emb", vision_norm="layer_norm", liger_module="qwen2_vl"),
    fp16_overflow=("info", "transformers#33294; fixed in transformers' eager attention by #33312"),
    box_coordinates="grid1000",
))


_QWEN_VL_COMPONENTS = {
    "projector": ("model.visual.merger.", "model.visual.deepstack_merger_list."),
    "vision": ("model.visual.",),
    "decoder": ("model.language_model.",),
    "lm_head": ("lm_head.",),
}

register(Family(
    name="qwen2_5_vl",
    patch_embed_matmul=True,
    model_types=("qwen2_5_vl",),
    model_class="Qwen2_5_VLForConditionalGeneration",
    processor_class="Qwen2_5_VLProcessor",
    modalities=("text", "image", "video"),
    components=_QWEN_VL_COMPONENTS,
    tiny="tiny/qwen2.5-vl",
    unmasked_right_padding=True,
    hub_pattern=r"qwen2\.5-vl",
    packable=True,
    mrope=True,
    time_aware_video=True,
    liger=LigerPatch(rope="apply_multimodal_rotary_pos_emb", vision_norm="rms_norm", liger_module="qwen2_5_vl"),
    fp16_overflow=("warning", "MiMo-VL#8, llama.cpp#17534, ollama#18070"),
    box_coordinates="resized_pixels",
))

register(Family(
    name="qwen3_vl",
    patch_embed_matmul=True,
    model_types=("qwen3_vl",),
    model_class="Qwen3VLForConditionalGeneration",
    processor_class="Qwen3VLProcessor",
    modalities=("text", "image", "video"),
    # DeepStack mergers feed intermediate vision features into early decoder layers: projectors too.
    components=_QWEN_VL_COMPONENTS,
    tiny="tiny/qwen3-vl",
    unmasked_right_padding=True,
    hub_pattern=r"qwen3-vl",
    packable=True,
    mrope=True,
    time_aware_video=True,
    video_timestamps_in_text=True,
    liger=LigerPatch(swiglu=False, liger_module="qwen3_vl"),
    box_coordinates="grid1000",
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
    unmasked_right_padding=True,
    hub_pattern=r"qwen2-audio",
    audio_tokens_by_whisper=True,
))

register(Family(
    name="qwen2_5_omni",
    patch_embed_matmul=True,
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
    hub_pattern=r"qwen2\.5-omni",
    time_aware_video=True,
    default_fps=2.0,  # the Omni processor's own default rate (the VL processors take VideoMetadata's 24)
))

# transformers 5's common image-text layout (Gemma 3, InternVL, LLaVA): one projector, one tower, one decoder
HF_VLM_COMPONENTS = {
    "projector": ("model.multi_modal_projector.",),
    "vision": ("model.vision_tower.",),
    "decoder": ("model.language_model.",),
    "lm_head": ("lm_head.",),
}
_LLAVA_COMPONENTS = {**HF_VLM_COMPONENTS, "projector": ("model.multi_modal_projector.", "model.image_newline")}

register(Family(
    name="llava",
    model_types=("llava",),
    model_class="LlavaForConditionalGeneration",
    processor_class="LlavaProcessor",
    modalities=("text", "image"),
    components=_LLAVA_COMPONENTS,
    tiny="tiny/llava",
    unmasked_right_padding=True,
    hub_pattern=r"llava",
    packable=True,
    liger=LigerPatch(liger_module="llava"),
))

register(Family(
    name="llava_next",
    model_types=("llava_next",),
    model_class="LlavaNextForConditionalGeneration",
    processor_class="LlavaNextProcessor",
    modalities=("text", "image"),
    components=_LLAVA_COMPONENTS,
    tiny="tiny/llava-next",
    unmasked_right_padding=True,
    hub_pattern=r"llava-v1\.6|llava-1\.6|llava-next|llava_next",
    packable=True,
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
    unmasked_right_padding=True,
    hub_pattern=r"llava-onevision|llava_onevision|llava-ov",
    packable=True,
))


def _discover() -> None:
    """Register the family modules of mmtune/models/family/ (one module per family, imported in name order).
    Each module only defines and registers; heavy imports stay inside its builder functions."""
    import importlib
    import pkgutil

    from . import family as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        importlib.import_module(f"{pkg.__name__}.{info.name}")


def family_for_model_type(model_type: str, vision_type: str | None = None) -> Family:
    """The one resolver from a config's model_type (and its vision_config's model_type, where a family names
    one: `vision_model_types`) to a family (loading, smoke twins, the doctor, the planner, serving)."""
    found = [fam for fam in FAMILIES.values() if model_type in fam.model_types]
    for fam in found:
        if vision_type is not None and vision_type in fam.vision_model_types:
            return fam
    for fam in found:
        if not fam.vision_model_types:
            return fam
    from ..errors import ModelLoadError

    known = sorted(t for f in FAMILIES.values() for t in f.model_types)
    raise ModelLoadError(
        f"model_type {model_type!r} is not a family mmtune knows",
        fix=f"use a model of a known type ({', '.join(known)}), or set model.family explicitly",
    )


def family_for_config(config) -> Family:
    """The family of a transformers config: its model_type in the registry, else (day 0) a family inferred
    from the model's structure where transformers loads it as AutoModelForImageTextToText (models/generic.py) or
    as AutoModelForCausalLM (models/generic_text.py)."""
    from ..errors import ModelLoadError

    try:
        return family_for_model_type(config.model_type, vision_model_type(config))
    except ModelLoadError:
        from .generic import infer_family

        fam = infer_family(config)
        if fam is None:
            raise
        return fam


def vision_model_type(config) -> str | None:
    """The model_type of a config's vision_config (a config object or its dict), None where it has none."""
    vision = config.get("vision_config") if isinstance(config, dict) else getattr(config, "vision_config", None)
    if isinstance(vision, dict):
        return vision.get("model_type")
    return getattr(vision, "model_type", None)


def family_for_hub_name(name: str) -> Family | None:
    """The family whose hub_pattern matches the name longest (a name with no config to read), or None."""
    import re

    low, best, best_len = name.lower(), None, 0
    for fam in FAMILIES.values():
        m = re.search(fam.hub_pattern, low) if fam.hub_pattern else None
        if m and m.end() - m.start() > best_len:
            best, best_len = fam, m.end() - m.start()
    return best


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        from ..errors import ModelLoadError

        raise ModelLoadError(f"unknown model family {name!r}", where="model.family",
                             fix=f"one of: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]


_discover()
