"""What from_pretrained left at random: transformers' loading info, read once after every pretrained load.

transformers reports checkpoint tensors it could not place ("Some weights of the model checkpoint were not
used") and model weights the checkpoint lacks ("newly initialized") in a log table, and then trains on. Under
mmtune's logging that table is not shown, so a checkpoint missing a decoder layer, or one whose every key
starts with `module.` (a DDP / FSDP wrapper's state dict saved as is), trained on random weights with no word.
Here a weight left at its initialisation stops the load, naming the weights and the checkpoint's own key form,
unless it belongs to the projector the run trains (a composed LLaVA-style model's new projector: MM052's case).
Tensors of the checkpoint that the class does not use are a decision, not an error (a model class that
takes part of a checkpoint, e.g. an Omni thinker beside its talker).
"""

from __future__ import annotations

import os

from ..errors import ModelLoadError

_SHOWN = 4  # names quoted in a message; the count says the rest


def _grouped(names, family) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in sorted(names):
        out.setdefault(family.component_of(n), []).append(n)
    return out


def _quote(names: list[str]) -> str:
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def _shared_prefix(keys) -> str:
    """The dotted prefix every unused checkpoint key starts with ('module.', 'base_model.model.'), or ''."""
    keys = sorted(keys)
    if len(keys) < 2:
        return ""
    common = os.path.commonprefix(keys)
    return common[: common.rfind(".") + 1] if "." in common else ""


def check_loading_info(info: dict, family, name: str, cls_name: str, projector_trained: bool) -> list[str]:
    """Decision lines for what the load left aside; ModelLoadError when a weight the run uses stayed random."""
    missing = set(info.get("missing_keys") or ())
    unused = set(info.get("unexpected_keys") or ())
    lines: list[str] = []
    by_comp = _grouped(missing, family)
    if projector_trained and set(by_comp) == {"projector"}:
        lines.append(f"weights: the projector is not in {name} ({len(by_comp['projector'])} tensor(s) initialised at "
                     "random), and this run trains it")
        by_comp = {}
    left = [n for names in by_comp.values() for n in names]
    if left:
        comps = ", ".join(f"{c} {len(v)}" for c, v in by_comp.items())
        prefix = _shared_prefix(unused)
        if prefix:
            why = (f"every tensor of the checkpoint that was not used starts with {prefix!r} ({len(unused)} of them): "
                   "a training wrapper's state dict saved as is")
            fix = (f"save the weights again without the {prefix!r} prefix (load the state dict, strip it from every "
                   "key, model.save_pretrained), or point model.name at the original model folder")
        elif set(by_comp) == {"lm_head"}:  # LLaVA-NeXT#315, Qwen3-VL-Embedding#89: saved tied, declared untied
            why = "the output layer alone is missing: a checkpoint saved with lm_head tied to the input embeddings"
            fix = ('if this model shares lm_head with its input embeddings, set "tie_word_embeddings": true in its '
                   "config.json (the text_config's for a VLM); otherwise save / download the complete checkpoint")
        else:
            why = (f"the checkpoint has no tensor for them{f' ({len(unused)} of its tensors were not used)' if unused else ''}"
                   ": a partial or converted save")
            fix = (f"point model.name at a complete checkpoint of {cls_name} (or save / download it again); "
                   "a weight left at random would be trained from noise or kept frozen at noise")
        raise ModelLoadError(
            f"{name}: {len(left)} weight(s) of {cls_name} are not in the checkpoint and would start at random "
            f"({comps}: {_quote(left)}); {why}", where="model.name", fix=fix)
    # A float8 weight's scale left unused: its layer was loaded as a plain Linear holding the raw float8 values,
    # each block off by its scale (a config.json without quantization_config, or a module transformers did not
    # convert: unsloth#6200). Tensors of another part of the checkpoint are not, so this one is an error.
    scales = sorted(k for k in unused if k.endswith(("weight_scale_inv", "weight_scale", "scale_weight")))
    if scales:
        raise ModelLoadError(
            f"{name}: {len(scales)} weight scale tensor(s) of the checkpoint were not used by {cls_name} "
            f"({_quote(scales)}): their float8 weights loaded as raw values, each off by its scale",
            where="model.name",
            fix="restore the checkpoint's quantization_config in its config.json (as published), or point "
                "model.name at the model's bf16 release")
    if unused:
        lines.append(f"weights: {len(unused)} tensor(s) of {name} are not used by {cls_name} "
                     f"({_quote(sorted(unused))})")
    return lines
