"""The pieces of loading a model: model folders and offline errors, configs, dtype audits, 4-bit layers.

`mmtune.build.load_model(resolved, ...)` puts them together and is the only way mmtune builds a model,
for `train`, `plan` (`meta=True`) and `doctor` alike. What it guarantees, and the failure mode each
guards against:

- one compute dtype for every floating parameter, audited after load, offenders named (4, 9);
- the whole model on the process's device, never `device_map` offload while training (7);
- no parameter left on `meta` before training (8);
- non-reentrant gradient checkpointing, so LoRA + DDP + checkpointing work together (11, 13);
- an offline model that is not cached fails with the missing files and the command that fetches
  them, instead of a hub traceback (24);
- QLoRA quantizes only the decoder's linear layers; vision tower and projector stay in the compute
  dtype, never uint8 (4).

Every automatic decision is logged with its reason and kept in `LoadedModel.decisions`.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ModelLoadError
from .families import Family, family_for_config, get_family
from .tiny import is_tiny, tiny_spec

log = logging.getLogger("mmtune.models")

_DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
           "fp16": "float16", "float16": "float16"}


@dataclass
class LoadedModel:
    model: Any  # transformers PreTrainedModel
    processor: Any  # processor (multimodal) or tokenizer (text)
    family: Family
    config: Any  # the model's transformers config
    attn_implementation: str = "sdpa"
    quantized: bool = False
    decisions: list[str] = field(default_factory=list)  # "what was chosen: why", in order


def as_torch_dtype(dtype):
    """torch.dtype from a torch.dtype or a name ('bf16', 'bfloat16', ...)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPES:
        return getattr(torch, _DTYPES[dtype])
    raise ConfigError(f"unknown dtype {dtype!r}", fix=f"one of: {', '.join(sorted(_DTYPES))}")


def _decide(decisions: list[str], text: str) -> None:
    log.info(text)
    decisions.append(text)


# --------------------------------------------------------------------------- family resolution

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
    if (path / "config.json").is_file() or _cached_snapshot(name, cfg.model.revision) is not None:
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


def build_on_meta(family: Family, config, dtype, attn: str):
    """The model's structure with parameters on meta (never allocated); buffers real, so integer buffers
    such as CLIP's `position_ids` keep their values for the planner's fake step (they are small)."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        model = build_from_config(family, config, dtype, attn)
    # Tied input / output embeddings come out of accelerate's empty init as two meta tensors (checked on
    # transformers 5.24, accelerate 1.15): tie them again, or the plan counts Gemma 3's 262k x d embedding twice.
    model.tie_weights()
    return model


def _offline() -> bool:
    from ..compat.hub import hub_offline

    return hub_offline()


def _cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The local snapshot folder of a hub model, or None when nothing of it is cached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        return None


def missing_files(folder: Path, family: Family | None = None, tokenizer: bool = True,
                  weights: bool = True) -> list[str]:
    """Files a loadable model folder needs and this one lacks (config, weights, tokenizer/processor)."""
    import json

    missing = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    index = folder / "model.safetensors.index.json"
    if not weights:
        pass
    elif index.is_file():
        shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        missing += [s for s in shards if not (folder / s).is_file()]
    elif not (list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))):
        missing.append("model weights (*.safetensors)")
    if tokenizer and not ((folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()
            or (folder / "vocab.json").is_file()):
        missing.append("tokenizer (tokenizer.json / tokenizer_config.json)")
    if family is not None and set(family.modalities) - {"text"}:
        if not any((folder / f).is_file() for f in ("preprocessor_config.json", "processor_config.json")):
            missing.append("preprocessor_config.json")
    return missing


def is_local_name(name: str) -> bool:
    """Whether model.name names a folder on this machine (never downloaded), not a hub id: it exists, starts
    with `.`, `/` or `~`, or has more path parts than ORG/NAME (runs/x/final)."""
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") >= 2


def unreadable_weights(folder: Path) -> list[tuple[str, str]]:
    """(file, why) for each *.safetensors file in `folder` whose header cannot be read: a Git LFS pointer
    (a clone without git-lfs leaves ~130-byte text files named like the weights) or a file cut short.
    transformers stops on them with "SafetensorError: Error while deserializing header: HeaderTooLarge"."""
    import json
    import struct

    bad = []
    for f in sorted(folder.glob("*.safetensors")):
        try:
            size = f.stat().st_size
            with open(f, "rb") as fh:
                head = fh.read(8)
                if head.startswith(b"version "):  # "version https://git-lfs.github.com/spec/v1"
                    bad.append((f.name, f"a Git LFS pointer ({size} bytes), not the weights"))
                    continue
                if len(head) < 8:
                    bad.append((f.name, f"{size} bytes: too short for a safetensors header"))
                    continue
                (n,) = struct.unpack("<Q", head)
                if n > size - 8:
                    bad.append((f.name, f"its header claims {n} bytes but the file holds {size}: cut short"))
                    continue
                json.loads(fh.read(n))
        except (OSError, ValueError) as e:
            bad.append((f.name, f"its header does not parse ({type(e).__name__})"))
    return bad


def model_folder(name: str, revision: str | None = None, family: Family | None = None,
                 tokenizer: bool = True, weights: bool = True) -> Path | str:
    """A local folder holding the model, or the hub id when it may still be downloaded.

    Offline (HF_HUB_OFFLINE=1 or no network) a model that is not complete on disk is a
    ModelLoadError naming the missing files and the `mmtune download` command.
    """
    path = Path(name).expanduser()
    # A hub id is ORG/NAME; anything with more path parts (runs/x/final) is a folder, never downloaded.
    if is_local_name(name):
        if not path.is_dir():
            raise ModelLoadError(f"model folder {name} does not exist", where="model.name",
                                 fix="point model.name at a folder saved with save_pretrained, or use a hub id")
        miss = missing_files(path, family, tokenizer, weights)
        if miss:
            have = ", ".join(sorted(p.name for p in path.iterdir())[:20]) or "nothing"
            raise ModelLoadError(f"model folder {name} lacks: {', '.join(miss)} (it holds: {have})",
                                 where="model.name", fix="save the model with save_pretrained into this folder")
        return path
    snap = _cached_snapshot(name, revision)
    if snap is not None:
        miss = missing_files(snap, family, tokenizer, weights)
        if not miss:
            return snap
        if _offline():
            raise ModelLoadError(f"model {name} is only partly in the local cache ({snap}); missing: {', '.join(miss)}",
                                 where="model.name", fix=f"mmtune download {name}   (on a machine with network)")
        return name
    if _offline():
        need = ["config.json", "model weights (*.safetensors)", "tokenizer (tokenizer.json / tokenizer_config.json)"]
        if family is not None and set(family.modalities) - {"text"}:
            need.append("preprocessor_config.json")
        from huggingface_hub import constants

        raise ModelLoadError(
            f"model {name} is not in the local cache ({constants.HF_HUB_CACHE}) and downloads are off "
            f"(HF_HUB_OFFLINE); missing: {', '.join(need)}",
            where="model.name", fix=f"mmtune download {name}   (then run again; or point model.name at a local folder)")
    return name


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

    src = model_folder(name, revision, weights=False)  # a config is read without the weights (model.weights=random)
    try:
        config = AutoConfig.from_pretrained(str(src), revision=revision, trust_remote_code=trust_remote_code)
        normalize_legacy_rope(config)
        return config
    except OSError as e:
        raise ModelLoadError(f"cannot read the config of {name}: {e}", where="model.name",
                             fix=f"mmtune download {name}") from None
    except ValueError as e:  # custom code without trust_remote_code; a model_type this transformers lacks
        if "trust_remote_code" in str(e) or "custom code" in str(e):
            raise ModelLoadError(f"{name} is defined by its own code (config.json auto_map), which transformers "
                                 "runs only with trust_remote_code", where="model.name",
                                 fix="model.trust_remote_code=true   (after reading the repository's code)") from None
        raise ModelLoadError(f"cannot read the config of {name}: {str(e).splitlines()[0]}", where="model.name",
                             fix="pip install -U transformers, or point model.name at a supported model") from None


# --------------------------------------------------------------------------- decisions

def refuse_device_map(cfg) -> None:
    """Training never offloads layers with `device_map` (failure mode 7)."""
    dm = getattr(cfg.model, "device_map", None)
    if dm not in (None, "", "none"):
        raise ConfigError(
            f"model.device_map={dm!r}: device_map placement/offload is not supported for training "
            "(offloaded layers + gradient checkpointing fail with 'expected device meta but got cuda:0')",
            where="model.device_map",
            fix="remove model.device_map; mmtune puts the whole model on each process's device. If it does not "
                "fit, use adapter.method=qlora, a smaller model, or more GPUs (mmtune plan suggests one)")


# --------------------------------------------------------------------------- audits

def dtype_audit(model, dtype, skip=lambda name: False) -> dict[str, str]:
    """Modules whose floating parameters are not in `dtype`: {module_name: dtype} (failure modes 4, 9).

    Quantized 4-bit weights (uint8 storage) are not floating and are ignored; `skip(name)` leaves out
    parameters kept in another dtype on purpose (e.g. fp32 LoRA weights).
    """
    bad: dict[str, str] = {}
    for name, p in model.named_parameters():
        if p.is_floating_point() and p.dtype != dtype and not skip(name):
            bad.setdefault(name.rsplit(".", 1)[0], str(p.dtype).replace("torch.", ""))
    return bad


def check_dtypes(model, dtype, skip=lambda name: False) -> None:
    bad = dtype_audit(model, dtype, skip)
    if bad:
        listed = ", ".join(f"{m} ({d})" for m, d in list(bad.items())[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise ModelLoadError(f"{len(bad)} module(s) are not in the compute dtype {dtype}: {listed}{more}",
                             fix="cast the model with model.to(dtype) or re-export the checkpoint in one dtype")


def meta_parameters(model) -> list[str]:
    return [n for n, p in model.named_parameters() if p.device.type == "meta"] + \
           [n for n, b in model.named_buffers() if b.device.type == "meta"]


def check_no_meta(model) -> None:
    """No parameter or buffer on `meta` before training (failure mode 8)."""
    bad = meta_parameters(model)
    if bad:
        raise ModelLoadError(
            f"{len(bad)} parameter(s)/buffer(s) are on the meta device (never materialised): {', '.join(bad[:10])}",
            fix="create new modules (projectors, heads) on a real device and initialise them; "
                "load checkpoints without low_cpu_mem_usage/device_map tricks for new modules")


# --------------------------------------------------------------------------- QLoRA

def quantize_decoder_4bit(model, family: Family, compute_dtype, quant_type: str = "nf4",
                          double_quant: bool = True, quant_storage=None) -> int:
    """Replace the decoder's nn.Linear layers by bitsandbytes Linear4bit (NF4), in place.

    Used for models built from a config (tiny twins): there are no pretrained weights to quantize
    while loading, so the random weights are quantized here. The vision tower, audio encoder,
    projector and lm_head are left in the compute dtype. Returns the number of layers replaced.
    `quant_storage`: the packed data's dtype (uint8 by default; the compute dtype under FSDP2:
    resolve/quantization.py). The layer is the weight's `module`, as transformers makes it: bnb then keeps
    the quant state on the layer too, and restores it onto the plain tensor FSDP2 gathers.
    """
    bnb = require_bitsandbytes()
    import torch
    from torch import nn

    decoder = family.components.get("decoder", ())
    others = tuple(p for c, ps in family.components.items() if c != "decoder" for p in ps)
    targets = [(n, m) for n, m in model.named_modules()
               if isinstance(m, nn.Linear) and n.startswith(decoder) and not (n + ".").startswith(others)]
    store = {} if quant_storage is None else {"quant_storage": quant_storage}
    for name, lin in targets:
        q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None,
                              compute_dtype=compute_dtype, compress_statistics=double_quant,
                              quant_type=quant_type, device="meta", **store)
        q.weight = bnb.nn.Params4bit(lin.weight.data.to(compute_dtype).cpu(), requires_grad=False,
                                     compress_statistics=double_quant, quant_type=quant_type, module=q, **store)
        if lin.bias is not None:
            q.bias = nn.Parameter(lin.bias.data.to(compute_dtype), requires_grad=False)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, q)
    device = next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))
    for _, m in model.named_modules():
        if isinstance(m, bnb.nn.Linear4bit):
            m.to(device)  # Params4bit quantizes on its first move to a device
    model.is_loaded_in_4bit = True
    return len(targets)


def _bnb_config(cfg, family: Family, dtype):
    from transformers import BitsAndBytesConfig

    require_bitsandbytes()  # transformers' own message would not name the extra
    # Everything that is not the decoder stays unquantized, in the compute dtype (failure mode 4).
    skip = [p.rstrip(".") for c, ps in family.components.items() if c != "decoder" for p in ps]
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=cfg.adapter.bnb_4bit_quant_type,
                              bnb_4bit_use_double_quant=cfg.adapter.bnb_4bit_double_quant,
                              bnb_4bit_compute_dtype=dtype, llm_int8_skip_modules=skip)


# --------------------------------------------------------------------------- load

def _model_class(family: Family):
    import transformers

    return getattr(transformers, family.model_class)


def build_from_config(family: Family, config, dtype, attn: str):
    """The family's model class built from a config (random init; on whatever device is current)."""
    cls = _model_class(family)
    if family.sub_config and hasattr(config, family.sub_config):  # e.g. the Thinker inside Qwen2.5-Omni
        config = getattr(config, family.sub_config)
    from ..compat.transformers_internals import model_from_config

    return model_from_config(cls, config, dtype=dtype, attn_implementation=attn)


# Config keys that hold special token ids, and the processor attribute / token string they stand for.
_TOKEN_KEYS = {
    "image_token_id": ("image_token", "<|image_pad|>"), "image_token_index": ("image_token", "<|image_pad|>"),
    "video_token_id": ("video_token", "<|video_pad|>"), "video_token_index": ("video_token", "<|video_pad|>"),
    "audio_token_id": ("audio_token", "<|AUDIO|>"), "audio_token_index": ("audio_token", "<|AUDIO|>"),
    "vision_start_token_id": (None, "<|vision_start|>"), "vision_end_token_id": (None, "<|vision_end|>"),
    "audio_start_token_id": (None, "<|audio_bos|>"), "audio_end_token_id": (None, "<|audio_eos|>"),
    "boi_token_index": (None, "<start_of_image>"), "eoi_token_index": (None, "<end_of_image>"),  # Gemma 3
}


def remap_token_ids(config, processor) -> None:
    """Point the config's special-token ids at a stand-in tokenizer's ids for the same tokens.

    A real-size config names hub token ids (151655 = <|image_pad|>); a stand-in processor tokenizes
    with a local tokenizer whose ids differ. Ids only steer matching (which positions are media), so
    matching ids make the model find its media tokens exactly as with the real tokenizer.
    """
    tok = getattr(processor, "tokenizer", processor)
    for holder in [config] + [getattr(config, k) for k in ("text_config", "thinker_config") if hasattr(config, k)]:
        for key, (attr, default) in _TOKEN_KEYS.items():
            if getattr(holder, key, None) is None:
                continue
            kind = attr[:-len("_token")] if attr else None
            # the id the placeholder expands to (processor.<kind>_token_ids: Gemma 3's soft token, not its
            # <start_of_image> placeholder), else the placeholder's
            tid = (getattr(processor, f"{kind}_token_ids", None) or [None])[0] if kind else None
            if tid is None:
                token = getattr(processor, attr, None) if attr else None
                tid = tok.convert_tokens_to_ids(token or default)
            if tid is not None and tid != tok.unk_token_id:
                setattr(holder, key, tid)


def enable_checkpointing(model, context_fn=None) -> None:
    """Non-reentrant activation checkpointing (transformers 5 name first, the v4 name as fallback).
    `context_fn`: torch.utils.checkpoint's (forward context, recomputation context) factory (the planner's)."""
    kwargs = {"use_reentrant": False, **({"context_fn": context_fn} if context_fn is not None else {})}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def apply_checkpointing(model, family, context_fn=None) -> str:
    """Non-reentrant activation checkpointing as a run has it (model.gradient_checkpointing): on each
    transformers part of a brought model, else on the model where it supports it; returns the decision's
    text. `context_fn`: torch.utils.checkpoint's (forward, recomputation) contexts (the planner's routing)."""
    if family.custom:
        from .custom import enable_part_checkpointing

        parts = enable_part_checkpointing(model, context_fn)
        return (f"on (non-reentrant) in {', '.join(parts)}" if parts else
                f"off: no part of {type(model).__name__} supports it")
    if getattr(model, "supports_gradient_checkpointing", False):
        # Non-reentrant: works with frozen inputs, LoRA and DDP (failure modes 11, 13).
        enable_checkpointing(model, context_fn)
        model.config.use_cache = False
        return "on (non-reentrant)"
    return f"off: {type(model).__name__} does not support it"


def is_checkpointing(model) -> bool:
    for attr in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), attr) or hasattr(model, attr):
            return bool(getattr(model, attr))
    return False


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
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(src, trust_remote_code=cfg.model.trust_remote_code)
    except OSError as e:
        raise ModelLoadError(f"cannot load the processor of {cfg.model.name}: {e}", where="model.name",
                             fix=f"mmtune download {cfg.model.name}") from None


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


def require_bitsandbytes():
    """bitsandbytes, or a ConfigError naming the extra that installs it (QLoRA's 4-bit layers need it;
    plans and the doctor use storage-exact stand-ins and do not)."""
    try:
        import bitsandbytes
    except ImportError:
        from ..errors import ConfigError

        raise ConfigError("adapter.method=qlora / lora8bit needs bitsandbytes (its 4-bit / int8 layers), which is "
                          "not installed here", where="adapter.method",
                          fix="pip install 'mmtune[qlora]', or adapter.method=lora") from None
    return bitsandbytes
