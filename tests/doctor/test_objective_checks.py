"""The objective checks (doctor/checks/objectives.py): GRPO's rewards (MM120 import, MM121 numbers on real
records), its completion budget against the training answers (MM122), and the reference model of a full
fine-tune (MM123, through real plans). Each is triggered by its broken setup and silent on a clean one."""

from __future__ import annotations

import dataclasses
import json

import pytest
from doctor_helpers import context_for, run_codes

REWARDS_MODULE = '''
def text(completions, references):
    return ["good"] * len(completions)

def boom(completions, references):
    raise KeyError("score")

def constant(completions, references):
    return [0.5] * len(completions)

not_a_function = 3
'''


def _tree(tmp_path, *, rewards=None, answer="three apples", max_completion=16, **train):
    rows = [{"messages": [{"role": "user", "content": f"How many apples in basket {i}?"},
                          {"role": "assistant", "content": answer}]} for i in range(6)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    grpo = {"generations": 2, "max_completion_length": max_completion}
    if rewards is not None:
        grpo["rewards"] = rewards
    return {"model": {"name": "tiny/qwen2"}, "data": {"train": str(tmp_path / "d.jsonl"), "max_length": 96},
            "train": {"objective": "grpo", "grpo": grpo, **train}}


@pytest.fixture
def user_rewards(tmp_path, monkeypatch):
    (tmp_path / "my_rewards_mm12x.py").write_text(REWARDS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_rewards_mm12x"


def _findings(rep, code):
    return [f for f in rep.findings if f.code == code]


def test_mm120_a_reward_that_does_not_import(tmp_path, user_rewards):
    tree = _tree(tmp_path, rewards=[{"name": "no_such_module_mm120:fn"}, {"name": f"{user_rewards}:missing"},
                                    {"name": f"{user_rewards}:not_a_function"}])
    fs = _findings(run_codes(context_for(tmp_path, tree), "MM120"), "MM120")
    assert [f.severity for f in fs] == ["error"] * 3
    assert fs[0].where == "train.grpo.rewards[0]" and "cannot be imported" in fs[0].message
    assert "not a function" in fs[2].message and fs[2].fix


def test_mm121_a_reward_that_returns_text_or_raises(tmp_path, user_rewards):
    tree = _tree(tmp_path, rewards=[{"name": f"{user_rewards}:text"}, {"name": f"{user_rewards}:boom"},
                                    {"name": f"{user_rewards}:constant"}])
    fs = _findings(run_codes(context_for(tmp_path, tree), "MM121"), "MM121")
    by = {f.severity: [] for f in fs}
    for f in fs:
        by[f.severity].append(f)
    assert len(by["error"]) == 2
    assert "one finite number per completion" in by["error"][0].message
    assert "d.jsonl:1" in str(by["error"][0].where)
    assert "KeyError" in by["error"][1].message
    (inf,) = by["info"]  # a constant reward rewards nothing the task asks for
    assert "constant" in inf.message and inf.where == "train.grpo.rewards[2]"


def test_mm122_completion_budget_below_the_answers(tmp_path):
    tree = _tree(tmp_path, answer="there are exactly three red apples in the basket today", max_completion=3)
    (f,) = _findings(run_codes(context_for(tmp_path, tree), "MM122"), "MM122")
    assert f.severity in ("error", "info") and "6 of 6 records" in f.message
    assert f.fix.startswith("train.grpo.max_completion_length=")
    assert int(f.fix.split("=")[1]) > 3


def test_objective_checks_silent_on_a_clean_grpo_setup(tmp_path):
    tree = _tree(tmp_path, rewards=[{"name": "exact_match"}, {"name": "mmtune.evaluate.rewards:_count"}],
                 max_completion=16)
    rep = run_codes(context_for(tmp_path, tree), "MM120", "MM121", "MM122", "MM123")
    assert not [f for f in rep.findings if f.code in ("MM120", "MM121", "MM122", "MM123")], rep.findings


def test_unknown_builtin_reward_is_a_config_error(tmp_path):
    from mmtune.doctor.registry import all_checks
    from mmtune.doctor.runner import run_checks

    tree = _tree(tmp_path, rewards=[{"name": "exact_mach"}])
    rep = run_checks(context_for(tmp_path, tree), [c for c in all_checks() if c.code in ("MM019", "MM120")])
    (f,) = [f for f in rep.findings if f.code == "MM019"]
    assert "did you mean 'exact_match'" in f.message + (f.fix or "")


def _reference_context(tmp_path, capacity_between: bool):
    """A full fine-tune of tiny Qwen2-VL with grpo beta > 0, planned for real on a GPU whose memory is chosen
    from a first plan: between the step without the frozen copy and with it (or with room for both)."""
    from mmtune.doctor.runner import make_context
    from mmtune.gpus import get_gpu
    from mmtune.plan.margin import required_headroom
    from mmtune.plan.planner import predict

    tree = {"model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": False},
            "data": {"train": "synthetic:counting", "synthetic_train_size": 8, "max_length": 160},
            "adapter": {"method": "full"}, "train": {"objective": "grpo", "precision": "fp32", "gpu": "t4",
                                                    "grpo": {"generations": 2, "max_completion_length": 8,
                                                             "beta": 0.04}}}
    ctx = context_for(tmp_path, tree)
    resolved = ctx.need("resolved")
    first = predict(resolved)
    copy = first.total_params * 4
    without = first.process_total_bytes - copy
    cap = without + required_headroom(without) + copy // 2 if capacity_between else 64 * 2**30
    spec = dataclasses.replace(get_gpu("t4"), usable_bytes=cap, memory_bytes=cap)
    resolved = dataclasses.replace(resolved, target=dataclasses.replace(resolved.target, gpu=spec))
    ctx.put("resolved", resolved)
    ctx.put("gpu", spec)
    ctx.put("plan", predict(resolved))
    del make_context
    return ctx


def test_mm123_the_frozen_copy_is_what_does_not_fit(tmp_path):
    ctx = _reference_context(tmp_path, capacity_between=True)
    assert not ctx.need("plan").fits
    (f,) = _findings(run_codes(ctx, "MM123"), "MM123")
    assert f.severity == "error" and "frozen reference copy" in f.message
    assert "adapter.method=lora" in f.fix and "train.grpo.beta=0" in f.fix


def test_mm123_fits_is_an_info_and_lora_is_silent(tmp_path):
    ctx = _reference_context(tmp_path, capacity_between=False)
    (f,) = _findings(run_codes(ctx, "MM123"), "MM123")
    assert f.severity == "info"
    lora = context_for(tmp_path, {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting"},
                                  "train": {"objective": "grpo", "gpu": "t4", "grpo": {"beta": 0.04}}})
    assert not _findings(run_codes(lora, "MM123"), "MM123")
