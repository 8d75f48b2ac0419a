"""A structure-only build on meta (the resolved run's parameter counts, the planner) is never put under
`deepspeed.zero.Init`: transformers builds every model under it while a ZeRO-3 config is registered with it, and
accelerate's DeepSpeed plugin leaves that registration behind after its run, so the next run of the same process
(tests/train/test_deepspeed.py runs twelve in one launch; a ZeRO-3 run followed by a ZeRO-2 one there) crashed
resolving its process-group timeout: "Cannot copy out of meta tensor", or DeepSpeed starting MPI."""

from __future__ import annotations

import importlib.util

import pytest
import torch


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed here")
def test_meta_build_ignores_a_registered_zero3_config_and_leaves_it_registered():
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    from mmtune.models.construct import build_on_meta
    from mmtune.models.families import family_for_config
    from mmtune.models.tiny import tiny_config_and_processor

    registered = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1})
    try:
        assert is_deepspeed_zero3_enabled()
        config = tiny_config_and_processor("tiny/qwen2")[0]
        model = build_on_meta(family_for_config(config), config, torch.float32, "sdpa")
        assert {p.device.type for p in model.parameters()} == {"meta"}
        assert sum(p.numel() for p in model.parameters()) > 0  # whole shapes, not ZeRO's empty partitions
        assert is_deepspeed_zero3_enabled()  # put back for the run that registered it
    finally:
        from transformers.integrations import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
        del registered
