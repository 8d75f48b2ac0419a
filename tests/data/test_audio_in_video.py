"""A video fed with its own audio track (use_audio) reaches the Omni thinkers' forward with
`use_audio_in_video=True` (data/audio_in_video.py), on the real tiny twins of both families: mmtune's training
loss is the model's own with the flag, not without; a batch mixing such a record with records that hold no
video is exact with the flag on; a plain video needs it off, so records, batches and data mixing the two kinds
of video are refused with counts."""

from __future__ import annotations

import pytest

from mmtune.compat.transformers_internals import supports_video_audio_tracks
from mmtune.config.schema import RunConfig
from mmtune.data.audio_in_video import FLAG, check_records
from mmtune.data.collate import Collator
from mmtune.data.encode import Encoder
from mmtune.data.records import Record
from mmtune.errors import DataError
from mmtune.loss import loss_sum_and_output, model_inputs

from .conftest import write_mp4, write_png, write_wav

pytestmark = pytest.mark.skipif(not supports_video_audio_tracks(), reason="this transformers cannot interleave a "
                                "video's audio track (5.17); tests/test_compat.py checks the clear error")

OMNI = ["tiny/qwen2.5-omni", "tiny/qwen3-omni"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("avmix")
    write_png(d / "a.png", size=(64, 64))
    write_wav(d / "a.wav", seconds=1.0, sr=16000)
    write_mp4(d / "av.mp4", n_frames=8, fps=4, size=(64, 64), audio_seconds=2.0)
    return d


@pytest.fixture(scope="module", params=OMNI)
def twin(request):
    import torch

    from mmtune.models.tiny import build_tiny

    model, proc = build_tiny(request.param, seed=0)
    model = model.eval().to(torch.float32)
    enc = Encoder(proc, None, RunConfig.model_validate({"model": {"name": request.param, "video_frames": 4}}))
    return model, enc, Collator(enc.tokenizer.pad_token_id, torch.float32)


def _rec(rid, *parts, answer="red"):
    return Record(rid, f"f:{rid}", [{"role": "user", "content": [*parts, {"type": "text", "text": "What is it?"}]},
                                    {"role": "assistant", "content": answer}])


def _av(files):
    return {"type": "video", "path": str(files / "av.mp4"), "use_audio": True}


def _plain(files):
    return {"type": "video", "path": str(files / "av.mp4")}


def _logits(model, batch, **kw):
    import torch

    with torch.no_grad():
        return model(**model_inputs(batch), use_cache=False, **kw).logits


def test_training_loss_is_the_models_own_with_the_flag(twin, files):
    import torch

    model, enc, collate = twin
    batch = collate([enc.encode(_rec("av", _av(files)))])
    assert batch[FLAG] is True
    with torch.no_grad():
        total, n, out = loss_sum_and_output(model, batch)
    plain = {k: v for k, v in batch.items() if k != FLAG}
    on, off = _logits(model, plain, use_audio_in_video=True), _logits(model, plain, use_audio_in_video=False)
    assert torch.allclose(out.logits, on, atol=1e-5)
    assert (on - off).abs().max() > 1e-3  # the flag matters for this record: without the fix the loss is off's

    labels = batch["labels"][:, 1:]
    mask = labels != -100
    want = torch.nn.functional.cross_entropy(on[:, :-1][mask].float(), labels[mask], reduction="sum")
    assert n == int(mask.sum()) and torch.allclose(total, want, rtol=1e-5)


def test_records_without_video_are_exact_in_a_flagged_batch(twin, files):
    import torch

    model, enc, collate = twin
    recs = [_rec("av", _av(files)), _rec("aud", {"type": "audio", "path": str(files / "a.wav")}),
            _rec("img", {"type": "image", "path": str(files / "a.png")}), _rec("txt", answer="blue")]
    items = [enc.encode(r) for r in recs]
    batch = collate(items)
    assert batch[FLAG] is True
    mixed = _logits(model, batch)
    for row, it in enumerate(items):
        alone = collate([it])
        assert (FLAG in alone) == (row == 0)  # only the audio-carrying video is flagged on its own
        n = int(it["input_ids"].shape[0])
        assert torch.allclose(mixed[row, :n], _logits(model, alone)[0], atol=1e-4), recs[row].id


def test_a_plain_video_needs_the_flag_off(twin, files):

    model, enc, collate = twin
    batch = collate([enc.encode(_rec("v", _plain(files)))])
    assert FLAG not in batch
    assert (_logits(model, batch, use_audio_in_video=True) - _logits(model, batch)).abs().max() > 1e-3
    with pytest.raises(DataError) as e:  # so a batch holding both kinds has no right flag
        collate([enc.encode(_rec("av", _av(files))), enc.encode(_rec("v", _plain(files)))])
    assert "1 record(s) whose video carries its audio" in e.value.what and "micro_batch_size=1" in e.value.fix


def test_a_record_with_both_kinds_of_video_is_refused(files):
    from mmtune.models.tiny import tiny_config_and_processor

    proc = tiny_config_and_processor("tiny/qwen2.5-omni")[1]
    enc = Encoder(proc, None, RunConfig.model_validate({"model": {"name": "tiny/qwen2.5-omni", "video_frames": 4}}))
    r = _rec("both", _av(files), _plain(files))
    for call in (enc.encode, enc.measure):
        with pytest.raises(DataError) as e:
            call(r)
        assert e.value.reason == "unsupported modality" and "1 video(s) with their audio track" in e.value.what


def test_data_that_could_mix_the_kinds_is_refused_before_training(files):
    recs = [_rec("a1", _av(files)), _rec("a2", _av(files)), _rec("v1", _plain(files)),
            _rec("i1", {"type": "image", "path": str(files / "a.png")})]
    check_records(recs, 1, "train.micro_batch_size", "train")  # one record a forward: always right
    check_records([recs[0], recs[1], recs[3]], 4, "train.micro_batch_size", "train")  # no plain video
    with pytest.raises(DataError) as e:
        check_records(recs, 2, "train.micro_batch_size", "train")
    assert "2 record(s) feed a video's audio track" in e.value.what and "1 have a plain video" in e.value.what
    assert "f:a1" in e.value.what and "f:v1" in e.value.what and e.value.where == "train.micro_batch_size"


def test_generation_gets_the_flag(twin, files):
    """evaluate / chat / serve generate through `generate_batch` on a left-padded collated batch: the flag is a
    bool there, kept as it is (not moved like a tensor), and the tokens are those of the model's own generate
    called with use_audio_in_video=True."""
    import contextlib

    import torch

    from mmtune.evaluate.run_eval import generate_batch

    model, enc, _ = twin
    left = Collator(enc.tokenizer.pad_token_id, torch.float32, padding_side="left")
    batch = left([enc.encode_prompt(_rec("av", _av(files))), enc.encode_prompt(_rec("txt"))])
    assert batch[FLAG] is True
    pad = enc.tokenizer.pad_token_id
    got = generate_batch(model, batch, device="cpu", autocast=contextlib.nullcontext, pad_id=pad,
                         eos_token_id=None, max_new_tokens=4, do_sample=False)
    with torch.no_grad():
        want = model.generate(**{k: v for k, v in batch.items() if k != FLAG}, use_audio_in_video=True,
                              pad_token_id=pad, eos_token_id=None, max_new_tokens=4, do_sample=False)
    assert torch.equal(got, want[:, batch["input_ids"].shape[1]:])


def test_the_planner_traces_the_flagged_step(tmp_path, files):
    """`mmtune plan` builds its worst-case micro-batch with the run's encoder and collator: the flag is in it, so
    the traced step and the real step it is checked against both run the forward with use_audio_in_video."""
    import json

    import yaml

    from mmtune.config import load_config
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.planner import predict, resolve_for_plan

    row = _rec("av", _av(files))
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": "av", "messages": row.messages}) + "\n")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": {"name": "tiny/qwen2.5-omni", "video_frames": 4},
        "data": {"train": str(tmp_path / "d.jsonl"), "max_length": 4096},
        "train": {"max_steps": 1, "micro_batch_size": 1, "precision": "fp32", "device": "cpu"},
        "logging": {"tensorboard": False}}))
    cfg = load_config(tmp_path / "cfg.yaml", [])
    assert worst_case_batch(resolve_for_plan(cfg)).micro_batch[FLAG] is True
    assert predict(cfg, plan_eval=False).tensor_peak_bytes > 0


def test_the_doctor_reports_the_mix_as_training_would_refuse_it(tmp_path, files):
    import json

    import yaml

    from mmtune.doctor.runner import run_doctor

    rows = [_rec("a1", _av(files)), _rec("v1", _plain(files)), _rec("v2", _plain(files))]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"id": r.id, "messages": r.messages}) + "\n" for r in rows))

    def mm033(mbs):
        cfg = tmp_path / f"c{mbs}.yaml"
        cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2.5-omni", "video_frames": 4},
                                       "output_dir": str(tmp_path / "run"), "data": {"train": str(tmp_path / "d.jsonl")},
                                       "train": {"micro_batch_size": mbs}}))
        return [f for f in run_doctor(cfg, [], None, only=["MM033"]).findings if f.code == "MM033"]

    found = mm033(2)
    assert [f.severity for f in found] == ["error"], found
    assert "1 record(s) feed a video's audio track" in found[0].message and "2 have a plain video" in found[0].message
    assert found[0].where == "train.micro_batch_size"
    assert not [f for f in mm033(1) if f.severity == "error"]


def test_a_dpo_pair_batch_keeps_the_flag_for_both_sides(twin, files):
    """DPO collates [chosen..., rejected...] with the media once; the flag is one bool for the 2N rows, not a
    media tensor to repeat per side, and the pair's forward is the model's own with the flag."""
    import torch

    from mmtune.data.preference import PairCollator, PairEncoder
    from mmtune.objectives.dpo import pair_inputs

    model, enc, collate = twin
    rec = _rec("av", _av(files))
    rec = Record(rec.id, rec.source, rec.messages, rejected=[{"type": "text", "text": "blue"}])
    batch = PairCollator(collate)([PairEncoder(enc).encode(rec)])
    assert batch[FLAG] is True and FLAG not in batch["pair_media"]
    inputs = pair_inputs(batch)
    with torch.no_grad():
        got = model(**inputs, use_cache=False).logits
        want = model(**{k: v for k, v in inputs.items() if k != FLAG}, use_audio_in_video=True, use_cache=False).logits
    assert inputs[FLAG] is True and torch.allclose(got, want, atol=1e-5)


def test_serve_never_batches_the_two_kinds_of_video(twin, files):
    """`mmtune serve` batches waiting requests by key: a video with its track and a plain video never share one
    (the collator would refuse the batch); requests of one kind still do."""
    from mmtune.serve.batcher import Job
    from mmtune.serve.protocol import Sampling

    _, enc, _ = twin
    greedy = Sampling(max_tokens=4, temperature=0.0, top_p=1.0)

    def key(*parts):
        return Job(inputs=enc.encode_prompt(_rec("r", *parts)), sampling=greedy, emit=None).key

    av, plain = key(_av(files)), key(_plain(files))
    assert av != plain and av == key(_av(files)) and plain == key(_plain(files))
