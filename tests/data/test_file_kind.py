"""A media file that does not decode is named for what it really is, with that case's fix (data/file_kind.py).

Each file here is a real case of users' datasets: a repository cloned without Git LFS, a download that got a web
page, an iPhone photo, a clip given as an image, a WAV given as a video, a PNG cut short. Before, every one of
them said only the decoder's words ("cannot identify image file") and "replace the file".
"""

from __future__ import annotations

import json

import pytest

from mmtune.data.formats import BadRecord
from mmtune.data.media import load_audio, load_image, load_video
from tests.data.conftest import write_png, write_wav

LFS = (b"version https://git-lfs.github.com/spec/v1\n"
       b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 102400\n")
HTML = b"<!DOCTYPE html>\n<html><head><title>429 Too Many Requests</title></head><body></body></html>\n"
# An iPhone photo's first box: ISO base media `ftyp`, major brand heic, compatible mif1 / heic.
HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 200


def _fails(load, part) -> BadRecord:
    with pytest.raises(BadRecord) as e:
        load(part, "data.jsonl:3")
    err = e.value
    assert err.where == "data.jsonl:3"
    return err


def _text(err: BadRecord) -> str:
    return f"{err.what} | {err.fix}"


def test_a_git_lfs_pointer_says_how_to_fetch_the_real_files(tmp_path):
    (tmp_path / "cat.jpg").write_bytes(LFS)
    err = _fails(load_image, {"type": "image", "path": str(tmp_path / "cat.jpg")})
    assert "Git LFS pointer" in err.what and "git lfs pull" in err.fix, _text(err)
    # The same stub under a clip's and a sound's name.
    (tmp_path / "clip.mp4").write_bytes(LFS)
    (tmp_path / "say.mp3").write_bytes(LFS)
    assert "git lfs pull" in _fails(load_video, {"type": "video", "path": str(tmp_path / "clip.mp4")}).fix
    assert "git lfs pull" in _fails(load_audio, {"type": "audio", "path": str(tmp_path / "say.mp3")}).fix


def test_a_downloaded_web_page_and_an_empty_file_are_named(tmp_path):
    (tmp_path / "a.png").write_bytes(HTML)
    (tmp_path / "b.png").write_bytes(b"")
    err = _fails(load_image, {"type": "image", "path": str(tmp_path / "a.png")})
    assert "HTML page" in err.what and "download it again" in err.fix, _text(err)
    err = _fails(load_image, {"type": "image", "path": str(tmp_path / "b.png")})
    assert "empty file (0 bytes)" in err.what, _text(err)


def test_a_heic_photo_says_to_convert_it(tmp_path):
    (tmp_path / "IMG_0001.HEIC").write_bytes(HEIC)
    err = _fails(load_image, {"type": "image", "path": str(tmp_path / "IMG_0001.HEIC")})
    assert "HEIC" in err.what and "JPEG" in err.fix, _text(err)
    # In-memory bytes (a parquet Image column) are read the same way.
    err = _fails(load_image, {"type": "image", "bytes": HEIC})
    assert "HEIC" in err.what, _text(err)


def test_media_of_another_kind_says_which_part_type_to_give(tmp_path):
    wav = write_wav(tmp_path / "speech.wav", seconds=0.2, sr=16000)
    png = write_png(tmp_path / "cat.png")
    err = _fails(load_image, {"type": "image", "path": str(wav)})
    assert "WAV audio file, given as image" in err.what and '"type": "audio"' in err.fix, _text(err)
    err = _fails(load_video, {"type": "video", "path": str(wav)})
    assert "WAV audio file, given as video" in err.what and '"type": "audio"' in err.fix, _text(err)
    bad = tmp_path / "cat.flac"  # a PNG under a sound's name: opened by PyAV / libsndfile and refused
    bad.write_bytes(png.read_bytes())
    err = _fails(load_audio, {"type": "audio", "path": str(bad)})
    assert "PNG image, given as audio" in err.what and '"type": "image"' in err.fix, _text(err)


def test_a_file_of_its_own_format_cut_short_is_called_damaged(tmp_path):
    png = write_png(tmp_path / "cut.png", size=(256, 256))
    import numpy as np
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 255, (256, 256, 3), dtype=np.uint8)).save(png)
    data = png.read_bytes()
    png.write_bytes(data[: len(data) // 3])
    err = _fails(load_image, {"type": "image", "path": str(png)})
    assert "PNG image but damaged or cut short" in err.what, _text(err)


def test_an_unknown_binary_keeps_the_decoders_words_and_fix(tmp_path):
    (tmp_path / "x.png").write_bytes(bytes(range(1, 256)) * 4)
    err = _fails(load_image, {"type": "image", "path": str(tmp_path / "x.png")})
    assert "cannot be decoded" in err.what and "; the file is" not in err.what
    assert err.fix == "replace the file, or set data.on_bad_record=skip"


def test_the_doctor_says_it_at_the_record(tmp_path):
    """A dataset cloned without Git LFS: its images are pointers. The doctor's MM018 carries the explanation and
    its fix at the record's file:line."""
    from tests.doctor.doctor_helpers import context_for, run_codes

    (tmp_path / "img.png").write_bytes(LFS)
    rec = {"messages": [{"role": "user", "content": [{"type": "image", "path": "img.png"},
                                                     {"type": "text", "text": "What is it?"}]},
                        {"role": "assistant", "content": "a cat"}]}
    data = tmp_path / "d.jsonl"
    data.write_text((json.dumps(rec) + "\n") * 2)
    ctx = context_for(tmp_path, {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": str(data)}})
    found = [f for f in run_codes(ctx, "MM018").findings if f.severity == "error"]
    assert any("Git LFS pointer" in f.message and "git lfs pull" in (f.fix or "") and "d.jsonl:1" in (f.where or "")
               for f in found), found
