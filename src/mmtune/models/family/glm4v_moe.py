"""GLM-4.5V / GLM-4.6V (`zai-org/GLM-4.5V`, `zai-org/GLM-4.6V`; Glm4vMoeForConditionalGeneration): GLM-4.1V's
vision tower (14 px patches, 2 x 2 merge, 2-frame temporal patches, the same merger and downsample conv) on a
GLM-4.5-Air *mixture-of-experts* decoder (GLM-4.5V: 46 layers, 4096 wide, 96 query / 8 KV heads of 128; 106B
parameters, 12B active per token).

Media, positions and padding are GLM-4.1V's (models/family/glm4v.py): the processor (the same `Glm4vProcessor`)
repeats `<|image|>` once per merged patch between `<|begin_of_image|>` / `<|end_of_image|>`, adding no text, and
positions are the model's 3-D M-RoPE (half the head dim rotates, sections [8, 12, 12]). Images only, as for
GLM-4.1V: GLM's video prompts carry per-frame timestamps not wired to mmtune's frames processor.

What differs, the decoder (transformers' modeling_glm4v_moe.py):
- Layer 0 is dense (`first_k_dense_replace: 1`: `mlp.gate_proj` / `up_proj` / `down_proj`, 10944 wide; unlike
  GLM-4.1V's fused `gate_up_proj`); layers 1-45 are MoE: 128 routed experts of 1408, 8 per token, stored fused as
  two 3-D parameters (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`), plus one *shared expert* every token
  goes through (`mlp.shared_experts.*`, a plain 1408-wide SwiGLU of nn.Linear).
- The router (`mlp.gate`) is DeepSeek-V3's: sigmoid scores plus a fixed `e_score_correction_bias` buffer (the
  aux-loss-free balancing the checkpoint was trained with) pick the experts; its weight is a bare parameter of a
  custom module, not nn.Linear, and transformers keeps it and the bias in fp32 (`_keep_in_fp32_modules_strict`).
- MTP: GLM-4.5-Air's multi-token-prediction layer is not part of this model. The config has no
  `num_nextn_predict_layers`, transformers builds no such layer and drops `model.layers.46.*` weights on load
  (`_keys_to_ignore_on_load_unexpected`), so training neither uses nor updates it; an exported merge has none.

The MoE decisions Qwen3-Omni made (models/family/qwen3_omni.py) hold here as they are:
- Default LoRA targets: the attention projections (q/k/v/o of all 46 layers). The fused experts are not
  nn.Linear, and peft's `target_parameters` would rebuild all 128 experts' deltas at every access; the router
  stays frozen, keeping the routing its correction bias was balanced for. The experts and the router train only
  with `adapter.method=full`. The shared experts and layer 0's dense MLP are nn.Linear: a run that wants them
  names them in `adapter.target_modules` (the leaves `gate_proj` / `up_proj` / `down_proj` reach exactly those).
- QLoRA's 4-bit reaches the nn.Linear layers only; the experts (99.7B parameters, 94 % of the decoder's) stay 16-bit (the
  load decision and doctor MM228 say so), and the planner holds every expert (all are resident) and traces the
  grouped-matmul forward transformers runs.
- `output_router_logits` is false in the published config and mmtune computes the loss from the logits, so no
  balancing loss is added (this router is balanced by its bias anyway); doctor MM124 names a config that turns it on.

Packing stays off as for GLM-4.1V (not verified by tests/data/test_packing.py for either). Right padding without
the mask (`unmasked_right_padding`) and the patch embedding as one matmul (`patch_embed_matmul`) are GLM-4.1V's
facts and are checked on this family's twin by the same tests (tests/train/test_padding_mask.py,
tests/models/test_patch_embed.py), since both only read the parts the two models share.
"""

from __future__ import annotations

from dataclasses import replace

from ..families import FAMILIES, register
from ..tiny import TinySpec, register_tiny
from .glm4v import _tokenizer, tiny_config_around

# GLM-4.1V as it is (components, processor, M-RoPE, padding), with what differs:
FAMILY = register(replace(
    FAMILIES["glm4v"],
    name="glm4v_moe",
    model_types=("glm4v_moe",),
    model_class="Glm4vMoeForConditionalGeneration",
    tiny="tiny/glm4v-moe",
    # "zai-org/GLM-4.5V", "GLM-4.6V(-FP8)"; not GLM-4.6V-Flash, a dense 9B; "glm4v-moe" is longer than glm4v's "glm4v"
    hub_pattern=r"glm-4\.[56]v(?!-flash)|glm4v[-_]moe",
    # attention only: the fused experts are not nn.Linear, the router is not either (module docstring)
    lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"),
))


def _config(tok, **over):
    from transformers import Glm4vMoeConfig

    from ..tiny import _text_common

    # 3 layers, as the real model is built: layer 0 dense (first_k_dense_replace=1), then a stack of identical MoE layers
    # (4 routed experts, 2 per token, and 1 shared, 32 wide: the routing is real and tiny). With 2 layers the one MoE
    # layer made no stack, and the e2e contract's 12 steps at lr 1e-2 ended on a loss spike (docs/families.md).
    # Half the head dim rotates, as in GLM-4.1V's twin.
    text = _text_common(tok, num_hidden_layers=3, head_dim=16, moe_intermediate_size=32, n_routed_experts=4,
                        num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
                        output_router_logits=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1],
                                         "partial_rotary_factor": 0.5})
    cfg = tiny_config_around(tok, text)
    cfg.update(over)
    return Glm4vMoeConfig(**cfg)


def _processor(tok):
    from .glm4v import _processor as glm4v_processor

    return glm4v_processor(tok)  # the same Glm4vProcessor as GLM-4.1V, with the local tokenizer


register_tiny(TinySpec("tiny/glm4v-moe", "glm4v_moe", _config, _processor, make_tokenizer=_tokenizer))
