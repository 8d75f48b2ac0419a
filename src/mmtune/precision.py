"""Device and precision decisions, each logged with its reason (nanoGPT's habit).

One compute dtype for the whole model: frozen weights are stored in it, trainable weights are kept in
fp32 (so AdamW updates and fp16's GradScaler work), and the forward runs under autocast to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PrecisionPlan:
    device: str  # "cpu" or "cuda"
    precision: str  # fp32 | bf16 | fp16 after decisions
    reasons: list[str] = field(default_factory=list)

    @property
    def compute_dtype(self):
        import torch

        return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[self.precision]

    @property
    def accelerate_mixed_precision(self) -> str:
        return {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[self.precision]


def decide_precision(requested: str, *, gpu: bool, bf16_ok: bool, arch: str = "") -> tuple[str, str | None]:
    """The precision a run uses on a device, and the reason when it differs from the one asked.

    One rule for `train` (the local device) and `plan` (a target GPU from the catalog): bf16 where the
    GPU lacks it becomes fp16 + GradScaler (failure mode 5); fp16 on the CPU becomes fp32.
    """
    if gpu and requested == "bf16" and not bf16_ok:
        return "fp16", f"bf16 unsupported on {arch} -> fp16 + GradScaler"
    if not gpu and requested == "fp16":
        return "fp32", "fp16 autocast with GradScaler is a GPU path; on CPU -> fp32"
    return requested, None


def resolve_precision(requested_device: str, requested_precision: str) -> PrecisionPlan:
    import torch

    cuda = torch.cuda.is_available()
    if requested_device == "cuda" and not cuda:
        from .errors import ConfigError

        raise ConfigError("train.device=cuda but no CUDA GPU is visible", where="train.device",
                          fix="train.device=auto (uses the CPU here) or run on a machine with a GPU")
    device = "cuda" if (requested_device == "cuda" or (requested_device == "auto" and cuda)) else "cpu"
    bf16_ok, arch = False, ""
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        bf16_ok, arch = torch.cuda.is_bf16_supported(including_emulation=False), f"sm_{major}{minor}"
    precision, reason = decide_precision(requested_precision, gpu=device == "cuda", bf16_ok=bf16_ok, arch=arch)
    return PrecisionPlan(device=device, precision=precision, reasons=[reason] if reason else [])
