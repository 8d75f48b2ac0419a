"""transformers processors: the per-item media token count without processing pixels.

`ProcessorMixin._get_num_multimodal_tokens(image_sizes=, video_sizes=, audio_lengths=)` is how
serving engines (vLLM) size placeholders; it is private API, so it is wrapped here. Checked on
transformers 5.17 and 5.23 for Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen2.5-Omni, LLaVA and LLaVA-NeXT
processors; Qwen2-Audio's processor has no such method (its count is computed in data/encode.py).
"""

from __future__ import annotations

from ..errors import MMTuneError


def has_media_token_arithmetic(processor) -> bool:
    return callable(getattr(processor, "_get_num_multimodal_tokens", None))


def num_media_tokens(processor, *, image_sizes=None, video_sizes=None, audio_lengths=None) -> dict[str, list[int]]:
    """{"image": [...], "video": [...], "audio": [...]} tokens per item, from the processor's arithmetic."""
    fn = getattr(processor, "_get_num_multimodal_tokens", None)
    if fn is None:
        import transformers

        raise MMTuneError(f"{type(processor).__name__} has no _get_num_multimodal_tokens in transformers "
                          f"{transformers.__version__}: mmtune cannot count its media tokens without processing "
                          "pixels", fix="use transformers 5.17-5.23, or report this processor to mmtune")
    kwargs = {}
    if image_sizes:
        kwargs["image_sizes"] = [list(s) for s in image_sizes]
    if video_sizes:
        kwargs["video_sizes"] = [list(s) for s in video_sizes]
    if audio_lengths:
        kwargs["audio_lengths"] = list(audio_lengths)
    data = fn(**kwargs)
    get = (lambda k: getattr(data, k, None)) if not isinstance(data, dict) else data.get
    return {"image": list(get("num_image_tokens") or []), "video": list(get("num_video_tokens") or []),
            "audio": list(get("num_audio_tokens") or [])}
