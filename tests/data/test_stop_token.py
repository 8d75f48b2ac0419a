"""Every trained answer ends with the token generation stops at. LLaVA-1.5-hf's chat template writes no
eos after an answer ("ASSISTANT: red USER: ..."): trained as rendered, the model never learns to stop
(TRL#1623; the doctor's MM063). The encoder writes the tokenizer's eos after such answers, trained; a
template that ends its turns itself (Qwen's <|im_end|>) is encoded exactly as before."""

from __future__ import annotations

import pytest

from mmtune.config.schema import RunConfig
from mmtune.data.encode import Encoder
from mmtune.data.records import Record

from .conftest import write_png

# llava-hf/llava-1.5-7b-hf's chat_template.json
LLAVA_1_5 = ("{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}"
             "{% endif %}{# Render all images first #}{% for content in message['content'] | selectattr('type', "
             "'equalto', 'image') %}{{ '<image>\\n' }}{% endfor %}{# Render all text next #}{% if message['role'] != "
             "'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
             "{{ content['text'] + ' '}}{% endfor %}{% else %}{% for content in message['content'] | selectattr('type', "
             "'equalto', 'text') %}{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}"
             "{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}")


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return write_png(tmp_path_factory.mktemp("stop") / "a.png", size=(60, 40))


def _encoder(name, template=None):
    from mmtune.models.tiny import tiny_config_and_processor

    proc = tiny_config_and_processor(name)[1]
    if template:
        proc.chat_template = template
    return Encoder(proc, None, RunConfig.model_validate({"model": {"name": name}}))


def _record(image, turns=1):
    msgs = [{"role": "user", "content": [{"type": "image", "path": str(image)}, {"type": "text", "text": "Colour?"}]},
            {"role": "assistant", "content": "red"}]
    if turns == 2:
        msgs += [{"role": "user", "content": "And the sky?"}, {"role": "assistant", "content": "blue"}]
    return Record("s", "t:1", msgs)


@pytest.mark.parametrize("turns", [1, 2])
def test_llava_1_5_template_answers_end_with_a_trained_eos(image, turns):
    enc = _encoder("tiny/llava", LLAVA_1_5)
    tok = enc.tokenizer
    r = _record(image, turns)
    rendered = enc.render(enc._template_messages(r.messages))
    assert tok.eos_token not in rendered  # the template itself never stops an answer
    out = enc.encode(r)
    lab = out["labels"]
    trained = lab[lab != -100].tolist()
    # " red": the template writes "ASSISTANT: red", and the byte-level BPE token carries the space
    assert tok.decode(trained) == " red" + tok.eos_token + (" blue" + tok.eos_token if turns == 2 else "")
    assert trained[-1] == tok.eos_token_id and trained.count(tok.eos_token_id) == turns
    # written right after each answer, where the next turn or the end of the text follows
    assert enc.rendered(r).count("red" + tok.eos_token + " ") == 1
    assert enc.measure(r) == enc.token_counts(r)  # the length engine counts the added stop tokens too


def test_llava_1_5_template_stop_token_is_added_for_text_only_records():
    enc = _encoder("tiny/llava", LLAVA_1_5)
    r = Record("t", "t:1", [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "hello"}])
    lab = enc.encode(r)["labels"]
    assert enc.tokenizer.decode(lab[lab != -100]) == " hello" + enc.tokenizer.eos_token
    assert enc.measure(r) == enc.token_counts(r)


@pytest.mark.parametrize("turns", [1, 2])
def test_a_template_with_its_own_turn_end_is_encoded_unchanged(image, turns):
    enc = _encoder("tiny/qwen2-vl")
    r = _record(image, turns)
    rendered = enc.render(enc._template_messages(r.messages))
    assert enc.rendered(r) == rendered  # nothing added: <|im_end|> already ends each answer
    out = enc.encode(r)
    direct = enc.processor(text=[rendered], images=enc._load_media(r)["images"], return_tensors="pt")
    assert out["input_ids"].tolist() == direct["input_ids"][0].tolist()
    lab = out["labels"]
    assert enc.tokenizer.decode(lab[lab != -100]) == "red<|im_end|>" + ("blue<|im_end|>" if turns == 2 else "")
