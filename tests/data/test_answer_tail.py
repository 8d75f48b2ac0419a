"""The last answer found from the record's one rendering (data/answer_tail.py): the same spans as rendering its
prompt, and the prompt rendered where the template or the record does not fit the shortcut."""

from __future__ import annotations

import pytest

from mmtune.config.schema import RunConfig
from mmtune.data.answer_tail import last_answer_start, learn_tail
from mmtune.data.encode import Encoder
from mmtune.data.records import Record

from .test_encode_reference import ReferenceEncoder

# Qwen2's template with a reasoning block written between the assistant header and the answer (as Qwen3's
# writes an empty <think></think> before a final answer): the generation prompt does not lead to the answer.
REASONING = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}[thought]\n{% endif %}"
             "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# A template that trims what it renders: " 3 " is written as "3".
TRIMMING = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _encoders(template=None):
    from mmtune.models.tiny import tiny_config_and_processor

    tok = tiny_config_and_processor("tiny/qwen2")[1]
    if template is not None:
        tok.chat_template = template
    cfg = RunConfig.model_validate({"model": {"name": "tiny/qwen2"}, "data": {"max_length": 4096}})
    return Encoder(tok, None, cfg), ReferenceEncoder(tok, None, cfg)


def _record(answer, rid="r"):
    return Record(rid, f"t:{rid}", [{"role": "user", "content": "What is 3 + 4? Say 7."},
                                    {"role": "assistant", "content": answer}])


def test_the_tail_is_what_the_template_writes_after_the_answer():
    enc, _ = _encoders()
    assert learn_tail(enc) == "<|im_end|>\n"
    full = enc.rendered(_record("7"))
    assert last_answer_start(enc, full, "7") == full.rindex("7<|im_end|>")  # not the "7" in the question


@pytest.mark.parametrize("template,shortcut", [(None, True), (REASONING, False), (TRIMMING, True)])
def test_spans_and_labels_are_those_of_the_prompt_render(template, shortcut):
    enc, ref = _encoders(template)
    assert (learn_tail(enc) is not None) == shortcut
    for i, answer in enumerate(["7", " 7 ", "thought", "7 and 7", "[thought]"]):
        record = _record(answer, str(i))
        new, old = enc.encode(record), ref.encode(record)
        assert list(new) == list(old)
        assert all(new[k].tolist() == old[k].tolist() for k in old), (template, answer)
        assert (new["labels"] != -100).any()


def test_a_template_that_cannot_render_the_sentinels_gets_no_shortcut():
    enc, _ = _encoders("{{ raise_exception('no') }}")
    assert learn_tail(enc) is None
    assert last_answer_start(enc, "anything", "thing") == -1
