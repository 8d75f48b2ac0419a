"""Broken setups from the forty-second batch of public bug reports (docs/doctor.md, "Public bug reports, batch 42: LoRA
variants and adapter settings"): PiSSA / OLoRA / LoftQ initialisation keys, new special tokens, lm_head trained in full
(peft's modules_to_save) on an untied model, and DoRA's cost. Each is rebuilt on a tiny twin; the miss is answered
now, and the rows mmtune handled are pinned.
"""

from __future__ import annotations

import json

import pytest
from doctor_helpers import refusal_of_key, sums_jsonl
from test_public_reports_resume import _base, _logits, _train

# ----------------------------------------------------------------------------- LoRA initialisations, new tokens
# https://github.com/huggingface/peft/issues/1929, https://github.com/hiyouga/LlamaFactory/issues/9404,
# https://github.com/huggingface/peft/issues/2270, https://github.com/huggingface/peft/pull/1626: PiSSA / OLoRA
# rewrite the base weights at start, so the adapter saved is right only on that rewritten base unless converted
# (path_initial_model_for_weight_conversion); LLaMA-Factory's pissa_convert changed r and alpha while converting.
# https://github.com/hiyouga/LlamaFactory/issues/6749, https://github.com/artidoro/qlora/issues/214,
# https://github.com/unslothai/unsloth/issues/2188: new special tokens whose rows LoRA leaves untrained. mmtune has
# neither switch; the keys were refused with "remove it; see docs/config.md" and ms-swift's init_weights with "did
# you mean 'model.weights'?" (run), which says nothing of what the run then is.

@pytest.mark.parametrize(("key", "tool", "says"), [
    ("adapter.init_lora_weights", "peft", "rewrite the base weights at start"),
    ("pissa_init", "LLaMA-Factory", "path_initial_model_for_weight_conversion"),
    ("pissa_convert", "LLaMA-Factory", "the run is plain LoRA"),
    ("init_weights", "ms-swift", "A random, B zero"),
    ("loftq_bits", "peft / LLaMA-Factory", "PiSSA / OLoRA / LoftQ"),
    ("peft_init_lora_weights", "axolotl", "PiSSA / OLoRA / LoftQ"),
    ("new_special_tokens", "LLaMA-Factory", "LoRA leaves the new rows untrained"),
    ("resize_vocab", "LLaMA-Factory", "neither adds tokens nor resizes the embeddings"),
])
def test_initialisation_and_new_token_keys_say_what_the_run_is(tmp_path, key, tool, says):
    text = " ".join(refusal_of_key(tmp_path, key, "pissa").split())
    leaf = key.rpartition(".")[2]
    assert f"({leaf} is the name in {tool})" in text and says in text, text
    assert "model.weights" not in text


# ----------------------------------------------------------------------------- lm_head trained in full, untied
# https://github.com/unslothai/unsloth/pull/9331, https://github.com/hiyouga/LlamaFactory/issues/6749: lm_head trained
# in full beside LoRA (peft's modules_to_save) and the merged model. On a tied base this is MM037's error (earlier
# batch, peft#2777). Pinned: on an untied base lm_head is its own module, trained in full as peft's modules_to_save,
# saved in the adapter, and the merged export computes what the adapter computes.

def test_lm_head_trained_in_full_on_an_untied_model_reaches_the_merged_model(tmp_path):
    import torch
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from mmtune.export import export

    base = _base(tmp_path / "untied")
    _, run = _train(tmp_path, base, train_components=["lm_head"])
    adapter = run / "checkpoint-2" / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["modules_to_save"] == ["lm_head"]
    with safe_open(str(adapter / "adapter_model.safetensors"), "pt") as f:
        assert [k for k in f.keys() if ".lora_" not in k] == ["base_model.model.lm_head.weight"]
    out = export(run, merge=True)
    ids = torch.randint(5, 200, (1, 12), generator=torch.Generator().manual_seed(0))
    trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                        str(adapter)).eval()
    plain = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    torch.testing.assert_close(_logits(merged, ids), _logits(trained, ids), rtol=0, atol=1e-4)
    assert not torch.allclose(_logits(merged, ids), _logits(plain, ids), atol=1e-3)


# ----------------------------------------------------------------------------- DoRA's cost
# https://github.com/modelscope/ms-swift/issues/3033 (DoRA 1.7x LoRA's time), https://github.com/huggingface/peft/pull/1474
# (2x on Qwen1.5-1.8B), https://github.com/h2oai/h2o-llmstudio/pull/709 (more memory without checkpointing),
# https://github.com/huggingface/peft/issues/2651 (DoRA slow in training). `mmtune plan` traces peft's own DoRA forward
# (the weight norm per adapted layer, the extra base matmul under dropout), so the planned step slows with it.

def test_the_plan_counts_dora_s_extra_work(tmp_path):
    from mmtune.config import load_config
    from mmtune.plan import predict

    speed = {}
    for dora, dropout in ((False, 0.0), (True, 0.0), (True, 0.05)):
        cfg = load_config(None, ["model.name=tiny/qwen2", f"data.train={sums_jsonl(tmp_path)}", "train.micro_batch_size=2",
                                 "adapter.target_modules=all-linear", f"adapter.use_dora={str(dora).lower()}",
                                 f"adapter.dropout={dropout}"])
        speed[(dora, dropout)] = predict(cfg, gpu="a100-80gb").tokens_per_s
    assert speed[(True, 0.0)] < 0.8 * speed[(False, 0.0)]  # the weight norm of every adapted layer, each step
    assert speed[(True, 0.05)] < speed[(True, 0.0)]  # dropout makes peft's DoRA run the base matmul again
