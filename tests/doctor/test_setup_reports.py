"""Broken setups from public bug reports (third batch, docs/doctor_bug_reports.md): each rebuilt on a tiny twin or
a local folder, flagged with its fix, and its clean twin beside it left silent. Every test names its threads."""

from __future__ import annotations

import json

import pytest
import yaml
from doctor_helpers import model_folder

DATA = {"train": "synthetic:counting", "synthetic_train_size": 8}
REMOTE = {"auto_map": {"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": "modeling_x.XModel"},
          "model_type": "internvl_chat", "transformers_version": "4.37.2"}


def _context(tmp_path, tree, gpu=None):
    from mmtune.doctor.runner import make_context

    path = tmp_path / "ctx.yaml"
    path.write_text(yaml.safe_dump(dict(tree, output_dir=str(tmp_path / "run"))))
    return make_context(path, gpu=gpu)


# ------------------------------------------------------------------------------------------ MM044: original LLaVA
# https://github.com/haotian-liu/LLaVA/issues/1622, https://github.com/LLaVA-VL/LLaVA-NeXT/issues/350 ("You are
# using a model of type llava to instantiate a model of type llava_llama"), https://github.com/vllm-project/vllm/pull/2153
# (liuhaotian/llava-v1.5-13b "need to be converted according to huggingface's new implementation").

def test_original_llava_checkpoint_names_the_llava_hf_conversion(doctor, tmp_path):
    """A liuhaotian-format folder (model_type llava_llama): an error whose fix is the llava-hf conversion, not
    `pip install -U transformers` (no release loads that class); the llava-hf layout beside it is silent."""
    orig = model_folder(tmp_path, tiny="tiny/llava", name="llava-v1.5-7b",
                        config_json={"model_type": "llava_llama", "mm_vision_tower": "openai/clip-vit-large-patch14-336"})
    rep = doctor({"model": {"name": str(orig)}, "data": DATA}, "MM044", fast=True)
    [f] = rep.errors
    assert f.code == "MM044" and "original LLaVA repository" in f.message
    assert f.fix.startswith("model.name=llava-hf/llava-1.5-7b-hf") and "pip install" not in f.fix
    hf = model_folder(tmp_path, tiny="tiny/llava", name="llava-1.5-7b-hf")
    assert doctor({"model": {"name": str(hf)}, "data": DATA}, "MM044", fast=True).findings == []


# ------------------------------------------------------------------------------------------ MM070: remote code
# https://github.com/huggingface/transformers/issues/39336 (CogVLM's remote code broken by a transformers upgrade;
# maintainers: remote code "can break with new versions"), https://github.com/Ucas-HaoranWei/GOT-OCR2.0/issues/313
# and https://github.com/huggingface/transformers/issues/36071 ("'DynamicCache' object has no attribute
# 'get_max_length' / 'seen_tokens'"), https://github.com/generative-computing/mellea/issues/367 (to_legacy_cache
# removed in transformers 5).

def _remote_folder(tmp_path, code: str, name="internvl", **config_json):
    folder = model_folder(tmp_path, tiny="tiny/qwen2-vl", name=name, config_json={**REMOTE, **config_json})
    (folder / "modeling_x.py").write_text(code)
    return str(folder)


def test_remote_code_importing_what_this_transformers_lacks(doctor, tmp_path):
    code = ("import torch\nfrom transformers.modeling_utils import PreTrainedModel\n"
            "from transformers.models.llama.modeling_llama import LlamaFlashAttention2\n"
            "from transformers.generation_utils import GenerationMixin\n\n"
            "def step(past_key_values):\n    return past_key_values.seen_tokens\n")
    tree = {"model": {"name": _remote_folder(tmp_path, code), "trust_remote_code": True}, "data": DATA}
    rep = doctor(tree, "MM070", fast=True)
    [err] = rep.errors
    assert "modeling_x.py:3: LlamaFlashAttention2" in err.message and "module transformers.generation_utils" in err.message
    assert "written for 4.37.2" in err.message
    [warn] = [f for f in rep.findings if f.severity == "warning"]
    assert "modeling_x.py:7: .seen_tokens" in warn.message


def test_remote_code_that_fits_this_transformers_is_silent(doctor, tmp_path):
    """Imports that exist, a cache method DynamicCache has, and the same folder without trust_remote_code
    (MM044's case: the code is never run) stay silent."""
    code = ("from transformers import PretrainedConfig\nfrom transformers.modeling_utils import PreTrainedModel\n"
            "from .configuration_x import XConfig\n\ndef n(cache):\n    return cache.get_seq_length()\n")
    folder = _remote_folder(tmp_path, code)
    assert doctor({"model": {"name": folder, "trust_remote_code": True}, "data": DATA}, "MM070", fast=True).findings == []
    assert doctor({"model": {"name": folder}, "data": DATA}, "MM070", fast=True).findings == []


def test_built_in_model_type_run_from_its_old_remote_code(doctor, tmp_path):
    """Phi-3's case (GOT-OCR2.0#313's quoted answer: "Since the Phi-3 model is now included in the transformers
    library, custom code is no longer required"): a model type transformers has built in, with auto_map and
    trust_remote_code=true, runs the checkpoint's old copy: a warning whose fix turns remote code off."""
    folder = model_folder(tmp_path, tiny="tiny/qwen2-vl", name="qwen2vl-with-code",
                          config_json={"auto_map": REMOTE["auto_map"], "transformers_version": "4.40.0"})
    rep = doctor({"model": {"name": str(folder), "trust_remote_code": True}, "data": DATA}, "MM070", fast=True)
    assert [(f.code, f.severity) for f in rep.findings] == [("MM070", "warning")]
    assert rep.findings[0].fix.startswith("model.trust_remote_code=false")
    plain = model_folder(tmp_path, tiny="tiny/qwen2-vl", name="qwen2vl")
    assert doctor({"model": {"name": str(plain), "trust_remote_code": True}, "data": DATA}, "MM070",
                  fast=True).findings == []


# ------------------------------------------------------------------------------------------ MM071: FA2 per class
# https://github.com/huggingface/transformers/issues/35634, https://github.com/huggingface/transformers/issues/36557
# ("MllamaForConditionalGeneration does not support Flash Attention 2.0 yet"), same error for other classes:
# https://github.com/huggingface/transformers/issues/31485, https://github.com/hiyouga/LlamaFactory/issues/1882.

MLLAMA = "meta-llama/Llama-3.2-11B-Vision-Instruct"


def test_premise_mllama_and_gemma3_lack_flash_attention_2_here():
    """The premise read through compat: this transformers' own flag, which from_pretrained checks first."""
    import transformers

    from mmtune.compat.transformers_internals import flash_attention_support

    assert flash_attention_support(transformers.MllamaForConditionalGeneration) is False
    assert flash_attention_support(transformers.Qwen2VLForConditionalGeneration) is True
    assert flash_attention_support(transformers.AutoModelForCausalLM) is None


def test_flash_attention_2_asked_of_mllama_is_an_error(doctor):
    rep = doctor({"model": {"name": MLLAMA, "attn_implementation": "flash_attention_2"}, "data": DATA}, "MM071",
                 gpu="a100-80gb", fast=True)
    [f] = rep.errors
    assert "MllamaForConditionalGeneration does not support FlashAttention-2" in f.message
    assert f.fix.startswith("model.attn_implementation=auto")


@pytest.mark.parametrize("name", [MLLAMA, "google/gemma-3-4b-it"])
def test_auto_attention_is_sdpa_for_a_class_without_flash_attention_2(tmp_path, name):
    """The shipped recipes (llama3.2_11b_vision_lora, gemma3_4b_lora) say `auto`: on an A100 with flash_attn
    the resolved run used to pick FlashAttention-2, which from_pretrained refuses for these classes. It now
    decides sdpa, with the reason; MM071 reads that decision and stays silent."""
    from doctor_helpers import run_codes

    ctx = _context(tmp_path, {"model": {"name": name}, "data": DATA}, gpu="a100-80gb")
    resolved = ctx.need("resolved")
    assert resolved.attn_implementation == "sdpa"
    assert "does not support FlashAttention-2" in resolved.decision("model.attn_implementation").reason
    assert run_codes(ctx, "MM071").findings == []


def test_auto_attention_stays_flash_attention_2_where_the_class_has_it(tmp_path, doctor):
    ctx = _context(tmp_path, {"model": {"name": "tiny/qwen2-vl"}, "data": DATA}, gpu="a100-80gb")
    assert ctx.need("resolved").attn_implementation == "flash_attention_2"
    assert doctor({"model": {"name": "tiny/qwen2-vl", "attn_implementation": "flash_attention_2"}, "data": DATA},
                  "MM071", gpu="a100-80gb", fast=True).findings == []


# ------------------------------------------------------------------------------------------ caught before: pinned
# https://github.com/unslothai/unsloth/issues/827, https://github.com/QwenLM/Qwen3/issues/406,
# https://github.com/rllm-org/rllm/issues/11 ("FlashAttention only support fp16 and bf16 data type": fp32 weights).

def test_flash_attention_2_in_fp32(doctor):
    rep = doctor({"model": {"name": "tiny/qwen2-vl", "attn_implementation": "flash_attention_2"}, "data": DATA,
                  "train": {"precision": "fp32"}}, "MM025", gpu="a100-80gb", fast=True)
    assert rep.codes("error") == {"MM025"} and "fp16/bf16" in rep.errors[0].message


# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/184 (Qwen2.5-VL LoRA in fp16 on a V100: "Attempting to
# unscale FP16 gradients"), https://github.com/huggingface/transformers/issues/30559 (Idefics2, the same).

def test_fp16_gradients_the_scaler_cannot_unscale(doctor):
    """Trainable weights in fp16 under GradScaler: the resolved run refuses (fp32 master weights are the default,
    and pure half precision needs bf16); the default fp16 run on the V100 keeps them fp32 and is not refused."""
    tree = {"model": {"name": "tiny/qwen2.5-vl"}, "data": DATA, "train": {"precision": "fp16", "fp32_trainable": False}}
    rep = doctor(tree, "MM005", gpu="v100-32gb", fast=True)  # any check that reads the resolved run
    [f] = rep.errors
    assert f.code == "MM098" and "fp16's GradScaler refuses to unscale fp16" in f.message
    assert "fp32_trainable=true" in f.fix
    ok = doctor({**tree, "train": {"precision": "fp16"}}, "MM005", gpu="v100-32gb", fast=True)
    assert ok.errors == []


# https://github.com/hiyouga/LlamaFactory/issues/3949, https://github.com/huggingface/accelerate/issues/2543,
# https://github.com/huggingface/peft/issues/306 ("DeepSpeed Zero-3 is not compatible with ... passing a device_map").

def test_device_map_beside_zero3(doctor):
    rep = doctor({"model": {"name": "tiny/qwen2-vl", "device_map": "auto"}, "data": DATA, "train": {"strategy": "zero3"}},
                 "MM007", fast=True)
    assert rep.codes("error") == {"MM007"} and rep.errors[0].fix.startswith("remove model.device_map")


# https://github.com/huggingface/alignment-handbook/issues/127, https://github.com/huggingface/trl/pull/456,
# https://github.com/mlabonne/llm-course/issues/33 (pad set to eos; the collator masks every pad id, the eos
# too, so the model never learns to stop).

def test_pad_equal_to_eos_still_trains_the_end_token(tmp_path):
    """Labels are the answer spans with their end token, never "every token but pad": with pad == eos the end
    token is still a label, and MM063 (answers end with the token generation stops at) stays silent."""
    import dataclasses

    from doctor_helpers import context_for, run_codes

    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record

    train = tmp_path / "t.jsonl"
    train.write_text(json.dumps({"messages": [{"role": "user", "content": "How many?"},
                                              {"role": "assistant", "content": "3"}]}) + "\n")
    tree = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": str(train), "format": "messages"}}

    def pad_is_eos(p):
        p.tokenizer.pad_token = p.tokenizer.eos_token

    ctx = context_for(tmp_path, tree, pad_is_eos)
    resolved = ctx.need("resolved")
    tok = resolved.processor.tokenizer
    assert tok.pad_token_id == tok.eos_token_id
    record = Record(id="r0", source="t.jsonl:1", messages=[
        {"role": "user", "content": [{"type": "text", "text": "How many?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "3"}]}])
    labels = [int(x) for x in Encoder.for_run(dataclasses.replace(resolved, pad_token_id=tok.eos_token_id))
              .encode(record)["labels"].reshape(-1) if int(x) != -100]
    assert tok.eos_token_id in labels
    assert run_codes(ctx, "MM063").findings == []
