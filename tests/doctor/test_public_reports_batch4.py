"""Broken setups from the fifth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 4"):
broken local model folders, run folders and configs, each rebuilt on a tiny twin; the ones mmtune missed or
answered with a wrong fix, caught now, and their clean twins left alone.
"""

from __future__ import annotations

import json

import pytest
from doctor_helpers import TINY_VL, context_for


def _folder(tmp_path, name="m"):
    """A tiny Qwen2-VL model folder as save_pretrained writes it (config, processor, real weights)."""
    from mmtune.models.tiny import build_tiny

    model, proc = build_tiny("tiny/qwen2-vl")
    folder = tmp_path / name
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder


# ----------------------------------------------------------------------------- weights cut inside their data
# https://github.com/QwenLM/Qwen/issues/462, https://github.com/PersuGPT/PersuGPT.github.io/issues/2: a shard
# that stopped downloading ("SafetensorError: Error while deserializing header: MetadataIncompleteBuffer" /
# "incomplete metadata, file not fully covered"). The header was whole, so MM024 passed it, and MM052's read of
# the projector crashed (MM099, "a bug in mmtune"), in the doctor and in `mmtune train`'s fast checks.

def test_weights_file_cut_inside_its_tensor_data(tmp_path, doctor):
    folder = _folder(tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    rep = doctor({**TINY_VL, "model": {"name": str(folder)}, "adapter": {"train_components": ["projector"]}},
                 "MM024", "MM052", "MM009", "MM040")
    assert not [f for f in rep.findings if f.code == "MM099"], rep.findings
    found = [f for f in rep.errors if f.code == "MM024"]
    assert found and "cut short" in found[0].message and "download the model again" in found[0].fix
    whole = _folder(tmp_path, "whole")
    clean = doctor({**TINY_VL, "model": {"name": str(whole)}, "adapter": {"train_components": ["projector"]}},
                   "MM024", "MM052", "MM009", "MM040")
    assert clean.errors == [], clean.errors


# ----------------------------------------------------------------------------- config.json without model_type
# https://github.com/huggingface/transformers/issues/44496, https://github.com/valuesimplex/FinBERT/issues/13,
# https://github.com/nghuyong/ERNIE-Pytorch/issues/41: "Unrecognized model in ... Should have a `model_type` key in
# its config.json". mmtune stopped with the right error and the wrong fix ("pip install -U transformers").

def test_config_json_without_model_type(tmp_path, doctor):
    folder = _folder(tmp_path)
    raw = json.loads((folder / "config.json").read_text())
    raw.pop("model_type")
    (folder / "config.json").write_text(json.dumps(raw))
    rep = doctor({**TINY_VL, "model": {"name": str(folder)}}, fast=True)
    fixes = [f.fix for f in rep.errors if "model_type" in f.message]
    assert fixes and '"model_type": "qwen2_vl"' in fixes[0] and "pip install" not in fixes[0], rep.errors


# ----------------------------------------------------------------------------- no chat template: train's message
# https://github.com/OpenRLHF/OpenRLHF/issues/613, https://github.com/unslothai/unsloth/issues/2096 ("Cannot use
# chat template functions because tokenizer.chat_template is not set"): the doctor's MM030 said so (an earlier
# batch), but `mmtune train` stopped at the first record, blaming it ("fix or remove the record ... or set
# data.on_bad_record=skip"), a fix that would have skipped every record.

def test_train_without_a_chat_template_blames_the_model_not_a_record(tmp_path):
    from mmtune.data.encode import Encoder
    from mmtune.errors import ConfigError

    def no_template(p):
        p.chat_template = p.tokenizer.chat_template = None

    ctx = context_for(tmp_path, TINY_VL, no_template)
    with pytest.raises(ConfigError) as e:
        Encoder.for_run(ctx.need("resolved"))
    assert e.value.where == "model.name" and "no chat template" in e.value.what
    assert "chat_template.jinja" in e.value.fix and "on_bad_record" not in e.value.fix
    Encoder.for_run(context_for(tmp_path, TINY_VL).need("resolved"))  # the clean twin builds


# ----------------------------------------------------------------------------- every record longer than max_length
# https://github.com/hiyouga/LlamaFactory/issues/6844, https://github.com/modelscope/ms-swift/issues/6414: a cap
# shorter than the image tokens drops (or breaks) every record. MM017 said so, but its fix offered
# data.on_bad_record=skip twice, which would skip all of them (MM031: nothing left).

def test_every_record_too_long_is_not_offered_skip(doctor):
    rep = doctor({**TINY_VL, "data": {**TINY_VL["data"], "max_length": 20}}, "MM017")
    found = [f for f in rep.errors if f.code == "MM017"]
    assert found and "data.max_length=" in found[0].fix and "on_bad_record" not in found[0].fix, found


def test_some_records_too_long_are_offered_skip_once(doctor, tmp_path):
    rows = [{"messages": [{"role": "user", "content": "What is 2+1?"}, {"role": "assistant", "content": "3"}]},
            {"messages": [{"role": "user", "content": "word " * 80}, {"role": "assistant", "content": "3"}]}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": str(path), "max_length": 48}}, "MM017")
    found = [f for f in rep.errors if f.code == "MM017"]
    assert found and found[0].fix.count("on_bad_record=skip") == 1, found


# ----------------------------------------------------------------------------- an empty training file
# https://github.com/DarioFT/ComfyUI-Qwen3-TTS/issues/15, https://github.com/huggingface/autotrain-advanced/issues/432
# ("num_samples should be a positive integer value, but got num_samples=0": a data step that wrote an empty file).
# `mmtune train` stopped clearly ("no usable records in ... (0 records)"); the doctor's MM031 said "fix the records
# reported above" when none were reported.

def test_empty_training_file(doctor, tmp_path):
    empty = tmp_path / "train.jsonl"
    empty.write_text("")
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": str(empty)}}, "MM031")
    found = [f for f in rep.errors if f.code == "MM031"]
    assert found and "no row at all" in found[0].message and "records reported above" not in found[0].fix, found
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
                   + "\n")
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": str(one)}, "train": {"micro_batch_size": 2}},
                 "MM031")
    assert [f.fix for f in rep.errors if f.code == "MM031"] == ["train.micro_batch_size=1"]


# ----------------------------------------------------------------------------- a TRL-style reward function
# Found while rebuilding https://github.com/modelscope/ms-swift/issues/4751 (a custom GRPO reward returning None,
# "TypeError: must be real number, not NoneType"): a reward written TRL's way, fn(completions, **kwargs) (as in
# https://github.com/huggingface/trl/pull/3079), is called by mmtune as fn(completions, references). MM120 (fast, run
# by `mmtune train` before it starts) imported it without trying the call, so the run stopped at its first GRPO step
# with a raw "TypeError: ... takes 1 positional argument but 2 were given".

def test_reward_written_for_trl_is_refused_before_the_run(tmp_path, monkeypatch, doctor):
    (tmp_path / "my_rewards_b4.py").write_text(
        "def trl_style(completions, **kwargs):\n    return [1.0 for _ in completions]\n"
        "def ours(completions, references, **kwargs):\n    return [1.0 for _ in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    tree = {**TINY_VL, "train": {"objective": "grpo", "grpo": {"rewards": [{"name": "my_rewards_b4:trl_style"}]}}}
    rep = doctor(tree, "MM120")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM120", "error")], rep.findings
    assert "fn(completions, references)" in rep.findings[0].message and "references" in rep.findings[0].fix
    tree["train"]["grpo"]["rewards"] = [{"name": "my_rewards_b4:ours"}]
    assert doctor(tree, "MM120").findings == []


# ----------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES hides the GPUs
# https://github.com/pytorch/examples/issues/115, https://github.com/thuml/Autoformer/issues/25,
# https://github.com/thuml/Time-Series-Library/issues/10: CUDA_VISIBLE_DEVICES set to an id the machine lacks (or
# '', as schedulers and CPU-forcing scripts set it) and training runs on the CPU, noticed from the step time.
# mmtune's resolved run said "target: CPU (this machine)" without the reason; train.device=cuda blamed the machine.

@pytest.mark.parametrize("value, words", [("", "hides every GPU"), ("1", "does this machine have GPU 1?")])
def test_cuda_visible_devices_that_hides_the_gpus_is_named(monkeypatch, value, words):
    import torch

    from mmtune.errors import ConfigError
    from mmtune.resolve import local_target

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    target = local_target("auto")
    assert target.device == "cpu" and f"CUDA_VISIBLE_DEVICES={value!r}" in target.origin and words in target.origin
    with pytest.raises(ConfigError) as e:
        local_target("cuda")
    assert e.value.where == "CUDA_VISIBLE_DEVICES" and "unset CUDA_VISIBLE_DEVICES" in e.value.fix
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert local_target("auto").origin == "this machine"  # nothing to explain without the variable
    assert local_target("cpu").origin == "train.device=cpu"


# ----------------------------------------------------------------------------- the launcher's mixed precision
# https://github.com/huggingface/accelerate/issues/1432, https://github.com/huggingface/transformers/issues/32622:
# `accelerate launch --mixed_precision fp16` (or an accelerate config file's `mixed_precision`) beside a training
# script configured otherwise; which one wins is unclear to users. Here: a run configured for bf16.
# mmtune passes train.precision to accelerate, which overrides the launcher's: the run is bf16 (clean), but nothing
# said the launcher's choice was ignored. The precision decision says so now.

def test_launcher_mixed_precision_that_the_run_overrides_is_said(tmp_path, monkeypatch):
    from mmtune.config import load_config
    from mmtune.resolve import local_target, resolve_run

    p = tmp_path / "c.yaml"
    p.write_text(f"model:\n  name: tiny/qwen2\noutput_dir: {tmp_path / 'run'}\ntrain:\n  precision: bf16\n  device: cpu\n")
    cfg = load_config(p, [])
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    d = resolve_run(cfg, local_target("cpu")).decision("train.precision")
    assert d.value.startswith("bf16") and "mixed_precision=fp16" in d.reason and "train.precision=fp16" in d.reason
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert "ACCELERATE" not in resolve_run(cfg, local_target("cpu")).decision("train.precision").reason
