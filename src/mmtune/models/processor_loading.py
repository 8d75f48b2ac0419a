"""The processor (multimodal) or tokenizer (text) saved in a model folder, rebuilt from its parts where
torchvision is absent. Media caps are the resolved run's (mmtune.resolve), not decided here."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ModelLoadError
from .families import Family


def load_processor_from(src: str, family: Family, cfg):
    """The processor (multimodal) or tokenizer (text) saved in a model folder. Media caps are applied
    by the resolved run (mmtune.resolve), not here."""
    if family.modalities == ("text",):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(src, trust_remote_code=cfg.model.trust_remote_code)
    import importlib.util

    if family.rebuild_processor and (Path(src) / "processor_config.json").is_file() \
            and (importlib.util.find_spec("torchvision") is None or _saved_by_mmtune(Path(src))):
        from .custom import import_object

        return import_object(family.rebuild_processor, "family.rebuild_processor")(Path(src))
    if "video" in family.modalities and importlib.util.find_spec("torchvision") is None \
            and (Path(src) / "processor_config.json").is_file():
        return processor_without_torchvision(Path(src), family)
    if importlib.util.find_spec("torchvision") is None and _saved_class(Path(src)) == "PixtralProcessor":
        return pixtral_without_torchvision(Path(src))
    from transformers import AutoProcessor

    try:
        proc = AutoProcessor.from_pretrained(src, trust_remote_code=cfg.model.trust_remote_code)
    except OSError as e:
        raise ModelLoadError(f"cannot load the processor of {cfg.model.name}: {e}", where="model.name",
                             fix=f"mmtune download {cfg.model.name}") from None
    except (ImportError, ValueError) as e:  # a processor part needing an optional package (torchvision) not here
        err = _missing_backend(e, cfg.model.name, _saved_class(Path(src)))
        if err is None:
            raise
        raise err from None
    _check_expansion_keys(proc, Path(src))
    return proc


def _check_expansion_keys(proc, folder: Path) -> None:
    """A LLaVA-style processor (LLaVA, LLaVA-NeXT, LLaVA-OneVision ...) writes each image's tokens from its
    `patch_size` and `vision_feature_select_strategy`; a folder saved before transformers moved that expansion
    into the processor (transformers#33424) has neither in its processor_config.json. Its processor then fails
    on every image ("unsupported operand type(s) for //: 'int' and 'NoneType'"), which read as every record's
    fault and left none to train (https://github.com/Blaizzy/mlx-vlm/issues/93,
    https://github.com/MNeMoNiCuZ/joy-caption-batch/issues/28). Said once, as the folder's, with the values from
    its config.json."""
    if not hasattr(proc, "vision_feature_select_strategy") or not hasattr(proc, "patch_size"):
        return
    missing = [k for k in ("patch_size", "vision_feature_select_strategy") if getattr(proc, k, None) is None]
    if not missing:
        return
    try:
        config = _json(folder / "config.json")
    except (OSError, ValueError):
        config = {}
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else {}
    known = {"patch_size": vision.get("patch_size"),
             "vision_feature_select_strategy": config.get("vision_feature_select_strategy")}
    add = ", ".join(f'"{k}": {json.dumps(known[k])}' for k in missing if known[k] is not None)
    raise ModelLoadError(
        f"the processor saved in {folder} has no {' and no '.join(missing)}: it cannot count an image's tokens, so "
        "every image record would fail (a folder saved before transformers' processors expanded the image tokens)",
        where=str(folder / "processor_config.json"),
        fix=(f"add {add} to {folder / 'processor_config.json'} (values from its config.json)" if add else
             f"add {' and '.join(missing)} to {folder / 'processor_config.json'} (the vision tower's patch size and "
             "the model's vision_feature_select_strategy)") + ", or copy the base model's processor files into the folder")


def _missing_backend(e: Exception, name: str, cls: str | None):
    """The clear error for a processor whose class or part needs a package that is not installed, or None when
    `e` is not that failure. Two shapes reach here: transformers' placeholder classes raise an ImportError
    "X requires the torchvision library but it was not found"; an image processor whose only class needs an
    absent backend is a ValueError "Missing optional dependencies: ..." (compat.missing_dependencies)."""
    import re

    from ..compat.transformers_internals import missing_dependencies
    from .requirements import MissingPackageError, install_line

    what = " ".join(str(e).split())
    named = re.search(r"requires the (\S+) library", what)
    pkgs = [named.group(1)] if named else missing_dependencies(e)
    pkgs = ["torchvision" if p.lower() == "torchvision" else p for p in pkgs]  # transformers writes "Torchvision"
    if not pkgs:
        return None
    label = f"{name} ({cls or 'its processor class'})"
    if pkgs == ["torchvision"]:
        return MissingPackageError(f"the processor of {label} needs torchvision, which is not installed, and mmtune "
                                   "has no torchvision-free route for it", where="model.name", fix=install_line(pkgs))
    return MissingPackageError(f"the processor of {label} needs {', '.join(pkgs)}, not installed here "
                               f"({type(e).__name__}: {what[:300]})", where="model.name", fix=install_line(pkgs))


def _saved_by_mmtune(folder: Path) -> bool:
    """The folder's image processor is one of mmtune's (a twin's, saved by a run here): transformers cannot
    name it, with or without torchvision."""
    import transformers

    kind = json.loads((folder / "processor_config.json").read_text()).get("image_processor", {}).get("image_processor_type")
    return bool(kind) and kind not in dir(transformers)  # the lazy module lists every class without importing it


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _saved_class(folder: Path) -> str | None:
    """The processor class a saved folder names (processor_config.json, else preprocessor_config.json)."""
    return _json(folder / "processor_config.json").get("processor_class") \
        or _json(folder / "preprocessor_config.json").get("processor_class")


def pixtral_without_torchvision(folder: Path):
    """A saved PixtralProcessor (Mistral 3, Pixtral-12B) rebuilt from its parts where torchvision is absent:
    transformers' own class (compat/pixtral.py says why it cannot be imported as usual) with the PIL image
    processor, both from the saved settings (a hub folder keeps the image processor's in
    preprocessor_config.json, a folder saved by transformers 5 inside processor_config.json)."""
    from transformers import AutoTokenizer
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    from ..compat.pixtral import pixtral_processor_class

    spec = _json(folder / "processor_config.json")
    ip = spec.get("image_processor") or _json(folder / "preprocessor_config.json")
    ip = PixtralImageProcessorPil.from_dict({k: v for k, v in ip.items() if k not in ("image_processor_type",
                                                                                       "processor_class")})
    keys = ("patch_size", "spatial_merge_size", "image_token", "image_break_token", "image_end_token")
    template = folder / "chat_template.jinja"
    text = template.read_text() if template.is_file() else _json(folder / "chat_template.json").get("chat_template")
    return pixtral_processor_class()(image_processor=ip, tokenizer=AutoTokenizer.from_pretrained(str(folder)),
                                     chat_template=text, **{k: spec[k] for k in keys if k in spec})


def processor_without_torchvision(folder: Path, family: Family):
    """A saved Qwen-style processor rebuilt from its parts when torchvision is absent (CPU machines).

    transformers' video processors import torchvision; the saved video settings are loaded into
    `FramesVideoProcessor` (same patch layout, PIL + numpy), the image part into the PIL image
    processor, so a saved tiny or merged Qwen-VL/Omni folder reloads on a CPU-only machine.
    """
    import transformers
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from ..compat.transformers_internals import make_processor
    from .video_frames import FramesVideoProcessor

    spec = json.loads((folder / "processor_config.json").read_text())
    parts: dict = {"tokenizer": AutoTokenizer.from_pretrained(str(folder))}
    if "image_processor" in spec:
        d = {k: v for k, v in spec["image_processor"].items() if k not in ("image_processor_type", "processor_class")}
        parts["image_processor"] = Qwen2VLImageProcessorPil.from_dict(d)
    if "video_processor" in spec:
        v = spec["video_processor"]
        size = v.get("size") or {}
        parts["video_processor"] = FramesVideoProcessor(
            patch_size=v.get("patch_size", 14), temporal_patch_size=v.get("temporal_patch_size", 2),
            merge_size=v.get("merge_size", 2), min_pixels=v.get("min_pixels") or size.get("shortest_edge", 56 * 56),
            max_pixels=v.get("max_pixels") or size.get("longest_edge", 28 * 28 * 1280),
            image_mean=v.get("image_mean", (0.48145466, 0.4578275, 0.40821073)),
            image_std=v.get("image_std", (0.26862954, 0.26130258, 0.27577711)))
    if "feature_extractor" in spec:
        from transformers import WhisperFeatureExtractor

        d = {k: v for k, v in spec["feature_extractor"].items() if k != "feature_extractor_type"}
        parts["feature_extractor"] = WhisperFeatureExtractor.from_dict(d)
    template = folder / "chat_template.jinja"
    cls = getattr(transformers, spec.get("processor_class") or family.processor_class)
    return make_processor(cls, **parts, chat_template=template.read_text() if template.is_file() else None)
