"""Video decode time per clip: seeking to the sampled frames vs decoding every frame.

    python benchmarks/video_decode.py [--seconds 60] [--repeats 5] [--json]

Makes H.264 clips here (640x480, 30 fps, random-ish content so the codec cannot cheat) with a 1 s
keyframe interval (phones, most cameras) and x264's default 250, then loads 8 and 32 frames per clip
through `mmtune.data.media.load_video` both ways: with seeking (the default) and with seeking turned
off (every frame decoded, only the sampled ones converted). Median and range over interleaved
repeats; the frames taken are checked equal.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

# What the results file holds beside the provenance (tests/test_benchmark_results.py).
RESULT_KEYS = ("repeats", "rows")


def make_clip(path: Path, seconds: int, gop: int | None) -> Path:
    import av

    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=30)
        vs.width, vs.height, vs.pix_fmt = 640, 480, "yuv420p"
        vs.options = {"preset": "ultrafast"}
        if gop:
            vs.codec_context.gop_size = gop
        for i in range(seconds * 30):
            frame = np.roll(base, 4 * i, axis=1)  # a panning picture: real motion between frames
            for packet in vs.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                out.mux(packet)
        for packet in vs.encode(None):
            out.mux(packet)
    return path


def time_load(path: Path, n_frames: int, seek: bool):
    from mmtune.data import media

    saved = media.SEEK_MIN_SPACING
    media.SEEK_MIN_SPACING = saved if seek else 10**9
    try:
        t = time.perf_counter()
        clip = media.load_video({"type": "video", "path": str(path)}, "", n_frames=n_frames)
        return time.perf_counter() - t, clip
    finally:
        media.SEEK_MIN_SPACING = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from _provenance import dumps, provenance

    started = provenance()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for gop, label in [(30, "keyframe every 1 s"), (None, "x264 default (250)")]:
            clip = make_clip(Path(d) / f"clip_{gop}.mp4", args.seconds, gop)
            for n_frames in (8, 32):
                seek_t, full_t = [], []
                for _ in range(args.repeats):  # interleaved: load drift hits both alike
                    ts, a = time_load(clip, n_frames, True)
                    tf, b = time_load(clip, n_frames, False)
                    seek_t.append(ts)
                    full_t.append(tf)
                    assert a.indices == b.indices
                    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a.frames, b.frames))
                row = {"clip": f"{args.seconds} s 640x480 30 fps, {label}", "frames": n_frames,
                       "seek_s": round(statistics.median(seek_t), 4), "full_s": round(statistics.median(full_t), 4),
                       "seek_range_s": [round(min(seek_t), 4), round(max(seek_t), 4)],
                       "full_range_s": [round(min(full_t), 4), round(max(full_t), 4)]}
                row["speedup"] = round(row["full_s"] / row["seek_s"], 2)
                rows.append(row)
                if not args.json:
                    print(f"{row['clip']:<50} {n_frames:>3} frames: seek {row['seek_s']:.3f} s, "
                          f"every frame {row['full_s']:.3f} s -> {row['speedup']}x")
    if args.json:
        print(dumps({"repeats": args.repeats, "rows": rows}, started))


if __name__ == "__main__":
    main()
