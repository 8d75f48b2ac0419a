"""FlashAttention-2 asked of a model class that has none in the installed transformers (Llama 3.2 Vision's
Mllama, Gemma 3 in 5.24): `from_pretrained` refuses before the first step, on every GPU ("... does not support
Flash Attention 2.0 yet": huggingface/transformers#35634, #36557, #31485, hiyouga/LlamaFactory#1882).
`model.attn_implementation=auto` already resolves to sdpa for such a model (the resolved run's decision, with
the reason); this reports the explicit request the resolved run keeps as written.
"""

from __future__ import annotations

from ..findings import error
from ..registry import check


@check("MM071", "FlashAttention-2 is asked only of a model class that has it in this transformers",
       needs=("cfg", "resolved"), fast=True)
def fa2_model_class(ctx):
    from ...models.construct import model_lacks_fa2

    resolved = ctx.need("resolved")
    if resolved.attn_implementation != "flash_attention_2":
        return  # auto decided sdpa (reason in the resolved run), or sdpa / eager asked for
    why = model_lacks_fa2(resolved.family)
    if why:
        yield error(f"model.attn_implementation=flash_attention_2, but {why}: the model does not load, on any GPU",
                    where="model.attn_implementation",
                    fix="model.attn_implementation=auto   (sdpa for this model; FlashAttention-2 where the class has it)")
