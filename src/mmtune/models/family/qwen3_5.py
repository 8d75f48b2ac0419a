"""Qwen3.5 (`Qwen/Qwen3.5-0.8B` ... `-27B`; Qwen3_5ForConditionalGeneration): Qwen3-VL's vision tower without
DeepStack (16 px patches, 2 x 2 merge, learned position embeddings, one merger into the LM width) and a *hybrid*
decoder: three of every four layers are linear attention (a gated delta net: `linear_attn`, with in_proj_qkv ->
a causal depthwise conv1d -> the gated delta rule's recurrence -> a gated RMSNorm by in_proj_z -> out_proj), the
fourth is full attention (gated q_proj, q/k norms, partial rotary: a quarter of each head, interleaved M-RoPE).
The processor is transformers' Qwen3VLProcessor (the auto mapping's, with the same tokens and timestamped video).

Kernels. The linear layers ask transformers for flash-linear-attention's `chunk_gated_delta_rule` (Triton) and
Dao's causal-conv1d (CUDA); where either is missing transformers runs its torch reference: the same chunked
recurrence over 64-token chunks in fp32 (a Python loop over the chunks, triangular solves per chunk), correct but
slower (transformers#48718: a 9B fine-tune's step 1.22 s on it, 0.70 s with the kernels; logged once). Both kernels
are GPU-only, so a CPU run always takes the fallback. The run says which path it takes and why
(resolve/linear_attention.py, decision `model.linear_attention`); the planner traces the torch fallback on meta
tensors (the fp32 chunk tensors are what it holds), and doctor MM343 names a CUDA run that would take the fallback,
with the install line.

Packing is off: a linear-attention layer carries its recurrent state (and its conv1d window) along the whole
row, so in a packed row record 2 starts from record 1's state unless the kernel is given the boundaries
(`cu_seqlens`). transformers passes them only from FlashAttention's varlen kwargs, only fla's kernel honours
them, and its torch fallback refuses them ("can't keep packed sequences apart"); position_ids, which keep the
full-attention layers exact (tests/data/test_packing.py), do not reach the recurrence. (ms-swift refuses real packing
without flash-linear-attention for the same reason, "state contamination between samples": modelscope/ms-swift#9865.)

Padding: the collator pads on the right. The linear layers zero padded positions' inputs when given the 2-D
mask (apply_mask_to_padding_states), but on the right nothing real comes after a pad: the recurrence is causal,
so a real token's output never reads a pad, with or without the mask (tests/train/test_padding_mask.py checks it
exact, so the mask is left out under SDPA as for Qwen3-VL). Left padding (generation) is exact too: pads are
zeroed, and a zero key / value leaves the initially-zero state at zero.

LoRA default targets: the full-attention q/k/v/o, every MLP, and the linear layers' big projections
(in_proj_qkv, in_proj_z, out_proj: 3/4 of the layers, most of the token mixing). Not in_proj_a / in_proj_b: their
outputs are one scalar per value head (the decay step and the delta rule's beta, 32 wide at 9B), where a rank-16
update is nearly a full one of the gates that keep the recurrence stable, and serving stacks dropped adapters on
them silently until recently (sglang#30499: `in_proj_ba` LoRA weights "silently dropped at load time"). The
conv1d and A_log / dt_bias are not Linear; they train with adapter.method=full.
"""

from __future__ import annotations

from ..families import Family, register
from ..tiny import TinySpec, register_tiny

COMPONENTS = {
    "projector": ("model.visual.merger.",),  # no DeepStack mergers in Qwen3.5's tower
    "vision": ("model.visual.",),
    "decoder": ("model.language_model.",),
    "lm_head": ("lm_head.",),
}

# (importable module, pip distribution, what it runs) for the linear-attention layers' fast path
LINEAR_ATTENTION_KERNELS = (("fla", "flash-linear-attention", "the chunked gated delta rule (Triton)"),
                            ("causal_conv1d", "causal-conv1d", "the depthwise causal conv1d (CUDA)"))

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                "in_proj_qkv", "in_proj_z", "out_proj")

UNPACKABLE = ("its linear-attention layers carry a recurrent state along the whole row; transformers gives the "
              "kernel record boundaries (cu_seqlens) only from FlashAttention's varlen kwargs, only "
              "flash-linear-attention's kernel reads them and the torch fallback refuses them, so a packed record "
              "would start from the previous record's state")

FAMILY = register(Family(
    name="qwen3_5",
    patch_embed_matmul=True,
    model_types=("qwen3_5",),
    model_class="Qwen3_5ForConditionalGeneration",
    processor_class="Qwen3VLProcessor",
    modalities=("text", "image", "video"),
    components=COMPONENTS,
    tiny="tiny/qwen3_5",
    unmasked_right_padding=True,
    hub_pattern=r"qwen3\.5",
    mrope=True,
    time_aware_video=True,
    video_timestamps_in_text=True,
    lora_targets=LORA_TARGETS,
    linear_attention=LINEAR_ATTENTION_KERNELS,
    unpackable_reason=UNPACKABLE,
))


def text_config(tok, **over):
    """The twin's hybrid decoder: 4 layers, linear attention at 0-2 and full attention at 3 (the real 3:1
    schedule, full_attention_interval=4), linear heads grouped 2 keys : 4 values as the real 16 : 32, and the
    real partial rotary (a quarter of each 32-wide head: 8 dims, M-RoPE sections 2 / 1 / 1, interleaved)."""
    from ..tiny import _text_common

    return _text_common(tok, **{**dict(
        num_hidden_layers=4, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, layer_types=["linear_attention"] * 3 + ["full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True}), **over})


def twin_config(config_class, tok, text: dict, over: dict):
    """A twin's whole config (this family's and the MoE sibling's): `text` with a 2-block vision tower and the
    tokenizer's media ids, then `over`."""
    from ..tiny import _vision_ids

    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text["hidden_size"],
                  patch_size=16, num_position_embeddings=64)
    cfg = dict(text_config=text, vision_config=vision, tie_word_embeddings=False, **_vision_ids(tok))
    cfg.update(over)
    return config_class(**cfg)


def _config(tok, **over):
    from transformers import Qwen3_5Config

    # layer_types: a test's all-full-attention twin (the same weights' shapes minus the linear layers)
    text = text_config(tok, **({"layer_types": over.pop("layer_types")} if "layer_types" in over else {}))
    return twin_config(Qwen3_5Config, tok, text, over)


def twin_processor(tok):
    from ..tiny import _qwen3_vl_processor

    return _qwen3_vl_processor(tok)  # the same class and media settings (Qwen3VLProcessor, 16 px patches)


register_tiny(TinySpec("tiny/qwen3_5", "qwen3_5", _config, twin_processor))
