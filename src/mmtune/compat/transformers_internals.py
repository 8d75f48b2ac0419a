"""Private or version-sensitive parts of transformers that mmtune uses.

Checked on transformers 5.17 (the GPU machines') and 5.23 (this machine's), with and without
torchvision absent (it is absent here).
"""

from __future__ import annotations

import contextlib
import functools

from . import broken, installed_version, need_attr

_LIB = "transformers"


def model_from_config(cls, config, **kwargs):
    """A model of class `cls` with random weights from `config` (`dtype`, `attn_implementation`...).

    Auto classes have the public `from_config`; concrete model classes (`Qwen2VLForConditionalGeneration`)
    only the private `_from_config`, which is what `from_config` itself calls and the one way to build a
    concrete class from a config with a dtype and an attention implementation without loading weights.
    Checked on transformers 5.17, 5.23.
    """
    if hasattr(cls, "from_config"):
        return cls.from_config(config, **kwargs)
    build = need_attr(cls, "_from_config", _LIB, "model building from a config (tiny twins, the planner's meta model)")
    return build(config, **kwargs)


@contextlib.contextmanager
def zero3_init_lifted():
    """No `deepspeed.zero.Init` around the models built inside: transformers builds every model under it while a
    ZeRO-3 config is registered with it (a module-level weakref that accelerate's DeepSpeed plugin sets, and that
    outlives the run: the next run of the same process resolves under it). A structure-only build on meta (the
    resolved run's parameter counts, the planner) cannot be partitioned ("Cannot copy out of meta tensor"); the
    registration is lifted for it and put back as it was. Checked on transformers 5.23 and 5.24."""
    import transformers.integrations.deepspeed as hf_ds

    saved = getattr(hf_ds, "_hf_deepspeed_config_weak_ref", None)
    hf_ds.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_ds._hf_deepspeed_config_weak_ref = saved


# ------------------------------------------------------------------ processors without torchvision
_PREFIX = "FramesVideoAccepting_"


def _video_check_needs_help() -> bool:
    """True when transformers' processor class check cannot recognise a video processor: torchvision absent.

    The check looks the expected base class up by name on the lazy `transformers` module: 5.23 asks for
    `VideoProcessorMixin`, which the module does not export without torchvision (ValueError); 5.17 asks
    for `BaseVideoProcessor`, which without torchvision resolves to a placeholder ("requires torchvision")
    class, so a real `BaseVideoProcessor` fails the isinstance check (TypeError). Both classes
    themselves need no torchvision.
    """
    import importlib.util

    return importlib.util.find_spec("torchvision") is None


@functools.cache
def _accepting_subclass(cls):
    """`cls` whose argument check accepts a `BaseVideoProcessor` as its video processor (cached per class).

    The subclass keeps `cls.__name__`, so a saved processor_config.json names the library's class and
    reloads as it; its `__qualname__` lets pickle (spawned data-loader workers) find it again through
    this module's `__getattr__`.
    """
    from transformers.video_processing_utils import BaseVideoProcessor

    base_check = need_attr(cls, "check_argument_for_proper_class", _LIB,
                           "CPU video processor (processor class check without torchvision)")

    def check_argument_for_proper_class(self, argument_name, argument):
        if argument_name == "video_processor" and isinstance(argument, BaseVideoProcessor):
            return type(argument)
        return base_check(self, argument_name, argument)

    return type(cls.__name__, (cls,), {"check_argument_for_proper_class": check_argument_for_proper_class,
                                       "__module__": __name__, "__qualname__": _PREFIX + cls.__name__,
                                       "__doc__": cls.__doc__})


def __getattr__(name: str):
    if name.startswith(_PREFIX):
        import transformers

        return _accepting_subclass(getattr(transformers, name[len(_PREFIX):]))
    raise AttributeError(name)


def make_processor(cls, **parts):
    """`cls(**parts)` for a transformers processor class, also when torchvision is absent.

    mmtune's CPU video processor (`models.video_frames.FramesVideoProcessor`) is a `BaseVideoProcessor`
    that needs only PIL and numpy. Without torchvision, transformers' processor `__init__` cannot
    recognise any video processor (see `_video_check_needs_help`); then the processor is built as a
    subclass whose check also accepts a `BaseVideoProcessor`, which changes nothing else and mutates no
    library state (it replaces a `setattr` on the transformers module). Checked on transformers 5.17
    and 5.23, both without torchvision.
    """
    if "video_processor" in parts and _video_check_needs_help():
        cls = _accepting_subclass(cls)
    return cls(**parts)


# ------------------------------------------------------------------ omni: a video's own audio track
def interleaves_video_audio(processor) -> bool:
    """Whether `processor` can interleave a video's own audio track (`load_audio_from_video=True`).

    transformers 5.23 marks such processors (Qwen2.5-Omni) with `processing_utils.OmniModalProcessorMixin`
    and takes `load_audio_from_video` / `audio_from_video_indices`; 5.17 has neither (its Omni processor
    takes `use_audio_in_video`, a different contract mmtune does not implement). An omni processor on a
    transformers without the mixin is a CompatError naming the version; any other processor answers False.
    Checked on transformers 5.17 and 5.23.
    """
    import transformers.processing_utils as pu

    mixin = getattr(pu, "OmniModalProcessorMixin", None)
    if mixin is not None:
        return isinstance(processor, mixin)
    if "omni" in type(processor).__name__.lower():
        raise broken(_LIB, "video parts with their own audio track (data: use_audio)",
                     "processing_utils.OmniModalProcessorMixin (load_audio_from_video)",
                     f"present in transformers 5.23, absent in {installed_version(_LIB)}", needs_range=">=5.23")
    return False


def video_rate_from_fps_kwarg(processor) -> bool:
    """Whether `processor` takes a video's frame rate as its `fps` kwarg rather than from `video_metadata`.

    transformers 5.17-5.23: the Omni processors (Qwen2.5-Omni, Qwen3-Omni) compute `video_second_per_grid`
    = temporal_patch_size / videos_kwargs["fps"] (default 2.0 / 1.0) and never read the metadata;
    Qwen2.5-VL / Qwen3-VL read `video_metadata`. Recognised by the output key they list.
    """
    return "video_second_per_grid" in (getattr(processor, "model_input_names", None) or ())


def supports_video_audio_tracks() -> bool:
    """Whether the installed transformers can interleave a video's own audio track (5.23: yes, 5.17: no)."""
    import transformers.processing_utils as pu

    return hasattr(pu, "OmniModalProcessorMixin")


# ------------------------------------------------------------------ auto classes without torchvision
def auto_image_processor():
    """transformers' `AutoImageProcessor` class (then `.from_pretrained(folder, backend="pil")`).

    transformers 5.17 without torchvision exports a "requires torchvision" placeholder as
    `transformers.AutoImageProcessor`, while the class in `models.auto.image_processing_auto` works and
    picks the PIL backend; 5.23 exports the working class. Checked on transformers 5.17 and 5.23.
    """
    from . import need

    return need("transformers.models.auto.image_processing_auto", "AutoImageProcessor", _LIB,
                "image processor loading (compose)")


# ------------------------------------------------------------------ input-embedding grad hooks
def drop_input_require_grads_hooks(model) -> int:
    """Remove the forward hooks `PreTrainedModel.enable_input_require_grads` registered anywhere in `model`
    (transformers' activation_checkpointing_enable and peft's PeftModel call it); returns how many.

    transformers 5 hooks the input embeddings of every sub-model (a vision tower's patch embedding too) and
    keeps only the last call's handles (`_require_grads_hooks`), so its own `disable_input_require_grads`
    cannot remove them all: the hooks are found by their function's name in torch's `Module._forward_hooks`
    (`make_inputs_require_grads`, peft's fallback `make_inputs_require_grad`). Checked on transformers 5.17
    and 5.24 with peft 0.21."""
    n = 0
    for mod in model.modules():
        for key, fn in list(mod._forward_hooks.items()):
            if getattr(fn, "__name__", "").startswith("make_inputs_require_grad"):
                del mod._forward_hooks[key]
                n += 1
    return n


# ------------------------------------------------------------------ optional packages a processor part needs
def missing_dependencies(exc: BaseException) -> list[str]:
    """The packages a failed `AutoProcessor.from_pretrained` says it lacks, or [] when it is not that failure.

    An ImportError names its module (`exc.name`); transformers 5.24 reports an image processor whose only class
    needs an absent backend as a ValueError ending "Missing optional dependencies: torchvision. Please install
    ..." (image_processing_auto.py), text only, so the names are read from it. Checked on transformers 5.24."""
    import re

    if isinstance(exc, ImportError):
        return [exc.name.split(".")[0]] if exc.name else []
    m = re.search(r"Missing optional dependencies: ([\w\-, ]+?)\.", str(exc))
    return [p.strip() for p in m.group(1).split(",") if p.strip()] if m else []


# ------------------------------------------------------------------ activation checkpointing
def checkpointing_function(module):
    """The checkpoint function a transformers module runs its layers through, or None.

    transformers keeps it in the private `_gradient_checkpointing_func` (a `functools.partial` of
    `torch.utils.checkpoint.checkpoint` carrying `use_reentrant`) of each layer that checkpoints; there
    is no public way to ask whether checkpointing is reentrant. Checked on transformers 5.17, 5.23.
    """
    return getattr(module, "_gradient_checkpointing_func", None)


def flash_attention_support(cls) -> bool | None:
    """Whether a transformers model class runs FlashAttention-2: its private `_supports_flash_attn` flag
    (`_supports_flash_attn_2` before 4.53), which `from_pretrained` checks first, before flash_attn is even
    imported ("X does not support Flash Attention 2.0 yet"). None for a class without the flag (an Auto class,
    a model brought by import path): unknown, so nothing is decided from it. In 5.24 Gemma 3 and Mllama lack it.
    Checked on transformers 5.17, 5.23, 5.24."""
    for flag in ("_supports_flash_attn", "_supports_flash_attn_2"):
        value = getattr(cls, flag, None)
        if isinstance(value, bool):
            return value
    return None


def sdpa_support(cls) -> bool | None:
    """Whether a transformers model class runs torch's scaled_dot_product_attention: its private `_supports_sdpa`
    flag, which the class's attention setup checks ("X does not support an attention implementation through
    torch.nn.functional.scaled_dot_product_attention yet"). False for Gemma-2 (SDPA cannot soft-cap the scores),
    None for a class without the flag (unknown). Checked on transformers 5.24."""
    value = getattr(cls, "_supports_sdpa", None)
    return value if isinstance(value, bool) else None


def bitsandbytes_min_version() -> str | None:
    """The oldest bitsandbytes the installed transformers' quantizers accept (`is_bitsandbytes_available()`
    compares against it; "4 bit quantization requires bitsandbytes>=..." otherwise): 0.46.1 in transformers 5
    (huggingface/transformers#41283). None when this transformers does not declare one. Checked on 5.17-5.24."""
    from transformers.utils import import_utils

    return getattr(import_utils, "BITSANDBYTES_MIN_VERSION", None)


__all__ = ["model_from_config", "make_processor", "interleaves_video_audio", "supports_video_audio_tracks",
           "auto_image_processor", "checkpointing_function", "missing_dependencies",
           "flash_attention_support", "sdpa_support", "bitsandbytes_min_version"]
