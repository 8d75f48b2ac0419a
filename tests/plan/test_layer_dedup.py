"""Tracing four layers per stack and copying the interior one's events gives the full trace byte for byte.

The models are the tiny twins' architectures made deeper (6 decoder layers, 6 vision blocks) and saved as
model folders, so the planner takes the stacks of identical layers as it does on a 7B model.
"""

import pytest

from mmtune.config import load_config
from mmtune.plan.batch import Declared

from .conftest import canonical_events

COMMON = ["data.max_length=96", "train.grad_accum=3"]
CASES = [
    ("tiny/qwen2", ["adapter.method=lora", "model.gradient_checkpointing=true", "train.precision=fp16"], None),
    ("tiny/qwen2", ["adapter.method=lora", "model.gradient_checkpointing=false", "train.precision=bf16"], None),
    ("tiny/qwen2", ["adapter.method=full", "model.gradient_checkpointing=true", "train.precision=fp32"], None),
    ("tiny/qwen2", ["adapter.method=qlora", "model.gradient_checkpointing=true", "train.precision=bf16",
                    "train.optimizer=adamw_8bit"], None),
    ("tiny/qwen2-vl", ["adapter.method=lora", "model.gradient_checkpointing=true", "train.precision=bf16"],
     Declared(images=[(112, 112)])),
]


def _deep_twin(tmp_path, name: str, layers: int = 6):
    """A tiny twin with `layers` decoder layers (and vision blocks), saved as a model folder."""
    from mmtune.models.tiny import tiny_config_and_processor

    config, processor = tiny_config_and_processor(name)
    text = getattr(config, "text_config", config)
    text.num_hidden_layers = layers
    if getattr(text, "layer_types", None):
        text.layer_types = [text.layer_types[0]] * layers
    vision = getattr(config, "vision_config", None)
    if vision is not None:
        vision.depth = layers
    import transformers

    from mmtune.compat.transformers_internals import model_from_config
    from mmtune.models.families import family_for_model_type

    folder = tmp_path / name.replace("/", "_")
    cls = getattr(transformers, family_for_model_type(config.model_type).model_class)
    model_from_config(cls, config).save_pretrained(folder)  # the weights the folder check asks for (~1 MB)
    processor.save_pretrained(folder)
    return str(folder)


def _relabelled(events):
    order = {}
    for e in events:
        order.setdefault(e.serial, len(order))
    return order, [(order[e.serial], e.nbytes, e.phase, e.tag) for e in events]


def _trace(cfg, declared, dedup):
    from mmtune.plan.planner import resolve_for_plan, trace_config

    pm, _, ex, _ = trace_config(resolve_for_plan(cfg, "h100"), declared=declared, dedup=dedup)
    tr = ex.tracker.trace
    last = max(i for i, e in enumerate(tr.events) if e.nbytes > 0)
    order, events = _relabelled(tr.events[: last + 1])
    storages = sorted((order[s.serial], s.nbytes, s.phase, s.tag, s.op) for s in tr.storages.values()
                      if s.serial in order)
    classes = [sorted(order[s] for s in ex.param_serials if s in order), sorted(order[s] for s in ex.grad_serials),
               sorted(order[s] for s in ex.state_serials)]
    peak = (tr.peak_bytes, tr.peak_index, tr.peak_phase)
    return pm, (canonical_events(events), storages, tr.costs, peak, classes)


@pytest.mark.parametrize("name,over,declared", CASES)
def test_four_traced_layers_give_the_full_trace(tmp_path, name, over, declared):
    cfg = load_config(None, COMMON + over + [f"model.name={_deep_twin(tmp_path, name)}"])
    pm, fast = _trace(cfg, declared, True)
    assert not [d for d in pm.decisions if "every layer traced" in d], pm.decisions
    assert [d for d in pm.decisions if "layers: 2 copied" in d], pm.decisions  # 6 layers, 4 traced
    _, full = _trace(cfg, declared, False)
    assert len(full[0]) > 1000
    for a, b in zip(fast, full):
        assert a == b


def test_stacks_found_and_index_dependent_configs_left_alone(tmp_path):
    from mmtune.plan.layer_dedup import find_groups
    from mmtune.plan.model import build_planned_model
    from mmtune.plan.planner import resolve_for_plan

    cfg = load_config(None, COMMON + [f"model.name={_deep_twin(tmp_path, 'tiny/qwen2-vl')}"])
    pm = build_planned_model(resolve_for_plan(cfg, "h100"))
    assert sorted(g.n for g in find_groups(pm.model, pm.hf_config)) == [6, 6]  # vision blocks, decoder layers
    pm.hf_config.vision_config.fullatt_block_indexes = [5]  # one block differs by its index: no copies
    assert find_groups(pm.model, pm.hf_config) == []
    tiny = build_planned_model(resolve_for_plan(load_config(None, COMMON + ["model.name=tiny/qwen2"]), "h100"))
    assert find_groups(tiny.model, tiny.hf_config) == []  # 2 layers: nothing to copy
