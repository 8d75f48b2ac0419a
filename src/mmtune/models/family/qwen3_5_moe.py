"""Qwen3.5's mixture-of-experts models (`Qwen/Qwen3.5-35B-A3B`, `-122B-A10B`, `-397B-A17B`; also Qwen3.6-35B-A3B,
the same class; Qwen3_5MoeForConditionalGeneration): Qwen3.5's vision tower and hybrid decoder (module qwen3_5: 3
linear-attention layers to 1 full-attention layer, the same kernels, packing and padding facts) with each layer's
MLP a sparse MoE block: 256 routed experts (8 per token at 35B-A3B) plus one shared expert, always on, scaled by a
sigmoid `shared_expert_gate`.

Mixture of experts, what it means here (as for Qwen3-Omni, module qwen3_omni):
- The routed experts of a layer are two fused 3-D parameters (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`),
  not `nn.Linear`: peft's `target_modules` cannot wrap them. The default LoRA targets are Qwen3.5's attention and
  linear-attention projections plus the shared expert's `gate_proj` / `up_proj` / `down_proj` -- dense
  `nn.Linear`s every token goes through, given to peft by full name (adapters.py), so no expert is reached
  (tests/models/test_qwen3_5_family.py checks it). The routed experts and the router (`mlp.gate`) train only with
  adapter.method=full; a frozen router keeps the routing the checkpoint was balanced for.
- QLoRA's 4-bit reaches the `nn.Linear`s only: the routed experts (most of the decoder) stay in the compute dtype;
  the planner counts what is really resident, since it builds the same model.
- The planner holds every expert's weights and traces transformers' grouped-mm experts (each token through its
  top-k only).
- Router load-balancing loss: the published config has `output_router_logits` unset (false) and
  `router_aux_loss_coef: 0.001`; mmtune computes the loss without passing labels, so transformers' aux loss is
  neither computed nor added. Doctor MM124 names a config that switches it on.
"""

from __future__ import annotations

from dataclasses import replace

from ..families import register
from ..tiny import TinySpec, register_tiny
from .qwen3_5 import FAMILY as DENSE
from .qwen3_5 import text_config, twin_config, twin_processor

# attention + linear attention + the shared expert's dense MLP; never the fused routed experts (not nn.Linear)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj",
                "gate_proj", "up_proj", "down_proj")

# Qwen3.5 as it is (module qwen3_5: components, kernels, no packing, padding), with what differs:
FAMILY = register(replace(
    DENSE,
    name="qwen3_5_moe",
    model_types=("qwen3_5_moe",),
    model_class="Qwen3_5MoeForConditionalGeneration",
    tiny="tiny/qwen3_5_moe",
    hub_pattern=r"qwen3\.[56]-\d+b-a\d+b",  # Qwen3.5-35B-A3B, Qwen3.6-35B-A3B: longer than qwen3_5's match
    lora_targets=LORA_TARGETS,
))


def _config(tok, **over):
    from transformers import Qwen3_5MoeConfig

    # 4 experts, 2 routed per token, 32 wide, and a 32-wide shared expert: the routing is real and tiny
    text = text_config(tok, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=32, output_router_logits=False)
    text.pop("intermediate_size")  # the MoE text config has none (each MLP is experts + the shared expert)
    return twin_config(Qwen3_5MoeConfig, tok, text, over)


register_tiny(TinySpec("tiny/qwen3_5_moe", "qwen3_5_moe", _config, twin_processor))
