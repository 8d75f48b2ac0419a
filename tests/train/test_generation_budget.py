"""eval.max_new_tokens left unset is decided from the eval set's answers (resolve/generation_budget.py): in force
in the run (its evaluation generates that many), said in the start-up decisions and config.resolved.yaml, and the
same value planned by `mmtune plan`; a value the config sets is kept."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.resolve.generation_budget import budget_for
from mmtune.train.loop import train

CAPTION = "a small red circle on the left and two black circles on the right side of a white square picture"


def _long_answers(cfg_path: Path, *, unset: bool) -> Path:
    """The config's eval set with one long answer; eval.max_new_tokens removed when `unset`."""
    tree = yaml.safe_load(cfg_path.read_text())
    data = Path(tree["data"]["train"])
    rows = [json.loads(line) for line in data.read_text().splitlines()][:4]
    rows[1]["messages"][-1]["content"] = CAPTION
    ev = data.parent / "eval_long.jsonl"
    ev.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tree["data"]["eval"] = str(ev)
    if unset:
        del tree["eval"]["max_new_tokens"]
    cfg_path.write_text(yaml.safe_dump(tree))
    return cfg_path


def _tokens(run, text: str) -> int:
    return len(run.encoder.tokenizer(text, add_special_tokens=False)["input_ids"])


def test_unset_budget_covers_the_longest_answer_and_is_recorded(tiny_vl_config):
    cfg_path = _long_answers(tiny_vl_config(train={"max_steps": 1, "grad_accum": 1}), unset=True)
    cfg = load_config(cfg_path, [])
    run = build_run(cfg)
    n = _tokens(run, CAPTION)
    assert n > 16  # the premise: the schema's default would cut it
    want = budget_for(n)
    assert want > n and run.cfg.eval.max_new_tokens == want
    assert run.resolved.cfg.eval.max_new_tokens == want
    line = next(d for d in run.decisions if d.startswith("eval.max_new_tokens:"))
    assert f"{want} (unset: the longest reference answer of the 4 eval records is {n} tokens" in line
    train(run)
    resolved = (Path(cfg.output_dir) / "config.resolved.yaml").read_text()
    assert f"# {line}" in resolved and yaml.safe_load(resolved)["eval"]["max_new_tokens"] == want

    from mmtune.plan import predict

    plan = predict(load_config(cfg_path, []))
    assert plan.eval["max_new_tokens"] == want  # the plan's eval phase generates what training will


def test_a_set_budget_is_kept(tiny_vl_config):
    cfg_path = _long_answers(tiny_vl_config(), unset=False)  # the fixture sets eval.max_new_tokens=3
    run = build_run(load_config(cfg_path, []))
    assert run.cfg.eval.max_new_tokens == 3
    assert not any(d.startswith("eval.max_new_tokens:") for d in run.decisions)
