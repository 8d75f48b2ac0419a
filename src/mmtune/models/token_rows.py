"""Embedding rows that were never trained, read from the checkpoint's safetensors (a few rows, never the matrix).

A base checkpoint can ship special tokens its pretraining never used: Llama 3 / 3.1 base's `<|eot_id|>`,
`<|start_header_id|>`, `<|end_header_id|>` (and the reserved tokens) have rows at or near zero in both the input
embeddings and lm_head. A chat template built on them makes the model read nothing at each turn marker and, with
lm_head frozen (LoRA), leaves the turn end's logit near 0 whatever the hidden state: the fine-tune cannot learn
to stop (torchtune#2429: `<|eot_id|>` at probability 0.05 after the answer), or its few non-zero values blow up
(unsloth#658 "Untrained tokens found ... causing NaNs").

A row counts as untrained when its norm is below `RATIO` x the median norm of rows sampled across the matrix:
trained rows of one matrix sit within a small factor of each other, untrained ones at ~0 (exactly 0, or the
1e-6-scale values of an init never updated)."""

from __future__ import annotations

from pathlib import Path

RATIO = 1e-2
SAMPLE = 256  # rows read for the median


def _find(folder: Path, suffix: str) -> tuple[Path, str] | None:
    from safetensors import safe_open

    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            for key in f.keys():
                if key == suffix or key.endswith("." + suffix):
                    return shard, key
    return None


def untrained_rows(folder: Path, ids: list[int]) -> dict[str, list[int]]:
    """{"embed_tokens" / "lm_head": the ids among `ids` whose row is untrained}. A checkpoint without an lm_head
    weight ties it to the input embeddings: its embed_tokens rows are the head's too, listed under both names.
    Empty lists are left out."""
    from safetensors import safe_open

    out: dict[str, list[int]] = {}
    for name in ("embed_tokens", "lm_head"):
        found = _find(folder, f"{name}.weight")
        if found is None:
            if name == "lm_head" and "embed_tokens" in out:
                out["lm_head"] = out["embed_tokens"]  # tied: the output head is the input matrix
            continue
        shard, key = found
        with safe_open(str(shard), "pt") as f:
            sl = f.get_slice(key)
            rows = sl.get_shape()[0]
            step = max(1, rows // SAMPLE)
            norms = sorted(float(sl[i:i + 1].float().norm()) for i in range(0, rows, step))
            median = norms[len(norms) // 2]
            bad = [i for i in ids if 0 <= i < rows and float(sl[i:i + 1].float().norm()) < RATIO * median]
        if bad:
            out[name] = bad
    return out
