"""MM036: eval.max_new_tokens shorter than the eval set's reference answers (counted with the run's
tokenizer) cuts the generated answers; silent when every answer fits or one accepted answer fits."""

from __future__ import annotations

import json

import pytest

LONG = "The chart shows revenue rising steadily from 2019 to 2023, with a sharp dip in 2020 and a recovery after"


@pytest.fixture
def eval_set(tmp_path):
    from PIL import Image

    Image.new("RGB", (56, 56), "white").save(tmp_path / "a.png")

    def write(answers, name="eval.jsonl"):
        with open(tmp_path / name, "w") as f:
            for a in answers:
                f.write(json.dumps({"image": "a.png", "question": "What does it show?", "answer": a}) + "\n")
        return str(tmp_path / name)

    return write


def _tree(eval_path, **ev):
    return {"model": {"name": "tiny/qwen2-vl"},
            "data": {"train": "synthetic:counting", "synthetic_train_size": 4, "eval": eval_path, "format": "vqa"},
            "eval": ev}


def _tokens(text):
    from mmtune.models.tiny import tiny_config_and_processor

    return len(tiny_config_and_processor("tiny/qwen2-vl")[1].tokenizer(text, add_special_tokens=False)["input_ids"])


def test_answers_longer_than_max_new_tokens_warn(doctor, eval_set):
    path = eval_set(["3", LONG, "two"])
    n = _tokens(LONG)
    assert n > 16  # the premise: a set eval.max_new_tokens=16 cuts it
    rep = doctor(_tree(path, max_new_tokens=16), "MM036")
    (f,) = rep.findings
    assert (f.code, f.severity) == ("MM036", "warning")
    assert "1 of 3 evaluated records" in f.message and f"longest: {n} tokens" in f.message
    assert f.where.startswith(f"{path}:2") and f.fix == f"eval.max_new_tokens={n}"


def test_unset_budget_is_decided_from_the_answers_and_only_the_cap_cuts(doctor, eval_set):
    """eval.max_new_tokens unset: training decides it from these answers (resolve/generation_budget.py), so the
    long answer is not cut; one past the decided budget's cap still is, and the finding says the budget was unset."""
    from mmtune.resolve.generation_budget import CAP

    assert doctor(_tree(eval_set(["3", LONG])), "MM036").findings == []
    huge = " ".join([LONG] * 60)
    assert _tokens(huge) > CAP
    tree = _tree(eval_set(["3", huge]))
    tree["data"]["max_length"] = 4096  # the record itself fits: only its generation is cut
    (f,) = doctor(tree, "MM036").findings
    assert f"eval.max_new_tokens={CAP} (unset" in f.message and "1 of 2 evaluated records" in f.message


@pytest.mark.parametrize("answers,ev", [
    (["3", LONG], {"max_new_tokens": 64}),  # long enough
    (["3", LONG], {"generate": False}),  # no generation: nothing is cut
    (["3", [LONG, "rising"]], {}),  # a short accepted answer is enough for the metric
    (["3", LONG], {"eval_max_samples": 1}),  # the long one is never evaluated
])
def test_answers_that_fit_are_silent(doctor, eval_set, answers, ev):
    tree = _tree(eval_set(answers), **{k: v for k, v in ev.items() if k != "eval_max_samples"})
    if "eval_max_samples" in ev:
        tree["data"]["eval_max_samples"] = ev["eval_max_samples"]
    assert doctor(tree, "MM036").findings == []
