"""A record far over data.max_length is refused from a floor under its token count, before anything
tokenizes it (data/length_bound.py): a 1,000,000-character answer without spaces took 5.5 s per tokenization
here and every measuring command tokenized it."""

from __future__ import annotations

import json
import random

import pytest

from mmtune.data.length_bound import at_least_tokens, longest_token_bytes


def _texts():
    rng = random.Random(0)
    alphabet = "abc xyz Ééèあいうアイウ한국어 \u0301\u1100\u1161\u11a8 😀🙂 \n\t" + "".join(map(chr, range(33, 127)))
    yield "y" * 20_000
    yield " " * 5_000
    yield "".join(rng.choice(alphabet) for _ in range(20_000))
    yield ("\u1100\u1161\u11a8" * 3_000)  # Hangul jamo that NFC composes: 9 bytes -> 3
    yield "e\u0301" * 5_000
    yield "<|im_end|>" * 500 + "ok"


def _unigram_nfkc(byte_fallback: bool = True):
    """A SentencePiece-style tokenizer (Unigram, Metaspace, NFKC normaliser), trained here."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    rng = random.Random(1)
    corpus = ["".join(rng.choice("abcdef ghij한국어あい") for _ in range(200)) for _ in range(200)]
    specials = ["<unk>"] + [f"<0x{b:02X}>" for b in range(256)]  # SentencePiece's byte-fallback pieces
    tok.train_from_iterator(corpus, trainers.UnigramTrainer(vocab_size=600, unk_token="<unk>", special_tokens=specials))
    spec = json.loads(tok.to_str())
    spec["model"]["byte_fallback"] = byte_fallback  # the trainer writes a model without it
    tok = Tokenizer.from_str(json.dumps(spec))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


@pytest.mark.parametrize("which", ["qwen_byte_level_bpe", "unigram_nfkc"])
def test_the_floor_is_never_above_the_real_count(which):
    from mmtune.models.local_tokenizer import make_tokenizer

    tok = make_tokenizer() if which == "qwen_byte_level_bpe" else _unigram_nfkc()
    longest = longest_token_bytes(tok)
    assert longest and longest > 1
    for text in _texts():
        real = len(tok(text, add_special_tokens=False)["input_ids"])
        floor = at_least_tokens(tok, text, longest)
        assert 0 < floor <= real, (text[:20], floor, real)


def test_no_floor_where_one_unknown_token_can_stand_for_a_whole_run():
    # without byte fallback a run of unseen characters becomes one <unk>: no count of bytes bounds the tokens
    tok = _unigram_nfkc(byte_fallback=False)
    assert len(tok("😀" * 1000, add_special_tokens=False)["input_ids"]) <= 2
    assert longest_token_bytes(tok) is None and at_least_tokens(tok, "😀" * 1000, None) == 0


def _encoder(tmp_path, max_length=2048):
    from mmtune.config import load_config
    from mmtune.data.encode import Encoder
    from tests.data.malformed import tiny_processor

    cfg = load_config(None, ["model.name=tiny/qwen2-vl", "data.train=synthetic:counting",
                             f"data.max_length={max_length}", f"output_dir={tmp_path}"])
    return Encoder(*tiny_processor("tiny/qwen2-vl"), cfg)


def _record(answer: str):
    from mmtune.data.records import Record

    return Record("r1", "d.jsonl:1", [{"role": "user", "content": [{"type": "text", "text": "How many?"}]},
                                      {"role": "assistant", "content": [{"type": "text", "text": answer}]}])


def test_a_megabyte_answer_is_refused_from_its_floor_by_measure_and_encode(tmp_path):
    from mmtune.data.formats import BadRecord

    enc, rec = _encoder(tmp_path), _record("y" * 1_000_000)
    for fn in (enc.measure, enc.encode):
        with pytest.raises(BadRecord) as e:
            fn(rec)
        # "at least": the floor refused it; tokenizing would have said "record is 1000021 tokens"
        assert e.value.reason == "too long" and "record is at least" in e.value.what
        assert "data.max_length=2048" in e.value.what and "data.on_bad_record=skip" in e.value.fix


def test_a_long_text_under_the_cap_is_measured_exactly(tmp_path):
    enc, rec = _encoder(tmp_path), _record("one two three four " * 116)  # 2,204 characters, fewer tokens than 2048
    counts = enc.measure(rec)
    assert counts["total"] == enc.token_counts(rec)["total"] < 2048
    # over the cap by its real count but not by the floor: the exact "too long" of the tokenized record
    from mmtune.data.formats import BadRecord

    with pytest.raises(BadRecord) as e:
        _encoder(tmp_path, max_length=512).encode(rec)
    assert e.value.reason == "too long" and "at least" not in e.value.what
