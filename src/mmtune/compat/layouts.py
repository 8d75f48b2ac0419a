"""Module-name layouts that differ between transformers versions (prefixes in the family table).

Light: no library import (the family registry is read at `import mmtune.models.families`).
"""

from __future__ import annotations

# Qwen2.5-Omni's Thinker. transformers 5.23 nests its parts under `model.` (`model.audio_tower.`,
# `model.visual.`, `model.language_model.`); 5.17 keeps the towers at the top and the decoder's
# parts directly under `model.` (`audio_tower.`, `visual.`, `model.layers.`, `model.embed_tokens.`,
# `model.norm.`). The decoder is listed by its parts, never as a bare `model.`, so no prefix of one
# layout matches a name of the other (a bare `model.` would put 5.23's vision MLP under LoRA).
# Checked on transformers 5.17 and 5.23 (tests/test_compat.py: every parameter of the tiny twin has a
# component, the decoder's LoRA regex matches no vision or audio module).
QWEN2_5_OMNI_THINKER_5_17 = {
    "projector": ("visual.merger.", "audio_tower.proj.", "audio_tower.ln_post."),
    "audio": ("audio_tower.",),
    "vision": ("visual.",),
    "decoder": ("model.layers.", "model.embed_tokens.", "model.norm."),
}


def with_layouts(components: dict[str, tuple[str, ...]], *older: dict[str, tuple[str, ...]]) -> dict:
    """`components` with the prefixes of older transformers layouts appended, component by component."""
    out = dict(components)
    for layout in older:
        for comp, prefixes in layout.items():
            out[comp] = tuple(out.get(comp, ())) + tuple(p for p in prefixes if p not in out.get(comp, ()))
    return out


__all__ = ["QWEN2_5_OMNI_THINKER_5_17", "with_layouts"]
