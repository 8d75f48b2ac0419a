"""A model's family and transformers config without its weights: from a local folder, the hub cache, an
embedded public config or the tiny twin's (the planner's and the doctor's meta build, `resolve_family`)."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path

from ..errors import ModelLoadError
from .families import Family, family_for_config, get_family
from .hub_files import cached_snapshot, is_local_name, model_folder
from .tiny import is_tiny, tiny_spec


def resolve_family(cfg) -> Family:
    """The family from `model.family`, the tiny twin's spec, or the model's config `model_type`; a model
    brought by model.class / model.factory gets its own (models/custom.py)."""
    from .custom import custom_family, is_custom

    if is_custom(cfg):
        return custom_family(cfg)
    if cfg.model.family:
        return get_family(cfg.model.family)
    if is_tiny(cfg.model.name):
        return get_family(tiny_spec(cfg.model.name).family)
    return family_for_config(structure_config(cfg))


# `mmtune plan --verify --layers N`: the decoder cut to N layers, for the plan and the measured model alike
# (a context variable, set only around both by plan/verify.py).
DECODER_LAYERS: ContextVar[int | None] = ContextVar("mmtune_decoder_layers", default=None)


def meta_config(cfg):
    """A config with no download: a local folder's, a cached one, or an embedded public config; else None."""
    name = cfg.model.name
    path = Path(name).expanduser()
    config = None
    if (path / "config.json").is_file() or cached_snapshot(name, cfg.model.revision) is not None:
        try:
            config = load_hf_config(name, cfg.model.revision, cfg.model.trust_remote_code)
        except ModelLoadError:
            pass
    if config is None and is_local_name(name) and cfg.model.composed_from is not None:
        # The folder a previous stage composes (mmtune compose), planned from its parts before it exists.
        from .compose import planned_llava_config

        config = planned_llava_config(cfg.model.composed_from)
    if config is None:
        from .configs import embedded, hf_config

        spec = embedded(name)
        config = hf_config(spec) if spec is not None else None
    layers = DECODER_LAYERS.get()
    if config is not None and layers is not None:
        text = config.get_text_config()
        if getattr(text, "layer_types", None):
            text.layer_types = list(text.layer_types)[:layers]
        text.num_hidden_layers = layers
    return config


def structure_config(cfg):
    """The config a build without weights uses (the planner's and doctor's meta model, `train.strategy=auto`'s
    parameter count): the tiny twin's, else `meta_config`'s, else the hub's (`load_hf_config`)."""
    if is_tiny(cfg.model.name):
        return load_hf_config(cfg.model.name)
    return meta_config(cfg) or load_hf_config(cfg.model.name, cfg.model.revision, cfg.model.trust_remote_code)


def normalize_legacy_rope(config) -> list[str]:
    """Rename the legacy rope type "mrope" to "default" in every sub-config; returns what it changed.

    M-RoPE is default RoPE plus `mrope_section`. Qwen2-VL's config class converts the legacy name itself;
    Qwen2.5-Omni's public config still says `"type": "mrope"`, which transformers 5's rotary embedding
    rejects with KeyError('mrope') when the model is built. Renaming keeps `mrope_section` and changes
    nothing else.
    """
    changed, seen, stack = [], set(), [("", config)]
    while stack:
        path, c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        rope = getattr(c, "rope_parameters", None)
        if isinstance(rope, dict) and "mrope" in (rope.get("rope_type"), rope.get("type")):
            rope["rope_type"] = "default"
            rope.pop("type", None)
            changed.append(path or "config")
        for key, value in vars(c).items():
            if hasattr(value, "to_dict") and hasattr(value, "model_type"):
                stack.append((f"{path}.{key}" if path else key, value))
    return changed


def load_hf_config(name: str, revision: str | None = None, trust_remote_code: bool = False):
    """The transformers config of a hub id or local folder (cache first), or the tiny twin's config."""
    if is_tiny(name):
        from .tiny import tiny_config_and_processor

        return tiny_config_and_processor(name)[0]
    from transformers import AutoConfig

    if not is_local_name(name) and cached_snapshot(name, revision) is None:
        _no_hub_fails_fast(name)
    src = model_folder(name, revision, weights=False)  # a config is read without the weights (model.weights=random)
    try:
        config = AutoConfig.from_pretrained(str(src), revision=revision, trust_remote_code=trust_remote_code)
        normalize_legacy_rope(config)
        return config
    except OSError as e:
        raise ModelLoadError(f"cannot read the config of {name}: {e}", where="model.name",
                             fix=_download_fix(name)) from None
    except ValueError as e:  # custom code without trust_remote_code; a model_type this transformers lacks
        if "trust_remote_code" in str(e) or "custom code" in str(e):
            raise ModelLoadError(f"{name} is defined by its own code (config.json auto_map), which transformers "
                                 "runs only with trust_remote_code", where="model.name",
                                 fix="model.trust_remote_code=true   (after reading the repository's code)") from None
        if "Should have a `model_type` key" in str(e):  # a hand-made or truncated config.json, not a version matter
            raise _no_model_type(name, Path(src)) from None
        raise ModelLoadError(f"cannot read the config of {name}: {str(e).splitlines()[0]}", where="model.name",
                             fix="pip install -U transformers, or point model.name at a supported model") from None


def _no_model_type(name: str, folder: Path) -> ModelLoadError:
    """config.json without `model_type`: no transformers release reads it, so upgrading is not the fix; the
    model type its `architectures` names, when this transformers knows the class, is."""
    import json

    from transformers.models.auto import modeling_auto

    path = folder / "config.json"
    try:
        archs = json.loads(path.read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        archs = []
    known = {cls: mt for k, v in vars(modeling_auto).items() if k.endswith("_MAPPING_NAMES") and isinstance(v, dict)
             for mt, cls in v.items() if isinstance(cls, str)}
    guess = next((known[a] for a in archs if a in known), None)
    fix = (f'add "model_type": "{guess}" to {path} (its architectures name {archs[0]})' if guess else
           f"copy config.json from the model this folder was trained from into {folder}, or save it with "
           "save_pretrained (which writes model_type)")
    return ModelLoadError(f"the config.json of {name} has no `model_type` key, which transformers needs to pick the "
                          "model class (\"Unrecognized model ... Should have a `model_type` key\"); no transformers "
                          "version reads it", where=str(path), fix=fix)


def _download_fix(name: str) -> str:
    from .configs import nearest_embedded

    near = nearest_embedded(name)
    return f"mmtune download {name}" + (f"   (or plan an embedded model: {', '.join(near)})" if near else "")


def _no_hub_fails_fast(name: str) -> None:
    """A hub id neither cached nor embedded, with downloads off or the hub out of reach: the error at once,
    naming the nearest embedded models, instead of huggingface_hub's ~25 s of retries. Reachable, nothing
    changes: the config is fetched as before."""
    from ..compat.hub import hub_offline, hub_unreachable
    from .configs import embedded

    why = "downloads are off (HF_HUB_OFFLINE)" if hub_offline() else hub_unreachable()
    if why:
        held = "" if embedded(name) is not None else ", mmtune embeds no config of it"
        raise ModelLoadError(f"cannot read the config of {name}: it is not in the local cache{held}, and {why}",
                             where="model.name", fix=_download_fix(name))
