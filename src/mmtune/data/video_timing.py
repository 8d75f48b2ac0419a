"""The frames' real sampling rate handed to the processor with a record's videos (data/encode.py's media step)."""

from __future__ import annotations


def video_timing(processor, clips) -> dict:
    """The rate the frames were really sampled at, for the processor's temporal positions: without it,
    Qwen2.5-VL (second_per_grid_ts), Qwen3-VL ("<t seconds>" stamps) and Qwen2.5-Omni assume a default
    rate, wrong for uniform sampling (each clip its own rate) and for model.video_fps at another rate.
    transformers' VideoMetadata: the source's fps, frame count and the indices taken, so that
    `sampled_fps` = frames taken / duration and `timestamps` = index / fps. A frames folder has no rate:
    its clip gets the processor's default as before (the doctor's MM066 names such data)."""
    from transformers.video_utils import VideoMetadata

    if not any(c.source_fps for c in clips):
        return {}
    metadata = []
    for c in clips:
        h, w = (c.frames[0].height, c.frames[0].width) if c.frames else (None, None)
        if c.source_fps:
            metadata.append(VideoMetadata(total_num_frames=c.source_frames, fps=c.source_fps, height=h, width=w,
                                          duration=c.source_frames / c.source_fps, frames_indices=list(c.indices)))
        else:  # what transformers builds for frames given without metadata
            metadata.append(VideoMetadata(total_num_frames=len(c.frames), fps=None, height=h, width=w,
                                          frames_indices=list(range(len(c.frames)))))
    out: dict = {"video_metadata": metadata}
    vp = processor.video_processor
    if getattr(vp, "do_sample_frames", False):
        out["do_sample_frames"] = False  # Qwen3-VL's default would re-sample the frames mmtune sampled
    from ..compat.transformers_internals import video_rate_from_fps_kwarg

    if video_rate_from_fps_kwarg(processor):
        # Qwen2.5-Omni reads one `fps` for all the record's videos (default 2): the first timed clip's rate.
        timed = [m for m in metadata if m.fps]
        out["fps"] = timed[0].sampled_fps
    return out
