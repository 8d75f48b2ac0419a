"""What one media item may become: the caps the resolved run settles once (resolve/run.py `_media_caps`:
the processor's effective pixel range read back after the config's caps are applied, the frame sampling,
the audio limit) and the encoder applies when it loads and counts media."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MediaCaps:
    """What one media item may become, as the processor and the media loader will apply it."""

    min_pixels: int | None = None  # per image / video frame, after the processor's resize
    max_pixels: int | None = None
    fixed_crop: tuple[int, int] | None = None  # CLIP/SigLIP-style processors: every image -> this size
    video_frames: int = 8
    video_fps: float | None = None
    audio_max_seconds: float = 30.0
    sampling_rate: int = 16000
    # The media loader's own cap on a video frame before the processor sees it: model.max_pixels as asked
    # (None: frames reach the processor at their size, which then applies max_pixels above).
    frame_max_pixels: int | None = None

    @classmethod
    def asked(cls, model_cfg, sampling_rate: int = 16000) -> MediaCaps:
        """The config's caps as written, for an encoder built without a resolved run (the processor's own
        defaults are then not read back: min_pixels / max_pixels are what the config asks, maybe None)."""
        return cls(min_pixels=model_cfg.min_pixels, max_pixels=model_cfg.max_pixels, video_frames=model_cfg.video_frames,
                   video_fps=model_cfg.video_fps, audio_max_seconds=model_cfg.audio_max_seconds,
                   sampling_rate=sampling_rate, frame_max_pixels=model_cfg.max_pixels)
