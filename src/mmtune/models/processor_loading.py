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

    if family.rebuild_processor and (Path(src) / "processor_config.json").is_file() \
            and (importlib.util.find_spec("torchvision") is None or _saved_by_mmtune(Path(src))):
        from .custom import import_object

        return import_object(family.rebuild_processor, "family.rebuild_processor")(Path(src))
    if "video" in family.modalities and importlib.util.find_spec("torchvision") is None \
            and (Path(src) / "processor_config.json").is_file():
        return processor_without_torchvision(Path(src), family)
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(src, trust_remote_code=cfg.model.trust_remote_code)
    except OSError as e:
        raise ModelLoadError(f"cannot load the processor of {cfg.model.name}: {e}", where="model.name",
                             fix=f"mmtune download {cfg.model.name}") from None
    except (ImportError, ValueError) as e:  # a processor part needing an optional package (torchvision) not here
        from ..compat.transformers_internals import missing_dependencies
        from .requirements import MissingPackageError, install_line

        pkgs = missing_dependencies(e)
        if not pkgs:
            raise
        raise MissingPackageError(f"the processor of {cfg.model.name} needs {', '.join(pkgs)}, not installed here "
                                  f"({type(e).__name__}: {str(e).splitlines()[0][:300]})", where="model.name",
                                  fix=install_line(pkgs)) from None


def _saved_by_mmtune(folder: Path) -> bool:
    """The folder's image processor is one of mmtune's (a twin's, saved by a run here): transformers cannot
    name it, with or without torchvision."""
    import json

    import transformers

    kind = json.loads((folder / "processor_config.json").read_text()).get("image_processor", {}).get("image_processor_type")
    return bool(kind) and kind not in dir(transformers)  # the lazy module lists every class without importing it


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
