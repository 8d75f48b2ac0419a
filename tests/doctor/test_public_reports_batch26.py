"""Broken setups from the twenty-sixth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 26:
configs carried over from other tools and hyperparameter footguns"): a config written with transformers' /
LLaMA-Factory's / axolotl's keys and values, a learning rate read as a string, learning rates and LoRA scales off
for the method. Each is the YAML a user would write, read by load_config (what `mmtune train` and `mmtune doctor`
read first) or run through the doctor.
"""

from __future__ import annotations

import pytest
import yaml

BASE = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 8},
        "train": {"max_steps": 2}}


def _problems(tmp_path, text: str) -> dict[str, str]:
    """key -> 'message -> fix' for each problem the config loader reports for the YAML `text`."""
    from mmtune.config.loader import load_config
    from mmtune.errors import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, "output_dir": str(tmp_path / "run")}) + text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    return {p["key"]: f"{p['message']} -> {p['fix']}" for p in e.value.problems}


def _validate_problems(tree: dict) -> dict[str, str]:
    from mmtune.config.loader import validate
    from mmtune.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        validate(tree)
    return {p["key"]: f"{p['message']} -> {p['fix']}" for p in e.value.problems}


# ----------------------------------------------------------------------------- `learning_rate: 2e-4` is a string
# https://github.com/hiyouga/LlamaFactory/issues/4014, https://github.com/hiyouga/LlamaFactory/issues/4149,
# https://github.com/salesforce/ALBEF/issues/128, https://github.com/h2oai/h2o-llmstudio/pull/699: PyYAML reads
# `2e-4` (no dot) as the string '2e-4'; the optimizer then fails with "'<=' not supported between 'float' and 'str'".
def test_an_lr_without_a_dot_is_read_as_the_number(tmp_path):
    from mmtune.config.loader import load_config

    assert yaml.safe_load("lr: 2e-4")["lr"] == "2e-4"  # the trap itself: YAML 1.1 floats need a dot
    path = tmp_path / "c.yaml"
    text = yaml.safe_dump({**BASE, "output_dir": str(tmp_path / "run")}).replace("max_steps: 2", "max_steps: 2\n  lr: 2e-4")
    path.write_text(text)
    cfg = load_config(path)
    assert isinstance(cfg.train.lr, float) and cfg.train.lr == 2e-4


# ----------------------------------------------------------------------------- keys that carry a decision
# https://github.com/axolotl-ai-cloud/axolotl/issues/1513 (an axolotl config: `load_in_4bit: true`, `adapter: qlora`,
# `optimizer: paged_adamw_32bit`), https://github.com/hiyouga/LlamaFactory/issues/580 (`--optim paged_adamw_32bit`):
# mmtune answered `load_in_4bit` / `quantization_bit` / `deepspeed` with "remove it" (which trains a 16-bit base where
# a 4-bit one was asked), and `adapter: qlora` with pydantic's "valid dictionary" and no fix.
@pytest.mark.parametrize("text,key,says", [
    ("load_in_4bit: true\n", "load_in_4bit", "adapter.method=qlora"),
    ("quantization_bit: 4\n", "quantization_bit", "adapter.method=qlora"),
    ("load_in_8bit: true\n", "load_in_8bit", "adapter.method=lora8bit"),
    ("deepspeed: ds_z3_config.json\n", "deepspeed", "train.strategy=zero2 or zero3"),
    ("adapter: qlora\n", "adapter", "adapter: {method: qlora}"),
])
def test_quantization_and_sharding_keys_of_other_tools_name_ours(tmp_path, text, key, says):
    problems = _problems(tmp_path, text)
    assert says in problems[key], problems[key]
    assert "remove it" not in problems[key]


# https://github.com/huggingface/transformers/issues/7974, https://github.com/huggingface/course/issues/987,
# https://github.com/TW-NLP/ChineseErrorCorrector/issues/31: `evaluation_strategy` / `eval_strategy` carried between
# transformers versions. difflib's nearest key was train.strategy (distributed training): a wrong fix; LLaMA-Factory's
# `template:` was answered with train.grpo.temperature, `model.torch_dtype` with model.factory.
@pytest.mark.parametrize("tree,key,ours,wrong", [
    ({"evaluation_strategy": "steps"}, "evaluation_strategy", "eval.every", "train.strategy"),
    ({"eval_strategy": "epoch"}, "eval_strategy", "eval.every", "train.strategy"),
    ({"template": "qwen2_vl"}, "template", "chat template is the model's own", "temperature"),
    ({"model": {"name": "tiny/qwen2-vl", "torch_dtype": "bfloat16"}}, "model.torch_dtype", "train.precision",
     "model.factory"),
])
def test_other_tools_keys_are_not_answered_with_a_near_wrong_key(tree, key, ours, wrong):
    problems = _validate_problems({**BASE, **tree})
    assert ours in problems[key] and wrong not in problems[key], problems[key]


# ----------------------------------------------------------------------------- values in another tool's words
# https://github.com/yangjianxin1/Firefly/issues/69, https://github.com/hiyouga/LlamaFactory/issues/580 (optimizer
# names), https://github.com/axolotl-ai-cloud/axolotl/issues/334, https://github.com/unslothai/unsloth-zoo/pull/818
# (transformers' scheduler names: a recipe ported with lr_scheduler_type='cosine_with_restarts' hit a ValueError with
# no equivalent named): the schema listed our choices but not which one theirs is.
@pytest.mark.parametrize("key,value,ours", [
    ("optimizer", "adamw_torch", "train.optimizer=adamw"),
    ("optimizer", "paged_adamw_32bit", "train.optimizer=paged_adamw"),
    ("scheduler", "constant_with_warmup", "train.scheduler=constant"),
    ("scheduler", "cosine_with_restarts", "train.scheduler=cosine"),
    ("precision", "bfloat16", "train.precision=bf16"),
])
def test_a_choice_spelled_the_other_tools_way_names_ours(key, value, ours):
    problems = _validate_problems({**BASE, "train": {**BASE["train"], key: value}})
    assert ours in problems[f"train.{key}"], problems


def test_the_doctor_gives_the_same_fixes(doctor):
    """The doctor reports a config it cannot read as MM019, with the loader's fixes."""
    rep = doctor({**BASE, "load_in_4bit": True, "train": {"max_steps": 2, "optimizer": "adamw_torch"}})
    fixes = " | ".join(f.fix or "" for f in rep.findings if f.code == "MM019")
    assert "adapter.method=qlora" in fixes and "train.optimizer=adamw" in fixes, fixes


# ----------------------------------------------------------------------------- learning rates off for the method
def _pretrained(tmp_path):
    from mmtune.models.tiny import tiny_config_and_processor

    folder = tmp_path / "pretrained"  # a local model folder stands for pretrained weights (MM032 skips tiny/)
    config, _ = tiny_config_and_processor("tiny/qwen2-vl")
    config.save_pretrained(folder)
    return {**BASE, "model": {"name": str(folder)}}


# https://github.com/QwenLM/Qwen3-VL/issues/127 (Qwen's README fine-tunes LoRA at 5e-6, LLaMA-Factory at 1e-4: "LoRA on
# few examples should use a larger LR"), https://github.com/hiyouga/LlamaFactory/issues/8242 ("LoRA fine-tuning is
# completely ineffective"), https://github.com/haotian-liu/LLaVA/issues/1456 (LoRA "no improvement at all"),
# https://github.com/bitsandbytes-foundation/bitsandbytes/issues/762 and https://github.com/unslothai/unsloth/issues/1304
# (what alpha / r does to the rate): a full fine-tuning rate on LoRA, or one shrunk by alpha < r, was silent.
@pytest.mark.parametrize("adapter,lr,warns", [
    ({"method": "lora"}, 5e-6, True),                     # Qwen README's rate, alpha = 2r
    ({"method": "qlora"}, 1e-5, True),                    # a transformers full fine-tuning habit
    ({"method": "lora", "r": 128, "alpha": 16}, 1e-4, True),  # a LoRA rate, shrunk 16x by alpha / r
    ({"method": "lora"}, 1e-4, False),                    # the recipes' rates
    ({"method": "lora", "r": 16}, 2e-5, False),           # recipes/seed003_qwen3vl_fsc147_counting.yaml
    ({"method": "lora", "r": 64, "alpha": 16}, 2e-4, False),  # alpha < r at 2e-4 still acts like 2.5e-5
])
def test_mm032_lora_at_a_full_finetuning_rate(doctor, tmp_path, adapter, lr, warns):
    tree = {**_pretrained(tmp_path), "adapter": adapter, "train": {"max_steps": 2, "lr": lr}}
    rep = doctor(tree, "MM032")
    assert ("MM032" in rep.codes("warning")) is warns, [f.message for f in rep.findings]
    if warns:
        (f,) = rep.findings
        assert f.where == "train.lr" and "train.lr=1e-4" in f.fix
        assert ("adapter.alpha=256" in f.fix) is (adapter.get("alpha") == 16)


def test_mm032_leaves_preference_runs_on_lora_at_their_small_rates(doctor, tmp_path):
    """recipes/qwen2_vl_7b_dpo.yaml trains its LoRA at 5e-6 on purpose: DPO / GRPO rates are small."""
    tree = {**_pretrained(tmp_path), "adapter": {"method": "lora"}, "train": {"max_steps": 2, "lr": 5e-6}}
    assert "MM032" in doctor(tree, "MM032").codes("warning")  # the same run, supervised
    assert doctor({**tree, "train": {**tree["train"], "objective": "dpo"}}, "MM032").findings == []


# ----------------------------------------------------------------------------- pinned: stopped at start (c)
# https://github.com/hiyouga/ChatGLM-Efficient-Tuning/issues/348 (fp16 / bf16 switches), transformers' "At most one
# of fp16 and bf16 can be True": both switches carried over are both named, with the one key that replaces them.
def test_bf16_and_fp16_switches_both_point_at_train_precision():
    problems = _validate_problems({**BASE, "bf16": True, "fp16": True})
    assert set(problems) == {"bf16", "fp16"}
    assert all("train.precision" in p for p in problems.values())


# transformers' `max_steps: -1` ("use num_train_epochs") next to epochs, and warmup given twice: refused with both
# keys named (the resolved run turns epochs / warmup_ratio into steps itself).
@pytest.mark.parametrize("train,says", [
    ({"max_steps": -1, "epochs": 3}, "train.max_steps=-1 and train.epochs=3 both set"),
    ({"max_steps": 100, "warmup_steps": 10, "warmup_ratio": 0.1}, "train.warmup_steps=10 and train.warmup_ratio=0.1"),
])
def test_two_lengths_of_the_run_are_refused(train, says):
    problems = _validate_problems({**BASE, "train": train})
    assert any(says in p for p in problems.values()), problems


# https://github.com/hiyouga/LlamaFactory/issues/7627, https://github.com/hiyouga/LlamaFactory/issues/1785:
# LLaMA-Factory's `lora_target: all` / `q_proj,v_proj` copied as adapter.target_modules.
@pytest.mark.parametrize("targets", ["all", "q_proj,v_proj"])
def test_llama_factory_lora_target_values_stop_with_the_decoders_names(targets):
    from mmtune.adapters import lora_target_names
    from mmtune.errors import ConfigError
    from mmtune.models.families import family_for_config
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny("tiny/qwen2-vl")
    with pytest.raises(ConfigError) as e:
        lora_target_names(model, family_for_config(model.config), targets)
    assert e.value.where == "adapter.target_modules" and "all-linear" in e.value.fix and "q_proj" in e.value.fix
