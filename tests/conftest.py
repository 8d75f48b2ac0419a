"""Shared fixtures. Tests run on CPU with tiny random models of real architectures."""

from __future__ import annotations

import os

import pytest

# Two cores: one intra-op thread per test process keeps parallel test runs from thrashing.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# As the mmtune command sets it (cli._short_openmp_spins), before torch loads its OpenMP runtime: libgomp's threads
# spin 300,000 times between parallel regions by default, which starves everything else on a busy machine.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")


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
