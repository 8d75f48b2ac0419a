"""Public bug reports, batch 20: preference and RL training beyond the pairs (docs/doctor.md).

Each test rebuilds a reported setup on a tiny twin. Two were misses, fixed here: GRPO sampled with the
checkpoint's own generation_config.json underneath the run's settings, and a GRPO step whose groups all tie (or
whose completions are all cut) learned nothing without a word. The others pin what was already so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import TINY_VL, context_for

# ----------------------------------------------------------------------------- GRPO samples from the policy only
# https://github.com/huggingface/trl/issues/5783 (GRPOTrainer near-greedy: the model's generation_config filled
# what the trainer left unset), https://github.com/PrimeIntellect-ai/prime-rl/pull/886 (Qwen2.5's
# repetition_penalty 1.05 applied to RL rollouts), https://github.com/huggingface/trl/issues/3562. mmtune passed
# temperature / top_k / top_p to generate, and generate filled every other field from the checkpoint's
# generation_config.json: a repetition penalty, an n-gram ban, a floor on new tokens bent the samples away from
# the distribution whose log-probabilities the loss takes.

def _sampled(model, tok, seed=0):
    import torch

    from mmtune.config.schema import GRPOConfig
    from mmtune.objectives.grpo import GRPO

    grpo = GRPO(GRPOConfig(generations=4, max_completion_length=12), None, tok)
    ids = torch.tensor([tok("count the dots in the picture")["input_ids"]])
    torch.manual_seed(seed)
    return torch.cat(grpo._sample(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}))


def test_grpo_samples_with_the_runs_settings_whatever_the_checkpoints_generation_config_says():
    import torch
    from peft import LoraConfig, get_peft_model

    from mmtune.models.tiny import build_tiny

    model, proc = build_tiny("tiny/qwen2")
    tok = getattr(proc, "tokenizer", proc)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"]))  # the run's LoRA wrapping
    plain = _sampled(model, tok)
    gc = model.get_base_model().generation_config  # what a Qwen generation_config.json loads as, and worse
    gc.repetition_penalty, gc.no_repeat_ngram_size, gc.min_new_tokens = 1.3, 1, 12
    gc.top_k, gc.top_p, gc.temperature = 1, 0.001, 0.01
    assert torch.equal(_sampled(model, tok), plain)  # the same draws: the checkpoint's settings play no part
    assert not torch.equal(_sampled(model, tok, seed=1), plain)  # and the draws are samples (the test can fail)
    assert model.get_base_model().generation_config.no_repeat_ngram_size == 1  # the model's own config is kept


# ----------------------------------------------------------------------------- a step that learns nothing is said
# https://github.com/huggingface/trl/issues/3857, https://github.com/huggingface/trl/issues/3452,
# https://github.com/unslothai/unsloth/issues/2291 (loss 0 and no learning: every group's rewards equal,
# TRL's frac_reward_zero_std 1); https://github.com/huggingface/trl/issues/5697,
# https://github.com/huggingface/trl/issues/6219, https://github.com/modelscope/ms-swift/issues/4950 (every
# completion cut at max_completion_length, clipped_ratio 1, reward 0). mmtune logged neither share and said
# nothing; now both are in every training row and the progress display says it the first time a whole step has it.

def _grpo_run(tmp_path, out, reward):
    from mmtune.config import load_config

    return load_config(None, [
        "model.name=tiny/qwen2", "model.gradient_checkpointing=false", "data.train=synthetic:arithmetic",
        "data.synthetic_train_size=8", "data.max_length=64", "adapter.r=4", "train.objective=grpo",
        "train.grpo.generations=3", "train.grpo.max_completion_length=2", f"train.grpo.rewards=[{{name: {reward}}}]",
        "train.max_steps=2", "train.micro_batch_size=2", "train.precision=fp32", "train.device=cpu",
        "logging.tensorboard=false", f"output_dir={tmp_path / out}"])


def _rows(out):
    return [r for r in map(json.loads, (Path(out) / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def test_a_grpo_step_whose_rewards_all_tie_and_whose_completions_are_all_cut_is_logged_and_said(tmp_path, monkeypatch):
    from mmtune.build import build_run
    from mmtune.train.loop import train

    # exact_match of 2-token samples from random weights against arithmetic answers: 0 for every completion
    cfg = _grpo_run(tmp_path, "tie", "exact_match")
    run = build_run(cfg)
    train(run)
    rows = _rows(cfg.output_dir)
    assert [r["frac_reward_zero_std"] for r in rows] == [1.0, 1.0]
    assert [r["frac_completions_truncated"] for r in rows] == [1.0, 1.0]
    note = run.objective.step_note(rows[0], 1)
    assert note is None  # said once per run: the loop already said it at step 1
    fresh = build_run(_grpo_run(tmp_path, "tie2", "exact_match")).objective.step_note(rows[0], 1)
    assert "frac_reward_zero_std 1" in fresh and "train.grpo.temperature" in fresh
    assert "train.grpo.max_completion_length=2" in fresh

    # the clean twin: a reward that tells samples apart (its length) gives groups with a spread
    (tmp_path / "spread_reward.py").write_text(
        "def reward(completions, references):\n    return [float(len(c)) for c in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg2 = _grpo_run(tmp_path, "spread", "'spread_reward:reward'")
    run2 = build_run(cfg2)
    train(run2)
    rows2 = _rows(cfg2.output_dir)
    assert all(r["frac_reward_zero_std"] < 1 for r in rows2)
    assert "frac_reward_zero_std" not in (build_run(cfg2).objective.step_note(rows2[0], 1) or "")


# ----------------------------------------------------------------------------- pinned: what was already so

# https://github.com/hiyouga/LlamaFactory/issues/4402, https://github.com/hiyouga/LlamaFactory/issues/4617,
# https://github.com/huggingface/trl/issues/2538: a cutoff applied to one side of a pair (the rejected answer ran
# past it, or only one side was cut). Here a pair is as long as its longer side and is never truncated.
def test_a_pair_whose_rejected_side_alone_is_too_long_is_refused_naming_the_record(tmp_path):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.errors import MMTuneError
    from mmtune.train.loop import train

    rows = [{"prompt": "How many dots?", "chosen": "3", "rejected": "there are three dots in rows, " * 12}]
    rows += [{"prompt": f"Q{i}?", "chosen": "yes", "rejected": "no"} for i in range(3)]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = load_config(None, ["model.name=tiny/qwen2", f"data.train={tmp_path / 'p.jsonl'}", "data.format=preference",
                             "data.max_length=40", "adapter.r=4", "train.objective=dpo", "train.max_steps=1",
                             "train.device=cpu", "train.precision=fp32", "logging.tensorboard=false",
                             f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(MMTuneError) as e:
        train(build_run(cfg))
    assert "over data.max_length=40" in str(e.value) and "not truncated" in str(e.value)
    assert "p.jsonl:1" in str(e.value.where)


# https://github.com/huggingface/trl/pull/1289, https://github.com/shibing624/MedicalGPT/issues/334,
# https://github.com/huggingface/trl/issues/624: a second reference copy beside LoRA ("You passed both a
# ref_model and a peft_config"). The reference is decided with the adapter method, in the resolved run.
def test_the_reference_of_a_lora_dpo_run_is_the_adapters_off_and_of_a_full_run_a_copy(tmp_path):
    from mmtune.config import load_config
    from mmtune.objectives import decide

    lora = load_config(None, ["model.name=tiny/qwen2", "train.objective=dpo", f"output_dir={tmp_path / 'a'}"])
    full = load_config(None, ["model.name=tiny/qwen2", "train.objective=dpo", "adapter.method=full",
                              f"output_dir={tmp_path / 'b'}"])
    (ref_lora,) = [d for d in decide(lora)[0] if d[0] == "reference model"]
    (ref_full,) = [d for d in decide(full)[0] if d[0] == "reference model"]
    assert "adapters disabled" in ref_lora[1] and "no second copy" in ref_lora[2]
    assert "frozen copy" in ref_full[1]


# https://github.com/Liuziyu77/Visual-RFT/issues/108, https://github.com/huggingface/open-r1/pull/621: a GRPO run
# from a model without a chat template ("No chat template is set for this processor"). GRPO's prompts go through
# the run's one encoder, which refuses the model once, naming model.name.
def test_grpo_from_a_model_without_a_chat_template_is_refused_naming_the_model(tmp_path):
    from mmtune.data.encode import Encoder
    from mmtune.data.preference import train_encoder
    from mmtune.errors import ConfigError

    def no_template(p):
        p.chat_template = p.tokenizer.chat_template = None

    tree = dict(TINY_VL, train={"objective": "grpo"})
    resolved = context_for(tmp_path, tree, no_template).need("resolved")
    with pytest.raises(ConfigError) as e:
        train_encoder(resolved, Encoder.for_run(resolved))
    assert e.value.where == "model.name" and "no chat template" in e.value.what


# https://github.com/huggingface/trl/issues/5697, https://github.com/greyhaven-ai/autocontext/pull/1067: a
# completion budget shorter than the answers. MM122 measures the training answers with the run's tokenizer.
def test_a_completion_budget_shorter_than_the_answers_is_mm122(tmp_path):
    from doctor_helpers import run_codes

    tree = {"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:arithmetic", "synthetic_train_size": 8},
            "train": {"objective": "grpo", "grpo": {"max_completion_length": 1}}}
    (f,) = [f for f in run_codes(context_for(tmp_path, tree), "MM122").findings if f.code == "MM122"]
    assert f.severity in ("warning", "error") and "train.grpo.max_completion_length=" in f.fix
