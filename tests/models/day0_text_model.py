"""Tiny random folders of causal LMs the registry does not list (Gemma-2, Phi-3, Qwen3-MoE), saved as a hub
checkout would be (config.json, weights, tokenizer with a chat template): the day-0 text path serves them."""

from __future__ import annotations

from pathlib import Path

# Each architecture's own knobs at tiny size; the shared ones come from mmtune.models.tiny.TEXT.
ARCHS = {
    "gemma2": dict(head_dim=16, sliding_window=16, query_pre_attn_scalar=16),  # tied embeddings, soft-capped logits
    "phi3": dict(),  # fused qkv_proj / gate_up_proj linears
    "qwen3_moe": dict(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      decoder_sparse_step=1, mlp_only_layers=[]),  # fused 3-D expert weights
}


def save_text_model(model_type: str, folder: Path) -> Path:
    import torch
    import transformers

    from mmtune.models.local_tokenizer import make_tokenizer
    from mmtune.models.tiny import TEXT

    tok = make_tokenizer()
    kw = dict(TEXT, vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
              bos_token_id=None, **ARCHS[model_type])
    if model_type == "gemma2":
        kw.pop("tie_word_embeddings")  # Gemma ties its head to the embeddings: keep it so
    config = transformers.CONFIG_MAPPING[model_type](**kw)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
