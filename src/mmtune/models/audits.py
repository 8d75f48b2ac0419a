"""The checks a loaded model passes before training: one compute dtype for every floating parameter
(failure modes 4, 9) and nothing left on `meta` (failure mode 8), each offender named."""

from __future__ import annotations

from ..errors import ModelLoadError


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
