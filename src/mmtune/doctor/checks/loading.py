"""Loading and precision checks (failure modes 4, 8, 9, 24 and the model's own limits)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ..findings import error, info, warning
from ..registry import check


@check("MM024", "the model is available offline (or will be downloaded)", needs=("cfg",), fast=True,
       failure_mode=24, claims=("processor_info:ModelLoadError", "loaded:ModelLoadError", "resolved:ModelLoadError"))
def model_available(ctx):
    from ...errors import ModelLoadError
    from ...models.hub_files import is_local_name, model_folder
    from ...models.tiny import is_tiny

    cfg = ctx.need("cfg")
    if is_tiny(cfg.model.name) or cfg.model.class_ or cfg.model.factory:
        return  # a brought model (model.class / model.factory) is built by its own code, not fetched
    if cfg.model.weights == "random":  # built from its config alone: no weights to fetch, the config must be here
        from ...models.model_config import meta_config

        if meta_config(cfg) is None:
            yield error(f"model.weights=random builds {cfg.model.name} from its config, and no config of it is on "
                        "disk or embedded", "model.name", f"mmtune download {cfg.model.name}   (or an embedded model)")
        return
    if is_local_name(cfg.model.name):
        yield from _local_folder(cfg)
        return
    try:  # with its family, a cached VLM snapshot lacking preprocessor_config.json counts as incomplete
        folder = model_folder(cfg.model.name, cfg.model.revision, _family(cfg))
    except ModelLoadError as e:
        hint = _looks_local(cfg.model.name)
        if ctx.user_offline or hint:
            yield error(e.what + hint, e.where or "model.name", e.fix)
        else:  # online, training downloads it; the checks that need its files could not run here
            from ...models.gated import gated_terms, gated_without_token

            refused = gated_without_token(cfg.model.name)
            if refused is not None:  # the download would stop the run where it starts, on the GPU machine
                yield error(refused[0] + "; `mmtune train` would stop at the model download", "model.name", refused[1])
                return
            terms = gated_terms(cfg.model.name)
            gate = (f"; it is gated ({terms}): the token's account must have accepted the terms at "
                    f"https://huggingface.co/{cfg.model.name}" if terms else "")
            # The config, processor and data checks still ran, from the embedded config and the stand-in
            # processor (resolve/processor.py); only the text token counts are approximate.
            yield warning(f"model {cfg.model.name} is not in the local cache: `mmtune train` will download it; "
                          "the checks here ran from its embedded config and a stand-in processor (text token "
                          f"counts approximate, weights not read){gate}",
                          where="model.name", fix=f"mmtune download {cfg.model.name}   (for exact token counts)")
        return
    if isinstance(folder, Path):
        yield from _weight_files(folder, cfg.model.name)


def _local_folder(cfg):
    """A folder is never downloaded: whatever it lacks is an error online too, and the files it needs
    depend on the model (a VLM folder saved without its processor lacks preprocessor_config.json: the
    merged-checkpoint failure of https://github.com/hiyouga/LlamaFactory/issues/5749)."""
    from ...errors import ModelLoadError
    from ...models.hub_files import model_folder

    try:
        folder = model_folder(cfg.model.name, cfg.model.revision, _family(cfg))
    except ModelLoadError as e:
        fix = e.fix
        if "preprocessor_config.json" in e.what and "instead of the Hub model" not in e.what:
            fix = ("copy the base model's processor files (preprocessor_config.json, and the tokenizer's) into "
                   "the folder, or save the processor beside the model (processor.save_pretrained)")
        yield error(e.what, e.where or "model.name", fix)
        return
    yield from _weight_files(folder, cfg.model.name)


@check("MM127", "the packages the model family needs beyond mmtune's are installed (Gemma 3n: timm, torchvision)",
       needs=("cfg",), fast=True, claims=tuple(f"{p}:MissingPackageError" for p in
                                                ("resolved", "loaded", "adapted", "processor_info", "plan")))
def family_packages(ctx):
    """A family whose transformers class needs an optional package (`Family.requires`: Gemma 3n's vision tower is
    a timm model, and timm imports torchvision) cannot be built without it, not even on meta for a plan: an error
    naming the packages and the install line, before anything is built (models/requirements.py)."""
    from ...models.requirements import install_line, missing_packages

    family = _family(ctx.need("cfg"))
    missing = missing_packages(family) if family is not None else []
    if missing:
        names = [p for p, _ in missing]
        yield error(f"{family.name} ({family.model_class}) needs {', '.join(names)}, not installed here: "
                    + "; ".join(f"{p}: {why}" for p, why in missing) + ". Nothing of it can be built, planned or "
                    "trained until they are", "model.name", install_line(names))


def _family(cfg):
    """The model's family from its config.json (a folder's, the cache's) or the embedded config; None when
    none can be read here (then the files every model needs are checked, not the processor's)."""
    from ...models.model_config import resolve_family

    try:
        return resolve_family(cfg)
    except Exception:  # noqa: BLE001 - an unreadable or unknown config is MM044's / the missing-files finding
        return None


def _weight_files(folder: Path, name: str):
    from ...models.hub_files import unreadable_weights

    bad = unreadable_weights(folder)
    if bad:
        lfs = any("Git LFS" in why for _, why in bad)
        yield error(f"model {name}: {len(bad)} weight file(s) in {folder} are not readable safetensors: "
                    + "; ".join(f"{f}: {why}" for f, why in bad[:3]) + (" ..." if len(bad) > 3 else "")
                    + " (loading stops with 'SafetensorError: Error while deserializing header')",
                    where=str(folder / bad[0][0]),
                    fix=("git lfs install && git lfs pull   (in the cloned folder), or mmtune download " + name
                         if lfs else "download the model again (mmtune download), the file is incomplete"))


def _looks_local(name: str) -> str:
    """A hint when ORG/NAME is more likely a local path: its first part is a folder here (models/qwen2-vl)."""
    head = name.split("/", 1)[0]
    if "/" in name and Path(head).is_dir():
        return (f"; note: ./{head} is a folder here, so model.name may mean the local folder ./{name}, which "
                "does not exist")
    return ""


def safetensors_dtypes(folder: Path) -> dict[str, str]:
    """{tensor name: dtype} from the headers of the folder's *.safetensors files (no tensor is read); files
    whose header cannot be read (a Git LFS pointer, a file cut short) are MM024's and skipped here."""
    from ...models.hub_files import unreadable_weights

    out = {}
    skip = {f for f, _ in unreadable_weights(folder)}
    for f in sorted(folder.glob("*.safetensors")):
        if f.name in skip:
            continue
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        out.update({k: v["dtype"] for k, v in header.items() if k != "__metadata__"})
    return out


FLOAT_DTYPES = {"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2"}


@check("MM009", "the checkpoint holds no quantized weights (mixed float dtypes, e.g. fp32 vision beside a "
       "bf16 LM, are an info: the loader casts to one dtype)", needs=("cfg",), fast=True,
       failure_mode=9)
def checkpoint_dtypes(ctx):
    from ...errors import ModelLoadError
    from ...models.hub_files import model_folder
    from ...models.tiny import is_tiny

    cfg = ctx.need("cfg")
    if is_tiny(cfg.model.name) or cfg.model.class_ or cfg.model.factory:
        return
    try:
        folder = model_folder(cfg.model.name, cfg.model.revision)
    except ModelLoadError:
        return  # MM024 reports it
    if not isinstance(folder, Path):
        return  # not on disk yet: nothing to read
    dtypes = safetensors_dtypes(folder)
    if not dtypes:
        return
    counts: dict[str, int] = {}
    for d in dtypes.values():
        counts[d] = counts.get(d, 0) + 1
    floats = {d: n for d, n in counts.items() if d in FLOAT_DTYPES}
    ints = [k for k, d in dtypes.items() if d in ("U8", "I8") and k.endswith("weight")]
    if ints and _declares_quantization(folder):
        ints = []  # saved quantized on purpose (unsloth's -bnb-4bit uploads): it loads and trains; MM040 says what it means
    if ints:
        yield error(f"{len(ints)} weight(s) are stored as 8-bit integers (a merged/converted quantized "
                    f"checkpoint?), e.g. {', '.join(ints[:3])}", where=ints[0].rsplit(".", 1)[0],
                    fix="merge LoRA into a 16-bit base model, not a 4/8-bit one; re-export the checkpoint in bf16")
    if not _declares_quantization(folder):
        yield from _float8_without_quantization_config(dtypes)
    # float8 weights beside their fp32 scales are no mix the loader casts away: the finding above or MM040 says
    # what they are
    if len(floats) > 1 and not {"F8_E4M3", "F8_E5M2"} & set(floats):
        main = max(floats, key=floats.get)
        odd = [k for k, d in dtypes.items() if d in floats and d != main]
        mods = sorted({k.rsplit(".", 1)[0] for k in odd})
        # Not a problem: the loader casts every weight to the one compute dtype (checkpoints that keep the
        # vision tower in fp32 beside a bf16 language model are common and load fine). Said as a fact.
        yield info(f"the checkpoint mixes dtypes {floats}: {len(odd)} tensor(s) are not {main}, in modules "
                   f"{', '.join(mods[:5])}{' ...' if len(mods) > 5 else ''}; mmtune casts all to the compute dtype "
                   f"({cfg.train.precision}) at load", where=mods[0] if mods else "model.name")


# Where block- / channel-scaled float8 checkpoints keep each weight's scale: fine-grained FP8 (DeepSeek-V3,
# Qwen3-*-FP8: `<weight>_scale_inv`), compressed-tensors / fbgemm (`weight_scale`), ComfyUI (`scale_weight`)
F8_SCALE_SUFFIXES = ("weight_scale_inv", "weight_scale", "scale_weight")


def _float8_without_quantization_config(dtypes: dict[str, str]):
    """float8 weights with no `quantization_config` to say how they are scaled. transformers then casts the raw
    float8 values to the compute dtype and drops the scale tensors as unexpected keys: each block is off by its
    scale (the tiny block-FP8 twin's weights came out ~6000x too large, its logits noise), and training starts
    from that model without an error (unsloth#6200: perplexity ~2 million)."""
    f8 = [k for k, d in dtypes.items() if d in ("F8_E4M3", "F8_E5M2") and k.endswith("weight")]
    if not f8:
        return
    scales = [k for k in dtypes if k.endswith(F8_SCALE_SUFFIXES)]
    where = f8[0].rsplit(".", 1)[0]
    if scales:
        yield error(f"{len(f8)} weight(s) are stored in float8 with their scales in separate tensors (e.g. "
                    f"{f8[0]}, {scales[0]}), and config.json declares no quantization_config: the loader takes the "
                    "raw float8 values as the weights and drops the scales (the *_scale_inv keys transformers "
                    "reports UNEXPECTED), so every block is off by its scale and the model is garbage before "
                    "training starts",
                    where=where,
                    fix="restore config.json's quantization_config as published with the checkpoint (fine-grained "
                        "FP8: {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"activation_scheme\": \"dynamic\", "
                        "\"weight_block_size\": [128, 128]}), or model.name=<the bf16 release of the model>")
    else:
        yield warning(f"{len(f8)} weight(s) are stored in float8 without scales (e.g. {f8[0]}) and config.json "
                      "declares no quantization_config: they are upcast to the compute dtype as they are, so the "
                      "run trains a model already rounded to 8 bits (3 mantissa bits in e4m3)", where=where,
                      fix="model.name=<the bf16 release of the model>; keep this one if the rounding is intended")


def _declares_quantization(folder: Path) -> bool:
    """config.json names the quantization its integer weights are in (a bitsandbytes save_pretrained writes
    `quantization_config` beside the uint8 4-bit blocks); a merged checkpoint that lost it does not."""
    try:
        return bool(json.loads((folder / "config.json").read_text()).get("quantization_config"))
    except (OSError, ValueError, AttributeError):
        return False


@check("MM004", "one compute dtype: no fp32/uint8 module left beside 4-bit weights", needs=("cfg", "adapted"),
       failure_mode=4)
def compute_dtype_audit(ctx):
    from ..pieces import real_dtype

    cfg, adapted = ctx.need("cfg"), ctx.need("adapted")
    if cfg.adapter.method == "qlora" and cfg.train.precision == "fp32":
        yield error("adapter.method=qlora with train.precision=fp32: 4-bit layers then compute in fp32 and "
                    "FlashAttention/bnb kernels expect fp16/bf16", where="train.precision",
                    fix="train.precision=bf16 (fp16 on GPUs without bf16)")
    if adapted.real:  # on meta, load_model casts and audits at real load time (check_dtypes)
        yield from dtype_findings(adapted.result.model, adapted.loaded.family, real_dtype(ctx.need("resolved")),
                                  cfg.adapter.method in ("qlora", "lora8bit"))


def dtype_findings(model, family, dtype, qlora: bool):
    """Frozen floating parameters must be in `dtype` (trainable ones are fp32 on purpose); with QLoRA
    only the decoder may hold 4-bit (uint8) weights."""
    from ...adapters import component_of

    odd: dict[str, str] = {}
    quant_outside: list[str] = []
    for name, p in model.named_parameters():
        if p.is_floating_point():
            if not p.requires_grad and p.dtype != dtype:
                odd.setdefault(name.rsplit(".", 1)[0], str(p.dtype).replace("torch.", ""))
        elif qlora and component_of(family, name) not in ("decoder",):
            quant_outside.append(name)
    if odd:
        names = list(odd)
        yield error(f"{len(odd)} frozen module(s) are not in the compute dtype {str(dtype).replace('torch.', '')}: "
                    + ", ".join(f"{m} ({d})" for m, d in list(odd.items())[:5]),
                    where=names[0], fix="load with one dtype for the whole model (mmtune.models.load does)")
    if quant_outside:
        yield error(f"{len(quant_outside)} non-decoder parameter(s) are quantized (uint8) with QLoRA, e.g. "
                    f"{quant_outside[0]}: vision/projector in 4-bit fails with 'only supports fp16/bf16'",
                    where=quant_outside[0], fix="quantize only the decoder (llm_int8_skip_modules = other components)")


@check("MM008", "no parameter left on the meta device", needs=("cfg", "adapted"), failure_mode=8)
def no_meta(ctx):
    from ...models.audits import meta_parameters

    adapted = ctx.need("adapted")
    if not adapted.real:
        from ..context import NotAvailable

        raise NotAvailable("the full-size model is built on meta here; load_model checks it at load time")
    yield from meta_findings(meta_parameters(adapted.result.model))


def meta_findings(names: list[str]):
    if names:
        yield error(f"{len(names)} parameter(s)/buffer(s) are on the meta device (never materialised): "
                    f"{', '.join(names[:5])} -> 'Cannot copy out of meta tensor'", where=names[0],
                    fix="create new modules (projectors, heads) on a real device and initialise them")


@check("MM027", "data.max_length fits the model's context", needs=("cfg",), fast=True)
def context_length(ctx):
    cfg, config = ctx.need("cfg"), ctx.need("model_config")
    if config is None:
        return  # MM024 reports it
    from ...models.context_window import context_window

    # The window a static RoPE scaling in the config stretches it to counts (Qwen's YaRN recipe for 128k).
    window = context_window(getattr(config, "text_config", None) or config)
    limit = window.limit
    if limit and cfg.data.max_length > limit:
        yield warning(f"data.max_length={cfg.data.max_length} exceeds the model's {window.describe()}",
                      where="data.max_length", fix=f"data.max_length={limit}")
    need = cfg.data.max_length + cfg.eval.max_new_tokens
    if limit and cfg.data.eval and need > limit >= cfg.data.max_length:
        yield warning(f"data.max_length + eval.max_new_tokens = {need} exceeds the model's {window.describe()}",
                      where="eval.max_new_tokens", fix=f"eval.max_new_tokens={max(1, limit - cfg.data.max_length)}")


@check("MM030", "the tokenizer has a chat template and a pad token", needs=("cfg", "processor_info"))
def chat_template(ctx):
    from ...data.documents import documents_only

    pinfo = ctx.need("processor_info")
    yield from template_findings(pinfo.processor, raw_text=documents_only(ctx.need("cfg").data))


def template_findings(processor, raw_text: bool = False):
    """`raw_text`: every source is data.format=text, which renders no conversation (a base model trains)."""
    tok = getattr(processor, "tokenizer", processor)
    if not raw_text and not (getattr(processor, "chat_template", None) or getattr(tok, "chat_template", None)):
        yield error("the processor/tokenizer has no chat template: records cannot be rendered as conversations",
                    where="model.name", fix="use the instruct/chat variant of the model, or a checkpoint "
                                            "that ships chat_template.jinja")
    if tok.pad_token_id is None and tok.eos_token_id is None:
        yield error("the tokenizer has neither a pad nor an eos token: batches cannot be padded",
                    where="model.name", fix="use a tokenizer with a pad or eos token")


@check("MM368", "the checkpoint's tensor names fit the model: not a training wrapper's state dict, no hole in a "
       "stack of layers", needs=("cfg",), fast=True)
def checkpoint_names(ctx):
    """transformers only logs the names it could not place and starts those weights at random; the load stops
    on them (models/load_report.py), and here the headers say it before any weight is read (weight_names.py)."""
    from ...models.tiny import is_tiny
    from ...models.weight_names import checkpoint_keys, layer_holes, wrapper_prefix
    from .model_setup import weights_folder

    cfg = ctx.need("cfg")
    if is_tiny(cfg.model.name) or cfg.model.class_ or cfg.model.factory or cfg.model.weights == "random":
        return
    folder = weights_folder(cfg)
    if folder is None:
        return  # not on disk, or a file MM024 reports
    keys = checkpoint_keys(folder)
    prefix = wrapper_prefix(keys)
    if prefix:
        yield error(f"every tensor name in {folder} starts with {prefix!r} ({len(keys)} of them, e.g. {keys[0]}): a "
                    "training wrapper's state dict saved as is, so no weight matches the model and every one would "
                    "start at random (\"Some weights of the model checkpoint were not used\")", where="model.name",
                    fix=f"save the weights again without the {prefix!r} prefix (strip it from every key, then "
                        "model.save_pretrained), or point model.name at the original model folder")
        return
    for stack, holes in layer_holes(keys).items():
        shown = ", ".join(map(str, holes[:8])) + (" ..." if len(holes) > 8 else "")
        yield error(f"{folder}: {stack} has no tensors for layer(s) {shown} between its first and last layer: those "
                    "layers would start at random (\"newly initialized\")", where="model.name",
                    fix="point model.name at a complete checkpoint (save or download it again)")
