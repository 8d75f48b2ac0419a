"""`load_model(resolved, ...)`: the one builder of a model, for `train`, `plan` (`meta=True`) and `doctor` alike.

`mmtune.build.load_model` resolves a bare config for this machine and calls it. One builder, three
materialisations: real weights, structure on `meta`, and (the planner's) `meta` turned into fake tensors.
What it guarantees, and the failure mode each guards against:

- one compute dtype for every floating parameter, audited after load, offenders named (4, 9: audits.py);
- the whole model on the process's device, never `device_map` offload while training (7);
- no parameter left on `meta` before training (8: audits.py);
- non-reentrant gradient checkpointing, so LoRA + DDP + checkpointing work together (11, 13: checkpointing.py);
- an offline model that is not cached fails with the missing files and the command that fetches
  them, instead of a hub traceback (24: hub_files.py);
- QLoRA quantizes only the decoder's linear layers; vision tower and projector stay in the compute
  dtype, never uint8 (4: quantize.py).

Every automatic decision is logged with its reason and kept in `LoadedModel.decisions`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .families import Family

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


def load_model(run, *, device="cpu", dtype=None, meta: bool = False, random_weights: bool = False) -> LoadedModel:
    """Build the model a resolved run (mmtune.resolve.ResolvedRun) names, ready for adapters (module docstring).

    Attention, quantization, precision and the processor come from the resolved run; `dtype` overrides the
    compute dtype (the doctor runs an fp16 plan's tiny twin in bf16 on the CPU)."""
    import torch

    cfg, family = run.cfg, run.family
    dtype = as_torch_dtype(dtype if dtype is not None else run.compute_dtype)
    device = torch.device("meta") if meta else torch.device(device)
    attn = run.attn_implementation
    decisions: list[str] = []
    if meta and attn == "flash_attention_2":
        from .construct import model_lacks_sdpa

        attn = "sdpa"  # FlashAttention-2 cannot be built without CUDA; same O(seq) memory as SDPA's kernels
        if model_lacks_sdpa(family):  # Gemma-2: SDPA cannot soft-cap, and transformers refuses to build it
            attn = "eager"
            _decide(decisions, "planned attention: eager stands in for FlashAttention-2 (this class has no SDPA to "
                               "trace FA2's O(seq) memory with): the plan counts the (seq x seq) scores per layer that "
                               "FA2 never keeps, an upper bound on activations")
    qlora = run.quantization is not None

    model, config, quantize_here = _materialise(run, device, dtype, attn, meta, random_weights, decisions)
    # transformers keeps some modules in fp32 (`_keep_in_fp32_modules`); one compute dtype for every
    # non-quantized floating parameter is what FlashAttention and the optimizer expect (on meta too: the
    # planner counts these bytes).
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
    if run.patch_embed_matmul:  # decided in the resolved run (decide_patch_embed); on meta too
        from .patch_embed import run_patch_embeds_as_matmul

        swapped = run_patch_embeds_as_matmul(model)
        _decide(decisions, f"vision patch embedding: {', '.join(swapped)} run as one matmul" if swapped else
                "vision patch embedding: no non-overlapping Conv3d `patch_embed` found in this model: left as built")
    if quantize_here:
        _quantize_built(model, family, cfg, dtype, meta, decisions, cuda_target=run.target.gpu is not None)
    if qlora:  # every k-bit path (loaded quantized, built then quantized, meta stand-ins): what stayed 16-bit
        from .kbit_coverage import left_out_line

        line = left_out_line(model, family, cfg.adapter.method, dtype)
        if line:
            _decide(decisions, line)
    if not meta:
        from .audits import check_dtypes, check_no_meta

        check_dtypes(model, dtype)
        check_no_meta(model)
    if qlora and cfg.adapter.kbit_upcast:
        _kbit_upcast(model, cfg.adapter.method, decisions)
    if cfg.model.gradient_checkpointing:
        from .checkpointing import apply_checkpointing

        # said whether on or off: a class without checkpointing (JetMoe as a day-0 family) trained silently
        # without it while model.gradient_checkpointing said true
        _decide(decisions, "gradient checkpointing: " + apply_checkpointing(model, family))
    _decide(decisions, f"dtype: {dtype} for every floating parameter; device: {device}")
    return LoadedModel(model=model, processor=run.processor, family=family, config=config,
                       attn_implementation=attn, quantized=qlora and not meta, decisions=decisions)


def _materialise(run, device, dtype, attn: str, meta: bool, random_weights: bool, decisions: list[str]):
    """(model, its config, whether it still needs quantizing): brought by import path, on meta, random weights
    from a full-size config, the tiny twin, or pretrained weights (which from_pretrained quantizes while loading)."""
    import torch

    from .construct import build_from_config, build_on_meta, remap_token_ids
    from .model_config import meta_config, structure_config
    from .tiny import is_tiny

    cfg, family, processor, name = run.cfg, run.family, run.processor, run.cfg.model.name
    qlora = run.quantization is not None
    if family.custom:  # brought by import path (models/custom.py, docs/byo_model.md)
        from .custom import build_custom

        model = build_custom(cfg, family, dtype, meta=meta)
        if not meta:
            model.to(device=device, dtype=dtype)
        _decide(decisions, f"model: {type(model).__name__} from {cfg.model.factory or cfg.model.class_} "
                           f"({name}{', on meta' if meta else ''})")
        return model, getattr(model, "config", None), qlora
    if meta:
        config = structure_config(cfg)
        if processor is not None and not run.exact_text_tokens:
            remap_token_ids(config, processor)
        model = build_on_meta(family, config, dtype, attn)
        _decide(decisions, f"model: {name} built on meta from its config (no weights)")
        return model, config, qlora
    if random_weights and not is_tiny(name):
        # `mmtune plan --verify`: the real architecture at full size with random weights, from the config
        # the plan uses (folder, cache or embedded), built on the device; nothing is downloaded.
        config = meta_config(cfg)
        if config is None:
            from ..errors import ModelLoadError

            raise ModelLoadError(f"no config of {name} on this machine and none embedded", where="model.name",
                                 fix=f"mmtune download {name}   (or use an embedded model / tiny/<family>)")
        if processor is not None and not run.exact_text_tokens:
            remap_token_ids(config, processor)
        with torch.device(device):
            model = build_from_config(family, config, dtype, attn)
        _decide(decisions, f"model: {name} with random weights from its config (no download)")
        return model, config, qlora
    if is_tiny(name):
        from .tiny import build_tiny

        model, _ = build_tiny(name, seed=cfg.train.seed, attn_implementation=attn)
        model.to(device=device, dtype=dtype)
        _decide(decisions, f"model: {name} (tiny random twin of {family.model_class})")
        return model, model.config, qlora
    model = _from_pretrained(run, device, dtype, attn, decisions)
    return model, model.config, False


def _from_pretrained(run, device, dtype, attn: str, decisions: list[str]):
    """Pretrained weights from a local folder or the hub cache (or the hub), quantized while loading under QLoRA."""
    from .construct import model_class
    from .hub_files import model_folder

    cfg, family, name = run.cfg, run.family, run.cfg.model.name
    src = model_folder(name, cfg.model.revision, family)
    kwargs = dict(dtype=dtype, attn_implementation=attn, revision=cfg.model.revision,
                  trust_remote_code=cfg.model.trust_remote_code,
                  # the whole model on this process's device: placement, never offload (failure mode 7)
                  device_map={"": device})
    if run.quantization is not None:
        from .quantize import bnb_config

        kwargs["quantization_config"] = bnb_config(cfg, family, dtype)
        _decide(decisions, f"{cfg.adapter.method}: decoder linear layers -> {run.quantization}, compute dtype "
                           f"{dtype}; vision/audio/projector/lm_head unquantized")
    else:
        _dequantize_untrainable(src, kwargs, dtype, decisions)
    cls = model_class(family)
    try:
        model, info = cls.from_pretrained(str(src), output_loading_info=True, **kwargs)
    except OSError as e:
        from ..errors import ModelLoadError

        raise ModelLoadError(f"cannot load {name}: {e}", where="model.name",
                             fix=f"mmtune download {name}") from None
    from .load_report import check_loading_info

    # a weight the checkpoint lacks stays at random: refused here, transformers only logs it (load_report.py)
    projector_trained = "projector" in run.trainable or any(
        u.startswith("projector") for st in cfg.train.stages for u in st.train)
    for line in check_loading_info(info, family, name, cls.__name__, projector_trained):
        _decide(decisions, line)
    _decide(decisions, f"model: {name} from {src}")
    return model


def _dequantize_untrainable(src, kwargs: dict, dtype, decisions: list[str]) -> None:
    """A checkpoint saved in a method transformers cannot train through (MXFP4: gpt-oss) loads dequantized to the
    compute dtype on every machine, not only where the method's kernels are missing (compat/quantizers.py)."""
    import json
    from pathlib import Path

    try:
        q = json.loads((Path(src) / "config.json").read_text()).get("quantization_config")
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(q, dict):
        return
    from ..compat.quantizers import dequantized_for_training

    config = dequantized_for_training(q)
    if config is not None:
        kwargs["quantization_config"] = config
        _decide(decisions, f"weights: the checkpoint's {q.get('quant_method')} layers load dequantized to {dtype} "
                           "(transformers cannot train through them; their memory is the dequantized model's)")


def _quantize_built(model, family: Family, cfg, dtype, meta: bool, decisions: list[str], cuda_target: bool) -> None:
    """qlora / lora8bit on a model built from a config: storage-exact stand-ins on meta; on real random weights
    (nothing pretrained to quantize while loading) bitsandbytes' k-bit layers, quantized here (models/quantize.py)."""
    from .quantize import plan_decoder, quantize_decoder

    if meta:
        _decide(decisions, plan_decoder(model, cfg, family, dtype, cuda_target=cuda_target))
    else:
        _decide(decisions, quantize_decoder(model, cfg, family, dtype))


def _kbit_upcast(model, method: str, decisions: list[str]) -> None:
    """peft's prepare_model_for_kbit_training: every non-quantized 16-bit weight to fp32 (the 4-bit storage is
    uint8 and stays); the planner builds through here, so it counts the same bytes. A 4-bit layer's bias is
    left alone: bnb.nn.Linear4bit casts it back to the compute dtype (in place) at its first forward, so after
    peft's upcast it is 16-bit again during training anyway."""
    import torch

    bias4 = {id(m.bias) for m in model.modules()  # Linear8bitLt casts its bias to the input's dtype likewise
             if ("4bit" in type(m).__name__ or "8bit" in type(m).__name__) and getattr(m, "bias", None) is not None}
    # 4-bit data stored in a 16-bit dtype (FSDP2: resolve/quantization.py) is packed bits, never upcast
    bias4 |= {id(m.weight) for m in model.modules() if "4bit" in type(m).__name__}
    n = 0
    for p in model.parameters():
        if p.is_floating_point() and p.dtype in (torch.float16, torch.bfloat16) and id(p) not in bias4:
            p.data = p.data.float()
            n += p.numel()
    _decide(decisions, f"{method}: {n:,} non-quantized weights upcast to fp32 (adapter.kbit_upcast)")
