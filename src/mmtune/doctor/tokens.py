"""Each record's token length with its media tokens, by the processor's own arithmetic.

No pixels are processed: an image's token count comes from its header size through the image
processor's `get_number_of_image_patches` (smart_resize with the processor's pixel caps) divided by
the merge size squared, a video's from `get_num_of_video_patches`, text from the tokenizer on the
chat-template rendering where each media item is one placeholder token that the processor expands.
Images are first capped to `model.max_pixels` as the data pipeline does (data/media.py cap_pixels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .media_probe import audio_seconds, image_size, video_shape


@dataclass
class RecordLength:
    total: int  # tokens of the whole conversation, media expanded
    through_last_media: int  # tokens up to and including the last media item (0: no media)
    media_tokens: int
    n_placeholders: int  # media placeholder tokens after the chat template (must equal the media items)


def whisper_audio_tokens(seconds: float, max_seconds: float) -> int:
    """Qwen2-Audio arithmetic: 100 mel frames/s -> conv stride 2 -> pool 2 (~25 tokens/s), capped."""
    frames = int(min(seconds, max_seconds) * 100)
    after_conv = (frames - 1) // 2 + 1
    return max(1, (after_conv - 2) // 2 + 1)


class TokenCounter:
    """Uses the data pipeline's Encoder for the rendering (system prompt, template, media caps on the
    processor), so the text counted is the text training tokenizes."""

    def __init__(self, processor, family, cfg):
        from ..data.encode import Encoder

        self.encoder = Encoder(processor, family, cfg)
        self.processor = processor
        self.tok = self.encoder.tokenizer
        self.cfg = cfg
        self.img_kwargs = {k: v for k, v in (("max_pixels", cfg.model.max_pixels),
                                             ("min_pixels", cfg.model.min_pixels)) if v}
        self.placeholder_ids = {k: v for k, v in self.encoder.media_token_id.items()
                                if k in self.encoder.modalities}

    def supports(self, kind: str) -> bool:
        return kind in self.placeholder_ids

    def media_tokens(self, part: dict) -> int:
        kind = part["type"]
        if kind == "image":
            h, w = image_size(part)
            cap = self.cfg.model.max_pixels
            if cap and h * w > cap:  # the data pipeline downsizes first, aspect kept
                s = math.sqrt(cap / (h * w))
                h, w = max(1, int(h * s)), max(1, int(w * s))
            ip = self.processor.image_processor
            if not hasattr(ip, "get_number_of_image_patches"):
                # LLaVA-family processors (fixed-size and "anyres" multi-view): the processor's own count
                # for an image of this size, the same arithmetic its __call__ expands placeholders with.
                n = self.processor._get_num_multimodal_tokens(image_sizes=[(h, w)])
                return int(n["num_image_tokens"][0])
            return ip.get_number_of_image_patches(h, w, dict(self.img_kwargs)) // ip.merge_size ** 2
        if kind == "video":
            n, h, w = video_shape(part, self.cfg.model.video_frames, self.cfg.model.video_fps)
            vp = self.processor.video_processor
            return vp.get_num_of_video_patches(n, h, w, dict(self.img_kwargs)) // vp.merge_size ** 2
        if kind == "audio":
            return whisper_audio_tokens(audio_seconds(part), self.cfg.model.audio_max_seconds)
        raise ValueError(f"unknown media type {kind!r}")

    def render(self, record) -> str:
        return self.encoder.rendered(record)

    def lengths(self, texts: list[str], media_counts: list[list[int]]) -> list[RecordLength]:
        """Batched: one tokenizer call for many rendered records. media_counts[i]: tokens per item, in order."""
        ids_batch = self.tok(texts, add_special_tokens=False)["input_ids"]
        ph = set(self.placeholder_ids.values())
        out = []
        for ids, counts in zip(ids_batch, media_counts):
            positions = [i for i, t in enumerate(ids) if t in ph]
            extra = sum(counts) - len(counts)
            total = len(ids) + extra
            through = positions[-1] + 1 + extra if positions else 0
            out.append(RecordLength(total=total, through_last_media=through, media_tokens=sum(counts),
                                    n_placeholders=len(positions)))
        return out
