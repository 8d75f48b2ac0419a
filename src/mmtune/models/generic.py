"""Day-0 families: a model type mmtune's registry does not list, which transformers loads as
`AutoModelForImageTextToText`, trains with a family inferred from the model itself.

What is inferred, each with its reason (the resolved run prints them as decisions, `model.family.*`):
- the class: transformers' own image-text-to-text class for the config's model_type;
- the components, by structure on a meta-device build (no weights, no memory): the decoder is the module
  `get_decoder()` returns, the vision encoder the child of the base model holding the vision config's
  embeddings (named `vision*` / `visual*` / `*_tower`), the projector the remaining child that maps vision
  width to text width (`*projector*` / `connector` / `merger` / `*adapter*`), the head `lm_head`;
- the modalities: text + image (the auto class's contract), video where the config names a video token.
The placeholder token is not a guess: the encoder reads it from the model's processor (`image_token`),
as for every family. What is not inferred stays at the safe default and is said so: packing off, no
Liger patch, no time-aware video, default LoRA targets (the decoder's linears, whatever their names,
when the usual q/k/v/o/gate/up/down names are absent: adapters.py falls back to all decoder linears).
"""

from __future__ import annotations

from .families import Family

PROJECTOR_WORDS = ("projector", "connector", "merger", "adapter", "aligner", "mm_proj")
VISION_WORDS = ("vision", "visual", "image_tower", "vit")


def image_text_class(model_type: str) -> str | None:
    """transformers' AutoModelForImageTextToText class name for a model_type, or None."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(model_type)


def infer_family(config) -> Family | None:
    """A Family for an unlisted image-text-to-text model type, inferred from its structure; else one for an
    unlisted causal-LM type (models/generic_text.py); None when transformers has neither class for it (the caller
    then says the type is unknown). Image-text first: a type in both maps (Gemma 3) is multimodal."""
    cls_name = image_text_class(getattr(config, "model_type", ""))
    if cls_name is None:
        from .generic_text import infer_text_family

        return infer_text_family(config)
    model = _meta_model(cls_name, config)
    components, notes = _components(model)
    modalities = ("text", "image") + (("video",) if getattr(config, "video_token_id", None) is not None
                                      or getattr(config, "video_token_index", None) is not None else ())
    notes = (("model.family", f"generic:{config.model_type}",
              f"day-0: {config.model_type!r} is not in mmtune's registry; transformers loads it as {cls_name} "
              "(AutoModelForImageTextToText), so its family is inferred from the model's structure"),
             *notes,
             ("model.family.modalities", ", ".join(modalities),
              "image-text-to-text" + (" and the config names a video token" if "video" in modalities else "")),
             ("model.family.lengths", "a real encode per record",
              "how the processor expands a placeholder is not known, so the start-up scan encodes instead of counting"),
             ("model.family.unverified", "packing off, no fused kernels, no time-aware video checks",
              "facts a registered family states after its tiny-twin tests; add the family (docs/internals.md) to "
              "have them"))
    return Family(name=f"generic:{config.model_type}", model_types=(config.model_type,), model_class=cls_name,
                  modalities=modalities, components=components, inferred=True, inferred_notes=notes,
                  # unknown expansion: lengths from a real encode, exact whatever text the processor adds
                  expansion_adds_text=True)


def _meta_model(cls_name: str, config):
    import copy

    import torch
    import transformers

    from ..compat.transformers_internals import model_from_config

    with torch.device("meta"):
        return model_from_config(getattr(transformers, cls_name), copy.deepcopy(config))


def _qualname(model, module) -> str | None:
    return next((n for n, m in model.named_modules() if m is module), None)


def _components(model) -> tuple[dict, list]:
    from ..errors import ModelLoadError

    notes = []
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    dec_name = _qualname(model, decoder) if decoder is not None else None
    if not dec_name:
        raise ModelLoadError(f"{type(model).__name__}: cannot find its language model (no get_decoder())",
                             where="model.name", fix="register a family for it (docs/internals.md, 'Adding a model family')")
    parent_name = dec_name.rpartition(".")[0]
    parent = model.get_submodule(parent_name) if parent_name else model
    siblings = {f"{parent_name}.{n}" if parent_name else n: m for n, m in parent.named_children() if m is not decoder}
    notes.append(("model.family.decoder", f"{dec_name}.", "the module get_decoder() returns"))

    def pick(words):
        return [n for n in siblings if any(w in n.rpartition(".")[2].lower() for w in words)]

    vision = pick(VISION_WORDS)
    projector = [n for n in pick(PROJECTOR_WORDS) if n not in vision]
    if not vision:  # fall back to the largest remaining child: the encoder dwarfs any projector
        rest = [n for n in siblings if n not in projector]
        sizes = {n: sum(p.numel() for p in siblings[n].parameters()) for n in rest}
        vision = [max(sizes, key=sizes.get)] if sizes and max(sizes.values()) > 0 else []
        why_v = "the largest child of the base model besides the decoder"
    else:
        why_v = f"child of the base model named like a vision encoder ({'/'.join(VISION_WORDS)})"
    if not vision:
        raise ModelLoadError(f"{type(model).__name__}: found no vision encoder beside the decoder {dec_name}",
                             where="model.name", fix="register a family for it (docs/internals.md)")
    notes.append(("model.family.vision", ", ".join(f"{n}." for n in vision), why_v))
    if projector:
        notes.append(("model.family.projector", ", ".join(f"{n}." for n in projector),
                      f"child named like a projector ({'/'.join(PROJECTOR_WORDS)})"))
    head = [n for n, _ in model.named_children() if n == "lm_head"]
    leftover = [n for n in siblings if n not in vision and n not in projector
                and any(True for _ in siblings[n].parameters())]
    if leftover:  # trainable parts that are none of these: the projector is the safest home (small, trained in stage 1)
        projector += leftover
        notes.append(("model.family.projector", ", ".join(f"{n}." for n in projector),
                      f"{', '.join(leftover)}: parameters outside the decoder and the vision encoder count as projector"))
    comps = {"decoder": (f"{dec_name}.",), "vision": tuple(f"{n}." for n in vision)}
    if projector:
        comps["projector"] = tuple(f"{n}." for n in projector)
    if head:
        comps["lm_head"] = ("lm_head.",)
    # component_of checks projector before vision, so a projector nested inside the vision tower would win there
    return comps, notes
