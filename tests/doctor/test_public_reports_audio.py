"""Public bug reports, batch 14 (docs/doctor.md, "Public bug reports, batch 14: audio and speech data, Qwen2-Audio
and Qwen2.5-Omni"): audio files and arrays as users' data holds them, the model's own audio marks written by hand,
audio records beside text-only ones, and the Omni Thinker. The misses are fixed here and their clean twins kept.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from doctor_helpers import context_for, run_codes

from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.formats import BadRecord
from mmtune.data.records import Record

SR = 16000


def _tone(seconds: float, rate: int) -> np.ndarray:
    return (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * rate)) / rate)).astype(np.float32)


def _msg(user, answer: str = "hello") -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]


@pytest.fixture(scope="module")
def audio_proc():
    from mmtune.models.tiny import tiny_config_and_processor

    return tiny_config_and_processor("tiny/qwen2-audio")[1]


def _encoder(proc, name="tiny/qwen2-audio"):
    return Encoder(proc, None, RunConfig.model_validate({"model": {"name": name}}))


# ---------------------------------------------------------------- the model card's audio marks written by hand
# https://github.com/QwenLM/Qwen2-Audio/issues/143, https://github.com/QwenLM/Qwen2-Audio/issues/144,
# https://github.com/hiyouga/LlamaFactory/issues/8604 ("Audio features and audio tokens do not match: tokens: 288,
# features 30"), https://github.com/hiyouga/LlamaFactory/issues/8378 (Qwen2-Audio's `<|audio_bos|>` / `<|AUDIO|>`
# in a data file): Qwen2-Audio's model card writes each clip as "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>", and
# users copy that into their text. mmtune refused the record (MM060) but with the turn token's fix, "remove or
# escape '<|audio_bos|>' (e.g. write it with a space)", which keeps the string and never names the `<audio>` tag.

def test_a_hand_written_audio_mark_is_answered_with_the_audio_tag(tmp_path, audio_proc):
    import soundfile as sf

    sf.write(tmp_path / "a.wav", _tone(1.0, SR), SR)
    enc = _encoder(audio_proc)
    card = "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\nWhat was said?"
    with pytest.raises(BadRecord) as e:
        enc.encode(Record("r", "d.jsonl:1", _msg([{"type": "audio", "path": str(tmp_path / "a.wav")},
                                                   {"type": "text", "text": card}])))
    assert e.value.reason == "special token in text" and "'<|audio_bos|>'" in e.value.what
    assert "write <audio> where the audio goes" in e.value.fix and "escape" not in e.value.fix
    # clean twins: a turn token in an answer keeps the turn token's fix; the tag itself encodes
    with pytest.raises(BadRecord) as e:
        enc.encode(Record("r", "d.jsonl:2", _msg("What is 1+1?", "2<|im_end|>")))
    assert "remove or escape '<|im_end|>'" in e.value.fix
    item = enc.encode(Record("r", "d.jsonl:3", _msg([{"type": "audio", "path": str(tmp_path / "a.wav")},
                                                      {"type": "text", "text": "What was said?"}])))
    assert "input_features" in item


def test_a_hand_written_vision_mark_names_the_image_tag():
    """The same mechanism for an image model: Qwen2-VL's <|vision_start|> by hand names `<image>`."""
    from mmtune.models.tiny import tiny_config_and_processor

    enc = _encoder(tiny_config_and_processor("tiny/qwen2-vl")[1], "tiny/qwen2-vl")
    with pytest.raises(BadRecord) as e:
        enc.encode(Record("r", "d.jsonl:1", _msg("<|vision_start|>What is it?")))
    assert "write <image> where the image goes" in e.value.fix


# ---------------------------------------------------------------- datasets' decoded Audio dicts, rates unsaid
# https://github.com/huggingface/blog/pull/1243 (Common Voice rows as `{'path': '...common_voice_tr_17346025.mp3',
# 'array': array([...]), 'sampling_rate': 48000}`), https://github.com/intel/ipex-llm/issues/8793 and
# https://github.com/huggingface/audio-transformers-course/pull/205 (44.1 kHz / 8 kHz samples given to the 16 kHz
# Whisper extractor: "Please make sure that the provided `raw_speech` input was sampled with 16000").
# A dataset saved after decoding holds each clip as that dict. mmtune read its `path`, the name inside the dataset's
# archive: "audio file not found" (with the array beside it), or "cannot read the audio field (a dict)" without
# one; the doctor's header probe then crashed on any in-memory clip ("unreadable record ... File object has no
# read() method"). Samples given without a rate were taken to be at the processor's 16 kHz, silently.

def _decoded_rows(tmp_path, with_rate: bool) -> str:
    clip = {"array": _tone(0.5, 48000).round(4).tolist(), **({"sampling_rate": 48000} if with_rate else {})}
    rows = [{"messages": _msg("<audio>What was said?"), "audios": [{**clip, "path": f"common_voice_tr_{i}.mp3"}]}
            for i in range(4)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(tmp_path / "d.jsonl")


def _tree(data: str) -> dict:
    return {"model": {"name": "tiny/qwen2-audio"}, "data": {"train": data, "max_length": 256},
            "train": {"precision": "fp32", "device": "cpu", "micro_batch_size": 2}}


def test_a_decoded_datasets_audio_dict_is_read_from_its_samples(tmp_path):
    rep = run_codes(context_for(tmp_path, _tree(_decoded_rows(tmp_path, True))), "MM014", "MM018", "MM031")
    assert rep.errors == []
    from mmtune.data.formats import _media_part
    from mmtune.data.media import load_audio

    part = _media_part("audio", {"array": _tone(1.0, 48000), "sampling_rate": 48000, "path": "cv_1.mp3"},
                       lambda p, w: str(tmp_path / p), "d.jsonl:1")
    assert len(load_audio(part, "d.jsonl:1", SR)) == SR  # resampled from 48 kHz: one second, not three


def test_audio_samples_without_their_rate_are_refused(tmp_path):
    from mmtune.data.media import load_audio

    with pytest.raises(BadRecord) as e:
        load_audio({"type": "audio", "audio": _tone(1.0, 48000)}, "d.jsonl:1", SR)
    assert "without their sampling_rate" in e.value.what and '"sampling_rate": 48000' in e.value.fix
    rep = run_codes(context_for(tmp_path, _tree(_decoded_rows(tmp_path, False))), "MM018")
    assert rep.codes("error") == {"MM018"} and "without their sampling_rate" in rep.errors[0].message
    # clean twins: the rate beside the samples, or as a (samples, rate) pair
    assert len(load_audio({"type": "audio", "audio": _tone(1.0, 8000), "sampling_rate": 8000}, "r", SR)) == SR
    assert len(load_audio({"type": "audio", "audio": (_tone(1.0, 44100), 44100)}, "r", SR)) == SR


# ---------------------------------------------------------------- decoding backends and sample formats
# https://github.com/librosa/librosa/issues/589, https://github.com/beetbox/audioread/issues/85,
# https://github.com/QwenLM/Qwen2.5-Omni/issues/337 (`audioread.NoBackendError` / "stream info not found": mp3 or a
# video's sound read through audioread without ffmpeg). mmtune decodes WAV / FLAC / OGG with soundfile and the rest
# with PyAV (its own FFmpeg), both core dependencies; 8-bit, 24-bit and float WAV, stereo and 44.1 / 48 kHz load
# as mono at the extractor's rate.

def test_compressed_and_odd_format_audio_decode_without_librosa(tmp_path):
    import av
    import soundfile as sf

    from mmtune.data.media import load_audio

    one = _tone(1.0, SR)
    sf.write(tmp_path / "pcm24.wav", one, SR, subtype="PCM_24")
    sf.write(tmp_path / "u8.wav", one, SR, subtype="PCM_U8")
    sf.write(tmp_path / "float.wav", one, SR, subtype="FLOAT")
    sf.write(tmp_path / "stereo44.wav", np.stack([_tone(1.0, 44100)] * 2, 1), 44100)
    sf.write(tmp_path / "a.flac", _tone(1.0, 48000), 48000)
    sf.write(tmp_path / "a.ogg", _tone(1.0, 44100), 44100, format="OGG", subtype="VORBIS")
    for name, codec in (("a.mp3", "mp3"), ("a.m4a", "aac")):
        with av.open(str(tmp_path / name), "w") as out:
            stream = out.add_stream(codec, rate=44100)
            stream.layout = "mono"
            frame = av.AudioFrame.from_ndarray(_tone(1.0, 44100)[None, :], format="fltp", layout="mono")
            frame.sample_rate = 44100
            for packet in [*stream.encode(frame), *stream.encode(None)]:
                out.mux(packet)
    for name in ("pcm24.wav", "u8.wav", "float.wav", "stereo44.wav", "a.flac", "a.ogg", "a.mp3", "a.m4a"):
        wave = load_audio({"type": "audio", "path": str(tmp_path / name)}, name, SR)
        assert wave.ndim == 1 and abs(len(wave) - SR) < 0.1 * SR, (name, len(wave))  # codecs pad a few ms
        assert 0.1 < float(np.abs(wave).max()) < 0.5, name


# ---------------------------------------------------------------- audio records beside text-only ones
# https://github.com/hiyouga/LlamaFactory/issues/6973 (audio records mixed with `audios: []` ones: "The expanded
# size of the tensor (13) must match the existing size (12)"). A micro-batch of an audio record and a text-only
# record of the tiny Qwen2-Audio: the collator gives features for the one clip, the step's loss is finite.

def test_a_micro_batch_of_an_audio_and_a_text_only_record_trains(tmp_path, audio_proc):
    import soundfile as sf
    import torch

    from mmtune.data.collate import Collator
    from mmtune.models.tiny import build_tiny

    sf.write(tmp_path / "a.wav", _tone(1.0, SR), SR)
    enc = _encoder(audio_proc)
    items = [enc.encode(Record("a", "d.jsonl:1", _msg([{"type": "audio", "path": str(tmp_path / "a.wav")},
                                                        {"type": "text", "text": "What was said?"}]))),
             enc.encode(Record("t", "d.jsonl:2", _msg("What is 1+1?", "2")))]
    batch = Collator(audio_proc.tokenizer.pad_token_id)(items)
    assert batch["input_features"].shape[0] == 1
    model, _ = build_tiny("tiny/qwen2-audio")
    out = model(**batch)
    assert torch.isfinite(out.loss)
    out.loss.backward()


# ---------------------------------------------------------------- Qwen2.5-Omni's Talker
# https://github.com/QwenLM/Qwen2.5-Omni/issues/344 (the Talker's speech changes after fine-tuning the Thinker),
# https://github.com/antgroup/HumanSense/issues/5, https://github.com/modelscope/ms-swift/issues/5771 (text output
# only after fine-tuning): mmtune builds the Thinker of a Qwen2.5-Omni checkpoint (the Omni config's
# thinker_config), never the Talker or token2wav, so their weights are neither loaded, trained nor exported.

def test_an_omni_checkpoint_is_trained_as_its_thinker():
    from mmtune.models.families import family_for_model_type

    family = family_for_model_type("qwen2_5_omni")
    assert family.model_class == "Qwen2_5OmniThinkerForConditionalGeneration"
    assert family.sub_config == "thinker_config"
