"""Public bug reports, batch 52: GRPO reward functions and verifiers (docs/doctor.md).

Each test rebuilds a reported setup on a tiny twin. Three were misses, fixed here: a reward that raises on a sampled
completion it cannot parse ended the run with the user's traceback (and MM121 swallowed the same exception on its
wrong-answer probe), a reward returning numpy float32 numbers was refused as "not a number", and the built-in
format reward's `.` stopped at a newline, so a multi-line reasoning block never matched. The others pin what was so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import context_for, run_codes

REWARDS = r'''
import re
import signal

SEEN = []

def boxed(completions, references):
    # the extraction every GRPO tutorial writes: re.search(...).group(1) raises on an answer without \boxed{}
    return [float(re.search(r"\\boxed\{(.+?)\}", c).group(1) == r[0]) for c, r in zip(completions, references)]

def last_word(completions, references):
    return [float(c.split()[-1] == r[0]) for c, r in zip(completions, references)]  # IndexError on ""

def np32(completions, references):
    import numpy as np
    return list(np.array([1.0 if c == r[0] else 0.0 for c, r in zip(completions, references)], dtype=np.float32))

def tensor(completions, references):
    import torch
    return torch.tensor([float(len(c)) for c in completions])

def one_value(completions, references):
    return [1.0]

def trl_accuracy(completions, solution, **kwargs):
    # TRL's shape: solution[i] one string; here the second argument is references[i], a list: never equal
    return [float(c.strip() == s) for c, s in zip(completions, solution)]

def recorded(completions, references):
    # math_verify's timeout: signal.signal, which raises ValueError off the main thread
    old = signal.signal(signal.SIGALRM, lambda *a: None)
    signal.signal(signal.SIGALRM, old)
    SEEN.extend(completions)
    return [float(len(c)) for c in completions]
'''


@pytest.fixture
def rewards(tmp_path, monkeypatch):
    (tmp_path / "rw_b52.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    import sys

    sys.modules.pop("rw_b52", None)
    return importlib.import_module("rw_b52")


def _tree(tmp_path, reward, answer="\\boxed{3}"):
    rows = [{"messages": [{"role": "user", "content": f"What is 1 + {i}? Put the answer in \\boxed{{}}."},
                          {"role": "assistant", "content": answer}]} for i in range(4)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return {"model": {"name": "tiny/qwen2"}, "data": {"train": str(tmp_path / "d.jsonl"), "max_length": 96},
            "train": {"objective": "grpo", "grpo": {"generations": 2, "max_completion_length": 16,
                                                   "rewards": [{"name": reward}]}}}


# ----------------------------------------------------------------------------- a reward that raises mid-run
# https://github.com/huggingface/cookbook/issues/335, https://github.com/verl-project/verl/pull/5635,
# https://github.com/huggingface/trl/issues/6533 (a reward's failure on one sample: a crash mid-run, or swallowed
# into zeros). A reward doing re.search(...).group(1) passes on the reference answers (they hold \boxed{}) and
# raised AttributeError at the first step that sampled an answer without it: the user's traceback, mid-run.

def test_a_reward_that_raises_on_a_sampled_completion_is_a_config_error_naming_the_completion(rewards):
    from mmtune.errors import ConfigError
    from mmtune.evaluate.rewards import reward_function, score

    fn = reward_function("rw_b52:boxed")
    assert score(fn, "rw_b52:boxed", ["\\boxed{3}"], [["\\boxed{3}"]]) == [0.0]  # no raise on the references
    with pytest.raises(ConfigError) as e:
        score(fn, "rw_b52:boxed", ["\\boxed{3}", "it is 3"], [["3"], ["3"]])
    assert "raised AttributeError" in e.value.what and "'it is 3'" in e.value.what
    assert e.value.where == "train.grpo.rewards" and "never raise" in e.value.fix


def test_mm121_calls_the_rewards_on_an_empty_completion_too(tmp_path, rewards):
    for name, exc in (("rw_b52:boxed", "AttributeError"), ("rw_b52:last_word", "IndexError")):
        rep = run_codes(context_for(tmp_path, _tree(tmp_path, name)), "MM121")
        (f,) = [f for f in rep.findings if f.code == "MM121"]
        assert f.severity == "error" and exc in f.message and "''" in f.message, f
        assert f.where == "train.grpo.rewards[0]" and "never raise" in f.fix


# ----------------------------------------------------------------------------- what counts as a number
# https://github.com/huggingface/trl/issues/6533, https://github.com/huggingface/trl/pull/6534 (one value for all
# completions, silently broadcast by TRL): refused here, as before. Found beside it: numpy float32 (not a float
# subclass) and a tensor were refused as "must return one finite number", with the numbers shown.

def test_numpy_and_tensor_rewards_are_numbers_and_a_single_value_is_still_refused(rewards):
    import math

    import torch

    from mmtune.errors import ConfigError
    from mmtune.evaluate.rewards import reward_function, score

    assert score(reward_function("rw_b52:np32"), "np32", ["3", "4"], [["3"], ["3"]]) == [1.0, 0.0]
    assert score(reward_function("rw_b52:tensor"), "tensor", ["ab", "c"], [["3"], ["3"]]) == [2.0, 1.0]
    for bad in ([1.0], [True, False], [None, 1.0], [math.nan, 1.0], ["1", "0"], torch.tensor([True, False])):
        with pytest.raises(ConfigError, match="one finite number per completion"):
            score(lambda c, r, bad=bad: bad, "bad", ["a", "b"], [["a"], ["b"]])


# ----------------------------------------------------------------------------- a format reward over lines
# https://github.com/unslothai/unsloth/issues/1761 (format_reward always zero: the regex's `.` stopped at the
# newlines inside the tags), https://github.com/huggingface/open-r1/pull/418.

def test_the_format_reward_matches_a_reasoning_block_over_several_lines():
    from mmtune.evaluate.rewards import reward_function

    fmt = reward_function("format", r"<think>.*</think>\s*<answer>.*</answer>")
    got = fmt(["<think>\nthree dots\nand one more\n</think>\n<answer>\n4\n</answer>\n", "4"], [["4"], ["4"]])
    assert got == [1.0, 0.0]


# ----------------------------------------------------------------------------- a reward that wants a column
# https://github.com/modelscope/ms-swift/issues/3840, https://github.com/modelscope/ms-swift/issues/3533,
# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/234 ("missing 1 required positional argument:
# 'solution'" at the first step). Here the second argument is the references whatever its name, but each is a list
# of accepted answers: TRL's `c == solution` compares text with a list and is 0 for every completion. MM121 says so.

def test_a_trl_accuracy_reward_on_a_solution_argument_is_said_to_reward_nothing(tmp_path, rewards):
    rep = run_codes(context_for(tmp_path, _tree(tmp_path, "rw_b52:trl_accuracy")), "MM120", "MM121")
    (f,) = [f for f in rep.findings if f.code in ("MM120", "MM121")]
    assert f.code == "MM121" and f.severity == "info" and "no more than a wrong answer" in f.message, f
    assert "0 vs 0" in f.message and f.where == "train.grpo.rewards[0]"


# ----------------------------------------------------------------------------- what a reward sees, and where
# https://github.com/lsdefine/simple_GRPO/issues/19 (a format pattern failing on <|im_end|> in the text),
# https://github.com/ZHZisZZ/dllm/issues/118 (tokens after the end of sequence scored),
# https://github.com/huggingface/Math-Verify/issues/55, https://github.com/huggingface/trl/pull/5281 (math_verify's
# signal-based timeout raises off the main thread). A two-step run: the reward is called in the main thread,
# on the completion text alone (no prompt, no template token, nothing after the end of sequence), and logged.

def test_a_two_step_run_calls_the_reward_on_plain_completions_in_the_main_thread(tmp_path, rewards):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    out = tmp_path / "run"
    cfg = load_config(None, [
        "model.name=tiny/qwen2", "model.gradient_checkpointing=false", "data.train=synthetic:arithmetic",
        "data.synthetic_train_size=8", "data.max_length=64", "adapter.r=4", "train.objective=grpo",
        "train.grpo.generations=3", "train.grpo.max_completion_length=6", "train.grpo.rewards=[{name: rw_b52:recorded}]",
        "train.max_steps=2", "train.micro_batch_size=2", "train.precision=fp32", "train.device=cpu",
        "logging.tensorboard=false", f"output_dir={out}"])
    train(build_run(cfg))
    assert len(rewards.SEEN) == 2 * 2 * 3  # steps x prompts x generations
    assert not [c for c in rewards.SEEN if "<|im_" in c or "<|endoftext|>" in c or "user\n" in c]
    rows = [r for r in map(json.loads, (Path(out) / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]
    assert len(rows) == 2 and all("reward/rw_b52:recorded" in r for r in rows)
