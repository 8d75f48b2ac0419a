"""Day-0 text families: a model type mmtune's registry does not list, which transformers loads as
`AutoModelForCausalLM` (Gemma-2, Phi-3, Mixtral, Qwen3-MoE, OLMo-2, DeepSeek-V3, ...), trains with a family
inferred from a meta-device build of the model (no weights, no memory).

What is inferred, each a decision of the resolved run with its reason (`model.family.*`):
- the class: transformers' own causal-LM class for the config's model_type;
- the components: the decoder is the module `get_decoder()` returns, the head `lm_head`; modalities: text;
- the LoRA targets (`adapter.target_modules: auto`): the leaf names of every nn.Linear in the decoder, not only
  Llama's q/k/v/o/gate/up/down. The fixed list would match part of a block and silently skip the rest (Phi-3's
  fused `qkv_proj` / `gate_up_proj`: LoRA on o_proj and down_proj alone). MoE routers (`gate`, `router`, `*_gate`)
  are left out: LoRA on expert choice moves tokens between experts. Experts that transformers 5 stores as fused
  3-D parameters (Mixtral, Qwen3-MoE: `experts.gate_up_proj`) are not nn.Linear, so LoRA cannot land there: the
  run says so, and those weights stay frozen under LoRA (full training trains them).
What is not inferred stays at the safe default and is said so: packing off, masked right padding, no Liger.
"""

from __future__ import annotations

from .families import Family

# Linear layers that pick experts, not transform tokens (Qwen2-MoE's shared_expert_gate, routers kept as Linear)
ROUTER_LEAVES = ("gate", "router", "shared_expert_gate")


def causal_lm_class(model_type: str) -> str | None:
    """transformers' AutoModelForCausalLM class name for a model_type, or None."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)


def infer_text_family(config) -> Family | None:
    """A Family for an unlisted causal-LM model type, inferred from its structure; None when transformers has
    no causal-LM class for it (the caller then says the type is unknown)."""
    cls_name = causal_lm_class(getattr(config, "model_type", ""))
    if cls_name is None:
        return None
    from .generic import _meta_model, _qualname

    model = _meta_model(cls_name, config)
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    dec_name = _qualname(model, decoder) if decoder is not None else None
    if not dec_name:
        from ..errors import ModelLoadError

        raise ModelLoadError(f"{cls_name}: cannot find its decoder (no get_decoder())", where="model.name",
                             fix="register a family for it (docs/internals.md, 'Adding a model family')")
    components = {"decoder": (f"{dec_name}.",)}
    if any(n == "lm_head" for n, _ in model.named_children()):
        components["lm_head"] = ("lm_head.",)
    targets, skipped, fused = _lora_leaves(decoder)
    mt = config.model_type
    notes = [("model.family", f"generic:{mt}",
              f"day-0: {mt!r} is not in mmtune's registry; transformers loads it as {cls_name} (AutoModelForCausalLM), "
              "so its family is inferred from the model's structure"),
             ("model.family.decoder", f"{dec_name}.", "the module get_decoder() returns"),
             ("model.family.modalities", "text", "a causal language model"),
             ("model.family.lora_targets", ", ".join(targets),
              "every nn.Linear leaf of the decoder (adapter.target_modules=auto)"
              + (f"; not the routers {', '.join(skipped)} (they pick experts)" if skipped else ""))]
    if fused:
        notes.append(("model.family.experts", ", ".join(fused),
                      "fused 3-D expert weights, not nn.Linear: LoRA cannot land on them, so they stay frozen under "
                      "LoRA (the adapters train attention and any dense layers); adapter.method=full trains them"))
    outside = sorted({n.split(".")[0] for n, _ in model.named_parameters()
                      if not any(n.startswith(p) for ps in components.values() for p in ps)})
    if outside:
        notes.append(("model.family.other", ", ".join(outside),
                      "parameters outside the decoder and lm_head: frozen under LoRA, trained by full training"))
    notes.append(("model.family.unverified", "packing off, masked right padding, no fused kernels",
                  "facts a registered family states after its tiny-twin tests; add the family (docs/internals.md) "
                  "to have them"))
    return Family(name=f"generic:{mt}", model_types=(mt,), model_class=cls_name, modalities=("text",),
                  components=components, lora_targets=tuple(targets), inferred=True, inferred_notes=tuple(notes))


def _lora_leaves(decoder) -> tuple[list[str], list[str], list[str]]:
    """(Linear leaf names for LoRA, router leaves left out, fused 3-D expert parameters by leaf path), in the
    decoder's module order. Paths are shown without block numbers (`layers.*.mlp.experts.gate_up_proj`)."""
    import re

    import torch

    targets, skipped, fused = [], [], []
    for name, mod in decoder.named_modules():
        leaf = name.rpartition(".")[2]
        if isinstance(mod, torch.nn.Linear):
            bucket = skipped if leaf in ROUTER_LEAVES else targets
            if leaf not in bucket:
                bucket.append(leaf)
        for pname, p in mod.named_parameters(recurse=False):
            path = re.sub(r"\.\d+\.", ".*.", f"{name}.{pname}")
            if p.dim() == 3 and path not in fused:
                fused.append(path)
    return targets, skipped, fused
