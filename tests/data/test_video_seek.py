"""Seek-based video decoding takes exactly the frames a full decode takes, and falls back to the full
decode whenever the stream does not behave like a constant-rate one (truncated, wrong header)."""
import av
import numpy as np
import pytest

from mmtune.data import media


def _write(path, n, fps, gop=None, size=(64, 48)):
    """Frame i is a flat grey of its own level, so a wrong frame cannot pass for the right one. The
    index (moov) goes first ("faststart", as streamed files have it): a file cut short then keeps a
    header that promises every frame."""
    with av.open(str(path), "w", options={"movflags": "faststart"}) as out:
        vs = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=fps)
        vs.width, vs.height = size
        vs.pix_fmt = "yuv420p"
        if gop:
            vs.codec_context.gop_size = gop
        for i in range(n):
            arr = np.full((size[1], size[0], 3), (37 * i) % 256, dtype=np.uint8)
            for packet in vs.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                out.mux(packet)
        for packet in vs.encode(None):
            out.mux(packet)
    return path


def _full_decode(path, n_frames, fps=None, monkeypatch=None):
    monkeypatch.setattr(media, "SEEK_MIN_SPACING", 10**9)  # never seek: every frame decoded
    clip = media.load_video({"type": "video", "path": str(path)}, "", n_frames=n_frames, fps=fps)
    monkeypatch.undo()
    return clip


@pytest.mark.parametrize("n,rate,gop,n_frames,fps", [
    (300, 30, None, 8, None),   # x264's default keyframe interval
    (300, 30, 12, 8, None),     # short GOPs: real seeks
    (301, 25, 30, 6, None),
    (240, 24, 24, 8, 2.0),      # sampled by time (2 frames a second)
])
def test_seek_takes_the_frames_a_full_decode_takes(tmp_path, monkeypatch, n, rate, gop, n_frames, fps):
    path = _write(tmp_path / "v.mp4", n, rate, gop)
    full = _full_decode(path, n_frames, fps, monkeypatch)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert media._header_is_consistent(container, stream, stream.frames, float(stream.average_rate))
        seeked = media._seek_frames(container, stream, full.indices, float(stream.average_rate), None)
    assert seeked is not None, "a constant-rate H.264 file must take the seek path"
    assert sorted(seeked) == full.indices
    for i, frame in zip(full.indices, full.frames):
        assert np.array_equal(np.asarray(seeked[i]), np.asarray(frame))
    clip = media.load_video({"type": "video", "path": str(path)}, "", n_frames=n_frames, fps=fps)
    assert clip.indices == full.indices and clip.source_frames == full.source_frames == n
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(clip.frames, full.frames))


def test_truncated_file_falls_back_to_counting_what_decodes(tmp_path, monkeypatch):
    path = _write(tmp_path / "v.mp4", 300, 30, 12)
    data = path.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with av.open(str(cut)) as container:
        stream = container.streams.video[0]
        assert stream.frames == 300  # the header still promises every frame
        assert media._seek_frames(container, stream, media.sample_indices(300, 8), 30.0, None) is None
    full = _full_decode(cut, 8, None, monkeypatch)
    clip = media.load_video({"type": "video", "path": str(cut)}, "", n_frames=8)
    assert 0 < clip.source_frames == full.source_frames < 300
    assert clip.indices == full.indices
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(clip.frames, full.frames))


def test_decode_count_rule():
    # Keyframes every 30 frames, 8 targets 225 apart: each from its own keyframe.
    keys = list(range(0, 1800, 30))
    picked = media.sample_indices(1800, 8)
    assert media._frames_to_decode(keys, picked) == sum(t - (t // 30) * 30 + 1 for t in picked)
    # One keyframe every 250 and 32 targets: nearly every frame would be decoded -> not worth seeking.
    dense = media.sample_indices(1800, 32)
    assert media._frames_to_decode(list(range(0, 1800, 250)), dense) > 0.75 * (dense[-1] + 1)
