"""data.format=asr: speech transcription sets (a clip and its transcript a row) read as records, scored with WER / CER."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mmtune.config.schema import DataConfig
from mmtune.data.sources import load_records
from mmtune.errors import DataError
from mmtune.evaluate.metrics import cer, compute, greater_is_better, wer

from .conftest import write_wav


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_common_voice_and_nemo_rows_become_a_clip_an_instruction_and_the_transcript(tmp_path):
    write_wav(tmp_path / "a.wav", seconds=0.3, sr=16000)
    cv = _jsonl(tmp_path / "cv.jsonl", [{"client_id": "x", "path": "a.wav", "sentence": "Hello world."}])
    nemo = _jsonl(tmp_path / "manifest.jsonl", [{"audio_filepath": "a.wav", "text": "hello world", "duration": 0.3}])
    for spec, answer in ((cv, "Hello world."), (nemo, "hello world")):
        r = load_records(spec, DataConfig(format="asr"))[0]
        user = r.messages[0]["content"]
        assert user[0] == {"type": "audio", "path": str(tmp_path / "a.wav")}
        assert user[1] == {"type": "text", "text": "Transcribe the audio."}
        assert r.answer_text() == answer and r.references == [answer]
    r = load_records(cv, DataConfig(format="asr", question_template="Detect the language and recognize the speech: <|en|>"))[0]
    assert r.messages[0]["content"][1]["text"] == "Detect the language and recognize the speech: <|en|>"


def test_a_row_without_its_transcript_is_a_counted_bad_record(tmp_path):
    write_wav(tmp_path / "a.wav", seconds=0.3, sr=16000)
    spec = _jsonl(tmp_path / "d.jsonl", [{"path": "a.wav", "sentence": "ok"}, {"path": "a.wav", "label": "oops"}])
    with pytest.raises(DataError) as e:
        load_records(spec, DataConfig(format="asr"))
    assert "d.jsonl:2" in str(e.value) and "sentence" in str(e.value)
    rs = load_records(spec, DataConfig(format="asr", on_bad_record="skip"))
    assert len(rs) == 1 and sum(rs.skipped.values()) == 1


def test_wer_and_cer_are_corpus_edit_rates_after_basic_normalisation():
    # one substitution and one insertion over 4 reference words; case and punctuation do not count
    assert wer(["the quick brown dog jumps"], [["The quick, brown fox."]]) == pytest.approx(2 / 4)
    # corpus level: (1 + 0) edits over (2 + 3) words, not the mean of per-item rates (0.5 and 0)
    assert wer(["hello there", "a b c"], [["hello world"], ["a b c"]]) == pytest.approx(1 / 5)
    assert cer(["kitten"], [["sitting"]]) == pytest.approx(3 / 7)
    assert wer([""], [["two words"]]) == 1.0 and wer(["same"], [["Same!"]]) == 0.0
    assert not greater_is_better("wer") and not greater_is_better("cer")
    assert compute(["wer", "cer"], ["<think>x</think> hello"], [["Hello"]]) == {"wer": 0.0, "cer": 0.0}


def test_the_format_brings_its_metrics_and_answer_length_unless_set(tmp_path):
    from mmtune.config.loader import config_sources, load_config

    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("model: {name: tiny/qwen2-audio}\ndata: {train: d.jsonl, format: asr}\n")
    cfg = load_config(cfg_file)
    assert cfg.eval.metrics == ["wer", "cer"] and cfg.eval.max_new_tokens == 128
    assert config_sources(cfg)["eval.metrics"] == "data.format=asr's default"
    cfg = load_config(cfg_file, ["eval.metrics=[cer]", "eval.max_new_tokens=64"])
    assert cfg.eval.metrics == ["cer"] and cfg.eval.max_new_tokens == 64


def test_a_format_that_is_not_a_name_is_the_config_error_not_a_typeerror():
    """The format defaults are looked up before validation: a list or mapping given as data.format must reach the
    schema's own error naming the key, not stop in the lookup ("unhashable type: 'list'")."""
    from mmtune.config.loader import load_config
    from mmtune.errors import ConfigError

    for value in ("[asr]", "{asr: 1}"):
        with pytest.raises(ConfigError) as e:
            load_config(None, ["model.name=tiny/qwen2-audio", f"data.format={value}"])
        assert "data.format" in str(e.value)


@pytest.mark.slow
def test_mmtune_train_on_a_transcription_set_reports_wer(tmp_path):
    words = ["one", "two", "three", "four"]
    rows = []
    for i, w in enumerate(words * 2):
        write_wav(tmp_path / f"c{i}.wav", seconds=0.4, sr=16000, freq=300.0 + 100 * (i % 4))
        rows.append({"path": f"c{i}.wav", "sentence": w})
    _jsonl(tmp_path / "train.jsonl", rows)
    _jsonl(tmp_path / "eval.jsonl", rows[:4])
    out = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model: {{name: tiny/qwen2-audio}}\ndata: {{train: {tmp_path / 'train.jsonl'}, eval: "
                   f"{tmp_path / 'eval.jsonl'}, format: asr}}\ntrain: {{max_steps: 2, micro_batch_size: 2, device: cpu, "
                   f"precision: fp32}}\neval: {{every: 2, max_new_tokens: 4, batch_size: 4}}\noutput_dir: {out}\n")
    r = subprocess.run([sys.executable, "-m", "mmtune.cli", "train", str(cfg)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"wer"' in line]
    assert evals and 0.0 <= evals[-1]["wer"] and 0.0 <= evals[-1]["cer"], evals
