"""The random streams of the training steps: one per rank, from (train.seed, rank)."""

from __future__ import annotations


def seed_streams(seed: int, rank: int) -> None:
    """Seed python, numpy and torch for the training steps, one stream per rank.

    build_run seeded torch with train.seed alone, so that every rank builds the same initial weights (LoRA's
    random A). The steps then draw dropout masks (LoRA's `adapter.dropout`, the model's own) and any other noise
    from these streams: seeded with train.seed alone, every rank would draw the same masks for its own records
    (transformers#31412: "the dropout masks will be identical across all devices"), so N ranks' gradients
    average N copies of one mask pattern. (seed, rank) keeps each rank's stream reproducible run to run, and a
    resume restores every rank's own state (rng/rank-R); the data order does not use these streams (it is a
    pure function of seed and epoch: data/batches.py), so every rank still reads its own share."""
    import random

    import numpy as np
    import torch

    mixed = seed + 1_000_003 * rank  # rank 0 keeps train.seed: a one-process run draws what it always drew
    random.seed(mixed)
    np.random.seed(mixed % 2**32)
    torch.manual_seed(mixed)
