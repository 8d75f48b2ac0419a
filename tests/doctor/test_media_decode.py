"""MM018 beyond the header: media that open but do not decode to the end (a truncated JPEG / PNG, a
video cut short) are found by decoding them as training does, on all records or a stated sample."""

from __future__ import annotations

import json

import numpy as np
import pytest


def _noise(h, w, seed):
    return np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)


def _truncated(path):
    b = path.read_bytes()
    path.write_bytes(b[: len(b) // 2])  # the header (size) survives, the pixel data does not
    return path


def _mp4(path, n_frames=20):
    """Header first (faststart), so a file cut short still opens and reports its frame count."""
    import av

    with av.open(str(path), "w", options={"movflags": "faststart"}) as out:
        vs = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=10)
        vs.width, vs.height, vs.pix_fmt = 64, 48, "yuv420p"
        for i in range(n_frames):
            for p in vs.encode(av.VideoFrame.from_ndarray(_noise(48, 64, i), format="rgb24")):
                out.mux(p)
        for p in vs.encode(None):
            out.mux(p)
    return path


@pytest.fixture
def media(tmp_path):
    from PIL import Image

    Image.fromarray(_noise(48, 64, 0)).save(tmp_path / "ok.jpg", quality=90)
    Image.fromarray(_noise(48, 64, 1)).save(tmp_path / "cut.jpg", quality=90)
    Image.fromarray(_noise(48, 64, 2)).save(tmp_path / "cut.png")
    _truncated(tmp_path / "cut.jpg")
    _truncated(tmp_path / "cut.png")
    _mp4(tmp_path / "ok.mp4")
    b = _mp4(tmp_path / "cut.mp4").read_bytes()
    (tmp_path / "cut.mp4").write_bytes(b[: int(len(b) * 0.3)])
    return tmp_path


def _write(tmp_path, items, name="train.jsonl"):
    with open(tmp_path / name, "w") as f:
        for kind, file in items:
            tag = "<image>" if kind == "image" else "<video>"
            f.write(json.dumps({"messages": [{"role": "user", "content": tag + "How many?"},
                                             {"role": "assistant", "content": "3"}], f"{kind}s": [file]}) + "\n")
    return str(tmp_path / name)


def _tree(train, **data):
    return {"model": {"name": "tiny/qwen2-vl", "video_frames": 4},
            "data": {"train": train, "format": "messages", **data}}


def test_header_passes_but_full_decode_fails(media):
    """The premise: the header probe measures these files, only a full decode finds them."""
    from mmtune.data import media_probe

    assert media_probe.image_size({"type": "image", "path": str(media / "cut.jpg")}) == (48, 64)  # (height, width)
    assert media_probe.image_size({"type": "image", "path": str(media / "cut.png")}) == (48, 64)  # (height, width)
    assert media_probe.video_shape({"type": "video", "path": str(media / "cut.mp4")}, 4, None)[0] == 4


def test_truncated_images_and_cut_video_are_corrupt(doctor, media):
    path = _write(media, [("image", "ok.jpg"), ("image", "cut.jpg"), ("image", "cut.png"), ("video", "ok.mp4"),
                          ("video", "cut.mp4")])
    rep = doctor(_tree(path), "MM018")
    scan = rep.tables["data"].splits[0]
    assert scan.bad == {"corrupt media": 2, "video too short": 1}
    assert (scan.ok, scan.decoded, scan.media_records) == (2, 5, 5)
    errs = sorted(rep.errors, key=lambda f: f.message)
    assert [f.code for f in errs] == ["MM018", "MM018"]
    corrupt = next(f for f in errs if "corrupt media" in f.message)
    assert "2 of 5 records" in corrupt.message and "cut.jpg" in corrupt.message
    assert corrupt.where.startswith(f"{path}:2")
    assert "replace it" in corrupt.fix and "damaged or cut short" in corrupt.message
    short = next(f for f in errs if "video too short" in f.message)
    assert short.where.startswith(f"{path}:5") and "model.video_frames=" in short.fix
    # the skip policy: training skips and counts them, so a warning
    rep = doctor(_tree(path, on_bad_record="skip"), "MM018")
    assert rep.errors == [] and rep.codes("warning") == {"MM018"}


def test_clean_media_are_silent(doctor, media):
    path = _write(media, [("image", "ok.jpg"), ("video", "ok.mp4")] * 2)
    rep = doctor(_tree(path), "MM018")
    assert rep.findings == []
    scan = rep.tables["data"].splits[0]
    assert (scan.ok, scan.decoded, scan.n_bad) == (4, 4, 0)


def test_large_splits_decode_a_stated_sample(doctor, media, monkeypatch):
    from mmtune.doctor import datascan

    monkeypatch.setattr(datascan, "DECODE_SAMPLE", 4)
    path = _write(media, [("image", "cut.jpg")] * 10)
    rep = doctor(_tree(path), "MM018")
    scan = rep.tables["data"].splits[0]
    assert (scan.decoded, scan.media_records, scan.bad["corrupt media"], scan.ok) == (4, 10, 4, 6)
    note = next(f for f in rep.findings if f.severity == "info")
    assert "random sample of 4 of 10" in note.message and "4 failed" in note.message and "--full" in note.fix
    # --full decodes every record
    rep = doctor(_tree(path), "MM018", full=True)
    scan = rep.tables["data"].splits[0]
    assert (scan.decoded, scan.bad["corrupt media"], scan.ok) == (10, 10, 0)
    assert all(f.severity == "error" for f in rep.findings)
    # a clean sample states its confidence
    path = _write(media, [("image", "ok.jpg")] * 10, "clean.jsonl")
    rep = doctor(_tree(path), "MM018")
    assert rep.errors == [] and rep.codes("warning") == set()
    (note,) = rep.findings
    assert "none failed" in note.message and "95% confidence fewer than 75.0%" in note.message


def test_fps_sampled_short_videos_count_the_frames_training_samples(doctor, tmp_path):
    """Sampling by time: a 1 s clip at model.video_fps=2 gives 2 frames, a 1.5 s clip 3 (an odd count,
    which Qwen2-VL's processor pads to its temporal_patch_size=2). The scan's token count per record is
    what the training encoder produces from the frames it really samples, not the model.video_frames
    count the run would take without fps."""
    from mmtune.data.encode import Encoder
    from mmtune.doctor.runner import make_context

    _mp4(tmp_path / "one_s.mp4", n_frames=10)  # 10 frames at 10 fps
    _mp4(tmp_path / "one_and_half_s.mp4", n_frames=15)
    path = _write(tmp_path, [("video", "one_s.mp4"), ("video", "one_and_half_s.mp4")])
    tree = _tree(path)
    tree["model"].update(video_fps=2, video_frames=16)
    rep = doctor(tree, "MM014", "MM016", "MM017", "MM018")
    assert rep.errors == [] and rep.codes("warning") == set(), rep.findings
    scan = rep.tables["data"].splits[0]
    assert (scan.ok, scan.n_bad) == (2, 0)
    ctx = make_context(tmp_path / "cfg.yaml")
    resolved = ctx.need("resolved")
    enc = Encoder.for_run(resolved)
    from mmtune.data.one_source import make_resolver
    from mmtune.data.row_records import row_to_records
    from mmtune.data.rows import iter_rows

    base, rows = iter_rows(path, "train")
    resolve = make_resolver(base, None)
    recs = [r for i, (w, row) in enumerate(rows) for r in row_to_records(row, "messages", {}, w, i, resolve)]
    videos = [int(enc.token_counts(r)["video"]) for r in recs]
    # 2 frames -> 1 temporal group, 3 frames -> padded to 4 -> 2 groups: twice the tokens
    assert videos[1] == 2 * videos[0] > 0
    assert list(scan.lengths) == [enc.token_counts(r)["total"] for r in recs]
    # without fps, the 16 frames asked of a 10-frame clip are "video too short", not silently fewer
    tree["model"].pop("video_fps")
    rep = doctor(tree, "MM018")
    assert rep.tables["data"].splits[0].bad == {"video too short": 2}
