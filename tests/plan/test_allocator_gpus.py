import pytest

from mmtune.errors import ConfigError
from mmtune.gpus import GPUS, get_gpu
from mmtune.plan.allocator import CachingAllocatorModel, round_size, segment_size


def test_rounding_and_segments_follow_the_caching_allocator():
    assert round_size(1) == 512 and round_size(513) == 1024
    assert segment_size(4096) == 2 << 20  # small pool
    assert segment_size(5 << 20) == 20 << 20  # large, under 10 MiB
    assert segment_size(11 << 20) == 12 << 20  # rounded to 2 MiB


def test_blocks_are_reused_and_split():
    m = CachingAllocatorModel()
    m.malloc(0, 100)  # 512 B block in a new 2 MiB segment
    m.malloc(1, 300)
    assert m.allocated == 1024 and m.reserved == 2 << 20
    m.free(0)
    m.malloc(2, 512)  # reuses the freed block: no new segment
    assert m.reserved == 2 << 20
    m.malloc(3, 30 << 20)
    m.free(3)
    m.malloc(4, 16 << 20)  # fits in the cached 30 MiB segment, split
    assert m.reserved == (2 << 20) + (30 << 20)
    assert m.peak_allocated == (30 << 20) + 1024


def test_gpu_names_case_insensitive_and_unknown_lists_known():
    assert get_gpu("A100-40GB").id == "a100-40gb"
    assert get_gpu("Quadro_RTX_6000").id == "quadro-rtx-6000"
    for gid in ("t4", "v100-32gb", "rtx-3090", "rtx-4090", "a10", "l4", "a100-80gb", "h100", "h200"):
        assert gid in GPUS
    with pytest.raises(ConfigError) as e:
        get_gpu("a100-60gb")
    assert "a100-40gb" in e.value.fix and "t4" in e.value.fix
