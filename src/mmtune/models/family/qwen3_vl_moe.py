"""Qwen3-VL-MoE (`Qwen/Qwen3-VL-30B-A3B-Instruct` / `-Thinking`, `Qwen/Qwen3-VL-235B-A22B-Instruct` / `-Thinking`;
Qwen3VLMoeForConditionalGeneration): Qwen3-VL's vision tower (16 px patches, 2 x 2 merge, learned position
embeddings, DeepStack mergers feeding early decoder layers) on a Qwen3 *mixture-of-experts* decoder (30B-A3B:
48 layers, 128 experts of 768, 8 routed per token; 235B-A22B: 94 layers, 128 experts of 1536, 8 routed).

Media, positions and video are Qwen3-VL's (models/families.py `qwen3_vl`): the processor repeats
`<|image_pad|>` / `<|video_pad|>` once per merged patch (grid t*h*w / 4) between `<|vision_start|>` /
`<|vision_end|>`, interleaved M-RoPE positions, and a video's frames each preceded by a "<t seconds>" stamp
written as text (so a video record's length needs a real encode: `video_timestamps_in_text`). Same processor
class (`Qwen3VLProcessor`), same module names for the vision tower and its DeepStack mergers.

Mixture of experts, as decided for Qwen3-Omni's thinker (models/family/qwen3_omni.py, whose decoder is the same
Qwen3-MoE block):
- Each layer's experts are two fused 3-D parameters (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`), not
  `nn.Linear`: the default LoRA targets are the attention projections (q/k/v/o in every layer); the experts and
  the router (`mlp.gate`) train only with `adapter.method=full` (the fallback ms-swift's users took on Qwen3-Omni,
  whose decoder is this block, when `all-linear` failed: ms-swift#9321).
- QLoRA's 4-bit reaches the attention linears only; the experts (30B-A3B: 29.0B parameters, 54.0 GiB in bf16, of
  the 56.6 GiB of weights `mmtune plan ... adapter.method=qlora` counts) stay 16-bit (the load decision and doctor
  MM228 say so), and the planner counts what is really resident: every expert.
- The embedded config sets no `output_router_logits` (transformers' default: false; the transcription it was
  taken from lists only some keys, models/configs/qwen3-vl-30b-a3b-instruct.json), and mmtune computes the loss
  from the logits, so no balancing loss is added; doctor MM124 names a config that switches it on.

Packing: on (tests/data/test_packing.py checks packed rows against unpacked ones on this family's twin: same
loss and gradients); the router sees the same tokens either way, since routing is per token.
"""

from __future__ import annotations

from dataclasses import replace

from ..families import FAMILIES, register
from ..tiny import TinySpec, register_tiny

# Same module names as Qwen3-VL: the merger and its DeepStack copies bridge the vision tower into the LM width.
# Qwen3-VL as it is (families.py: components, processor, video timing, 0-1000 boxes, packing), with what differs:
FAMILY = register(replace(
    FAMILIES["qwen3_vl"],
    name="qwen3_vl_moe",
    model_types=("qwen3_vl_moe",),
    model_class="Qwen3VLMoeForConditionalGeneration",
    tiny="tiny/qwen3-vl-moe",
    # "qwen3-vl-30b-a3b-instruct": longer than qwen3_vl's "qwen3-vl", so this family wins for the MoE sizes
    hub_pattern=r"qwen3-vl-\d+b-a\d+b",
    # attention only: the fused experts are not nn.Linear (module docstring)
    lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"),
    # no Liger patch: liger-kernel has an apply_liger_kernel_to_qwen3_vl_moe, but its `swiglu` default differs between
    # releases (True swaps the sparse MoE block for a dense SwiGLU MLP) and it was not verified here (docs/families.md)
    liger=None,
))


def _config(tok, **over):
    from transformers import Qwen3VLMoeConfig

    from ..tiny import _text_common, _vision_ids

    # 4 experts, 2 routed per token, 32-wide each: the routing is real (tokens split between experts) and tiny
    text = _text_common(tok, head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                        output_router_logits=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3],
                                         "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text["hidden_size"],
                  patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0])
    cfg = dict(text_config=text, vision_config=vision, tie_word_embeddings=False, **_vision_ids(tok))
    cfg.update(over)
    return Qwen3VLMoeConfig(**cfg)


def _processor(tok):
    from ..tiny import _qwen3_vl_processor

    return _qwen3_vl_processor(tok)  # the same Qwen3VLProcessor as the dense Qwen3-VL, with the local tokenizer


register_tiny(TinySpec("tiny/qwen3-vl-moe", "qwen3_vl_moe", _config, _processor))
