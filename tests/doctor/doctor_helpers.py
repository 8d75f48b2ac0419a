"""Shared configs for the doctor tests."""

TINY_VL = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 8}}
