"""Map a real model to its tiny twin (`--smoke`), and shrink a real config to tiny dimensions.

`smoke_twin(name)` answers "which tiny random twin has this model's architecture": the family comes
from `model.family`, a local folder's config.json, an embedded public config, a cached hub config,
or a table of known hub-id patterns, in that order. `shrink_config(config)` keeps the class and every
structural setting of a real config (activation, rope layout, patch and merge sizes, feature layer,
token ids) and shrinks only sizes, for tests that need "this exact architecture, small".
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from ..errors import ModelLoadError
from .families import FAMILIES, family_for_hub_name, family_for_model_type, get_family, vision_model_type
from .tiny import is_tiny


def _config_dict_of(name: str) -> dict | None:
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return json.loads((path / "config.json").read_text())
    from .configs import embedded

    spec = embedded(name)
    if spec is not None:
        return spec["config"]
    from .hub_files import cached_snapshot

    snap = cached_snapshot(name, None)
    if snap is not None and (snap / "config.json").is_file():
        return json.loads((snap / "config.json").read_text())
    return None


def family_of_name(name: str, family: str | None = None) -> str:
    if family:
        return get_family(family).name
    config = _config_dict_of(name)
    if config is not None and config.get("model_type") is not None:
        return family_for_model_type(config["model_type"], vision_model_type(config)).name
    fam = family_for_hub_name(name)  # Family.hub_pattern, longest match
    if fam is not None:
        return fam.name
    raise ModelLoadError(f"cannot tell which model family {name!r} belongs to (no config.json on disk, no embedded "
                         "or cached config, and the name matches no known family)",
                         where="model.name", fix="set model.family (e.g. qwen2_vl, llava) in the recipe")


def smoke_twin(model_name: str, family: str | None = None) -> str:
    """The tiny twin name (tiny/<x>) of a model's architecture."""
    if is_tiny(model_name):
        return model_name
    fam = get_family(family_of_name(model_name, family))
    if fam.tiny is None:
        from .requirements import check_requirements

        check_requirements(fam)  # no twin because the model cannot build on this machine: that is the reason
        raise ModelLoadError(f"family {fam.name} has no tiny twin", where="model.name")
    return fam.tiny


# ------------------------------------------------------------------------------------------ shrink

TEXT_SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_window_layers=2)
ENCODER_SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                     depth=2, num_heads=2, embed_dim=32, projection_dim=32, d_model=32, encoder_layers=2,
                     encoder_attention_heads=2, encoder_ffn_dim=64, num_position_embeddings=64)
TEXT_KEYS = ("text_config", "llm_config")
ENCODER_KEYS = ("vision_config", "audio_config")


def _shrink_text(d: dict) -> dict:
    for k, v in TEXT_SIZES.items():
        if k in d:
            d[k] = v
    n = d.get("num_hidden_layers", 2)
    if isinstance(d.get("layer_types"), list):
        d["layer_types"] = d["layer_types"][:n]
    rope = d.get("rope_parameters") or d.get("rope_scaling")
    if isinstance(rope, dict) and "mrope_section" in rope:
        rope["mrope_section"] = [2, 3, 3]  # sums to head_dim / 2
    if isinstance(rope, dict) and rope.get("rope_type") == "mrope":
        # legacy name: M-RoPE is "default" RoPE plus mrope_section (Qwen2-VL's config converts it the
        # same way; Qwen2.5-Omni's does not, and its rotary embedding rejects "mrope")
        rope["rope_type"] = "default"
        if rope.get("type") == "mrope":
            rope["type"] = "default"
    return d


def _shrink_encoder(d: dict, text_hidden: int) -> dict:
    for k, v in ENCODER_SIZES.items():
        if k in d:
            d[k] = v
    for k in ("out_hidden_size", "output_dim"):
        if k in d:
            d[k] = text_hidden
    if "fullatt_block_indexes" in d:
        d["fullatt_block_indexes"] = [1]
    if "deepstack_visual_indexes" in d:
        d["deepstack_visual_indexes"] = [0]
    return d


def shrink_config(real_config, vocab_size: int | None = None):
    """A config of the same class with tiny sizes; structure and token ids kept.

    With `vocab_size` the vocabulary shrinks too: token ids below it are kept, larger ones (image/video/
    audio placeholders, bos/eos) are moved to distinct ids at the top of the new vocabulary.
    """
    cls = type(real_config)
    d = copy.deepcopy(real_config.to_dict())
    for k in ("_name_or_path", "transformers_version", "architectures"):
        d.pop(k, None)
    wrapper = next((f for f in FAMILIES.values() if f.sub_config and d.get("model_type") in f.model_types
                    and f.sub_config in d), None)
    if wrapper is not None:  # e.g. Qwen2.5-Omni: the Thinker inside the Omni config is what trains
        raise ModelLoadError(f"shrink_config takes the trained part's config (config.{wrapper.sub_config}) of "
                             f"{wrapper.name}")
    text_d = next((d[k] for k in TEXT_KEYS if isinstance(d.get(k), dict)), d)
    _shrink_text(text_d)
    for k in ENCODER_KEYS:
        if isinstance(d.get(k), dict):
            _shrink_encoder(d[k], text_d.get("hidden_size", 64))
    if vocab_size is not None:
        top = vocab_size - 1
        moved: dict[int, int] = {}

        def remap(x):
            nonlocal top
            if isinstance(x, int) and not isinstance(x, bool) and x >= vocab_size:
                if x not in moved:
                    moved[x] = top
                    top -= 1
                return moved[x]
            if isinstance(x, list):
                return [remap(i) for i in x]
            return x

        for dd in {id(d): d, id(text_d): text_d}.values():
            if "vocab_size" in dd:
                dd["vocab_size"] = vocab_size
            for k in list(dd):
                if k.endswith(("token_id", "token_ids", "token_index")):
                    dd[k] = remap(dd[k])
    return cls(**{k: v for k, v in d.items() if k != "model_type"})
