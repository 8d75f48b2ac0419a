"""Applying the run's CUDA caching-allocator settings (PYTORCH_CUDA_ALLOC_CONF) inside this process.

torch reads the environment variable once, when CUDA initialises, and mmtune has usually touched CUDA
before the run is built (the GPU is detected to resolve the run). torch's runtime setter does what the
variable would: `torch._C._accelerator_setAllocatorSettings` (torch >= 2.9, also read from
PYTORCH_ALLOC_CONF), before it `torch._C._cuda_cudaCachingAllocator_set_allocator_settings` (2.1-2.8;
the public-looking wrapper `torch.cuda.memory._set_allocator_settings` is private and warns deprecated
since 2.9). Expandable segments may be switched on after memory was allocated: segments made from then
on are expandable (vLLM toggles it the same way). Checked on torch 2.13 and 2.14 (names present; CPU
builds, so the call itself is not exercised here).
"""

from __future__ import annotations

from . import broken

_FEATURE = "CUDA allocator settings (PYTORCH_CUDA_ALLOC_CONF, decided in the resolved run)"
_SETTERS = ("_accelerator_setAllocatorSettings", "_cuda_cudaCachingAllocator_set_allocator_settings")


def allocator_setter():
    """torch's runtime setter of the caching allocator's settings, or a CompatError."""
    import torch

    for name in _SETTERS:
        fn = getattr(torch._C, name, None)
        if fn is not None:
            return fn
    raise broken("torch", _FEATURE, "torch._C." + " or torch._C.".join(_SETTERS))


def apply_cuda_allocator(conf: str) -> bool:
    """Apply `conf` to this process's CUDA caching allocator; False (nothing to do) without CUDA."""
    import torch

    if not conf or not torch.cuda.is_available():
        return False
    allocator_setter()(conf)
    return True
