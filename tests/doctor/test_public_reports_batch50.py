"""Broken setups from the fiftieth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 50:
low-precision training on Hopper and Blackwell: FP8, torchao, float8 and MXFP4 checkpoints"): fp8 training asked for
in other tools' words, an FP8 checkpoint whose config.json lost its quantization_config, and an MXFP4 gpt-oss
checkpoint. The checkpoints are tiny twins saved as the published ones are: a Qwen2 with float8_e4m3fn linears and
128x128 block scales in `*.weight_scale_inv` (Qwen3-*-FP8, DeepSeek-V3), a gpt-oss with its experts in MXFP4
`*_blocks` / `*_scales`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from doctor_helpers import context_for, refusal_of_key, run_codes, sums_jsonl

# as published in Qwen/Qwen3-8B-FP8's config.json
FP8 = {"activation_scheme": "dynamic", "modules_to_not_convert": ["lm_head"], "fmt": "e4m3", "quant_method": "fp8",
       "weight_block_size": [128, 128]}
# as published in openai/gpt-oss-20b's config.json
MXFP4 = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                             "model.embed_tokens", "lm_head"]}


def _fp8_twin(folder: Path, quantization_config: dict | None = FP8, scales: bool = True) -> Path:
    """The tiny Qwen2 saved with its linears in float8_e4m3fn, each 128x128 block divided by its scale
    (amax / 448) and the scale kept as `<weight>_scale_inv`, as fine-grained FP8 checkpoints are."""
    import torch
    from safetensors.torch import load_file, save_file

    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2", seed=0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    out = {}
    for k, w in load_file(folder / "model.safetensors").items():
        if not k.endswith("proj.weight"):
            out[k] = w
            continue
        rows, cols = math.ceil(w.shape[0] / 128), math.ceil(w.shape[1] / 128)
        scale = torch.empty(rows, cols)
        q = torch.empty(w.shape, dtype=torch.float8_e4m3fn)
        for a in range(rows):
            for b in range(cols):
                block = w[a * 128:(a + 1) * 128, b * 128:(b + 1) * 128].float()
                scale[a, b] = block.abs().max().clamp(min=1e-12) / 448.0
                q[a * 128:(a + 1) * 128, b * 128:(b + 1) * 128] = (block / scale[a, b]).to(torch.float8_e4m3fn)
        out[k] = q
        if scales:
            out[k + "_scale_inv"] = scale
    save_file(out, folder / "model.safetensors", metadata={"format": "pt"})
    raw = json.loads((folder / "config.json").read_text())
    if quantization_config:
        raw["quantization_config"] = quantization_config
    (folder / "config.json").write_text(json.dumps(raw))
    return folder


def _tree(tmp_path, folder: Path, **adapter) -> dict:
    return {"model": {"name": str(folder), "gradient_checkpointing": False},
            "data": {"train": sums_jsonl(tmp_path, 16), "max_length": 64},
            "adapter": {"method": "lora", "r": 4, **adapter},
            "train": {"max_steps": 2, "micro_batch_size": 2, "precision": "bf16", "device": "cpu"},
            "eval": {"every": None}, "logging": {"tensorboard": False}}


def _mm009(tmp_path, folder):
    return [f for f in run_codes(context_for(tmp_path, _tree(tmp_path, folder)), "MM009").findings
            if f.code == "MM009"]


# ----------------------------------------------------------------------------- FP8 weights without their config
# https://github.com/unslothai/unsloth/pull/6978 (fixes unsloth#6200: Qwen3.6-27B-FP8 layers loaded as plain bf16
# Linears, "its weight_scale_inv is discarded as an unexpected key ... roughly 200x too large", perplexity ~2
# million), https://github.com/Lightricks/LTX-2/pull/172 (an fp8 checkpoint upcast without its weight_scale: "values
# ~770x too large", static noise), https://github.com/NVIDIA/TensorRT-Model-Connect/pull/1115 ("reading it appeared to
# work and was silently wrong"). Rebuilt: the tiny block-FP8 twin whose config.json has no quantization_config loads
# with weights ~6000x too large and trained two steps without an error; MM009 called the float8 weights beside fp32
# scales "mixed dtypes ... mmtune casts all to the compute dtype" (an info).
def test_float8_weights_with_scales_and_no_quantization_config_are_an_error(tmp_path):
    folder = _fp8_twin(tmp_path / "fp8", quantization_config=None)
    findings = _mm009(tmp_path, folder)
    assert [f.severity for f in findings] == ["error"], findings
    assert "weight_scale_inv" in findings[0].message and "quantization_config" in findings[0].fix
    from mmtune.doctor.registry import all_checks

    assert next(c for c in all_checks() if c.code == "MM009").fast  # so `mmtune train` stops before it starts


def test_float8_weights_without_scales_are_a_warning_and_a_declared_fp8_checkpoint_is_left_to_mm040(tmp_path):
    bare = _fp8_twin(tmp_path / "bare", quantization_config=None, scales=False)
    assert [f.severity for f in _mm009(tmp_path, bare)] == ["warning"]
    declared = _fp8_twin(tmp_path / "declared")  # as published: MM040's warning says what it is
    assert _mm009(tmp_path, declared) == []


def test_the_declared_fp8_twin_loads_its_scales_and_the_stripped_one_does_not(tmp_path):
    """What MM009's error stands for, measured: transformers dequantizes the declared twin on the CPU (weights within
    fp8 rounding of the original), and takes the stripped twin's raw float8 values as the weights."""
    import torch
    from transformers import AutoModelForCausalLM

    from mmtune.models.tiny import build_tiny

    ref = build_tiny("tiny/qwen2", seed=0)[0].model.layers[0].mlp.down_proj.weight.float()
    for folder, ok in ((_fp8_twin(tmp_path / "declared"), True), (_fp8_twin(tmp_path / "stripped", None), False)):
        w = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).model.layers[0].mlp.down_proj.weight
        ratio = (w.float().std() / ref.std()).item()
        assert (0.9 < ratio < 1.1) if ok else ratio > 100, (folder.name, ratio)


# The same twin past the doctor (`mmtune train --skip-checks`, or a hub model MM009 cannot read before the download):
# the load dropped the 14 scale tensors into one "tensors not used" decision line and trained. Unused weight scales
# now stop the load (models/load_report.py), the net under unsloth#6200's case too (a declared FP8 checkpoint whose
# modules transformers left unconverted; on the CPU transformers dequantizes every module, so that one is read).
def test_the_load_stops_when_a_float8_weight_s_scale_is_left_unused(tmp_path):
    import yaml

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.errors import ModelLoadError

    folder = _fp8_twin(tmp_path / "fp8", quantization_config=None)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(dict(_tree(tmp_path, folder), output_dir=str(tmp_path / "r"))))
    with pytest.raises(ModelLoadError) as err:
        build_run(load_config(tmp_path / "c.yaml", []))
    assert "14 weight scale tensor(s)" in str(err.value) and "quantization_config" in err.value.fix


# ----------------------------------------------------------------------------- fp8 asked for in other tools' words
# https://github.com/hiyouga/LlamaFactory/issues/9500 (`fp8: true`, `fp8_backend: te`: "FP8 Training Silently Falls
# Back to BF16"), https://github.com/kohya-ss/sd-scripts/issues/1553 and https://github.com/huggingface/accelerate/
# issues/1276 (accelerate's mixed_precision=fp8: "requires transformer_engine or MS-AMP", "only on H100s"),
# https://github.com/meta-pytorch/torchtune/issues/2833 (torchao float8 with LoRA). The keys stopped the run as
# "unknown key 'fp8' -> remove it" and train.precision=fp8 as "Input should be 'fp32', 'bf16' or 'fp16'", without
# saying that mmtune has no fp8 training or what it does with an FP8 checkpoint.
@pytest.mark.parametrize("key,value", [("fp8", True), ("fp8_backend", "te"), ("fp8_config", {"backend": "TE"}),
                                       ("fp8_enable_fsdp_float8_all_gather", True)])
def test_fp8_training_keys_say_there_is_no_fp8_training(tmp_path, key, value):
    said = refusal_of_key(tmp_path, key, value)
    assert "did you mean 'train.precision'" in said and "there is no fp8 training" in said, said


@pytest.mark.parametrize("value", ["fp8", "float8_e4m3fn", "mxfp4"])
def test_train_precision_fp8_is_answered_with_bf16(tmp_path, value):
    said = refusal_of_key(tmp_path, "train.precision", value)
    assert "did you mean train.precision=bf16?" in said and "does not train in 8 or 4-bit floats" in said, said


def test_kv_cache_dtype_is_named_a_serving_setting(tmp_path):
    # vLLM's --kv-cache-dtype fp8 carried into a training config
    said = refusal_of_key(tmp_path, "kv_cache_dtype", "fp8")
    assert "inference server's KV-cache setting" in said, said


# https://github.com/huggingface/accelerate/issues/1276, https://github.com/lrzjason/T2ITrainer/issues/54: an
# accelerate config file with mixed_precision: fp8. The run's precision decision said "train.precision=fp8 follows
# the launcher", a value train.precision refuses.
def test_an_accelerate_launcher_asking_for_fp8_is_not_advised_train_precision_fp8(monkeypatch):
    from mmtune.resolve.launch_env import launcher_precision_note

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp8")
    note = launcher_precision_note("bf16")
    assert "train.precision=fp8" not in note and "mmtune does not train in" in note and "trains in bf16" in note


# ----------------------------------------------------------------------------- MXFP4: gpt-oss
def _mxfp4_twin(folder: Path) -> Path:
    """A tiny gpt-oss saved as openai/gpt-oss-20b is: its experts in MXFP4 (`*_blocks` of packed e2m1 pairs,
    `*_scales` of e8m0 exponents), attention, router and embeddings in bf16; the tiny Qwen2's tokenizer."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GptOssConfig, GptOssForCausalLM

    from mmtune.models.tiny import build_tiny

    _, tok = build_tiny("tiny/qwen2", seed=0)
    cfg = GptOssConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                       num_experts_per_tok=2, sliding_window=16, layer_types=["sliding_attention", "full_attention"],
                       max_position_embeddings=256, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    GptOssForCausalLM(cfg).to(torch.bfloat16).save_pretrained(folder)
    tok.save_pretrained(folder)
    g = torch.Generator().manual_seed(0)
    out = {}
    for k, v in load_file(folder / "model.safetensors").items():
        if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            experts, n_in, n_out = v.shape
            out[k + "_blocks"] = torch.randint(0, 256, (experts, n_out, n_in // 32, 16), generator=g, dtype=torch.uint8)
            out[k + "_scales"] = torch.full((experts, n_out, n_in // 32), 120, dtype=torch.uint8)  # 2^-7
        else:
            out[k] = v
    save_file(out, folder / "model.safetensors", metadata={"format": "pt"})
    raw = json.loads((folder / "config.json").read_text())
    raw["quantization_config"] = MXFP4
    (folder / "config.json").write_text(json.dumps(raw))
    return folder


# https://github.com/huggingface/transformers/issues/39969 ("The model you are trying to fine-tune is quantized with
# QuantizationMethod.MXFP4 but that quantization method do not support training", on H100s once `kernels` was
# installed), https://github.com/huggingface/gpt-oss-recipes/issues/27, https://github.com/hiyouga/LlamaFactory/
# issues/8994 (no native MXFP4 training: bf16). transformers keeps gpt-oss's experts in MXFP4 where triton and
# `kernels` are installed (a GPU machine set up for gpt-oss) and dequantizes them only where they are missing (this
# CPU), so the same config trained here and met untrainable MXFP4 layers there. The load now asks for the dequantized
# model on every machine (transformers' own Mxfp4Config(dequantize=True), as OpenAI's fine-tuning recipe does).
def test_an_mxfp4_checkpoint_loads_dequantized_wherever_it_runs(tmp_path):
    import torch
    import yaml

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    folder = _mxfp4_twin(tmp_path / "oss")
    tree = dict(_tree(tmp_path, folder), output_dir=str(tmp_path / "run"))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(tree))
    run = build_run(load_config(tmp_path / "c.yaml", []))
    line = [d for d in run.decisions if "mxfp4 layers load dequantized" in d]
    assert line, run.decisions
    experts = run.model.get_base_model().model.layers[0].mlp.experts
    assert type(experts).__name__ == "GptOssExperts" and experts.gate_up_proj.dtype == torch.bfloat16
    train(run)
    rows = [json.loads(r) for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2]


def test_a_trainable_quantization_is_not_dequantized():
    # fine-grained FP8 trains through transformers' FP8Linear (batch 29): left as the checkpoint says
    from mmtune.compat.quantizers import dequantized_for_training

    assert dequantized_for_training(FP8) is None
    assert dequantized_for_training(MXFP4).dequantize is True


# https://github.com/hiyouga/LlamaFactory/issues/8994 (full fine-tuning gpt-oss-20b: "MXFP4 native training is not
# supported yet", the model trains in bf16). MM040 refused adapter.method=full on it ("cannot train integer weights")
# and warned that LoRA trains on quantized weights; the run loads it dequantized, so both train a bf16 model.
@pytest.mark.parametrize("method", ["lora", "full"])
def test_mm040_says_an_mxfp4_checkpoint_trains_dequantized(tmp_path, method):
    folder = _mxfp4_twin(tmp_path / "oss")
    ctx = context_for(tmp_path, _tree(tmp_path, folder, method=method))
    findings = [f for f in run_codes(ctx, "MM040").findings if f.code == "MM040"]
    assert [f.severity for f in findings] == ["info"], findings
    assert "loads them dequantized" in findings[0].message
