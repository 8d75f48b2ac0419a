"""Broken setups from the twenty-third batch of public bug reports (docs/doctor.md, "Public bug reports, batch 23:
mixture-of-experts fine-tuning"): Qwen3-MoE, Qwen2-MoE, Mixtral and OLMoE as transformers 5 builds them (fused 3-D
expert weights, a router module of its own), at tiny size with random weights. The misses are fixed (a QLoRA base
that leaves the experts in 16 bits without saying so: MM228 and a load decision; transformers-4 expert / router
names in `adapter.target_modules` refused without saying why), the rest pinned.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from doctor_helpers import context_for, run_codes, sums_jsonl  # noqa: E402

# Each architecture's own MoE knobs at tiny size (4 experts, 2 routed per token); the rest is mmtune.models.tiny.TEXT.
MOE = {
    "qwen3_moe": dict(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                      mlp_only_layers=[]),
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64,
                      decoder_sparse_step=1, mlp_only_layers=[]),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "olmoe": dict(num_experts=4, num_experts_per_tok=2),
}


def _config(model_type: str, **over):
    import transformers

    from mmtune.models.local_tokenizer import make_tokenizer
    from mmtune.models.tiny import TEXT

    tok = make_tokenizer()
    kw = dict(TEXT, vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
              **MOE[model_type], **over)
    return transformers.CONFIG_MAPPING[model_type](**kw), tok


def _model(model_type: str, **over):
    import torch
    import transformers

    config, _ = _config(model_type, **over)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config)


def _folder(tmp_path: Path, model_type: str, **over) -> Path:
    """A saved tiny MoE as a hub checkout has it: config.json, weights, a tokenizer with a chat template."""
    import torch
    import transformers

    config, tok = _config(model_type, **over)
    folder = tmp_path / model_type
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# ----------------------------------------------------------------------------- QLoRA leaves the experts in 16 bits
# https://github.com/bitsandbytes-foundation/bitsandbytes/issues/1849 ("Failed to quant MoE models with fused expert
# weights in transformers v5"), https://github.com/axolotl-ai-cloud/axolotl/issues/3787 (a 30B-A3B QLoRA floor of
# 17-24 GiB only with expert quantization of its own), https://github.com/unslothai/unsloth/issues/3970 (Qwen3-30B-A3B
# bnb-4bit: "high VRAM usage" on an A100 80GB). The plan counted the bf16 experts, but nothing said why a "4-bit"
# 30B-A3B planned 56 GiB: bitsandbytes quantizes nn.Linear only, and the experts are fused 3-D parameters.
def test_mm228_names_the_fused_experts_a_qlora_base_leaves_in_16_bits(tmp_path):
    folder = _folder(tmp_path, "mixtral")
    tree = {"model": {"name": str(folder)}, "data": {"train": sums_jsonl(tmp_path)},
            "adapter": {"method": "qlora", "r": 4}, "train": {"precision": "bf16", "gpu": "a100-80gb"}}
    ctx = context_for(tmp_path, tree)
    found = [f for f in run_codes(ctx, "MM228").findings if f.code == "MM228"]
    assert len(found) == 1 and found[0].severity == "warning", found
    msg = found[0].message
    assert "model.layers.*.mlp.experts.gate_up_proj, model.layers.*.mlp.experts.down_proj" in msg and "stay in bf16" in msg
    share = int(msg.split("% of the decoder's weight bytes")[0].rsplit("(", 1)[1])
    assert share >= 50, msg  # 4 experts of 2 x 128 x 64 against attention's 4 x 64 x 64-ish and the embeddings
    # the same fact is a load decision of the run (plan, doctor, train all load through models/load.py)
    decisions = ctx.need("loaded").decisions
    assert any(d.startswith("qlora: not quantized: model.layers.*.mlp.experts.gate_up_proj") for d in decisions), decisions


def test_mm228_is_silent_on_a_dense_qlora_base(tmp_path):
    tree = {"model": {"name": "tiny/qwen2"}, "data": {"train": sums_jsonl(tmp_path)},
            "adapter": {"method": "qlora", "r": 4}, "train": {"precision": "bf16", "gpu": "a100-80gb"}}
    report = run_codes(context_for(tmp_path, tree), "MM228")
    assert not [f for f in report.findings if f.code == "MM228"] and "MM228" not in {n.code for n in report.not_run}


# ----------------------------------------------------------------------------- transformers-4 names on a 5.x MoE
# https://github.com/InternLM/xtuner/pull/312 ("To avoid adding LoRA for gate layers"), https://github.com/pytorch/
# pytorch/issues/171355 (LoRA on the gating layer: CheckpointError), https://github.com/unslothai/unsloth/issues/2588
# (`mlp.experts.1.gate_proj.lora_A` of per-expert Linear layers): recipes list Mixtral's `w1/w2/w3`, Qwen-MoE's
# per-expert `gate_proj/up_proj/down_proj` or the router `gate`. transformers 5 has none of them as nn.Linear:
# `mmtune train` stopped with "match no linear layer", listing q/k/v/o, without saying why the MLP names vanished.
@pytest.mark.parametrize("model_type, names, router", [
    ("mixtral", ["q_proj", "v_proj", "w1", "w2", "w3"], None),
    ("qwen3_moe", ["q_proj", "gate_proj", "up_proj", "down_proj"], None),
    ("qwen3_moe", ["q_proj", "v_proj", "gate"], "Qwen3MoeTopKRouter"),
    ("olmoe", ["q_proj", "gate"], "OlmoeTopKRouter"),
])
def test_transformers4_moe_names_are_refused_with_the_reason(model_type, names, router):
    from mmtune.adapters import lora_target_names
    from mmtune.errors import ConfigError
    from mmtune.models.families import family_for_config

    model = _model(model_type)
    with pytest.raises(ConfigError) as err:
        lora_target_names(model, family_for_config(model.config), names)
    fix = err.value.fix
    assert "fused 3-D parameters (model.layers.*.mlp.experts.gate_up_proj, model.layers.*.mlp.experts.down_proj)" in fix
    assert "adapter.method=full trains them" in fix
    assert (f"{router} (named gate) is not nn.Linear" in fix) if router else "is not nn.Linear;" not in fix


# ----------------------------------------------------------------------------- pinned: what auto picks on each MoE
# https://github.com/hiyouga/LlamaFactory/issues/8090 (LoRA on the router), xtuner#312: `target_modules=auto` on every
# MoE of transformers 5 reaches the attention (and Qwen2-MoE's dense shared expert), never a router, and says the
# experts stay frozen.
@pytest.mark.parametrize("model_type", sorted(MOE))
def test_auto_lora_leaves_routers_out_and_names_the_frozen_experts(model_type):
    from mmtune.adapters import lora_target_names
    from mmtune.models.families import family_for_config

    model = _model(model_type)
    family = family_for_config(model.config)
    leaves = {n.rsplit(".", 1)[-1] for n in lora_target_names(model, family, "auto")}
    want = {"q_proj", "k_proj", "v_proj", "o_proj"} | ({"gate_proj", "up_proj", "down_proj"} if model_type == "qwen2_moe"
                                                        else set())
    assert leaves == want, leaves
    notes = {k: v for k, v, _ in family.inferred_notes}
    assert notes["model.family.experts"] == "layers.*.mlp.experts.gate_up_proj, layers.*.mlp.experts.down_proj"


# ----------------------------------------------------------------------------- pinned: experts that get no token
# https://github.com/deepspeedai/DeepSpeed/issues/4808, https://github.com/hiyouga/LlamaFactory/issues/2315,
# https://github.com/hiyouga/LlamaFactory/issues/1998, https://github.com/huggingface/accelerate/pull/2662: ZeRO-3
# hangs in reduce-scatter when a rank's batch leaves an expert without tokens (its hooks never fire), and DDP
# stops at parameters without a gradient. transformers 5's experts are one fused parameter per layer, used by
# every forward: a backward that routes one token (2 of 4 experts) still reaches every expert weight.
def test_experts_without_tokens_still_get_a_gradient():
    import torch

    model = _model("mixtral")
    out = model(input_ids=torch.tensor([[5]]), output_router_logits=True)
    picked = [set(torch.topk(r, 2, dim=-1).indices.flatten().tolist()) for r in out.router_logits]
    assert all(len(p) == 2 for p in picked), picked  # two of the four experts idle in every layer
    out.logits.float().sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, missing


# ----------------------------------------------------------------------------- pinned: checkpointing and routing
# https://github.com/pytorch/pytorch/issues/171355, https://github.com/verl-project/verl/issues/7016,
# https://github.com/NVIDIA-NeMo/RL/issues/1203, https://github.com/PrimeIntellect-ai/prime-rl/issues/1009:
# "CheckpointError: A different number of tensors was saved during the original forward and recomputation" on
# Qwen3-MoE: the recomputation routes tokens to other experts (bf16 non-determinism), and a per-expert loop saves
# other tensors. mmtune's checkpointing on transformers' default grouped-matmul experts saves the same tensors
# whatever the routing; the per-expert loop ("eager") is shown failing the same way, so the test can fail.
def _backward_with_routing_changed_in_recomputation(impl: str):
    import torch

    from mmtune.models.checkpointing import apply_checkpointing
    from mmtune.models.families import family_for_config

    model = _model("mixtral")
    model.config._experts_implementation = impl
    model.train()
    assert apply_checkpointing(model, family_for_config(model.config)).startswith("on")
    for layer in model.model.layers:
        calls = {"n": 0}

        def routed(h, _fwd=layer.mlp.gate.forward, _calls=calls):
            logits, scores, idx = _fwd(h)
            _calls["n"] += 1
            return (logits, scores, (idx + 1) % 4) if _calls["n"] % 2 == 0 else (logits, scores, idx)

        layer.mlp.gate.forward = routed
    model(input_ids=torch.tensor([[3, 9, 4, 7, 5]])).logits.float().sum().backward()


def test_checkpointed_moe_survives_other_routing_in_the_recomputation():
    from torch.utils.checkpoint import CheckpointError

    _backward_with_routing_changed_in_recomputation("grouped_mm")  # what mmtune runs (transformers 5's default)
    with pytest.raises(CheckpointError):
        _backward_with_routing_changed_in_recomputation("eager")


# ----------------------------------------------------------------------------- pinned: the router's balancing loss
# https://github.com/huggingface/transformers/issues/44242, https://github.com/hiyouga/LlamaFactory/issues/8090: a
# Mixtral config with output_router_logits on and full fine-tuning: MM124 (written for Qwen3-Omni) reads Mixtral's
# `num_local_experts` too.
def test_mm124_warns_on_a_mixtral_with_router_logits_under_full_training(tmp_path):
    folder = _folder(tmp_path, "mixtral", output_router_logits=True)
    tree = {"model": {"name": str(folder)}, "data": {"train": sums_jsonl(tmp_path)},
            "adapter": {"method": "full"}, "train": {"lr": 1e-5, "precision": "fp32", "device": "cpu"}}
    found = [f for f in run_codes(context_for(tmp_path, tree), "MM124").findings if f.code == "MM124"]
    assert len(found) == 1 and found[0].severity == "warning" and "(4 experts)" in found[0].message, found
