"""The one place mmtune touches private or version-sensitive parts of torch, transformers, accelerate,
peft and huggingface_hub.

Everything outside this package uses only the libraries' public API plus the names exported here.
Each entry is a small function or name whose docstring says what it wraps, why mmtune needs it, and
the versions it was checked on. When an installed version lacks what an entry needs, the entry raises
`CompatError` (an `MMTuneError`) naming the library, its installed version, the feature and the tested
range, instead of an AttributeError from deep inside a library.

Modules (each imports its library only when used; this file imports nothing heavy):
- `fake_tensor`   torch's FakeTensorMode internals the planner builds on (cache key, cache entries,
                  dispatch without wrappers, constants of fake tensors).
- `torch_internals`  pytree, dispatch modes, no_dispatch, the FLOP registry, the autograd engine's
                  graph-task id, private aten operators, the profiler's raw allocator events.
- `transformers_internals`  `_from_config`, the processor class check without torchvision, Omni's
                  video-audio interleaving, the checkpointing function a module holds.
- `rope_index`    a model's own M-RoPE `get_rope_index` without the model (packed rows' positions).
- `layouts`       module-name prefixes that differ between transformers versions (Qwen2.5-Omni).
- `accelerate_state`  resetting accelerate's process-wide state singletons.
- `hub`           whether hub downloads are off, and a scoped (context-local) offline switch.
- `cuda_allocator`  torch's runtime setter of the CUDA caching allocator's settings (the run's
                  PYTORCH_CUDA_ALLOC_CONF decision, applied after CUDA has started).
- `deepspeed_ops` whether DeepSpeed's CPU Adam op is prebuilt or can be compiled here (DeepSpeed's
                  `installed_ops` record and `CPUAdamBuilder`), for train.offload=optimizer under ZeRO.
- `pixtral`       transformers' own PixtralProcessor (Mistral 3, Pixtral-12B) where torchvision is absent (its module
                  imports a sizing helper from the torchvision image processor; the PIL module's identical one stands in).
- `processors`    a processor's per-item media token count without pixels (`_get_num_multimodal_tokens`),
                  the data length engine's (`Encoder.measure`) source for image/video/audio tokens.

tests/test_compat.py exercises every entry on the installed versions, simulates each missing feature,
and fails when a private library use appears anywhere in src/mmtune outside this package.
"""

from __future__ import annotations

from ..errors import MMTuneError

# Versions each entry was checked on (the docstrings repeat the ones that matter for that entry).
CHECKED = {
    "torch": ("2.13 (CPU build), 2.14.1 (CUDA build, run on a CPU-only machine); the GPU machines' 2.11 was not "
              "installable on this CPU machine"),
    "transformers": "5.17, 5.23",
    "accelerate": "1.15",
    "peft": "0.21",
    "huggingface_hub": "1.33 (with transformers 5.17), 2.4 (with transformers 5.23)",
}
# The tested ranges pyproject.toml states (kept in one place for the error messages).
TESTED = {
    "torch": ">=2.11",
    "transformers": ">=5.17",
    "accelerate": ">=1.15",
    "peft": ">=0.21",
    "huggingface_hub": ">=1.0",
}


class CompatError(MMTuneError):
    """An installed library version lacks an internal that mmtune relies on."""


def installed_version(lib: str) -> str:
    """The installed version of a distribution, without importing it ("not installed" if absent)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(lib)
    except PackageNotFoundError:
        return "not installed"


def broken(lib: str, feature: str, needs: str, detail: str = "", needs_range: str | None = None) -> CompatError:
    """The error an entry raises when `lib` lacks what `feature` needs (`needs_range`: the versions that
    have it, when that is narrower than the tested range)."""
    ver = installed_version(lib)
    what = (f"mmtune's {feature} needs {needs} from {lib}; {lib} {ver} changed or lacks it"
            + (f" ({detail})" if detail else "") + f". Checked on {lib} {CHECKED.get(lib, '?')}.")
    return CompatError(what, where=f"mmtune.compat ({lib} {ver})",
                       fix=f"install a version that has it: pip install '{lib}{needs_range}'" if needs_range else
                       f"install a tested version: pip install '{lib}{TESTED.get(lib, '')}' "
                       "(or report the version at which this broke)")


def need(module: str, name: str, lib: str, feature: str):
    """`from module import name`, or a CompatError naming the library version and the feature."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise broken(lib, feature, f"the module {module}", str(e)) from None
    try:
        return getattr(mod, name)
    except AttributeError:
        raise broken(lib, feature, f"{module}.{name}") from None


def need_attr(obj, name: str, lib: str, feature: str):
    """`getattr(obj, name)`, or a CompatError naming the library version and the feature."""
    try:
        return getattr(obj, name)
    except AttributeError:
        owner = getattr(obj, "__name__", type(obj).__name__)
        raise broken(lib, feature, f"{owner}.{name}") from None
