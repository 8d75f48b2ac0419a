"""Broken setups from the twenty-ninth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 29:
training on pre-quantized or unusual checkpoints: GPTQ, AWQ, FP8, bnb-saved 4-bit, GGUF"): a tiny model folder whose
config.json carries the `quantization_config` published with such a checkpoint, or a GGUF file, run through the
doctor (the fast checks are what `mmtune train` runs before it starts).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from doctor_helpers import context_for, model_folder, run_codes, sums_jsonl

# quantization_config as published in the checkpoints' config.json (Qwen/Qwen2.5-VL-7B-Instruct-AWQ,
# Qwen/Qwen2-VL-7B-Instruct-GPTQ-Int4, Qwen/Qwen3-8B-FP8, RedHatAI's FP8-dynamic compressed-tensors models)
AWQ = {"bits": 4, "group_size": 128, "modules_to_not_convert": ["visual"], "quant_method": "awq", "version": "gemm",
       "zero_point": True}
GPTQ = {"bits": 4, "damp_percent": 0.01, "dataset": None, "desc_act": False, "group_size": 128,
        "modules_in_block_to_quantize": None, "quant_method": "gptq", "static_groups": False, "sym": True,
        "true_sequential": True}
FP8 = {"activation_scheme": "dynamic", "modules_to_not_convert": ["lm_head"], "fmt": "e4m3", "quant_method": "fp8",
       "weight_block_size": [128, 128]}
COMPRESSED = {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
              "ignore": ["lm_head"], "kv_cache_scheme": None, "sparsity_config": {},
              "config_groups": {"group_0": {"targets": ["Linear"], "output_activations": None,
                                            "input_activations": {"dynamic": True, "num_bits": 8, "strategy": "token",
                                                                  "symmetric": True, "type": "float"},
                                            "weights": {"dynamic": False, "num_bits": 8, "strategy": "channel",
                                                        "symmetric": True, "type": "float"}}}}


def _tree(tmp_path, quantization_config, **adapter):
    folder = model_folder(tmp_path, config_json={"quantization_config": quantization_config})
    tree = {"model": {"name": str(folder)}, "data": {"train": sums_jsonl(tmp_path)}, "train": {"max_steps": 2}}
    if adapter:
        tree["adapter"] = adapter
    return tree


def _findings(tmp_path, tree, *codes, gpu=None):
    ctx = context_for(tmp_path, tree)
    if gpu:
        from mmtune.gpus import get_gpu

        ctx.put("gpu", get_gpu(gpu))
    return [f for f in run_codes(ctx, *codes).findings if f.code in codes]


# ----------------------------------------------------------------------------- the backend package is missing
# https://github.com/oobabooga/textgen/issues/7007, https://github.com/chatchat-space/Langchain-Chatchat/issues/3794
# ("Loading an AWQ quantized model requires auto-awq library"), https://github.com/hiyouga/LlamaFactory/issues/6044
# (a GPTQ-Int8 Qwen: install auto_gptq and optimum), https://github.com/hiyouga/LlamaFactory/issues/9662 (fine-tuning
# Qwen3-32B-AWQ stops at check_version("autoawq")). Before MM258 the doctor said only MM040's warning and
# `mmtune train` prepared the data, then died in from_pretrained with transformers' ImportError traceback.
@pytest.mark.parametrize("name,q,package", [
    ("awq", AWQ, "gptqmodel"), ("gptq", GPTQ, "optimum"), ("compressed-tensors", COMPRESSED, "compressed_tensors")])
def test_a_prequantized_checkpoint_without_its_backend_stops_before_the_run(tmp_path, name, q, package):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here: nothing is missing")
    found = _findings(tmp_path, _tree(tmp_path, q), "MM258")
    assert [f.severity for f in found] == ["error"], found
    assert name in found[0].message and "pip install" in found[0].message, found[0].message
    assert "16-bit base model" in found[0].fix
    # planned for another GPU: that machine needs the package, this one need not have it
    (tmp_path / "p").mkdir()
    planned = _findings(tmp_path / "p", _tree(tmp_path / "p", q), "MM258", gpu="a100-80gb")
    assert [f.severity for f in planned] == ["info"], planned


def test_mm258_is_silent_where_the_backend_loads_and_on_a_plain_checkpoint(tmp_path):
    # FP8: transformers' finegrained-FP8 quantizer needs only accelerate (an mmtune dependency); without a GPU of
    # sm_89+ it dequantizes to bf16 (the tiny FP8 twin trained two LoRA steps on the CPU, batch 29's run).
    assert _findings(tmp_path, _tree(tmp_path, FP8), "MM258") == []
    (tmp_path / "plain").mkdir()
    folder = model_folder(tmp_path / "plain")
    tree = {"model": {"name": str(folder)}, "data": {"train": sums_jsonl(tmp_path / "plain")}}
    assert _findings(tmp_path / "plain", tree, "MM258") == []


def test_a_quant_method_this_transformers_does_not_know_is_an_error(tmp_path):
    found = _findings(tmp_path, _tree(tmp_path, {"quant_method": "exl3", "bits": 4}), "MM258")
    assert [f.severity for f in found] == ["error"] and "does not know" in found[0].message, found


# ----------------------------------------------------------------------------- pinned: MM040 on each method
# https://github.com/huggingface/transformers/issues/41516 ("QuantizationMethod.FP8 do not support training",
# DeepSeek V3.1 LoRA), https://github.com/hiyouga/LlamaFactory/issues/8145 (Qwen3 FP8 LoRA),
# https://github.com/modelscope/ms-swift/issues/2686 (Qwen2-VL-GPTQ-Int4 LoRA: the adapter will not merge): full fine-tuning of a
# quantized checkpoint is an error (the run does not start), LoRA on it a warning that names the merge.
@pytest.mark.parametrize("q", [FP8, GPTQ, AWQ], ids=["fp8", "gptq", "awq"])
def test_full_training_of_a_quantized_checkpoint_is_refused_and_lora_warned(tmp_path, q):
    (tmp_path / "full").mkdir()
    full = _findings(tmp_path / "full", _tree(tmp_path / "full", q, method="full"), "MM040")
    assert [f.severity for f in full] == ["error"], full
    lora = _findings(tmp_path, _tree(tmp_path, q, method="lora"), "MM040")
    assert [f.severity for f in lora] == ["warning"] and "merg" in lora[0].message, lora


# ----------------------------------------------------------------------------- GGUF as model.name
# https://github.com/kohya-ss/sd-scripts/issues/1682 ("GGUF finetune?"), https://github.com/p-e-w/heretic/issues/453
# (training LoRA over GGUF): a .gguf path read as "model folder ... does not exist" (the file exists) and a folder
# of .gguf files as "save the model with save_pretrained into this folder"; neither said what GGUF is not.
def test_a_gguf_file_or_folder_as_model_name_names_gguf(tmp_path):
    from mmtune.errors import ModelLoadError
    from mmtune.models.hub_files import model_folder as resolve_folder

    folder = tmp_path / "gguf"
    folder.mkdir()
    gguf = folder / "Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    for name in (gguf, folder):
        with pytest.raises(ModelLoadError) as e:
            resolve_folder(str(name))
        assert "GGUF" in e.value.what and "does not exist" not in e.value.what, e.value.what
        assert "converted from" in e.value.fix
    other = tmp_path / "weights.bin"
    other.write_bytes(b"\0")
    with pytest.raises(ModelLoadError) as e:
        resolve_folder(str(other))
    assert "is a file, not a model folder" in e.value.what


def test_the_doctor_reports_a_gguf_model_name_under_mm024(tmp_path):
    gguf = tmp_path / "model-Q8_0.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    tree = {"model": {"name": str(gguf)}, "data": {"train": sums_jsonl(tmp_path)}}
    found = _findings(tmp_path, tree, "MM024")
    assert [f.severity for f in found] == ["error"] and "GGUF" in found[0].message, found



# ----------------------------------------------------------------------------- a checkpoint saved in bnb 4-bit
def _bnb_saved(tmp_path):
    """A tiny Qwen2 saved by save_pretrained after loading in bitsandbytes 4-bit on the CPU: uint8 blocks and
    `quantization_config` (quant_method bitsandbytes) in config.json, as unsloth's -bnb-4bit uploads are."""
    pytest.importorskip("bitsandbytes")
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2", seed=0)
    model.save_pretrained(tmp_path / "base16")
    tok.save_pretrained(tmp_path / "base16")
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    m4 = AutoModelForCausalLM.from_pretrained(tmp_path / "base16", quantization_config=q, device_map={"": "cpu"})
    m4.save_pretrained(tmp_path / "bnb4")
    tok.save_pretrained(tmp_path / "bnb4")
    return tmp_path / "bnb4"


# https://github.com/unslothai/unsloth/issues/1597 (fine-tuning unsloth/...-bnb-4bit),
# https://github.com/oobabooga/textgen/issues/5330 (LoRA training on a 4-bit quantized checkpoint): MM009 read the
# saved uint8 blocks as "a merged/converted quantized checkpoint?" and its error stopped `mmtune train` for lora and
# qlora alike, though both train two steps on that folder (run, with --skip-checks). Now MM040's warning is all.
def test_a_bnb_saved_4bit_checkpoint_is_not_refused_as_a_broken_merge(tmp_path):
    folder = _bnb_saved(tmp_path)
    tree = {"model": {"name": str(folder)}, "data": {"train": sums_jsonl(tmp_path)}}
    found = _findings(tmp_path, tree, "MM009", "MM040")
    assert [(f.code, f.severity) for f in found] == [("MM040", "warning")], found


# https://github.com/huggingface/peft/issues/2105, https://github.com/unslothai/unsloth/issues/2516,
# https://github.com/unslothai/unsloth-zoo/pull/810: an adapter trained on a 4-bit base merges onto the dequantized
# 4-bit weights. `mmtune export --merge` of a run trained on a bnb-saved checkpoint stopped in transformers ("You
# cannot cast a bitsandbytes model in a new `dtype`"); now the base is dequantized first (transformers' dequantize)
# and the merged model computes what was trained.
def test_merged_export_of_a_run_on_a_bnb_saved_base_computes_what_was_trained(tmp_path):
    import torch
    import yaml
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.export import export
    from mmtune.train.loop import train

    folder = _bnb_saved(tmp_path)
    tree = {"output_dir": str(tmp_path / "run"), "model": {"name": str(folder), "gradient_checkpointing": False},
            "data": {"train": sums_jsonl(tmp_path), "max_length": 64},
            "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "lr": 0.05, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 0, "seed": 0, "save_every": 2},
            "eval": {"every": None}, "logging": {"tensorboard": False}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(tree))
    train(build_run(load_config(tmp_path / "c.yaml", [])))
    out = export(tmp_path / "run", merge=True)
    ids = torch.randint(5, 200, (1, 12), generator=torch.Generator().manual_seed(0))
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, device_map={"": "cpu"})
    trained = PeftModel.from_pretrained(base, str(tmp_path / "run" / "checkpoint-2" / "adapter")).eval()
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert getattr(merged.config, "quantization_config", None) is None
    with torch.no_grad():
        want, got = trained(input_ids=ids).logits, merged(input_ids=ids).logits
        with trained.disable_adapter():
            plain = trained(input_ids=ids).logits
    # bitsandbytes' CPU 4-bit matmul is not bit-exact against the dequantized weights (1e-3 here), so the test
    # is against the adapter's own effect: the merge keeps it, within a small part of its size
    effect, off = (want - plain).abs().max().item(), (got - want).abs().max().item()
    assert effect > 0.05 and off < 0.05 * effect, (effect, off)
    notes = json.loads((out / ".mmtune-export.json").read_text())["notes"]
    assert any("dequantized" in n for n in notes), notes


# ----------------------------------------------------------------------------- qlora on a checkpoint already quantized
# https://github.com/QwenLM/Qwen3-VL/issues/888 (load_in_4bit on Qwen2.5-VL-72B-Instruct-AWQ: "'BitsAndBytesConfig'
# object has no attribute 'get_loading_attributes'"), https://github.com/huggingface/transformers/issues/39939 (the
# same with a BitsAndBytesConfig on MXFP4 gpt-oss-20b): MM040 said "transformers keeps the checkpoint's own
# quantization" (a warning) while transformers 5.24 stops from_pretrained with "The model is quantized with
# FineGrainedFP8Config but you are passing a BitsAndBytesConfig config" (run: `mmtune train` of the tiny FP8 twin with
# adapter.method=qlora, after the data).
@pytest.mark.parametrize("q", [FP8, AWQ, GPTQ], ids=["fp8", "awq", "gptq"])
def test_qlora_on_a_checkpoint_quantized_another_way_is_an_error(tmp_path, q):
    found = _findings(tmp_path, _tree(tmp_path, q, method="qlora"), "MM040")
    assert [f.severity for f in found] == ["error"], found
    assert "BitsAndBytesConfig" in found[0].message and "adapter.method=lora" in found[0].fix


BNB4 = {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
        "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
        "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
        "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}


def test_qlora_on_a_bnb_saved_checkpoint_stays_a_warning(tmp_path):
    # same config class: transformers keeps the checkpoint's quantization (the real bnb-saved twin trained two qlora
    # steps on the CPU, batch 29's run)
    found = _findings(tmp_path, _tree(tmp_path, BNB4, method="qlora"), "MM040")
    assert [f.severity for f in found] == ["warning"], found


def test_a_gguf_hub_repo_is_named_before_any_download(tmp_path):
    # Qwen/Qwen2.5-7B-Instruct-GGUF, unsloth/Qwen2.5-VL-7B-Instruct-GGUF: repos of .gguf files only, no config.json
    from mmtune.errors import ModelLoadError
    from mmtune.models.hub_files import model_folder as resolve_folder

    with pytest.raises(ModelLoadError) as e:
        resolve_folder("unsloth/Qwen2.5-VL-7B-Instruct-GGUF")
    assert "GGUF" in e.value.what and "converted from" in e.value.fix
