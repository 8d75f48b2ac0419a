"""How many tokens a media item becomes, from the processor's own facts: the placeholder's expanded
token id per media kind, and Qwen2-Audio / Whisper-style audio token counts. Used by the encoder's
length arithmetic (`Encoder.measure`) and the doctor's processor checks."""

from __future__ import annotations

from .records import MEDIA_TYPES


def media_token_ids(processor) -> dict[str, int]:
    """{media kind: the token id its placeholder expands to}: the processor's own id, else the
    placeholder's id in the tokenizer; a placeholder the tokenizer does not know is left out."""
    tok = getattr(processor, "tokenizer", processor)
    out = {}
    for k in MEDIA_TYPES:
        # `<kind>_token_ids` (transformers' processor API) where it names the expanded token: Gemma 3 writes
        # `<start_of_image>` but expands it into `<image_soft_token>`s.
        tid = (getattr(processor, f"{k}_token_ids", None) or [None])[0] or getattr(processor, f"{k}_token_id", None)
        token = getattr(processor, f"{k}_token", None)
        if tid is None and token:
            tid = tok.convert_tokens_to_ids(token)
        if tid is not None and tid != tok.unk_token_id:
            out[k] = int(tid)
    return out


def audio_extractor(processor):
    """The processor's audio feature extractor, whatever attribute holds it: `feature_extractor` (Qwen2-Audio,
    Qwen2.5-Omni, Whisper towers) or `audio_processor` (Phi-4-multimodal), as transformers' own processors
    look it up; None for a processor without audio."""
    return getattr(processor, "feature_extractor", None) or getattr(processor, "audio_processor", None)


def whisper_audio_tokens(samples: int, feature_extractor) -> int:
    """Qwen2-Audio's audio tokens for a clip of `samples`: mel frames (hop_length) -> conv stride 2 ->
    pool 2, as its processor expands `<|AUDIO|>` from the feature attention mask."""
    hop = int(getattr(feature_extractor, "hop_length", 160) or 160)
    window = getattr(feature_extractor, "n_samples", None)  # the extractor cuts longer clips to it (30 s)
    if window is None:  # not a Whisper-style extractor (Phi-4-multimodal's): this arithmetic does not apply
        from ..compat import CompatError

        raise CompatError(f"{type(feature_extractor).__name__} has no pixel-free audio token count here",
                          fix="nothing to do: mmtune encodes such records in full")
    frames = min(samples, window) // hop
    after_conv = (frames - 1) // 2 + 1
    return max(1, (after_conv - 2) // 2 + 1)


def with_frames_mask(out: dict, family) -> dict:
    """`out` with the frame mask of a lone audio clip where the family's processor writes none for one clip
    (`Family.audio_frames_mask`): every frame real, so the collator's zero padding marks a shorter clip's padding."""
    fm = family.audio_frames_mask if family is not None else None
    if fm and fm[0] in out and fm[1] not in out:
        import torch

        out[fm[1]] = torch.ones(out[fm[0]].shape[:2], dtype=torch.bool)
    return out
