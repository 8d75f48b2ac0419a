"""Shared configs for the doctor tests."""

TINY_VL = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 8}}


def context_for(tmp_path, tree: dict, mutate=None):
    """A doctor context for `tree` (output_dir under tmp_path); with `mutate`, its resolved run carries a
    copy of the processor that `mutate(proc)` changed (tests build broken processors this way)."""
    import copy
    import dataclasses

    import yaml

    from mmtune.doctor.runner import make_context

    path = tmp_path / "ctx.yaml"
    path.write_text(yaml.safe_dump(dict(tree, output_dir=str(tmp_path / "run"))))
    ctx = make_context(path)
    if mutate is not None:
        resolved = ctx.need("resolved")
        proc = copy.deepcopy(resolved.need_processor())
        mutate(proc)
        ctx.put("resolved", dataclasses.replace(resolved, processor=proc))
    return ctx


def run_codes(ctx, *codes: str):
    """Run the checks `codes` on `ctx` -> DoctorReport."""
    from mmtune.doctor.registry import all_checks
    from mmtune.doctor.runner import run_checks

    return run_checks(ctx, [c for c in all_checks() if c.code in codes])


def model_folder(tmp_path, tiny="tiny/qwen2", name="m", config_json=None, **overrides):
    """A local model folder of a tiny architecture: config.json, processor files, a (header-only) weights
    file. `config_json` edits the written config.json (keys as the hub's files have them)."""
    import json
    import struct

    from mmtune.models.tiny import tiny_config_and_processor

    folder = tmp_path / name
    folder.mkdir()
    config, processor = tiny_config_and_processor(tiny, **overrides)
    config.save_pretrained(folder)
    processor.save_pretrained(folder)
    if config_json:
        raw = json.loads((folder / "config.json").read_text())
        raw.update(config_json)
        (folder / "config.json").write_text(json.dumps(raw))
    header = json.dumps({"w": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0")
    return folder


def sums_jsonl(folder, n: int = 8) -> str:
    """A text data file of `n` "What is i+1?" records (the answer i+1) in `folder`; its path."""
    import json
    from pathlib import Path

    path = Path(folder) / "t.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i}+1?"},
                                                      {"role": "assistant", "content": str(i + 1)}]}) + "\n"
                            for i in range(n)))
    return str(path)


def refusal_of_key(tmp_path, key: str, value) -> str:
    """The ConfigError a tiny run's config gets for `key` (dotted: a section's key; bare: top level) set to `value`."""
    import pytest
    import yaml

    from mmtune.config import load_config
    from mmtune.errors import ConfigError

    tree = {"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:counting"}, "output_dir": str(tmp_path / "r")}
    section, _, leaf = key.rpartition(".")
    (tree.setdefault(section, {}) if section else tree)[leaf] = value
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError) as e:
        load_config(path, [])
    return str(e.value)
