"""The encoder's outputs are byte-identical to those of the encoder before its CPU work was cut (one
tokenization of a text-only record, vectorised label alignment, 2 chat-template renders instead of 4 for a
one-answer record): `ReferenceEncoder` keeps that encoder's per-record methods verbatim (src/mmtune/data/
encode.py before the change), and every family, modality, multi-turn and system-prompt record below must
encode to equal input_ids, labels, attention masks and media tensors (same dtypes), and measure the same."""

from __future__ import annotations

import pytest
import torch

from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.formats import BadRecord
from mmtune.data.records import Record, last_assistant_index, part_text
from mmtune.errors import DataError

from .conftest import write_mp4, write_png, write_wav


class ReferenceEncoder(Encoder):
    """The previous encoder's `_answer_spans`, `_aligned_labels` and `encode`, unchanged (a reference only
    this test keeps: Python loops over tokens, a tokenization per call, 4 renders per one-answer record)."""

    def _answer_spans(self, tmessages: list[dict], full: str, record: Record) -> list[tuple[int, int, bool]]:
        """Character spans [start, end) in `full` of every assistant answer + its end-of-turn token, and
        whether the template wrote such a token."""
        spans = []
        for i, m in enumerate(tmessages):
            if m["role"] != "assistant":
                continue
            answer = m["content"] if isinstance(m["content"], str) else part_text(m["content"])
            answer = answer.strip()
            upto = self.render(tmessages[: i + 1])
            prompt = self.render(tmessages[:i], add_generation_prompt=True)
            before = self.render(tmessages[:i]) if i else ""
            if not full.startswith(upto):
                raise DataError("the chat template renders a conversation differently from its own prefix",
                                where=record.where(),
                                fix="use a chat template whose rendering of a conversation starts with the rendering "
                                    "of its first turns (report this model to mmtune)")
            if upto.startswith(prompt) and upto.find(answer, len(prompt)) >= 0:
                start = upto.find(answer, len(prompt))
            else:  # templates whose generation prompt differs from an assistant turn's header
                start = upto.rfind(answer, len(before))
            if not answer or start < 0:
                raise BadRecord("no answer", f"assistant turn {i} has no answer text the template renders", record.where(),
                                "give every assistant turn a non-empty text answer")
            end = start + len(answer)
            tail = upto[end:]
            stripped = tail.lstrip(" ")
            has_stop = False
            for s in self.special_strings:  # the end-of-turn token, if the template puts one right after
                if stripped.startswith(s):
                    end += len(tail) - len(stripped) + len(s)
                    has_stop = True
                    break
            spans.append((start, end, has_stop))
        return spans

    # ------------------------------------------------------------------ media
    def _aligned_labels(self, text: str, spans, expanded_ids: list[int], record: Record) -> list[int]:
        """Labels over `expanded_ids`: answer tokens keep their id, everything else is -100."""
        enc = self.tokenizer(text, add_special_tokens=self._add_special(text), return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        in_answer = [end > start and any(a0 < end and start < a1 for a0, a1 in spans) for start, end in offsets]
        media_ids = set(self.media_token_id.values())
        # The tokenizer's ids as literal text segments separated by placeholders (a run of adjacent
        # placeholders counts as one: their expansions are all masked anyway).
        segments: list[list[int]] = [[]]  # token positions in `ids`
        for i, tid in enumerate(ids):
            if tid in media_ids:
                if segments[-1] or len(segments) == 1:
                    segments.append([])
            else:
                segments[-1].append(i)
        E, n = expanded_ids, len(expanded_ids)
        labels = [-100] * n

        def fail(what: str):
            return DataError(f"cannot line up the processor's tokens with the tokenizer's ({what})",
                             where=record.where(),
                             fix="this processor changes text beyond expanding media placeholders; report the model to mmtune")

        j = 0
        for k, seg in enumerate(segments):
            want = [ids[i] for i in seg]
            if k == 0:
                at = 0
            elif k == len(segments) - 1:
                at = n - len(want)  # the last segment ends the sequence
            else:
                # A placeholder expanded into at least one token, possibly with text of its own (Qwen3-VL
                # writes frame timestamps): the next literal segment is where the text continues.
                at = next((a for a in range(j + 1, n - len(want) + 1)
                           if E[a] == want[0] and E[a:a + len(want)] == want), -1) if want else j + 1
            if at < j or E[at:at + len(want)] != want or (k > 0 and at == j):
                raise fail(f"segment {k} of {len(segments)} not found")
            for off, i in enumerate(seg):
                if in_answer[i]:
                    labels[at + off] = ids[i]
            j = at + len(want)
        if j != n and (len(segments) == 1 or segments[-1]):
            raise fail(f"ended at token {j} of {n}")
        return labels

    def encode(self, record: Record, *, check_length: bool = True) -> dict:
        import torch

        if last_assistant_index(record.messages) is None:
            raise BadRecord("no answer", "record has no assistant turn", record.where(),
                            "end the conversation with an assistant message holding the answer")
        tmessages = self._template_messages(record.messages)
        full, spans = self._trained_text(tmessages, record)
        self._check_media(record, tmessages, full)
        out = self._run(full, record, self._load_media(record))
        ids = out["input_ids"][0].tolist()
        if check_length:
            self._check_length(len(ids), record)
        labels = self._aligned_labels(full, spans, ids, record)
        res = self._finish(out, record)
        res["labels"] = torch.tensor(labels, dtype=torch.long)
        return res



class CountingEncoder(Encoder):
    """The encoder, counting its chat-template renders."""

    renders = 0

    def render(self, tmessages, add_generation_prompt=False):
        self.renders += 1
        return super().render(tmessages, add_generation_prompt)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("reference")
    (d / "frames").mkdir()
    for i in range(4):
        write_png(d / "frames" / f"{i}.png", (50 * i, 0, 0), size=(64, 64))
    return {"image": write_png(d / "a.png", size=(100, 80)), "odd": write_png(d / "b.png", size=(333, 201)),
            "audio": write_wav(d / "a.wav", seconds=1.0, sr=44100), "frames": d / "frames",
            "video": write_mp4(d / "v.mp4", n_frames=9, fps=4, size=(64, 48))}


def _cfg(name, system_prompt=None):
    return RunConfig.model_validate({"model": {"name": name, "video_frames": 4},
                                     "data": {"max_length": 100000, "system_prompt": system_prompt}})


def _encoders(name, system_prompt=None):
    from mmtune.models.tiny import tiny_config_and_processor

    proc = tiny_config_and_processor(name)[1]
    cfg = _cfg(name, system_prompt)
    return Encoder(proc, None, cfg), ReferenceEncoder(proc, None, cfg)


def _part(kind, media):
    return {"type": "image" if kind == "odd" else "video" if kind == "frames" else kind, "path": str(media[kind])}


def _records(kinds, media):
    """One-answer, multi-turn (media in the first turn, answers in several), a system message of the record's
    own, a long answer (~1,800 tokens on the tiny tokenizer) and stray spaces around an answer."""
    first = [_part(k, media) for k in kinds]
    long = " ".join(f"item {i} is {i * 7 % 13} units" for i in range(150))
    return [
        Record("one", "t:1", [{"role": "user", "content": first + [{"type": "text", "text": "How many?"}]},
                              {"role": "assistant", "content": "Three."}]),
        Record("multi", "t:2", [{"role": "user", "content": first + [{"type": "text", "text": "What is it?"}]},
                                {"role": "assistant", "content": "A shape."},
                                {"role": "user", "content": "And its colour?"},
                                {"role": "assistant", "content": [{"type": "text", "text": "  Red.  "}]},
                                {"role": "user", "content": "Sure?"},
                                {"role": "assistant", "content": "Yes, red."}]),
        Record("system", "t:3", [{"role": "system", "content": "Answer briefly."},
                                 {"role": "user", "content": first + [{"type": "text", "text": "Count them."}]},
                                 {"role": "assistant", "content": "2"}]),
        Record("long", "t:4", [{"role": "user", "content": first + [{"type": "text", "text": "List them all."}]},
                               {"role": "assistant", "content": long}]),
    ]


CASES = [  # (tiny twin, media kinds of the first user turn)
    ("tiny/qwen2", ()),  # text: the tokenizer is the processor
    ("tiny/qwen2-vl", ()), ("tiny/qwen2-vl", ("image",)), ("tiny/qwen2-vl", ("image", "odd")),
    ("tiny/qwen2-vl", ("frames",)),
    ("tiny/qwen2.5-vl", ("video",)),
    ("tiny/qwen3-vl", ("video",)),  # frame timestamps written as text between the placeholders
    ("tiny/qwen2-audio", ("audio",)),
    ("tiny/qwen2.5-omni", ("image", "audio")),
    ("tiny/llava", ("image",)),  # a template without an end-of-turn token: the encoder writes eos
    ("tiny/llava-next", ("image",)),
]


def _assert_same(new: dict, ref: dict, what):
    assert list(new) == list(ref), what
    for k in ref:
        assert new[k].dtype == ref[k].dtype and new[k].shape == ref[k].shape, (what, k)
        assert torch.equal(new[k], ref[k]), (what, k)


@pytest.mark.parametrize("name,kinds", CASES, ids=[f"{n}-{'+'.join(k) or 'text'}" for n, k in CASES])
@pytest.mark.parametrize("system_prompt", [None, "You are a careful counter."])
def test_encoding_is_byte_identical_to_the_reference(name, kinds, system_prompt, media):
    enc, ref = _encoders(name, system_prompt)
    for record in _records(kinds, media):
        new, old = enc.encode(record), ref.encode(record)
        _assert_same(new, old, (name, kinds, record.id))
        assert (new["labels"] != -100).any()
        assert enc.measure(record) == ref.measure(record)
        assert enc.rendered(record) == ref.rendered(record)


def test_label_alignment_failures_are_the_same(media):
    """A processor's ids that do not contain the tokenizer's text are refused the same way."""
    enc, ref = _encoders("tiny/qwen2-vl")
    record = _records(("image",), media)[0]
    full, spans = enc._trained_text(enc._template_messages(record.messages), record)
    ids = enc.encode(record)["input_ids"].tolist()
    for bad in (ids[:-1], ids + [ids[-1]], [ids[0] + 1] + ids[1:], ids[:3] + ids[5:]):
        with pytest.raises(DataError) as new_err:
            enc._aligned_labels(full, spans, bad, record)
        with pytest.raises(DataError) as old_err:
            ref._aligned_labels(full, spans, bad, record)
        assert new_err.value.what == old_err.value.what


@pytest.mark.parametrize("name", ["tiny/qwen2", "tiny/qwen2-vl", "tiny/llava"])
def test_a_one_answer_record_renders_the_template_once(name, media):
    from mmtune.models.tiny import tiny_config_and_processor

    enc = CountingEncoder(tiny_config_and_processor(name)[1], None, _cfg(name))
    one, multi = _records(() if name == "tiny/qwen2" else ("image",), media)[:2]
    enc.encode(one)
    assert enc.renders == 1 + 2  # the conversation; once per encoder, the template's tail (answer_tail.py)
    enc.renders = 0
    enc.encode(one)
    assert enc.renders == 1  # the answer is the text before the tail: no render of its prompt
    enc.renders = 0
    enc.encode(multi)
    assert enc.renders == 1 + 2 * 2  # + each earlier answer's prefix and prompt; the last one needs none
