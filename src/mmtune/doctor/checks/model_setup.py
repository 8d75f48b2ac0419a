"""Model checks from public issue threads, read from the model's config alone (fast, no weights).

Each reads what the run will load: the tiny twin's config, a local folder's or cached config.json, or
the embedded public config (`mmtune plan`'s source); never a download. Sources: docs/doctor.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..findings import error, info, warning
from ..registry import check
from .training_setup import trains_in_full

# --------------------------------------------------------------------------- reading the config

def model_dir(cfg) -> Path | None:
    """The model's folder on disk: a local folder, or the hub cache's snapshot of an ORG/NAME id; None
    for a tiny twin or a model not on disk (never a download)."""
    from ...models.tiny import is_tiny

    if is_tiny(cfg.model.name):
        return None
    folder = Path(cfg.model.name).expanduser()
    if folder.is_dir():
        return folder
    if cfg.model.name.count("/") != 1:
        return None
    from ...models.hub_files import cached_snapshot

    return cached_snapshot(cfg.model.name, cfg.model.revision)


def raw_config(cfg) -> tuple[dict, str] | tuple[None, None]:
    """(config.json as written, its path) for a local folder or a cached hub model; (None, None) else.
    Read as JSON, so a model type this transformers does not know can still be reported."""
    folder = model_dir(cfg)
    path = folder / "config.json" if folder is not None else None
    if path is None or not path.is_file():
        return None, None
    try:
        return json.loads(path.read_text()), str(path)
    except (OSError, ValueError):
        return None, None


def trained_part(config, family):
    """The sub-config of the model mmtune trains (Qwen2.5-Omni: the Thinker), else the config itself."""
    sub = getattr(family, "sub_config", None)
    return getattr(config, sub, None) or config if sub else config


def text_part(config, family):
    """The language model's config inside the trained part (where vocab_size, rope and heads live)."""
    part = trained_part(config, family)
    return part.get_text_config() if hasattr(part, "get_text_config") else part


def family_of(cfg, config):
    """The run's family from model.family or the config's model type (no weights needed), or None."""
    from ...errors import ModelLoadError
    from ...models.families import family_for_config, get_family

    try:
        return get_family(cfg.model.family) if cfg.model.family else family_for_config(config)
    except (ModelLoadError, KeyError, ValueError):
        return None


def _config_or_skip(ctx):
    from ..context import NotAvailable

    cfg, config = ctx.need("cfg"), ctx.need("model_config")
    if config is None:
        raise NotAvailable(f"no config of {cfg.model.name} on disk or embedded (MM024 says how to get it)")
    return cfg, config


# --------------------------------------------------------------------------- checks

_TIED_SOURCES = "peft#2777, peft#1750"


def _units_naming(cfg, comp: str) -> list[str]:
    """Config keys that train, freeze or scale `comp` in full."""
    a = cfg.adapter
    keys = [f"adapter.{k}" for k in ("train_components", "freeze_components") if comp in getattr(a, k)]
    if comp in a.lr_multipliers:
        keys.append(f"adapter.lr_multipliers.{comp}")
    for i, st in enumerate(cfg.train.stages):
        if trains_in_full(st, comp):
            keys.append(f"train.stages[{i}].train")
    return keys


@check("MM037", "lm_head tied to the input embeddings is not trained, frozen or LoRA-adapted on its own", fast=True)
def tied_lm_head(ctx):
    """With tie_word_embeddings the output head IS the input embedding matrix (Qwen2-VL-2B, Qwen2.5-0.5B..3B,
    Qwen3-VL-2B/4B): the model has no separate lm_head parameter (apply_adapters stops with "component
    'lm_head' does not exist"), and LoRA on it merges into the shared matrix, so an export changes the
    input embeddings too or drops the trained head (peft#2777)."""
    cfg, config = _config_or_skip(ctx)
    # The resolved run's family when it resolves here (a folder without weights does not: its config's type)
    family = ctx.need("resolved").family if ctx.has("resolved") else family_of(cfg, config)
    part = trained_part(config, family)
    if not getattr(part, "tie_word_embeddings", False):
        return
    keys = _units_naming(cfg, "lm_head")
    if keys:
        yield error(f"{', '.join(keys)} name lm_head, but {cfg.model.name} ties lm_head to the input embeddings "
                    "(tie_word_embeddings=true): there is no separate lm_head weight to train or freeze, and the "
                    "run stops with \"component 'lm_head' does not exist\"", where=keys[0],
                    fix="remove lm_head there; the tied matrix belongs to the decoder (adapter.method=full trains "
                        f"it with the decoder, adapter.freeze_components=[decoder] freezes both) ({_TIED_SOURCES})")
    targets = cfg.adapter.target_modules
    named = [t for t in targets if "lm_head" in t] if isinstance(targets, list) else (
        [targets] if isinstance(targets, str) and "lm_head" in targets else [])
    if named and cfg.adapter.method != "full":
        yield warning(f"adapter.target_modules puts LoRA on lm_head ({', '.join(named)}), which is tied to the "
                      "input embeddings: a merge by other tools (peft's merge_and_unload, then save_pretrained) adds "
                      "the update to the shared matrix, so the input embeddings change too, or drops the merged head "
                      "when the model is saved tied; `mmtune export --merge` stores lm_head apart instead "
                      "(tie_word_embeddings=false, one more embedding matrix)", where="adapter.target_modules",
                      fix=f"merge with mmtune export --merge, or leave lm_head out of adapter.target_modules "
                          f"({_TIED_SOURCES}; unsloth#9331 measured the trained head discarded at merge)")


@check("MM040", "the checkpoint is not already quantized (bnb / GPTQ / AWQ) for a run that trains its weights",
       fast=True)
def prequantized_checkpoint(ctx):
    cfg = ctx.need("cfg")
    raw, path = raw_config(cfg)
    q = (raw or {}).get("quantization_config") or {}
    if not q:
        return
    kind = q.get("quant_method") or ("bitsandbytes" if q.get("load_in_4bit") or q.get("load_in_8bit") else "quantized")
    what = f"{cfg.model.name} is a quantized checkpoint ({kind}; quantization_config in {path})"
    from ...compat.quantizers import dequantized_for_training

    if cfg.adapter.method in ("lora", "full") and dequantized_for_training(q) is not None:
        # models/load.py loads it dequantized (MXFP4: transformers cannot train through it): a 16-bit model
        yield info(f"{what}: transformers cannot train through {kind} layers, so the run loads them dequantized "
                   f"to the compute dtype (their memory is the dequantized model's, as the plan counts it) and "
                   f"adapter.method={cfg.adapter.method} trains that model", where="model.name")
        return
    if cfg.adapter.method == "full":
        yield error(f"{what}: adapter.method=full cannot train integer weights (\"You cannot perform fine-tuning "
                    "on purely quantized models\")", where="model.name",
                    fix="train the original 16-bit model (model.name=<its base model>), or adapter.method=lora")
    elif cfg.adapter.method in ("qlora", "lora8bit") and kind != "bitsandbytes":
        # transformers merges a passed BitsAndBytesConfig into the checkpoint's own only for the same config class;
        # any other ("The model is quantized with FineGrainedFP8Config but you are passing a BitsAndBytesConfig")
        # stops from_pretrained after the data was prepared
        yield error(f"{what}: adapter.method={cfg.adapter.method} asks bitsandbytes to quantize it again, and "
                    f"transformers refuses a second quantization config on a {kind} checkpoint (\"The model is "
                    "quantized with ... but you are passing a BitsAndBytesConfig config\")", where="adapter.method",
                    fix="adapter.method=lora (LoRA on the checkpoint's own quantized layers), or model.name=<the 16-bit "
                        "base model> with adapter.method=qlora")
    elif cfg.adapter.method == "qlora":
        yield warning(f"{what}: transformers keeps the checkpoint's own quantization and ignores the run's "
                      "4-bit settings (adapter.bnb_4bit_*), and the planned memory assumes NF4 from 16-bit weights",
                      where="model.name", fix="model.name=<the 16-bit base model> with adapter.method=qlora")
    else:
        yield warning(f"{what}: adapter.method=lora on it trains on quantized weights (QLoRA in effect, not what "
                      "was planned), and merging the adapter into it fails (\"Cannot merge LORA layers when the "
                      "model is ... quantized\") or loses precision", where="model.name",
                      fix="model.name=<the 16-bit base model> (adapter.method=qlora quantizes it at load)")


@check("MM258", "a pre-quantized checkpoint's backend (gptqmodel / optimum / compressed-tensors ...) is installed "
       "where the run executes", fast=True)
def prequantized_backend(ctx):
    """A GPTQ / AWQ / compressed-tensors checkpoint loads only through its quantization backend; without it
    `from_pretrained` stops with an ImportError after the data was prepared ("Loading an AWQ quantized model
    requires gptqmodel", "Loading a GPTQ quantized model requires optimum"). transformers' own quantizer for the
    checkpoint's `quant_method` is asked here (compat/quantizers.py), so the package names and minimums are its."""
    from ...compat.quantizers import quantizer_blocker

    cfg = ctx.need("cfg")
    raw, path = raw_config(cfg)
    q = (raw or {}).get("quantization_config") or {}
    if not q or cfg.model.weights == "random":  # random weights are built from the config, never dequantized
        return
    blocked = quantizer_blocker(q)
    if blocked is None:
        return
    kind, said = blocked
    method = q.get("quant_method") or "bitsandbytes"
    what = f"{cfg.model.name} is saved quantized ({method}; quantization_config in {path})"
    fix = ("model.name=<the 16-bit base model> (adapter.method=qlora quantizes it at load with bitsandbytes), or "
           + ("install the package named above" if kind == "package" else "a transformers release that knows it"))
    if kind == "method":
        yield error(f"{what}, a method this transformers does not know: loading stops (\"{said[:160]}...\")",
                    where="model.name", fix=fix)
    elif ctx.has("gpu"):  # planned for another machine: that machine needs it
        yield info(f"{what}; loading it needs what this machine lacks, the GPU machine needs it: {said}",
                   where="model.name", fix=fix)
    else:
        yield error(f"{what}, and loading it stops before any weight is read: {said}", where="model.name", fix=fix)


@check("MM043", "every token id the run feeds exists in the model's embedding matrix", needs=("cfg", "resolved"),
       fast=True)
def token_ids_fit_embeddings(ctx):
    """A tokenizer (or a processor's media token) with ids beyond the embedding rows fails on the GPU
    with "device-side assert triggered ... srcIndex < srcSelectDimSize", far from the cause."""
    resolved = ctx.need("resolved")
    if resolved.processor is None or not resolved.exact_text_tokens:
        return  # the stand-in tokenizer's ids are not the model's: nothing to compare
    cfg, config = _config_or_skip(ctx)
    part = trained_part(config, resolved.family)
    rows = getattr(text_part(config, resolved.family), "vocab_size", None) or getattr(part, "vocab_size", None)
    if not rows:
        return
    yield from vocab_findings(resolved.processor, int(rows), resolved.pad_token_id, cfg.model.name)


def vocab_findings(processor, rows: int, pad_id: int | None, name: str):
    from ...data.media_tokens import media_token_ids

    tok = getattr(processor, "tokenizer", processor)
    used = {f"{k} token": v for k, v in media_token_ids(processor).items()}
    if pad_id is not None:
        used["pad token"] = pad_id
    if tok.eos_token_id is not None:
        used["eos token"] = tok.eos_token_id
    over = {k: v for k, v in used.items() if v >= rows}
    fix = (f"use the processor saved with {name} (a tokenizer from another checkpoint has other ids), or resize the "
           "embeddings and train them (adapter.method=full) when tokens were added")
    if over:
        yield error(f"{', '.join(f'{k} id {v}' for k, v in over.items())} >= the model's {rows} embedding rows: "
                    "the first batch fails with a device-side assert (index out of range)", where="model.name",
                    fix=fix)
    elif len(tok) > rows:
        yield warning(f"the tokenizer has {len(tok)} tokens and the model {rows} embedding rows: a record containing "
                      f"one of the {len(tok) - rows} added tokens fails with a device-side assert", where="model.name",
                      fix=fix)


def _version(v: str) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


# original-LLaVA-repository model types -> an example of the llava-hf conversion users are pointed to
_LLAVA_HF = {"llava_llama": "llava-hf/llava-1.5-7b-hf", "llava_mistral": "llava-hf/llava-v1.6-mistral-7b-hf",
             "llava_qwen": "llava-hf/llava-onevision-qwen2-7b-ov-hf"}


@check("MM044", "this transformers knows the checkpoint's model type and is not older than the one that saved it",
       fast=True)
def transformers_version(ctx):
    import transformers

    cfg = ctx.need("cfg")
    raw, path = raw_config(cfg)
    if not raw:
        return
    here = transformers.__version__
    mt = raw.get("model_type")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if raw.get("auto_map") and not cfg.model.trust_remote_code and (not mt or mt not in CONFIG_MAPPING):
        # InternVL, MiniCPM-V, Phi-3-vision: the architecture is the checkpoint's own Python code, which
        # transformers refuses to run unasked ("contains custom code which must be executed").
        yield error(f"{path}: model_type {mt!r} is defined by the checkpoint's own code (auto_map), which "
                    "transformers runs only with trust_remote_code (\"contains custom code which must be executed "
                    "to correctly load the model\")", where="model.trust_remote_code",
                    fix="model.trust_remote_code=true   (after reading the repository's code)")
        return
    if mt and mt not in CONFIG_MAPPING and mt.startswith("llava_"):
        # haotian-liu/LLaVA and LLaVA-NeXT save their own class (model_type llava_llama / llava_mistral /
        # llava_qwen, mm_vision_tower in config.json): no transformers release loads it, so an upgrade is the
        # wrong fix (LLaVA#1622, LLaVA-NeXT#350, vllm#2153): the llava-hf conversion of the same weights is.
        yield error(f"{path}: model_type {mt!r} is the original LLaVA repository's format, which no transformers "
                    "version loads (\"You are using a model of type llava to instantiate a model of type "
                    f"{mt}\")", where="model.name",
                    fix=f"model.name={_LLAVA_HF.get(mt, 'llava-hf/<the same model>-hf')}   (the transformers-format "
                        "conversion of these weights; or convert them with transformers' convert_llava_weights_to_hf)")
        return
    if mt and mt not in CONFIG_MAPPING and not cfg.model.trust_remote_code:
        yield error(f"{path}: model_type {mt!r} is unknown to transformers {here} (\"Transformers does not recognize "
                    "this architecture\")", where="model.name",
                    fix=f"pip install -U transformers (the checkpoint was saved with {raw.get('transformers_version', '?')})")
        return
    saved = raw.get("transformers_version")
    if saved and _version(saved)[:2] > _version(here)[:2]:
        yield warning(f"{cfg.model.name} was saved with transformers {saved}, newer than the installed {here}: "
                      "config keys and weight names it added may be ignored or fail to load", where="model.name",
                      fix=f"pip install 'transformers>={'.'.join(map(str, _version(saved)[:2]))}'")


@check("MM051", "model.name is a model, not a LoRA adapter or a training checkpoint folder", needs=("tree",), fast=True)
def adapter_as_model(ctx):
    model = (ctx.need("tree").get("model") or {})
    name = model.get("name") if isinstance(model, dict) else None
    if not isinstance(name, str):
        return
    folder = Path(name).expanduser()
    if not folder.is_dir() or (folder / "config.json").is_file():
        return
    for sub, what in (("", "a LoRA adapter"), ("adapter", "an mmtune checkpoint (LoRA adapter inside)")):
        acfg = folder / sub / "adapter_config.json"
        if acfg.is_file():
            try:
                base = json.loads(acfg.read_text()).get("base_model_name_or_path")
            except (OSError, ValueError):
                base = None
            yield error(f"model.name={name} is {what}, not a model: it has {acfg.name} and no config.json "
                        "(\"does not appear to have a file named config.json\")", where="model.name",
                        fix=(f"model.name={base} (its base model); " if base else "")
                        + f"or merge it into one model folder first: mmtune export {folder.parent if sub else folder} "
                          "--merge")
            return
    if (folder / "model" / "config.json").is_file():
        yield error(f"model.name={name} is an mmtune checkpoint folder; its model is in {folder / 'model'}",
                    where="model.name", fix=f"model.name={folder / 'model'}")



def weights_folder(cfg) -> Path | None:
    """The folder holding the model's *.safetensors, when it is on disk (local or hub cache) and every file's
    header reads (a Git LFS pointer or a file cut short is MM024's finding, not something to read here)."""
    from ...models.hub_files import unreadable_weights

    folder = model_dir(cfg)
    if folder is None or not any(folder.glob("*.safetensors")) or unreadable_weights(folder):
        return None
    return folder


def projector_biases(folder: Path, family) -> dict[str, float] | None:
    """{projector bias tensor: sum of |values|} read from the checkpoint (only those tensors), or None
    when the checkpoint has no projector tensors at all. Names may be in transformers 4.x's layout
    ("multi_modal_projector...", saved that way by transformers 5 too) or 5.x's ("model.multi_...")."""
    from safetensors import safe_open

    from ...models.hub_files import unreadable_weights

    def is_projector(key: str) -> bool:
        return "projector" in (family.component_of(key), family.component_of("model." + key))

    out: dict[str, float] = {}
    found = False
    skip = {f for f, _ in unreadable_weights(folder)}  # a file cut short or an LFS pointer: MM024's error
    for shard in sorted(folder.glob("*.safetensors")):
        if shard.name in skip:
            continue
        with safe_open(str(shard), "pt") as f:
            for key in f.keys():
                if not is_projector(key):
                    continue
                found = True
                if key.endswith(".bias"):
                    out[key] = float(f.get_tensor(key).float().abs().sum())
    return out if found else None


def _under_wrapper_prefix(folder: Path) -> bool:
    from ...models.weight_names import checkpoint_keys, wrapper_prefix

    return wrapper_prefix(checkpoint_keys(folder)) is not None


@check("MM052", "a projector that was never trained is trained by the run", needs=("cfg", "resolved"), fast=True)
def untrained_projector(ctx):
    """A composed LLaVA-style model (`mmtune compose`) or a checkpoint without projector weights starts
    with a random projector (transformers initialises biases to zero; missing weights are "newly
    initialized"). A run that keeps it frozen trains the decoder on random projections of the image
    features: the loss falls a little and the model never looks at the image (LLaVA#808, #1548)."""
    resolved = ctx.need("resolved")
    cfg, family = resolved.cfg, resolved.family
    if "projector" not in family.components:
        return
    folder = weights_folder(cfg)
    if folder is None:
        return
    biases = projector_biases(folder, family)
    if biases is None and _under_wrapper_prefix(folder):
        return  # no name matches at all, the projector's neither: MM368's error, with its own fix
    if biases is None:
        state = "has no projector weights (transformers initialises them at random when loading)"
    elif biases and all(v == 0.0 for v in biases.values()):
        state = (f"has a projector that was never trained: its {len(biases)} bias tensors are exactly zero, as "
                 "initialised (a composed model before its alignment stage)")
    else:
        return
    trained = "projector" in resolved.trainable or any(
        u.startswith("projector") for st in cfg.train.stages for u in st.train)
    if trained:
        return
    yield error(f"{cfg.model.name} {state}, and this run keeps the projector frozen: the language model is trained "
                "on random projections of the image features", where="adapter.train_components",
                fix="adapter.train_components=[projector] (or train the projector alone first, as "
                    "recipes/seed004_llava_clip_stage1.yaml does)")


FA2_MAX_HEAD_DIM = 256  # flash-attn 2: head dimensions up to 256 (flash-attention#277)
FA2_MAX_BACKWARD_HEAD_DIM_CONSUMER = 192  # backward above 192 needs A100/H100-class SMs (flash-attention#328)
# The SMs with about 100 KB of shared memory per SM (99 KB per block; CUDA C++ Programming Guide, technical
# specifications per compute capability): 8.6, 8.9 and consumer Blackwell 12.0, against 164-228 KB on 8.0 / 8.7 /
# 9.0 / 10.0. (8, 7) is kept as the check had it.
FA2_SMALL_SMEM_SM = ((8, 6), (8, 7), (8, 9), (12, 0))


def head_dims(config) -> dict[str, int]:
    """{part: attention head dimension} of the text model and any encoder sub-config."""
    out = {}
    parts = {"text": config.get_text_config() if hasattr(config, "get_text_config") else config}
    for key in ("vision_config", "audio_config"):
        sub = getattr(config, key, None)
        if sub is not None:
            parts[key.split("_")[0]] = sub
    for name, c in parts.items():
        heads = getattr(c, "num_attention_heads", None) or getattr(c, "num_heads", None) or getattr(
            c, "encoder_attention_heads", None)
        width = getattr(c, "embed_dim", None) or getattr(c, "hidden_size", None) or getattr(c, "d_model", None)
        dim = getattr(c, "head_dim", None) or (width // heads if heads and width else None)
        if isinstance(dim, int):
            out[name] = dim
    return out


@check("MM050", "FlashAttention-2 supports the model's attention head size", needs=("cfg", "resolved"), fast=True)
def fa2_head_dim(ctx):
    resolved = ctx.need("resolved")
    if resolved.attn_implementation != "flash_attention_2":
        return
    cfg, config = _config_or_skip(ctx)
    limit, why = FA2_MAX_HEAD_DIM, f"FlashAttention-2 supports head dimensions up to {FA2_MAX_HEAD_DIM}"
    gpu = resolved.target.gpu
    if gpu is not None and tuple(gpu.compute_capability) in FA2_SMALL_SMEM_SM:  # A10/A40/L4/RTX 30-40-50
        limit = FA2_MAX_BACKWARD_HEAD_DIM_CONSUMER
        why = (f"FlashAttention-2's backward on {gpu.name} (sm_{''.join(map(str, gpu.compute_capability))}) supports "
               f"head dimensions up to {limit}; above that it needs an A100/H100")
    big = {k: v for k, v in head_dims(trained_part(config, resolved.family)).items() if v > limit}
    if big:
        parts = ", ".join(f"{k} model has head_dim {v}" for k, v in big.items())
        yield error(f"model.attn_implementation=flash_attention_2 and the {parts}: {why}",
                    where="model.attn_implementation",
                    fix="model.attn_implementation=sdpa")


_STATIC_ROPE = ("yarn", "linear")


@check("MM053", "a static RoPE scaling (YaRN / linear) is only on when the run's sequences need it", fast=True)
def static_rope_scaling(ctx):
    """Qwen's model cards add `rope_scaling: {type: yarn, factor: 4}` to config.json for 128k contexts;
    transformers applies it to every sequence, and short ones lose quality (Qwen3#1567: Arena-Hard 39 ->
    26.5 with YaRN on). Training with it on sequences that fit the original window trains the model under
    the scaled positions for nothing."""
    cfg, config = _config_or_skip(ctx)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    if not isinstance(rope, dict):
        return
    kind = rope.get("rope_type") or rope.get("type")
    factor = rope.get("factor") or 1.0
    original = rope.get("original_max_position_embeddings")
    if kind not in _STATIC_ROPE or factor <= 1.0:
        return
    window = original or int(getattr(text, "max_position_embeddings", 0) / factor) or None
    need = cfg.data.max_length + (cfg.eval.max_new_tokens if cfg.data.eval else 0)
    if window and need <= window:
        yield warning(f"{cfg.model.name}'s config scales RoPE statically ({kind}, factor {factor:g}) for contexts beyond "
                      f"{window} tokens, and the run's sequences are at most {need}: every sequence trains and "
                      "evaluates under the stretched positions, which costs short-context quality",
                      where="model.name", fix="remove rope_scaling from the model's config.json (keep it only for "
                                              f"sequences longer than {window} tokens)")


@check("MM238", "a RoPE scaling written in config.json reaches the decoder (a composite config's text_config)", fast=True)
def rope_scaling_reaches_the_decoder(ctx):
    """A VLM's decoder reads its RoPE from `text_config` (transformers 5). Following a model card's long-context
    recipe, users add `rope_scaling: {type: yarn, factor: 4, ...}` at the top of config.json; where the file
    already has a `text_config` with its own `rope_parameters` (any folder transformers 5 saved), the top-level
    entry is kept on the outer config and never read: the run trains at unscaled positions past the window it
    asked for, silently (as sglang#26187's YaRN dropped under the wrong key)."""
    from ...models.context_window import context_window, rope_scaling

    cfg, config = _config_or_skip(ctx)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if text is config:
        return
    outer = {k: v for k, v in vars(config).items() if k in ("rope_scaling", "rope_parameters")}
    top = next((v for v in outer.values() if isinstance(v, dict)), {})
    kind = top.get("rope_type") or top.get("type")
    inner = rope_scaling(text)
    factor = top.get("factor")
    if kind in (None, "default", "mrope") or not isinstance(factor, (int, float)) or factor <= 1.0:
        return
    if (inner.get("rope_type") or inner.get("type")) == kind and inner.get("factor") == top.get("factor"):
        return
    window = context_window(text)
    yield error(f"{cfg.model.name}'s config.json scales RoPE at its top level ({kind}, factor {top.get('factor')}), "
                f"but the decoder reads text_config.rope_parameters ({inner.get('rope_type') or 'default'}): the scaling "
                f"is not applied and the model keeps {window.describe()}",
                where="model.name", fix="move the rope_scaling entry into config.json's text_config as rope_parameters "
                                        "(keeping its mrope_section and rope_theta), or remove it")


# Checks that read facts only a registered family states (each verified on its tiny twin), and what they say
# instead for a day-0 family (models/generic.py).
# code -> (the modality it concerns, None for any; why it cannot apply): a text-only day-0 family is not told about video
REGISTERED_FACTS = {
    "MM066": ("video", "video time positions: whether the family's video positions depend on the frame rate is unknown"),
    "MM041": ("image", "fp16 overflow of the vision tower: no reports are recorded for an unlisted family (a decoder's, "
                       "by its model type, still apply)"),
    "MM081": (None, "fused kernels: Liger-Kernel is applied to registered families only"),
    "data.packing": (None, "packing is refused: exactness under packing is verified per family"),
}


@check("MM095", "a day-0 family (inferred from the model, not in the registry) says what it inferred and which "
                "checks cannot apply", needs=("cfg", "resolved"), fast=True)
def day0_family(ctx):
    from ..findings import info

    family = ctx.need("resolved").family
    if not family.inferred:
        return
    inferred = "; ".join(f"{k.rpartition('.')[2]}={v}" for k, v, _ in family.inferred_notes[1:])
    cannot = "; ".join(f"{code} ({why})" for code, (kind, why) in REGISTERED_FACTS.items()
                       if kind is None or kind in family.modalities)
    twin = "" if family.tiny else ("; MM011 / MM013 / MM021 / MM022 run a real backward of the model itself when it "
                                   "is small enough, else they cannot apply (no tiny twin)")
    yield info(f"{family.name} is a day-0 family: {inferred}. Checks that cannot apply: {cannot}{twin}",
               where="model.name",
               fix="register the family (docs/internals.md, 'Adding a model family') to have these checks and a tiny twin")


_ROUTER_SOURCES = ("transformers#44242 / #44586 (the balancing loss rides on output_router_logits), transformers#48885 (MoE "
                   "VLM wrappers), LlamaFactory#8090 (the aux loss does not fall under LoRA: the router is frozen)")


@check("MM124", "a mixture-of-experts decoder's router load-balancing loss is what the config asks for", fast=True)
def moe_router_aux_loss(ctx):
    """A MoE decoder (Qwen3-Omni's thinker: 128 experts, 8 routed per token) with `output_router_logits: true`.
    transformers adds `router_aux_loss_coef * aux_loss` only to the loss it computes itself from `labels`
    (Qwen3OmniMoeThinkerForConditionalGeneration.forward); mmtune computes the loss from the logits and passes no
    labels (mmtune/loss.py), so the balancing term never reaches the gradient, while every layer's router logits
    are still collected each step. Under full fine-tuning the router then trains on the language-model loss alone
    (a warning: routing can drift from the balance the checkpoint was trained for); under LoRA the router is
    frozen and only the memory is spent (an info). The published Qwen3-Omni config has it off: silent."""
    cfg, config = _config_or_skip(ctx)
    family = ctx.need("resolved").family if ctx.has("resolved") else family_of(cfg, config)
    text = text_part(config, family)
    experts = getattr(text, "num_experts", None) or getattr(text, "num_local_experts", None) or 0
    if not experts or not getattr(text, "output_router_logits", False):
        return
    coef = getattr(text, "router_aux_loss_coef", None)
    what = (f"{cfg.model.name} is a mixture of experts ({experts} experts) with output_router_logits=true (router_aux_loss_coef "
            f"{coef}): transformers adds the load-balancing loss only to the loss it computes from labels, and mmtune "
            "computes the loss from the logits, so the balancing term is not trained; the router logits of every layer "
            "are still collected")
    fix = f"set output_router_logits to false in the model's text config (nothing then changes in training) ({_ROUTER_SOURCES})"
    if cfg.adapter.method == "full":
        yield warning(what + "; under adapter.method=full the router trains on the language-model loss alone",
                      where="model.name", fix=fix)
    else:
        yield info(what + "; under LoRA the router is frozen, so only that memory is spent", where="model.name", fix=fix)
