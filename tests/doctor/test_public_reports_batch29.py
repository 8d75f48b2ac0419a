"""Broken setups from the twenty-ninth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 29:
training on pre-quantized or unusual checkpoints: GPTQ, AWQ, FP8, bnb-saved 4-bit, GGUF"): a tiny model folder whose
config.json carries the `quantization_config` published with such a checkpoint, or a GGUF file, run through the
doctor (the fast checks are what `mmtune train` runs before it starts).
"""

from __future__ import annotations

import importlib.util

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
# DeepSeek V3.1 LoRA), https://github.com/hiyouga/LlamaFactory/issues/8145 (Qwen3 FP8 LoRA), https://github.com/
# modelscope/ms-swift/issues/2686 (Qwen2-VL-GPTQ-Int4 LoRA: the adapter will not merge): full fine-tuning of a
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

