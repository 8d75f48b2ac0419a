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


def resolve_precision(requested_device: str, requested_precision: str) -> PrecisionPlan:
    import torch

    reasons = []
    cuda = torch.cuda.is_available()
    if requested_device == "cuda" and not cuda:
        from .errors import ConfigError

        raise ConfigError("train.device=cuda but no CUDA GPU is visible", where="train.device",
                          fix="train.device=auto (uses the CPU here) or run on a machine with a GPU")
    device = "cuda" if (requested_device == "cuda" or (requested_device == "auto" and cuda)) else "cpu"
    precision = requested_precision
    if device == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        major, minor = torch.cuda.get_device_capability()
        precision = "fp16"
        reasons.append(f"bf16 unsupported on sm_{major}{minor} -> fp16 + GradScaler")
    if device == "cpu" and precision == "fp16":
        precision = "fp32"
        reasons.append("fp16 autocast with GradScaler is a GPU path; on CPU -> fp32")
    return PrecisionPlan(device=device, precision=precision, reasons=reasons)
