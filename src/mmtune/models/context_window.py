"""How many positions a model's config says it handles: max_position_embeddings, or what a static RoPE scaling
in the config stretches it to.

Qwen's model cards extend a 32k model to 128k by adding `rope_scaling: {type: yarn, factor: 4,
original_max_position_embeddings: 32768}` to config.json and leaving `max_position_embeddings` at 32768 (vLLM
derives its max_model_len as original x factor). Reading `max_position_embeddings` alone calls every sequence past
32768 too long for a config that scales RoPE for exactly those. Only what transformers itself reads as the pre-scaling
window is multiplied: an explicit `original_max_position_embeddings`, or for YaRN `max_position_embeddings` (the
original when none is given). A linear factor without `original_max_position_embeddings` is left alone: such configs
(chinese-alpaca-2-13b-16k: 16384, linear 4) already state the stretched window.
"""

from __future__ import annotations

from dataclasses import dataclass

STATIC_ROPE = ("yarn", "linear")  # scalings that stretch every sequence the same (MM053 reads them too)
_STRETCHING = ("yarn", "linear", "dynamic", "llama3", "longrope")


@dataclass(frozen=True)
class ContextWindow:
    limit: int | None  # positions the config handles (None: the config does not say)
    native: int | None  # max_position_embeddings as written
    kind: str | None = None  # the RoPE scaling that stretches `native` to `limit`, if any
    factor: float = 1.0
    original: int | None = None  # the window before scaling

    def describe(self) -> str:
        if self.kind is None or self.limit == self.native:
            return f"max_position_embeddings={self.native}"
        return (f"max_position_embeddings={self.native} with RoPE scaling {self.kind} x{self.factor:g} from "
                f"{self.original} = {self.limit} positions")


def rope_scaling(text_config) -> dict:
    """The text config's RoPE parameters (transformers 5's `rope_parameters`, or the legacy `rope_scaling`)."""
    rope = getattr(text_config, "rope_parameters", None) or getattr(text_config, "rope_scaling", None) or {}
    return rope if isinstance(rope, dict) else {}


def context_window(text_config) -> ContextWindow:
    native = getattr(text_config, "max_position_embeddings", None)
    rope = rope_scaling(text_config)
    kind = rope.get("rope_type") or rope.get("type")
    try:
        factor = float(rope.get("factor") or 1.0)
    except (TypeError, ValueError):
        factor = 1.0
    original = rope.get("original_max_position_embeddings")
    if not native or kind not in _STRETCHING or factor <= 1.0:
        return ContextWindow(native, native)
    if original is None and kind != "yarn":
        return ContextWindow(native, native)
    original = int(original or native)
    return ContextWindow(max(native, int(original * factor)), native, kind, factor, original)
