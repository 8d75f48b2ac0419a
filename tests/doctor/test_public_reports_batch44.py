"""Broken setups from the forty-fourth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 44:
DeepSpeed ZeRO and FSDP: config files, checkpoints and saving"): HF's usual DeepSpeed JSON with "auto" values under
`accelerate launch`, an accelerate FSDP config, and what a ZeRO-3 run saves. Each is rebuilt on a tiny twin; the two
misses are answered now, and the rows mmtune handled are pinned.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from doctor_helpers import TINY_VL, context_for, run_codes

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
NO_DEEPSPEED = "DeepSpeed is not installed here: pip install 'mmtune[deepspeed]' after a CPU torch"

# HF's usual ZeRO-3 file (the Trainer's docs, LLaMA-Factory's ds_z3_config.json, the Qwen2-VL fine-tuning repos'
# zero3.json): every size "auto", which the HF Trainer fills from its arguments.
HF_ZERO3_JSON = {
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True, "sub_group_size": 1e9,
                          "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                          "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True},
}
BUCKET_KEYS = ("zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
               "zero_optimization.stage3_param_persistence_threshold")

# ----------------------------------------------------------------------------- "auto" in a user's DeepSpeed JSON
# https://github.com/huggingface/accelerate/pull/2207, https://github.com/huggingface/accelerate/pull/2296: outside
# the HF Trainer, accelerate fills `train_micro_batch_size_per_gpu: "auto"` only from a DataLoader handed to prepare
# ("requires you to pass at least one of training or evaluation dataloaders with `batch_size` attribute").
# https://github.com/hiyouga/LlamaFactory/issues/4754, https://github.com/huggingface/transformers/pull/33829,
# https://github.com/huggingface/transformers/issues/22176: the three bucket keys "auto" need model.config.hidden_size,
# which a VLM's config does not have ("Can find neither `model.config.hidden_size` nor `model.config.hidden_sizes`").
# Run on the base (e5509b8): `accelerate launch --config_file` (DEEPSPEED, this JSON) of a tiny Qwen2-VL LoRA run on 2
# CPU ranks stopped both ranks at prepare with the first message; the doctor said nothing (MM048 even advises "auto").


@pytest.mark.skipif(not HAS_DEEPSPEED, reason=NO_DEEPSPEED)
def test_hf_zero3_json_with_auto_values_gets_the_runs_values(tmp_path, launch):
    from accelerate.utils import DeepSpeedPlugin

    from mmtune.launch_config import deepspeed_config, fill_user_autos

    launch(stage=3, ds_json=HF_ZERO3_JSON)
    tree = {**TINY_VL, "train": {"strategy": "zero3", "micro_batch_size": 2, "grad_accum": 3, "max_grad_norm": 0.3,
                                 "device": "cpu"}}
    resolved = context_for(tmp_path, tree).need("resolved")
    plugin = DeepSpeedPlugin()  # what accelerate builds from the launch's environment
    # The premises of both refusals: the micro-batch is "auto" with no DataLoader passed to prepare, and the bucket
    # keys are "auto" on a model whose config has no hidden_size.
    assert plugin.is_auto("train_micro_batch_size_per_gpu") and all(plugin.is_auto(k) for k in BUCKET_KEYS)
    from mmtune.models.tiny import build_tiny

    built = build_tiny("tiny/qwen2-vl")
    model = built[0] if isinstance(built, tuple) else built
    assert not hasattr(model.config, "hidden_size") and not hasattr(model.config, "hidden_sizes")

    line = fill_user_autos(plugin, resolved)
    ours = deepspeed_config(resolved)
    assert plugin.get_value("train_micro_batch_size_per_gpu") == 2
    assert plugin.get_value("gradient_accumulation_steps") == 3
    # accelerate fills "auto" clipping with 1.0 whatever the run says; the run's 0.3 applies
    assert plugin.get_value("gradient_clipping") == 0.3
    for key in BUCKET_KEYS:
        assert plugin.get_value(key) == ours["zero_optimization"][key.rpartition(".")[2]], key
    assert "train_micro_batch_size_per_gpu=2" in line and "gradient_clipping=0.3" in line and "ds_config.json" in line
    # what the user wrote as a number stays the user's
    assert plugin.get_value("zero_optimization.stage3_max_live_parameters") == 1e9


@pytest.mark.skipif(not HAS_DEEPSPEED, reason=NO_DEEPSPEED)
@pytest.mark.slow
@pytest.mark.distributed
def test_accelerate_launch_with_hf_zero3_json_trains_and_saves_a_whole_adapter(tmp_path):
    """~40 s: the report as typed: `accelerate launch --config_file` (DEEPSPEED, HF's ZeRO-3 JSON with "auto")
    of a tiny Qwen2-VL LoRA run on 2 CPU ranks trains its 2 steps under a ZeRO-3 engine and saves an adapter with
    every LoRA tensor whole (not the placeholders of a ZeRO-3 save without the gather: trl#4416)."""
    import torch
    from safetensors.torch import load_file

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
    from torchrun import failure, launch

    ds = tmp_path / "ds_z3.json"
    ds.write_text(json.dumps(HF_ZERO3_JSON))
    acc = tmp_path / "accelerate.yaml"
    acc.write_text(yaml.safe_dump({
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED",
        "deepspeed_config": {"deepspeed_config_file": str(ds), "zero3_init_flag": False}, "num_machines": 1,
        "num_processes": 2, "machine_rank": 0, "main_training_function": "main", "rdzv_backend": "static",
        "same_network": True}))
    run = tmp_path / "run"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(run), "model": {"name": "tiny/qwen2-vl"},
        "data": {"train": "synthetic:arithmetic", "synthetic_train_size": 8, "max_length": 256},
        "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
        "train": {"max_steps": 2, "micro_batch_size": 1, "grad_accum": 1, "lr": 1e-2, "precision": "fp32",
                  "device": "cpu", "scheduler": "constant", "seed": 0, "strategy": "zero3", "save_every_minutes": None},
        "logging": {"tensorboard": False}}))
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": src}
    res = launch(lambda port: [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(acc),
                               "--main_process_port", str(port), "-m", "mmtune.cli", "train", str(cfg)],
                 timeout=900, env=env)
    assert res.returncode == 0, failure(res, 3000)
    decisions = json.loads((run / "summary.json").read_text())["decisions"]
    assert any(d.startswith("DeepSpeed ZeRO-3 engine: 2 ranks") for d in decisions), decisions
    assert any("train_micro_batch_size_per_gpu=1" in d for d in decisions), decisions
    tensors = load_file(str(run / "checkpoint-2" / "adapter" / "adapter_model.safetensors"))
    lora = {k: v for k, v in tensors.items() if "lora_" in k}
    assert lora and all(v.numel() > 0 for v in lora.values())
    assert any(torch.count_nonzero(v) for k, v in lora.items() if "lora_B" in k)  # trained, not B's zero init


# ----------------------------------------------------------------------------- an accelerate FSDP config
# https://github.com/huggingface/peft/issues/1702, https://github.com/ByteDance-Seed/Bagel/issues/120,
# https://github.com/mosaicml/llm-foundry/issues/414: LoRA under FSDP1 with use_orig_params false: "Must flatten
# tensors with uniform requires_grad". https://github.com/huggingface/accelerate/issues/2872,
# https://github.com/huggingface/accelerate/issues/3811, https://github.com/huggingface/accelerate/issues/3748:
# fsdp_transformer_layer_cls_to_wrap naming one class (or a class the model lacks), the vision blocks left out.
# mmtune shards with FSDP2 itself (train.strategy=fsdp) and decides these; but an accelerate FSDP config made every
# Accelerator in the process wrap the model in accelerate's FSDP with the file's settings, and nothing looked: on
# the base, `accelerate launch --config_file fsdp.yaml` (FSDP v1, TRANSFORMER_BASED_WRAP of Qwen2DecoderLayer,
# use_orig_params false, SHARDED_STATE_DICT) passed the pre-start doctor and stopped in Accelerator() on the CPU ranks
# ("There are currently no available devices found"); on GPUs accelerate wraps.

FSDP_LAUNCH = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "1", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
               "FSDP_TRANSFORMER_CLS_TO_WRAP": "Qwen2DecoderLayer", "FSDP_USE_ORIG_PARAMS": "false",
               "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}


def test_an_accelerate_fsdp_launch_is_refused_with_the_runs_own_fsdp(tmp_path, monkeypatch):
    ctx = context_for(tmp_path, TINY_VL)
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert run_codes(ctx, "MM413").findings == []  # no accelerate FSDP launch: silent
    for k, v in FSDP_LAUNCH.items():
        monkeypatch.setenv(k, v)
    found = run_codes(ctx, "MM413").findings
    assert [(f.code, f.severity) for f in found] == [("MM413", "error")], found
    text = " ".join(found[0].message.split())
    assert "fsdp_use_orig_params=false" in text and "fsdp_transformer_layer_cls_to_wrap=Qwen2DecoderLayer" in text
    assert "train.strategy=fsdp" in found[0].fix and "torchrun" in found[0].fix


def test_mmtune_train_stops_at_start_under_an_accelerate_fsdp_launch(tmp_path, monkeypatch):
    from mmtune.commands.train import run_training
    from mmtune.errors import MMTuneError

    for k, v in FSDP_LAUNCH.items():
        monkeypatch.setenv(k, v)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "model": {"name": "tiny/qwen2"},
        "data": {"train": "synthetic:arithmetic", "synthetic_train_size": 8},
        "train": {"max_steps": 1, "device": "cpu", "precision": "fp32"}}))
    with pytest.raises(MMTuneError, match="mmtune doctor found 1 error"):
        run_training(cfg, [])
    assert not (tmp_path / "run" / "checkpoint-1").exists()


# ----------------------------------------------------------------------------- the generated ZeRO-3 config
# https://github.com/hiyouga/LlamaFactory/issues/477, https://github.com/hiyouga/LlamaFactory/issues/647,
# https://github.com/deepspeedai/DeepSpeed/issues/2413, https://github.com/deepspeedai/DeepSpeed/issues/506: a ZeRO-3
# full fine-tune saves only its partitions (global_stepN/), a model needs zero_to_fp32.py, or the saved weights have
# shape 0. Pinned: the config mmtune generates for train.strategy=zero3 has no "auto" left and gathers 16-bit weights
# on save, so every checkpoint holds a loadable adapter/ (or model/); tests/train/test_deepspeed.py exports one from a
# ZeRO-3 full fine-tune, and the accelerate-launch test above checks the adapter's tensors.

def test_the_generated_zero3_config_has_no_auto_and_gathers_on_save(tmp_path):
    from mmtune.launch_config import deepspeed_config

    resolved = context_for(tmp_path, {**TINY_VL, "train": {"strategy": "zero3", "device": "cpu"}}).need("resolved")
    ours = deepspeed_config(resolved)
    assert "auto" not in json.dumps(ours)
    assert ours["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
