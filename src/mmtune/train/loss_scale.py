"""fp16's loss scale, watched: how many updates the GradScaler skipped, and when its scale has collapsed.

torch's GradScaler halves its scale at every step whose scaled gradients overflow and skips that update; it has no
floor. When the gradients overflow fp16 even unscaled (activations a bf16-trained model keeps past 65504, a model
that only trains in bf16), every step is skipped, the scale falls towards 0 (apex and DeepSpeed threads show
"reducing loss scale to 1e-303") and the run "trains" to its end with the logged loss flat and the weights
unchanged. DeepSpeed stops at a floor of 1 ("Current loss scale already at minimum"); the loop does the same under
train.nan_guard: an update skipped at a scale below 1 is one whose gradients overflow with no scaling at all, and no
further halving can save it. The counts go into every metrics row (`loss_scale`) and summary.json
(`skipped_updates`, `loss_scale`), so a run whose updates were skipped says so.
"""

from __future__ import annotations

MIN_SCALE = 1.0  # DeepSpeed's default min_loss_scale: below it the gradients overflow fp16 unscaled


class LossScaleWatch:
    """Counts the skipped updates of a run with a GradScaler (`scaler` None: nothing to watch)."""

    def __init__(self, scaler):
        self.scaler = scaler if scaler is not None and hasattr(scaler, "get_scale") else None
        self.skipped = 0  # updates skipped by this process's steps
        self.in_a_row = 0  # the current run of skipped updates
        self.steps = 0

    @property
    def active(self) -> bool:
        return self.scaler is not None and bool(getattr(self.scaler, "is_enabled", lambda: True)())

    def scale(self) -> float | None:
        return float(self.scaler.get_scale()) if self.active else None

    def after_step(self, skipped: bool) -> None:
        self.steps += 1
        self.skipped += int(skipped)
        self.in_a_row = self.in_a_row + 1 if skipped else 0

    def collapsed(self) -> bool:
        """The last update was skipped and the scale it left is below the floor: fp16 cannot hold the gradients."""
        scale = self.scale()
        return scale is not None and self.in_a_row > 0 and scale < MIN_SCALE

    def message(self, step: int) -> tuple[str, str, str]:
        """(what, where, fix) of a collapsed scale."""
        return (f"fp16's loss scale fell to {self.scale():.3g} at step {step}: {self.in_a_row} update(s) in a row were "
                f"skipped ({self.skipped} of {self.steps} steps in all) because the gradients overflow fp16 even "
                f"unscaled, so the weights no longer change while the logged loss stays finite",
                "train.precision",
                "train.precision=bf16 on a GPU that has it (A100, L4, RTX 30xx or newer), or train.precision=fp32 on "
                "this GPU; if bf16 overflows too, look at what makes the gradients that large (train.lr, adapter.alpha, "
                "the checkpoint's weights). train.nan_guard=false trains on with every update skipped")

    def summary(self) -> dict:
        """summary.json's part: empty without a GradScaler."""
        if not self.active:
            return {}
        return {"skipped_updates": self.skipped, "loss_scale": self.scale()}
