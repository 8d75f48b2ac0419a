"""The run's processor, from one place, and the media caps it applies.

Sources, in order: a tiny twin's local processor; a model folder on disk; the local hub cache; for a
model known only by an embedded public config (plan and doctor before any download), a stand-in: the
family's processor class with a locally made tokenizer, configured with the real model's patch sizes,
pixel caps and audio features, so media token counts are the real model's (text counts approximate).
Training (`for_training=True`) never uses a stand-in: it loads the real processor (downloading it
when the hub is reachable).

Media caps are set on the processor here, once, and read back from it: what the resolved run reports
is what the processor will do (a Qwen image processor keeps its caps in a `SizeDict`, not in
`max_pixels` attributes; reading them back is how a cap that did not take is caught).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError


@dataclass
class ProcessorSource:
    processor: Any
    description: str
    exact_text: bool  # False for the stand-in: its tokenizer is not the model's


def load_run_processor(cfg, family, *, for_training: bool) -> ProcessorSource:
    from ..models.hub_files import cached_snapshot, is_local_name, model_folder
    from ..models.processor_loading import load_processor_from
    from ..models.tiny import is_tiny, tiny_config_and_processor

    name = cfg.model.name
    if family.custom:  # a model brought by import path: its processor as model.processor says (custom.py)
        from ..models.custom import load_custom_processor

        proc, where = load_custom_processor(cfg)
        return ProcessorSource(proc, where, True)
    if is_tiny(name):
        return ProcessorSource(tiny_config_and_processor(name)[1], f"{name} (tiny twin, made locally)", True)
    composed = cfg.model.composed_from
    if is_local_name(name) and composed is not None and not for_training and not Path(name).expanduser().is_dir():
        from ..models.configs import embedded

        spec = embedded(composed.vision)  # the composed model's image processor is its vision tower's
        if spec is not None:
            proc = stand_in_processor(family, dict(spec.get("processor", {})))
            return ProcessorSource(proc, f"stand-in for {name} (not made yet; model.composed_from: {composed.vision} + "
                                   f"{composed.lm}): {family.processor_class or 'tokenizer'} with the vision tower's "
                                   "embedded media facts and a local tokenizer (media token counts exact, text "
                                   "approximate)", False)
    if is_local_name(name):
        folder = model_folder(name, cfg.model.revision, family, weights=for_training)
        return ProcessorSource(load_processor_from(str(folder), family, cfg), f"model folder {folder}", True)
    snap = cached_snapshot(name, cfg.model.revision)
    if snap is not None and _has_processor_files(snap):
        return ProcessorSource(load_processor_from(str(snap), family, cfg), f"{name} (local hub cache)", True)
    if for_training:
        folder = model_folder(name, cfg.model.revision, family)
        return ProcessorSource(load_processor_from(str(folder), family, cfg), f"{name} ({folder})", True)
    from ..models.configs import embedded

    spec = embedded(name)
    if spec is not None:
        proc = stand_in_processor(family, dict(spec.get("processor", {})))
        return ProcessorSource(proc, f"stand-in for {spec['hub_id']}: {family.processor_class or 'tokenizer'} with "
                               "the embedded media facts and a local tokenizer (media token counts exact, text "
                               "approximate; the real processor is used once the model is downloaded)", False)
    raise ModelLoadError(f"the processor of {name} is not on this machine and no embedded config knows it",
                         where="model.name", fix=f"mmtune download {name}   (a few MB of processor files suffice "
                                                 "for doctor and data inspect; weights only for training)")


def _has_processor_files(folder: Path) -> bool:
    return any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json"))


# Processors that size an image by a token budget and square tiles, not a pixel cap (LFM2-VL: smart-resize between
# min/max image tokens, large images cut into tile_size tiles, a thumbnail after them)
TOKEN_BUDGET = ("min_image_tokens", "max_image_tokens", "tile_size", "min_tiles", "max_tiles", "use_thumbnail",
                "encoder_patch_size", "downsample_factor", "max_pixels_tolerance", "do_image_splitting")


def stand_in_processor(family, facts: dict):
    """The family's processor class with the local tokenizer, configured with the real model's media facts."""
    from ..models.tiny import tiny_config_and_processor

    # A text model's stand-in is the local tokenizer whatever its family (a day-0 text family has no twin of its
    # own): the text twin's, as for Llama and Mistral under the qwen2 family
    twin = family.tiny or ("tiny/qwen2" if tuple(family.modalities) == ("text",) else None)
    if not twin:
        from ..models.requirements import check_requirements

        check_requirements(family)  # a family without a twin because its model cannot build here: say why first
        raise ModelLoadError(f"no stand-in processor for family {family.name!r} (it has no tiny twin)",
                             where="model.name", fix="point model.name at a local model folder that has its processor files")
    _, proc = tiny_config_and_processor(twin)
    for part in ("image_processor", "video_processor"):
        sub = getattr(proc, part, None)
        if sub is None:
            continue
        # max_patches: tiles (InternVL); dynamic_hd: the most HD crops (Phi-4-multimodal)
        for key in ("patch_size", "merge_size", "temporal_patch_size", "max_patches", "dynamic_hd", *TOKEN_BUDGET):
            if key in facts and hasattr(sub, key):
                setattr(sub, key, facts[key])
    set_pixel_caps(proc, facts.get("min_pixels"), facts.get("max_pixels"))
    for part in ("image_processor", "video_processor"):
        sub = getattr(proc, part, None)
        if sub is None or _is_pixel_capped(sub):
            continue
        if getattr(sub, "size", None) is not None and "image_size" in facts:
            # Fixed-size towers (CLIP / SigLIP in LLaVA families): the real input size, not the twin's.
            n, kind = facts["image_size"], type(sub.size)  # a dict or transformers' SizeDict
            has_height = (sub.size.get("height") if isinstance(sub.size, dict) else getattr(sub.size, "height", None))
            sub.size = kind(height=n, width=n) if has_height else kind(shortest_edge=n)
            if getattr(sub, "crop_size", None) is not None:
                sub.crop_size = type(sub.crop_size)(height=n, width=n)
        if "image_grid_pinpoints" in facts and hasattr(sub, "image_grid_pinpoints"):
            sub.image_grid_pinpoints = facts["image_grid_pinpoints"]  # multi-view ("anyres") crops
        if "longest_edge" in facts and getattr(sub, "max_image_size", None) is not None:
            # Tiled towers (Idefics3 / SmolVLM): the image's long edge, then square tiles of `tile_edge` px
            sub.size = type(sub.size)(longest_edge=facts["longest_edge"])
            sub.max_image_size = {"longest_edge": facts["tile_edge"]}
        elif "longest_edge" in facts and _size_get(getattr(sub, "size", None), "longest_edge"):
            # Pixtral (Mistral 3): any aspect ratio, the long edge capped, no tiles
            sub.size = type(sub.size)(longest_edge=facts["longest_edge"])
    if "image_seq_length" in facts and hasattr(proc, "image_seq_length"):
        # Rebuilt, not patched: Gemma 3 builds its expanded image string at construction (InternVL reads the
        # attribute per call; a rebuild serves both).
        from ..compat.transformers_internals import make_processor

        parts = {name: getattr(proc, name) for name in proc.get_attributes()}
        proc = make_processor(type(proc), **parts, image_seq_length=facts["image_seq_length"],
                              chat_template=proc.chat_template)
    if "spatial_merge_size" in facts and hasattr(proc, "spatial_merge_size"):
        # Pixtral processors: their own patch_size x spatial_merge_size is the grid an image is rounded up to
        proc.patch_size, proc.spatial_merge_size = facts.get("patch_size", proc.patch_size), facts["spatial_merge_size"]
    if "image_seq_len" in facts and hasattr(proc, "image_seq_len"):  # Idefics3 / SmolVLM: tokens per tile
        proc.image_seq_len = facts["image_seq_len"]
    if "num_image_tokens" in facts and hasattr(proc, "num_image_tokens"):
        proc.num_image_tokens = facts["num_image_tokens"]
    from ..data.media_tokens import audio_extractor

    fe = audio_extractor(proc)
    keys = ("feature_size", "sampling_rate", "hop_length", "chunk_length", "n_fft", "win_length")
    if fe is not None and any(k in facts for k in keys):
        # Rebuilt, not patched: the mel filter bank is computed from feature_size at construction.
        part = "feature_extractor" if getattr(proc, "feature_extractor", None) is fe else "audio_processor"
        setattr(proc, part, type(fe)(**{k: facts.get(k, getattr(fe, k)) for k in keys if hasattr(fe, k)}))
    return proc


# --------------------------------------------------------------------------- pixel caps

_EDGE = {"min_pixels": "shortest_edge", "max_pixels": "longest_edge"}


def _pixel_parts(processor):
    return [(n, getattr(processor, n)) for n in ("image_processor", "video_processor")
            if getattr(processor, n, None) is not None]


def _size_get(size, key: str):
    """`size[key]` of a dict or transformers' SizeDict (None where it has no such key)."""
    return size.get(key) if isinstance(size, dict) else getattr(size, key, None)


def _is_pixel_capped(sub) -> bool:
    """Qwen-style processors resize to a pixel budget; CLIP/SigLIP-style ones crop to a fixed size."""
    size = getattr(sub, "size", None)
    edge = size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)
    return hasattr(sub, "merge_size") and (edge is not None or getattr(sub, "max_pixels", None) is not None)


def _per_clip_budget(sub) -> bool:
    """Qwen3-VL's video processor reads size["longest_edge"] as the pixels of the whole clip (t * h * w, every
    frame sharing it), not of one frame; its `cap_pixels_per_frame` switch (transformers 5.24) caps each
    frame instead. mmtune's CPU stand-in (FramesVideoProcessor) caps per frame, as Qwen2-VL's does."""
    return hasattr(sub, "cap_pixels_per_frame") and hasattr(sub, "max_video_tokens")


def _cap_each_frame(sub, max_pixels: int) -> None:
    """model.max_pixels per frame on a per-clip-budget video processor: each frame capped at max_pixels (the
    processor's per-frame cap, in merged-patch units), and the clip's budget wide enough never to cut below it
    at the most frames the processor takes. Without this the value would be the whole clip's budget: 16
    frames under max_pixels=200704 came out 96x128 each instead of 384x512 (transformers#48062)."""
    factor = int(sub.patch_size) * int(sub.merge_size)
    sub.cap_pixels_per_frame = True
    sub.max_video_tokens = max_pixels / (factor * factor)
    budget = max_pixels * int(getattr(sub, "max_frames", None) or 768)
    size = getattr(sub, "size", None)
    shortest = _size_get(size, "shortest_edge")
    # the capped path floors a frame at 1.05 x shortest_edge: keep that floor under the cap
    floor = min(shortest, int(max_pixels / 1.05)) if shortest else shortest
    if isinstance(size, dict):
        sub.size = dict(size, longest_edge=budget, shortest_edge=floor)
    elif size is not None:
        size.longest_edge, size.shortest_edge = budget, floor


def _frame_cap(sub):
    """The per-frame pixel cap of a per-clip-budget video processor set by _cap_each_frame, else None."""
    if not (_per_clip_budget(sub) and sub.cap_pixels_per_frame):
        return None
    factor = int(sub.patch_size) * int(sub.merge_size)
    return round(sub.max_video_tokens * factor * factor)


def set_pixel_caps(processor, min_pixels: int | None, max_pixels: int | None) -> None:
    """Set min/max pixels on every pixel-budget processor part, whatever holds them (attribute, dict or SizeDict).
    Both are per image / per frame (the config's meaning), also where a video processor budgets per clip."""
    for _, sub in _pixel_parts(processor):
        if not _is_pixel_capped(sub):
            continue
        if max_pixels is not None and _per_clip_budget(sub):
            _cap_each_frame(sub, max_pixels)
            max_pixels_here = None
        else:
            max_pixels_here = max_pixels
        for key, value in (("min_pixels", min_pixels), ("max_pixels", max_pixels_here)):
            if value is None:
                continue
            size = getattr(sub, "size", None)
            if isinstance(size, dict):
                sub.size = dict(size, **{_EDGE[key]: value})
            elif size is not None and hasattr(size, _EDGE[key]):
                setattr(size, _EDGE[key], value)
            if hasattr(sub, key):
                setattr(sub, key, value)


def read_pixel_caps(processor) -> dict[str, tuple[int | None, int | None]]:
    """{part: (min_pixels, max_pixels)} as the processor will apply them; parts with a fixed crop omitted."""
    out = {}
    for name, sub in _pixel_parts(processor):
        if not _is_pixel_capped(sub):
            continue
        size = getattr(sub, "size", None)

        def get(key, sub=sub, size=size):
            v = size.get(_EDGE[key]) if isinstance(size, dict) else getattr(size, _EDGE[key], None)
            return v if v is not None else getattr(sub, key, None)

        cap = _frame_cap(sub)
        out[name] = (get("min_pixels"), cap if cap is not None else get("max_pixels"))
    return out


def fixed_crop(processor) -> tuple[int, int] | None:
    """(height, width) an image is resized/cropped to by CLIP/SigLIP-style processors, else None."""
    sub = getattr(processor, "image_processor", None)
    if sub is None or _is_pixel_capped(sub):
        return None
    crop = getattr(sub, "crop_size", None) or getattr(sub, "size", None)
    h = crop.get("height") if isinstance(crop, dict) else getattr(crop, "height", None)
    w = crop.get("width") if isinstance(crop, dict) else getattr(crop, "width", None)
    return (int(h), int(w)) if h and w else None


def most_tiles(processor) -> int | None:
    """The most tiles a fixed-size processor cuts one image into (its `fixed_crop` is then a tile's size, not the
    image's): Phi-4-multimodal's `dynamic_hd` crops, InternVL's `max_patches` with `crop_to_patches`, LLaVA-NeXT's and
    OneVision's "anyres" `image_grid_pinpoints` (the largest grid's tiles plus the whole image as one more view: an
    image's token count follows its aspect ratio, so it is not "every image resized to one size"); else None."""
    sub = getattr(processor, "image_processor", None)
    if sub is None:
        return None
    grid, crop = getattr(sub, "image_grid_pinpoints", None), fixed_crop(processor)
    if grid and crop:
        return max((int(gh) // crop[0]) * (int(gw) // crop[1]) for gh, gw in grid) + 1
    if getattr(sub, "dynamic_hd", None):
        return int(sub.dynamic_hd)
    if getattr(sub, "crop_to_patches", False) and getattr(sub, "max_patches", None):
        return int(sub.max_patches)
    return None


def token_budget(processor) -> str | None:
    """What a token-budget processor (TOKEN_BUDGET: LFM2-VL) makes of an image, in words; None for the others."""
    sub = getattr(processor, "image_processor", None)
    if sub is None or getattr(sub, "max_image_tokens", None) is None or getattr(sub, "tile_size", None) is None:
        return None
    side = sub.encoder_patch_size * sub.downsample_factor
    out = f"{sub.min_image_tokens}..{sub.max_image_tokens} tokens an image (one per {side}x{side} px)"
    if sub.do_image_splitting and not sub.min_tiles == sub.max_tiles == 1:
        tile = (sub.tile_size // side) ** 2
        out += (f"; larger ones {sub.tile_size}x{sub.tile_size} px tiles, {sub.min_tiles}..{sub.max_tiles} of "
                f"{tile} tokens" + (" + a thumbnail" if sub.use_thumbnail else ""))
    return out


def audio_window_seconds(processor) -> float | None:
    """The longest clip the processor hands the audio encoder whole, in seconds: a Whisper-style feature
    extractor (Qwen2-Audio, Qwen2.5-Omni, composed Whisper towers) pads or cuts every clip to `n_samples`
    (30 s at 16 kHz, the encoder's 1500 positions); the rest of a longer clip never reaches the model.
    None when the processor has no such fixed window."""
    from ..data.media_tokens import audio_extractor

    fe = audio_extractor(processor)
    n, rate = getattr(fe, "n_samples", None), getattr(fe, "sampling_rate", None)
    if not n or not rate:
        return None
    return float(n) / float(rate)
