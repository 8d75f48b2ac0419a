"""data.format=asr: speech transcription sets, one clip and its transcript a row (Common Voice's `path` +
`sentence`, LibriSpeech / FLEURS-style `audio` + `text` / `transcription`, NeMo manifests' `audio_filepath` +
`text`). The user turn is the clip and an instruction (data.question_template, default below); the answer is
the transcript, scored with eval.metrics=[wer, cer]."""

from __future__ import annotations

from ..formats import _get, _media_part, _qa_record, text_value

FIELDS = {"audio": ("audio", "path", "audio_filepath", "file"),
          "text": ("sentence", "text", "transcription", "transcript", "normalized_text", "raw_transcription"),
          "id": ("id",)}

DEFAULT_QUESTION = "Transcribe the audio."


def to_records(row, fmt, columns, where, index, rid, resolve, templates=None):
    audio = _media_part("audio", _get(row, fmt, "audio", columns, where), resolve, where)
    text = text_value(_get(row, fmt, "text", columns, where), "text", where)
    question = (templates or {}).get("question") or DEFAULT_QUESTION
    return [_qa_record(rid, where, [audio], question, text, [text])]
