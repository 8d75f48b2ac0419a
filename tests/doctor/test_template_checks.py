"""MM060-MM065: record text, train/eval copies, and the template / tokenizer against the model.
Each broken setup is built from the report it comes from (docs/doctor.md lists the threads); each clean
one stays silent."""

from __future__ import annotations

import copy
import json

import pytest
from doctor_helpers import TINY_VL, context_for, run_codes

from tests.family_registry import TWINS

NEW = ("MM060", "MM061", "MM062", "MM063", "MM064", "MM065")


def _msg(text, answer="3", system=None):
    m = [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
    return ([{"role": "system", "content": system}] if system else []) + m


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _tree(train, eval=None, **data):
    d = {"train": train, "format": "messages", **data}
    if eval:
        d["eval"] = eval
    return {"model": {"name": "tiny/qwen2-vl"}, "data": d}


@pytest.fixture
def images(tmp_path):
    from PIL import Image

    for i in range(4):
        Image.new("RGB", (56, 56), (60 * i, 0, 0)).save(tmp_path / f"img{i}.png")
    return tmp_path


def test_clean_setups_are_silent(doctor, images):
    train = _jsonl(images / "train.jsonl", [{"messages": _msg("<image>How many?", str(i)), "images": [f"img{i}.png"]}
                                            for i in range(3)] + [{"messages": _msg("Say hi.", "hi", system="Be brief.")}])
    # the same question about another image is not a copy
    ev = _jsonl(images / "eval.jsonl", [{"messages": _msg("<image>How many?", "3"), "images": ["img3.png"]}])
    rep = doctor(_tree(train, ev), *NEW)
    assert rep.findings == [] and rep.not_run == [], (rep.findings, rep.not_run)
    rep = doctor(TINY_VL, *NEW)
    assert rep.findings == [], rep.findings


def test_mm060_special_token_text_in_a_record(doctor, images):
    # LLaMA-Factory / TRL reports: '<|im_end|>' pasted into answers ends the turn in mid-answer.
    train = _jsonl(images / "train.jsonl", [{"messages": _msg("Say hi.", "hi")},
                                            {"messages": _msg("Say bye.", "bye<|im_end|> and more")}])
    # the encoder refuses such a record ("special token in text"): a warning under skip (counted), an error
    # under error (training would stop at it)
    rep = doctor(_tree(train, on_bad_record="skip"), "MM060")
    (f,) = rep.findings
    assert (f.code, f.severity) == ("MM060", "warning")
    assert "1 of 2 records: special token in text" in f.message and "'<|im_end|>'" in f.message
    assert f.where.startswith(f"{train}:2")
    (f,) = doctor(_tree(train, on_bad_record="error"), "MM060").findings
    assert f.severity == "error"


def test_mm061_eval_records_copied_from_train(doctor, images):
    rows = [{"messages": _msg("<image>How many?", str(i)), "images": [f"img{i}.png"]} for i in range(3)]
    train = _jsonl(images / "train.jsonl", rows)
    ev = _jsonl(images / "eval.jsonl", [rows[1], {"messages": _msg("<image>How many?", "3"), "images": ["img3.png"]}])
    rep = doctor(_tree(train, ev), "MM061")
    (f,) = rep.findings
    assert (f.code, f.severity) == ("MM061", "warning") and "1 of 2 records (50%)" in f.message
    assert f.where.startswith(f"{ev}:1")
    # eval = train: every record is a copy, said as such
    rep = doctor(_tree(train, train), "MM061")
    (f,) = rep.findings
    assert "3 of 3" in f.message and "same records as data.train" in f.message


def test_mm062_template_that_drops_system_messages(tmp_path, images):
    # transformers#28366 / Gemma-style templates: the system role is not rendered (or raises).
    train = _jsonl(images / "train.jsonl", [{"messages": _msg("Say hi.", "hi", system="Answer in French.")}])
    drop = ("{% for m in messages %}{% if m['role'] != 'system' %}<|im_start|>{{ m['role'] }}\n"
            "{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
            "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

    def set_template(p):
        p.chat_template = drop

    rep = run_codes(context_for(tmp_path, _tree(train), set_template), "MM062")
    (f,) = rep.findings
    assert (f.code, f.severity) == ("MM062", "warning") and "1 record(s) with a system message" in f.message

    def raising(p):
        p.chat_template = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}" \
                          "{% endif %}" + drop

    rep = run_codes(context_for(tmp_path, _tree(train), raising), "MM062")
    (f,) = rep.findings
    assert f.severity == "error" and "System role not supported" in f.message


def test_mm063_answers_without_a_stop_token_or_a_stop_generation_ignores(tmp_path, images):
    # TRL#1623 (SFT models never learn EOS) and Qwen base models (eos <|endoftext|>, turns end <|im_end|>).
    train = _jsonl(images / "train.jsonl", [{"messages": _msg("Say hi.", "hi")}])
    plain = ("{% for m in messages %}{{ m['role'] }}: {% for p in m['content'] %}{% if p['type'] == 'text' %}"
             "{{ p['text'] }}{% endif %}{% endfor %}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")

    def no_eos(p):
        p.chat_template = plain

    # The encoder now writes the eos after such answers (trained), so the template alone is no longer a finding ...
    rep = run_codes(context_for(tmp_path, _tree(train), no_eos), "MM063")
    assert rep.findings == []

    def no_eos_at_all(p):  # ... a tokenizer with no eos to write still is
        p.chat_template = plain
        p.tokenizer.eos_token = None

    rep = run_codes(context_for(tmp_path, _tree(train), no_eos_at_all), "MM063")
    (f,) = rep.findings
    assert (f.code, f.severity) == ("MM063", "warning") and "never learns to stop" in f.message

    def base_eos(p):  # Qwen2-VL-7B (base): eos = pad = <|endoftext|>, turns still end with <|im_end|>
        p.tokenizer.eos_token = "<|endoftext|>"

    rep = run_codes(context_for(tmp_path, _tree(train), base_eos), "MM063")
    (f,) = rep.findings
    assert "trained to end with '<|im_end|>'" in f.message and "generation stops at" in f.message


def test_mm064_media_token_id_differs_from_the_model_config(tmp_path, images):
    # transformers#29836: LLaVA image_token_index 64000 in the config, 64002 in the tokenizer.
    from mmtune.models.tiny import tiny_config_and_processor

    train = _jsonl(images / "train.jsonl", [{"messages": _msg("Say hi.", "hi")}])
    ctx = context_for(tmp_path, _tree(train))

    hf = copy.deepcopy(tiny_config_and_processor("tiny/qwen2-vl")[0])
    hf.image_token_id += 1
    ctx.put("model_config", hf)
    rep = run_codes(ctx, "MM064")
    (f,) = rep.findings
    assert (f.code, f.severity) == ("MM064", "error") and f"image_token_id={hf.image_token_id}" in f.message


def test_mm065_tokenizer_ids_past_the_embedding(tmp_path, images):
    # transformers#12763 / E5-V#7: added tokens without resize_token_embeddings -> index out of range.
    from mmtune.models.tiny import tiny_config_and_processor

    train = _jsonl(images / "train.jsonl", [{"messages": _msg("Say hi.", "hi")}])
    base = tiny_config_and_processor("tiny/qwen2-vl")[0]
    for shrink, sev in ((3, "warning"), (len(tiny_config_and_processor("tiny/qwen2-vl")[1].tokenizer) - 4, "error")):
        ctx = context_for(tmp_path, _tree(train))
        hf = copy.deepcopy(base)
        hf.text_config.vocab_size = len(ctx.need("resolved").need_processor().tokenizer) - shrink
        ctx.put("model_config", hf)
        rep = run_codes(ctx, "MM065")
        (f,) = rep.findings
        assert (f.code, f.severity) == ("MM065", sev), f


@pytest.mark.parametrize("model,fps,video,fires", [
    # lmms-eval#1260 / ms-swift#9955: frames sampled at one rate, positions built for another. The encoder
    # now passes each file's real rate, so uniform sampling and any model.video_fps are silent ...
    ("tiny/qwen2.5-vl", None, "clip.mp4", False),
    ("tiny/qwen2.5-vl", 1, "clip.mp4", False),
    ("tiny/qwen3-vl", None, "clip.mp4", False),
    # ... and what is still a guess is named: a frames folder has no rate
    ("tiny/qwen2.5-vl", None, "frames", True),
    ("tiny/qwen2.5-vl", 2, "frames", True),
    ("tiny/qwen2-vl", None, "frames", False),  # Qwen2-VL has no time-scaled positions
])
def test_mm066_video_positions_need_the_clip_rate(doctor, tmp_path, model, fps, video, fires):
    from PIL import Image
    from test_media_decode import _mp4

    _mp4(tmp_path / "clip.mp4", n_frames=20)  # 2 s at 10 fps
    (tmp_path / "frames").mkdir()
    for i in range(6):
        Image.new("RGB", (56, 56), (40 * i, 0, 0)).save(tmp_path / "frames" / f"{i}.png")
    train = _jsonl(tmp_path / "train.jsonl", [{"messages": _msg("<video>What happens?", "a ball rolls"),
                                               "videos": [video]}])
    tree = {"model": {"name": model, "video_frames": 4, **({"video_fps": fps} if fps else {})},
            "data": {"train": train, "format": "messages"}}
    rep = doctor(tree, "MM066")
    if fires:
        (f,) = rep.findings
        assert (f.code, f.severity) == ("MM066", "warning") and "1 video item(s) are frames folders" in f.message
        assert "assumed 2 fps" in f.message and f.where.startswith(f"{train}:1") and "files" in f.fix
    else:
        assert rep.findings == []


@pytest.mark.parametrize("model", TWINS)
def test_mm069_every_tiny_family_template_has_its_generation_prompt(tmp_path, model):
    # instructlab/training#232: a template without the add_generation_prompt clause is flagged
    # (tests/doctor/test_public_reports.py); every family's own template here writes its header.
    train = _jsonl(tmp_path / "train.jsonl", [{"messages": _msg("Say hi.", "hi")}])
    rep = run_codes(context_for(tmp_path, {**_tree(train), "model": {"name": model}}), "MM069")
    assert rep.findings == [] and rep.not_run == [], (rep.findings, rep.not_run)


def test_mm069_llava_style_template_without_its_assistant_prompt(tmp_path):
    # LLaVA-1.5-hf's template ends with {% if add_generation_prompt %}ASSISTANT:{% endif %}; dropping it is flagged.
    train = _jsonl(tmp_path / "train.jsonl", [{"messages": _msg("Say hi.", "hi")}])
    body = ("{% for m in messages %}{{ m['role'].upper() }}: {% for p in m['content'] %}{% if p['type'] == 'text' %}"
            "{{ p['text'] }}{% endif %}{% endfor %}{% if m['role'] == 'assistant' %}<|im_end|>{% endif %} {% endfor %}")

    def with_prompt(p):
        p.chat_template = body + "{% if add_generation_prompt %}ASSISTANT:{% endif %}"

    def without(p):
        p.chat_template = body

    assert run_codes(context_for(tmp_path, _tree(train), with_prompt), "MM069").findings == []
    (f,) = run_codes(context_for(tmp_path, _tree(train), without), "MM069").findings
    assert (f.code, f.severity) == ("MM069", "warning") and "'ASSISTANT: '" in f.message
