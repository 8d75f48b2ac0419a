"""The processor (multimodal) or tokenizer (text) saved in a model folder, rebuilt from its parts where
torchvision is absent. Media caps are the resolved run's (mmtune.resolve), not decided here."""

from __future__ import annotations

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

    if "video" in family.modalities and importlib.util.find_spec("torchvision") is None \
            and (Path(src) / "processor_config.json").is_file():
        return processor_without_torchvision(Path(src), family)
    if importlib.util.find_spec("torchvision") is None and _saved_class(Path(src)) == "PixtralProcessor":
        return pixtral_without_torchvision(Path(src))
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(src, trust_remote_code=cfg.model.trust_remote_code)
    except OSError as e:
        raise ModelLoadError(f"cannot load the processor of {cfg.model.name}: {e}", where="model.name",
                             fix=f"mmtune download {cfg.model.name}") from None
    except ImportError as e:  # transformers' placeholder classes: "X requires the torchvision library but it was not found"
        raise _missing_backend(e, cfg.model.name, _saved_class(Path(src))) from None


def _missing_backend(e: ImportError, name: str, cls: str | None) -> ModelLoadError:
    import re

    what = " ".join(str(e).split())
    lib = re.search(r"requires the (\S+) library", what)
    lib = lib.group(1) if lib else None
    if lib and lib.lower() == "torchvision":
        return ModelLoadError(
            f"the processor of {name} ({cls or 'its processor class'}) needs torchvision, which is not installed, and "
            "mmtune has no torchvision-free route for it", where="model.name",
            fix="pip install torchvision  (the build matching your torch: https://pytorch.org/get-started/locally/)")
    return ModelLoadError(f"the processor of {name} ({cls or 'its processor class'}) cannot be imported: {what[:300]}",
                          where="model.name", fix=f"pip install {lib}" if lib else "install the library the message names")


def _json(path: Path) -> dict:
    import json

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
    import json

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
