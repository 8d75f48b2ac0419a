"""One processor call per micro-batch (data/encode_batch.py) gives every record the encoding `Encoder.encode`
gives it alone: equal keys, dtypes and values, on every tiny family with image, video, audio, text-only,
two-image and multi-turn records mixed in one micro-batch, and the same collated batch. A bad record
stays its own BadRecord in its slot; the good ones around it are still encoded."""

from __future__ import annotations

import pytest
import torch

from mmtune.config.schema import RunConfig
from mmtune.data.collate import Collator
from mmtune.data.encode import Encoder
from mmtune.data.encode_batch import encode_many
from mmtune.data.formats import BadRecord
from mmtune.data.records import Record

from .conftest import write_mp4, write_png, write_wav

TINY_NAMES = ["tiny/qwen2", "tiny/qwen2-vl", "tiny/qwen2.5-vl", "tiny/qwen3-vl", "tiny/qwen2-audio",
              "tiny/qwen2.5-omni", "tiny/llava", "tiny/llava-next"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("batch")
    write_png(d / "a.png", (200, 30, 30), size=(100, 80))
    write_png(d / "b.png", (30, 200, 30), size=(48, 96))
    write_wav(d / "a.wav", seconds=1.0, sr=16000)
    (d / "frames").mkdir()
    for i in range(4):
        write_png(d / "frames" / f"{i}.png", (50 * i, 0, 0), size=(64, 64))
    write_mp4(d / "v.mp4", n_frames=8, fps=4, size=(64, 64))
    return d


def _encoder(name):
    from mmtune.models.tiny import tiny_config_and_processor

    proc = tiny_config_and_processor(name)[1]
    return Encoder(proc, None, RunConfig.model_validate({"model": {"name": name, "video_frames": 4}}))


def _records(enc, d) -> list[Record]:
    def rec(i, parts, answer="red", turns=()):
        msgs = [m for t in turns for m in t] + [{"role": "user", "content": parts + [{"type": "text", "text": f"What {i}?"}]},
                                               {"role": "assistant", "content": answer}]
        return Record(f"r{i}", f"f:{i}", msgs)

    media = {"image": [{"type": "image", "path": str(d / "a.png")}],
             "image2": [{"type": "image", "path": str(d / "b.png")}, {"type": "image", "path": str(d / "a.png")}],
             "video": [{"type": "video", "path": str(d / "frames")}],
             "video_file": [{"type": "video", "path": str(d / "v.mp4")}],
             "audio": [{"type": "audio", "path": str(d / "a.wav")}]}
    kinds = {"image": "image", "image2": "image", "video": "video", "video_file": "video", "audio": "audio"}
    out = [rec(0, [], "a much longer answer than the others, to pad"),
           rec(1, [], "3", turns=[[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]])]
    for j, (name, parts) in enumerate(media.items()):
        if kinds[name] in enc.modalities:
            out.append(rec(10 + j, parts, "blue"))
    return out


def _same(a: dict, b: dict, where: str) -> None:
    assert set(a) == set(b), (where, sorted(a), sorted(b))
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, (where, k, a[k].shape, b[k].shape)
        assert torch.equal(a[k], b[k]), (where, k)


@pytest.mark.parametrize("name", TINY_NAMES)
def test_batched_equals_per_record(name, files):
    enc = _encoder(name)
    recs = _records(enc, files)
    alone = [enc.encode(r) for r in recs]
    together = encode_many(enc, recs)
    for r, a, t in zip(recs, alone, together):
        _same(a, t, f"{name} {r.id}")
    # in another order and in pairs (a micro-batch's records vary), the same encodings
    for i in range(0, len(recs) - 1, 2):
        for a, t in zip(alone[i:i + 2][::-1], encode_many(enc, recs[i:i + 2][::-1])):
            _same(a, t, f"{name} pair {i}")
    # merged where a mix of timed and untimed videos is not (see below): without the video file, and two of it
    for subset in ([r for r in recs if r.id != "r13"], [r for r in recs if r.id in ("r13", "r10")] * 2):
        for r, t in zip(subset, encode_many(enc, subset)):
            _same(alone[recs.index(r)], t, f"{name} subset {r.id}")
    pad = enc.tokenizer.pad_token_id if enc.tokenizer.pad_token_id is not None else 0
    _same(Collator(pad)(alone), Collator(pad)(together), f"{name} collated")


def test_the_merged_call_is_made_where_it_splits(files):
    """Not a silent fallback: on Qwen2-VL the image, video and text records of one micro-batch go through
    one processor call (the encoder still allows batching afterwards)."""
    enc = _encoder("tiny/qwen2-vl")
    calls = []
    real = enc.processor.__class__.__call__

    class Counting(enc.processor.__class__):
        def __call__(self, *a, **k):
            calls.append(len(k.get("text") or a[0]))
            return real(self, *a, **k)

    enc.processor.__class__ = Counting
    recs = [r for r in _records(enc, files) if r.id != "r13"]  # r13: a timed video file, see below
    encode_many(enc, recs)
    assert calls == [len(recs)] and enc.batch_ok
    # A frames folder (no timing) next to a video file (its timing): transformers takes timing for all the
    # call's videos or for none, so such a micro-batch is encoded record by record (same results).
    calls.clear()
    encode_many(enc, _records(enc, files))
    assert calls == [1] * len(_records(enc, files)) and enc.batch_ok


def test_a_bad_record_stays_in_its_slot(files):
    enc = _encoder("tiny/qwen2-vl")
    good = _records(enc, files)[:3]
    missing = Record("bad", "f:9", [{"role": "user", "content": [{"type": "image", "path": str(files / "nope.png")},
                                                                 {"type": "text", "text": "?"}]},
                                    {"role": "assistant", "content": "x"}])
    no_answer = Record("bad2", "f:10", [{"role": "user", "content": "only a question"}])
    out = encode_many(enc, [good[0], missing, good[1], no_answer, good[2]])
    assert isinstance(out[1], BadRecord) and out[1].reason == "missing media"
    assert isinstance(out[3], BadRecord) and out[3].reason == "no answer"
    for r, got in zip(good, [out[0], out[2], out[4]]):
        _same(enc.encode(r), got, r.id)


def test_a_too_long_record_is_found_after_the_merged_call(files):
    """The length check runs per record after the call: the long one is a BadRecord, the rest encode."""
    enc = _encoder("tiny/qwen2-vl")
    recs = _records(enc, files)[:3]
    enc.max_length = max(int(enc.encode(r)["input_ids"].numel()) for r in recs[1:])
    long = Record("long", "f:11", [{"role": "user", "content": "word " * 400}, {"role": "assistant", "content": "x"}])
    out = encode_many(enc, [recs[1], long, recs[2]])
    assert isinstance(out[1], BadRecord) and out[1].reason == "too long"
    _same(enc.encode(recs[1]), out[0], "before")
    _same(enc.encode(recs[2]), out[2], "after")
