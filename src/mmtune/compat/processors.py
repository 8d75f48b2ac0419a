"""transformers processors: the per-item media token count without processing pixels.

`ProcessorMixin._get_num_multimodal_tokens(image_sizes=, video_sizes=, audio_lengths=)` is how
serving engines (vLLM) size placeholders; it is private API, so it is wrapped here. Checked on
transformers 5.23 for Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen2.5-Omni, LLaVA, LLaVA-NeXT and
LLaVA-OneVision processors. On 5.17 Qwen2-VL/2.5-VL's version fails on video sizes alone (a NameError
inside transformers) and Qwen2.5-Omni has none: there the Qwen arithmetic is asked of the image and
video processors directly (`get_number_of_image_patches`, `get_num(ber)_of_video_patches`), which is
what the 5.23 method does. Where neither works, `CompatError`: the caller encodes the record in full.
Qwen2-Audio's processor has no such method on any version (its count is computed in data/encode.py).
"""

from __future__ import annotations

from . import CompatError


def has_media_token_arithmetic(processor) -> bool:
    return callable(getattr(processor, "_get_num_multimodal_tokens", None)) or _qwen_parts(processor)


def _qwen_parts(processor) -> bool:
    ip = getattr(processor, "image_processor", None)
    return ip is not None and hasattr(ip, "get_number_of_image_patches") and hasattr(ip, "merge_size")


def num_media_tokens(processor, *, image_sizes=None, video_sizes=None, audio_lengths=None) -> dict[str, list[int]]:
    """{"image": [...], "video": [...], "audio": [...]} tokens per item, from the processor's arithmetic.
    Audio is answered only by processors whose method counts it (Qwen2.5-Omni on 5.23)."""
    fn = getattr(processor, "_get_num_multimodal_tokens", None)
    kwargs = {}
    if image_sizes:
        kwargs["image_sizes"] = [list(s) for s in image_sizes]
    if video_sizes:
        kwargs["video_sizes"] = [list(s) for s in video_sizes]
    if audio_lengths:
        kwargs["audio_lengths"] = list(audio_lengths)
    if fn is not None:
        try:
            data = fn(**kwargs)
        except (NameError, AttributeError, KeyError):  # a version's own bug (5.17 Qwen2-VL video sizes)
            data = None
        if data is not None:
            get = (lambda k: getattr(data, k, None)) if not isinstance(data, dict) else data.get
            out = {"image": list(get("num_image_tokens") or []), "video": list(get("num_video_tokens") or []),
                   "audio": list(get("num_audio_tokens") or [])}
            if not audio_lengths or out["audio"]:
                return out
    if _qwen_parts(processor) and not audio_lengths:
        return _qwen_arithmetic(processor, image_sizes or [], video_sizes or [])
    import transformers

    raise CompatError(f"{type(processor).__name__} cannot count its media tokens without pixels in transformers "
                      f"{transformers.__version__}", fix="nothing to do: mmtune encodes such records in full")


def _qwen_arithmetic(processor, image_sizes, video_sizes) -> dict[str, list[int]]:
    ip = processor.image_processor
    images = [ip.get_number_of_image_patches(h, w, {}) // ip.merge_size ** 2 for h, w in image_sizes]
    if not video_sizes:
        return {"image": images, "video": [], "audio": []}
    vp = getattr(processor, "video_processor", None)
    count = getattr(vp, "get_num_of_video_patches", None) or getattr(vp, "get_number_of_video_patches", None)
    if count is None:
        raise CompatError(f"{type(vp).__name__} cannot count video patches without pixels",
                          fix="nothing to do: mmtune encodes such records in full")
    return {"image": images, "video": [count(t, h, w, {}) // vp.merge_size ** 2 for t, h, w in video_sizes], "audio": []}


def resized_image_size(processor, height: int, width: int) -> tuple[int, int] | None:
    """(height, width) of the image a Qwen-VL-style processor feeds the model: its module's `smart_resize` with the
    processor's own factor and pixel caps (model.max_pixels / min_pixels land there). Checked against the processor's
    own patch count, so a processor that sizes otherwise answers None rather than a guess."""
    import sys

    ip = getattr(processor, "image_processor", None)
    if not _qwen_parts(processor) or not getattr(ip, "patch_size", None):
        return None
    fn = getattr(sys.modules.get(type(ip).__module__), "smart_resize", None)
    size = getattr(ip, "size", None)
    get = (lambda k: size.get(k)) if isinstance(size, dict) else (lambda k: getattr(size, k, None))
    lo = get("shortest_edge") or getattr(ip, "min_pixels", None)
    hi = get("longest_edge") or getattr(ip, "max_pixels", None)
    if fn is None or not lo or not hi:
        return None
    try:
        h, w = fn(height, width, factor=ip.patch_size * ip.merge_size, min_pixels=lo, max_pixels=hi)
        patches = ip.get_number_of_image_patches(height, width, {})
    except (ValueError, TypeError):
        return None
    return (int(h), int(w)) if (h // ip.patch_size) * (w // ip.patch_size) == patches else None
