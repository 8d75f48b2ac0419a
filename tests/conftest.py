"""Shared fixtures. Tests run on CPU with tiny random models of real architectures."""

from __future__ import annotations

import os

import pytest

# Two cores: one intra-op thread per test process keeps parallel test runs from thrashing.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# OpenMP's spin between parallel regions, as the mmtune command sets it, before torch loads libgomp (one rule:
# cli._short_openmp_spins; importing mmtune.cli imports no torch, tests/test_import_light.py).
from mmtune.cli import _short_openmp_spins  # noqa: E402

_short_openmp_spins()


def pytest_collection_modifyitems(config, items):
    import importlib.util

    has_cuda = False
    if importlib.util.find_spec("torch") is not None:
        import torch

        has_cuda = torch.cuda.is_available()
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
