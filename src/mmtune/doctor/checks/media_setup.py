"""Media arithmetic checks: the processor's image geometry against the model's, and the pixel caps.

The processor decides how many media tokens it writes for an image (patch size, merge size, CLS tokens,
crop size, tiling grid); the model decides how many features its encoder returns. When the two come from
different files (a processor saved from another checkpoint, an edited preprocessor_config.json, a
vision tower swapped for SigLIP) the counts differ and the first step stops with "Image features and
image tokens do not match". Sources per check: docs/doctor.md.
"""

from __future__ import annotations

from ..context import NotAvailable
from ..findings import error, warning
from ..registry import check
from .generation import NEEDS_OWN_TOKENIZER

# CLS-like tokens a vision tower returns before its patch features (LLaVA processors add these to the
# patch count, then subtract one with vision_feature_select_strategy=default, as the model drops one).
_EXTRA_TOKENS = {"clip_vision_model": 1, "siglip_vision_model": 0}


def _geometry_pairs(proc, hf):
    """(processor key, its value, model config key, its value) for each number both sides hold."""
    vc = getattr(hf, "vision_config", None)
    thinker = getattr(hf, "thinker_config", None)
    if vc is None and thinker is not None:  # Qwen2.5-Omni nests the encoders in the thinker
        vc, hf = getattr(thinker, "vision_config", None), thinker
    if vc is None:
        return
    # LLaVA-style processors hold the arithmetic on the processor itself.
    yield "processor.patch_size", getattr(proc, "patch_size", None), "vision_config.patch_size", getattr(vc, "patch_size", None)
    yield ("processor.vision_feature_select_strategy", getattr(proc, "vision_feature_select_strategy", None),
           "vision_feature_select_strategy", getattr(hf, "vision_feature_select_strategy", None))
    extra = _EXTRA_TOKENS.get(getattr(vc, "model_type", None))
    if getattr(proc, "vision_feature_select_strategy", None) is not None:
        yield ("processor.num_additional_image_tokens", getattr(proc, "num_additional_image_tokens", None),
               f"vision tower {getattr(vc, 'model_type', '?')} (CLS tokens)", extra)
    # Qwen-VL-style image / video processors: patch, spatial merge and temporal patch.
    for part in ("image_processor", "video_processor"):
        sub = getattr(proc, part, None)
        if sub is None:
            continue
        yield f"{part}.patch_size", getattr(sub, "patch_size", None), "vision_config.patch_size", getattr(vc, "patch_size", None)
        yield (f"{part}.merge_size", getattr(sub, "merge_size", None), "vision_config.spatial_merge_size",
               getattr(vc, "spatial_merge_size", None))
        yield (f"{part}.temporal_patch_size", getattr(sub, "temporal_patch_size", None),
               "vision_config.temporal_patch_size", getattr(vc, "temporal_patch_size", None))
    sub = getattr(proc, "image_processor", None)
    grid = getattr(sub, "image_grid_pinpoints", None) if sub is not None else None
    want = getattr(hf, "image_grid_pinpoints", None)
    if grid is not None and want is not None:  # LLaVA-NeXT / OneVision tiling: lists of [h, w]
        yield "image_processor.image_grid_pinpoints", [list(g) for g in grid], "image_grid_pinpoints", [list(g) for g in want]
    from ...resolve.processor import fixed_crop

    crop = fixed_crop(proc)
    size = getattr(vc, "image_size", None)
    if crop is not None and isinstance(size, int):  # CLIP-style towers: one position table for one size
        yield "image_processor crop (height, width)", tuple(crop), "vision_config.image_size", (size, size)


def _square(value):
    """A square size written as {"height": n, "width": n} (Pixtral's and Mistral 3's image processors keep
    `patch_size` so, as their published preprocessor_config.json does) is the config's plain n."""
    if isinstance(value, dict) or hasattr(value, "height"):
        get = value.get if isinstance(value, dict) else lambda k: getattr(value, k, None)
        h, w = get("height"), get("width")
        if h is not None and h == w:
            return h
    return value


@check("MM057", "the processor's image arithmetic (patch / merge size, CLS tokens, crop, tiling grid) is "
       "the model config's",
       needs=("cfg", "resolved", "processor_info"))
def processor_geometry(ctx):
    """Each number both the processor and the model config hold must agree: the processor writes as many
    media tokens as its own numbers say, the model fills them with as many features as its config says.
    Any mismatch stops the first step ("Image features and image tokens do not match", or a position
    embedding size error for a crop the tower was not built for): an error."""
    resolved = ctx.need("resolved")
    if not resolved.exact_text_tokens:
        raise NotAvailable(NEEDS_OWN_TOKENIZER)
    hf = ctx.need("model_config")
    if hf is None:
        return
    for pkey, pval, mkey, mval in _geometry_pairs(resolved.need_processor(), hf):
        if pval is None or mval is None or _square(pval) == _square(mval):
            continue
        yield error(f"the processor's {pkey}={pval!r} but the model's {mkey}={mval!r}: the processor writes a different "
                    "number of media tokens than the model's encoder returns features, so the first step stops "
                    "(\"Image features and image tokens do not match\")", where=f"model.name ({pkey})",
                    fix="use the processor files (preprocessor_config.json / processor_config.json) of the same "
                        f"checkpoint as the model, or set {pkey} to {mval!r} there")


@check("MM059", "model.min_pixels (or the processor's default) is not above model.max_pixels: the pixel cap "
       "holds", needs=("cfg", "resolved"),
       fast=True)
def pixel_caps_ordered(ctx):
    """Qwen-VL's smart_resize shrinks an image above max_pixels and grows one below min_pixels, in that
    order: with min above max, every image smaller than min_pixels is grown to min_pixels, past the cap
    the memory plan and the media-token counts assume. The processor's own default minimum (3136 for
    Qwen2-VL) counts too, so a very low model.max_pixels alone can do it. A warning: it trains, with more
    media tokens (and memory) than the run was sized for."""
    cfg, caps = ctx.need("cfg"), ctx.need("resolved").media  # the caps the processor applies (resolve read them back)
    lo, hi = caps.min_pixels, caps.max_pixels
    if lo is None or hi is None or lo <= hi:
        return
    who = "model.min_pixels" if cfg.model.min_pixels is not None else "the processor's default min_pixels"
    yield warning(f"{who}={lo} is above model.max_pixels={hi}: images smaller than {lo} pixels are enlarged to {lo} "
                  "pixels, past the max_pixels cap the memory plan and media-token counts assume",
                  where="model.min_pixels" if cfg.model.min_pixels is not None else "model.max_pixels",
                  fix=f"model.min_pixels={hi} (at most model.max_pixels), or a larger model.max_pixels")


@check("MM067", "model.max_pixels / min_pixels act on the model's processor (a fixed-size CLIP / SigLIP "
       "processor ignores them)",
       needs=("cfg", "resolved"), fast=True)
def pixel_caps_take_effect(ctx):
    """model.max_pixels is the memory knob of pixel-budget processors (Qwen-VL's smart_resize). CLIP /
    SigLIP-style processors (LLaVA, LLaVA-NeXT's tiles, OneVision) resize every image to a fixed size or
    grid and have no pixel budget: the setting is accepted and does nothing, so the images cost what the
    processor's own size gives, not what the config says (the same silent no-op as transformers#41955). A
    warning naming the size the processor really uses."""
    cfg, resolved = ctx.need("cfg"), ctx.need("resolved")
    if resolved.processor is None:  # no processor here (not downloaded): nothing to compare
        return
    asked = [k for k in ("max_pixels", "min_pixels") if getattr(cfg.model, k) is not None]
    if not asked or resolved.media.max_pixels is not None or resolved.media.min_pixels is not None:
        return
    crop = resolved.media.fixed_crop
    size = f"resizes every image to {crop[1]}x{crop[0]}" if crop else "has no pixel budget"
    keys = ", ".join(f"model.{k}" for k in asked)
    yield warning(f"{keys} has no effect on this model: its processor ({type(resolved.processor).__name__}) {size}, so "
                  "the media tokens per image (and memory) are the processor's, not the config's", where=f"model.{asked[0]}",
                  fix=f"remove {keys} (for fewer image tokens pick a model with a pixel budget, e.g. Qwen2-VL)")


@check("MM082", "audio clips fit the audio encoder's window (Whisper-style encoders hear 30 s)",
       needs=("cfg", "resolved"), fast=True)
def audio_window(ctx):
    """Qwen2-Audio's and Qwen2.5-Omni's audio encoders (and composed Whisper towers) take a fixed window: the
    feature extractor pads or cuts every clip to `n_samples` (30 s at 16 kHz). mmtune refuses clips longer
    than `model.audio_max_seconds`; raised above the window, clips between the two pass and are cut to
    their first 30 s without a word, so the answer is trained against audio the model never hears.
    The cap alone is a warning (fast: `mmtune train` runs it); clips in the data past the window are an
    error naming how many and the longest. Sources: docs/doctor.md (public bug reports)."""
    from ...resolve.processor import audio_window_seconds

    cfg, resolved = ctx.need("cfg"), ctx.need("resolved")
    try:
        proc = resolved.need_processor()
    except Exception:  # noqa: BLE001 - no processor here: the checks that need one say why
        return
    window = audio_window_seconds(proc)
    cap = cfg.model.audio_max_seconds
    if window is None or cap <= window + 1e-9:
        return
    scan = None
    if not ctx.fast and ctx.has("scan"):
        scan = ctx.need("scan")
    over = [s for s in scan.splits if s.audio_over_window] if scan is not None else []
    fix = (f"model.audio_max_seconds={window:g}   (clips over it are then refused with a count; or cut long clips "
           f"into <= {window:g} s pieces)")
    if over:
        n = sum(s.audio_over_window for s in over)
        longest = max((s.audio_longest for s in over), key=lambda t: t[0])
        yield error(f"{n} audio clip(s) last longer than the audio encoder's {window:g} s window (longest "
                    f"{longest[0]:.1f} s, {longest[1]}); model.audio_max_seconds={cap:g} lets them in and the "
                    f"processor keeps only their first {window:g} s: the answers are trained against audio the "
                    "model never hears", where=longest[1], fix=fix)
        return
    yield warning(f"model.audio_max_seconds={cap:g} is above the audio encoder's {window:g} s window "
                  f"({type(getattr(proc, 'feature_extractor', None)).__name__}): a clip between {window:g} and "
                  f"{cap:g} s is not refused but cut to its first {window:g} s", where="model.audio_max_seconds",
                  fix=fix)
