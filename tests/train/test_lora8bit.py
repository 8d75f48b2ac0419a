"""adapter.method=lora8bit: a tiny twin trained on int8 decoder weights (bitsandbytes Linear8bitLt, its CPU
kernels), never silently in fp32; the adapter saved in PEFT's format loads back onto a fresh int8 base and
gives the trained model's loss; the resolved run decides and refuses what it must; the plan's peak matches
the real CPU step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mmtune.config import load_config
from mmtune.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from equivalence_runs import losses, write_config  # noqa: E402

TEXT = ["model.name=tiny/qwen2", "data.max_length=512", "train.precision=fp32", "train.device=cpu",
        "train.grad_accum=2"]


def _decoder_linears(model):
    """Every linear layer of the decoder blocks, as peft leaves them (the base layer under LoRA)."""
    return {n: getattr(m, "base_layer", m) for n, m in model.named_modules()
            if ".layers." in n and n.rsplit(".", 1)[-1].endswith("_proj")}


def test_lora8bit_trains_on_int8_weights_and_its_adapter_loads_back(tmp_path):
    import bitsandbytes as bnb
    import torch
    from peft import PeftModel

    from mmtune.build import build_model_and_adapters, build_run, load_model
    from mmtune.resolve import resolve_here
    from mmtune.train.loop import train

    path = write_config("text-lora", "ddp", tmp_path, 1, tag="int8", adapter={"method": "lora8bit"}, save_every=5)
    cfg = load_config(path, [])
    run = build_run(cfg)
    # the base really is int8: every decoder projection a bnb Linear8bitLt holding 1 byte per weight
    layers = _decoder_linears(run.model)
    assert len(layers) == 14 and all(isinstance(m, bnb.nn.Linear8bitLt) for m in layers.values()), layers
    assert all(m.weight.dtype == torch.int8 and m.weight.element_size() == 1 for m in layers.values())
    assert not any(p.requires_grad for m in layers.values() for p in m.parameters(recurse=False))
    train(run)
    out = Path(cfg.output_dir)
    lo = losses(out)
    assert len(lo) == 5 and lo[-1] < lo[0], lo
    decisions = json.loads((out / "summary.json").read_text())["decisions"]
    assert "lora8bit: 14 decoder linear layers -> int8 (bitsandbytes Linear8bitLt)" in decisions
    assert any(d.startswith("adapter.method: lora8bit: decoder linear layers int8 LLM.int8()") for d in decisions)

    # The adapter: PEFT's format, onto a freshly built int8 base; the same loss as the trained model.
    adapter = out / "checkpoint-5" / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["peft_type"] == "LORA"
    fresh = PeftModel.from_pretrained(load_model(resolve_here(cfg)).model, str(adapter))
    assert all(isinstance(m, bnb.nn.Linear8bitLt) for m in _decoder_linears(fresh).values())
    ids = torch.arange(3, 40).unsqueeze(0)
    run.model.eval()
    fresh.eval()
    with torch.no_grad():
        trained, reloaded = run.model(input_ids=ids, labels=ids).loss, fresh(input_ids=ids, labels=ids).loss
        _, untrained = build_model_and_adapters(resolve_here(cfg))
        base = untrained.model.eval()(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(reloaded, trained)
    assert abs(float(base) - float(trained)) > 1e-4  # the adapter carries what was learned


def test_resolved_run_decides_int8_and_4bit_storage_and_refuses_what_cannot_shard():
    from mmtune.resolve import resolve_here

    r = resolve_here(load_config(None, TEXT + ["adapter.method=lora8bit"]))
    assert r.quantization == "int8 LLM.int8() (outlier threshold 6)" and r.strategy == "ddp"
    with pytest.raises(ConfigError, match="cannot shard 8-bit LoRA's int8"):
        resolve_here(load_config(None, TEXT + ["adapter.method=lora8bit", "train.strategy=fsdp"]))
    with pytest.raises(ConfigError, match="zero3 cannot shard QLoRA"):
        resolve_here(load_config(None, TEXT + ["adapter.method=qlora", "train.strategy=zero3"]))
    q = ["adapter.method=qlora", "train.strategy=fsdp"]
    fsdp = resolve_here(load_config(None, TEXT + q))
    assert fsdp.cfg.adapter.bnb_4bit_quant_storage == "fp32"  # the compute dtype, in the config in force
    assert fsdp.decision("adapter.bnb_4bit_quant_storage").reason.startswith("auto: train.strategy=fsdp")
    bf16 = resolve_here(load_config(None, TEXT[:-3] + q + ["train.precision=bf16"]))
    assert bf16.cfg.adapter.bnb_4bit_quant_storage == "bf16"
    assert resolve_here(load_config(None, TEXT + ["adapter.method=qlora"])).cfg.adapter.bnb_4bit_quant_storage == "uint8"
    with pytest.raises(ConfigError, match="reinterprets packed 4-bit data") as e:
        resolve_here(load_config(None, TEXT[:-3] + q + ["train.precision=bf16", "adapter.bnb_4bit_quant_storage=fp16"]))
    assert e.value.where == "adapter.bnb_4bit_quant_storage"


@pytest.mark.parametrize("ckpt", ["true", "false"])
def test_lora8bit_step_planned_vs_real(ckpt):
    """bnb's CPU training path (MatMul8bitFp): the weight dequantized to the input's dtype in forward and again
    in backward, the input held on the autograd context (outside checkpointing's saved-tensor hooks)."""
    from mmtune.plan.batch import Declared, worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    cfg = load_config(None, TEXT + ["adapter.method=lora8bit", f"model.gradient_checkpointing={ckpt}"])
    res = predict(cfg, declared=Declared(), plan_eval=False)
    assert res.breakdown["quant_state"] == 4 * sum(m.out_features for m in _planned_int8(cfg))  # fp32 row scales
    measured = measure_step(cfg, worst_case_batch(resolve_for_plan(cfg), declared=Declared()).micro_batch)
    assert abs(res.tensor_peak_bytes - measured.peak_allocated_bytes) / measured.peak_allocated_bytes <= 0.02
    assert res.step_time_parts["dequant_s"] > 0  # the int8 (de)quantization traffic is priced


def _planned_int8(cfg):
    from mmtune.plan.model import build_planned_model
    from mmtune.plan.planner import resolve_for_plan

    pm = build_planned_model(resolve_for_plan(cfg))
    return [m for m in pm.model.modules() if type(m).__name__ == "PlannedLinear8bit"]


def test_int8_weights_take_a_byte_each_in_the_plan_of_a_gpu_run():
    """Planned for a GPU: int8 weights at 1 byte + 4 bytes per row, under LoRA's 2-byte weights and over
    QLoRA's half byte; LLM.int8()'s outlier columns counted."""
    from mmtune.plan.batch import Declared
    from mmtune.plan.planner import predict

    gpu = ["model.name=tiny/qwen2", "data.max_length=512", "train.gpu=a100-80gb", "train.precision=bf16"]
    plans = {m: predict(load_config(None, gpu + [f"adapter.method={m}"]), declared=Declared(), plan_eval=False)
             for m in ("lora", "lora8bit", "qlora")}
    int8 = _planned_int8(load_config(None, gpu + ["adapter.method=lora8bit"]))
    numel = sum(m.in_features * m.out_features for m in int8)
    assert plans["lora"].breakdown["weights"] - plans["lora8bit"].breakdown["weights"] == numel  # 2 -> 1 byte
    assert plans["qlora"].breakdown["weights"] < plans["lora8bit"].breakdown["weights"]
    assert any("outlier columns" in d for d in plans["lora8bit"].decisions)
    assert plans["lora8bit"].step_time_parts["dequant_s"] > 0
