"""Broken setups from the twelfth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 12: adapters,
peft and saved weights"): LoRA targets, the files an adapter run saves, continuing an adapter, merging DoRA, and an
adapter loaded onto another base of the same shapes. Each is rebuilt on a tiny twin trained for real; the one mmtune
missed is caught now, its clean twin left alone, and the ones it handled are pinned.
"""

from __future__ import annotations

import json
import shutil

import pytest
from doctor_helpers import refusal_of_key
from test_public_reports_resume import _base, _logits, _train

# ----------------------------------------------------------------------------- another base of the same shapes
# https://github.com/huggingface/peft/issues/1932, https://github.com/predibase/lorax/pull/58: an adapter loaded
# onto a base model other than its own. With other shapes it fails (batch 5); with the same shapes (another seed,
# revision or fine-tune at the same path) peft loads it without a word, and mmtune chat / export --merge did too
# (run: a base folder re-saved from another seed after training).

def test_base_of_the_same_shapes_replaced_after_training_is_named(tmp_path):
    from mmtune.chat import load_session
    from mmtune.errors import MMTuneError
    from mmtune.export import export

    base = _base(tmp_path / "base")
    _, run = _train(tmp_path, base)
    saved = json.loads((run / "checkpoint-2" / "meta.json").read_text())["base_weights"]
    assert saved["tensors"] > 20 and saved["files"] == ["model.safetensors"]
    shutil.rmtree(base)
    _base(base, seed=1)  # the same architecture and sizes, other weights
    for action in (lambda: export(run, merge=True), lambda: export(run, out=tmp_path / "adapter-out"),
                   lambda: load_session(str(run), device="cpu")):
        with pytest.raises(MMTuneError) as e:
            action()
        assert f"model.name={base} are not the ones checkpoint-2's run started from" in e.value.what
        assert "another seed, revision, fine-tune or dtype" in e.value.what
        assert "config.resolved.yaml" in e.value.fix
    # the clean twin: the same weights saved again (a copy, a re-download) are the same model
    shutil.rmtree(base)
    _base(base)
    assert (export(run, merge=True) / "config.json").is_file()
    assert load_session(str(run), device="cpu").model is not None


def test_a_model_without_local_weight_files_has_no_fingerprint(tmp_path):
    from mmtune.models.base_fingerprint import differs, fingerprint

    assert fingerprint("tiny/qwen2") is None  # built in memory: nothing to compare, nothing refused
    assert differs(None, str(tmp_path)) is None
    assert differs({"sha256": "0" * 64, "tensors": 1}, str(tmp_path)) is None  # the folder holds no weights now


# ----------------------------------------------------------------------------- continuing an adapter
# https://github.com/huggingface/peft/issues/282, https://github.com/tloen/alpaca-lora/issues/352,
# https://github.com/huggingface/trl/issues/6700, https://github.com/huggingface/transformers/pull/24463:
# PeftModel.from_pretrained loads an adapter frozen (is_trainable=False): "trainable params: 0", the loss flat.
# mmtune continues an adapter only by resuming its own run, which copies the saved tensors into a freshly built,
# trainable adapter (an adapter folder given as model.name is MM051's error).

def test_a_resumed_adapter_keeps_training(tmp_path):
    import yaml
    from safetensors.torch import load_file

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    base = _base(tmp_path / "base")
    cfg, run = _train(tmp_path, base)
    path = tmp_path / "more.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    train(build_run(load_config(path, ["train.max_steps=4", "train.accept_changes=true"])))
    before, after = (load_file(str(run / f"checkpoint-{n}" / "trainable.safetensors")) for n in (2, 4))
    lora = [k for k in before if ".lora_" in k]
    assert lora and set(before) == set(after)
    assert all(not before[k].equal(after[k]) for k in lora if ".lora_B." in k)  # every B moved in steps 3-4


# ----------------------------------------------------------------------------- what an adapter checkpoint holds
# https://github.com/huggingface/trl/issues/1287, https://github.com/huggingface/peft/issues/2092,
# https://github.com/RUCAIBox/LC-Rec/issues/19: adapter_model.safetensors of 1-2 GB (the embeddings or a tied lm_head's
# base weight saved beside the LoRA weights); https://github.com/unslothai/unsloth/pull/1509,
# https://github.com/huggingface/sentence-transformers/issues/3402: a model wrapped twice, keys nested
# base_model.model.base_model.model. Pinned: a tied base's adapter holds the LoRA weights alone, under one prefix.

def test_adapter_of_a_tied_model_holds_the_lora_weights_alone(tmp_path):
    from safetensors import safe_open

    base = _base(tmp_path / "tied", tie_word_embeddings=True)
    _, run = _train(tmp_path, base)
    with safe_open(str(run / "checkpoint-2" / "adapter" / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and all(".lora_A." in k or ".lora_B." in k for k in keys), keys
    assert all(k.startswith("base_model.model.") and "base_model.model.base_model" not in k for k in keys)
    config = json.loads((run / "checkpoint-2" / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base) and not config.get("modules_to_save")


# ----------------------------------------------------------------------------- merging DoRA
# https://github.com/huggingface/peft/pull/1588, https://github.com/unslothai/unsloth-zoo/pull/828,
# https://github.com/AnswerDotAI/fsdp_qlora/issues/60: a DoRA adapter merged by hand drops its magnitude vector (the
# merged model repeats itself or answers otherwise). `mmtune export --merge` merges through peft, magnitude included.

def test_merged_export_of_dora_computes_what_was_trained(tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from mmtune.export import export

    base = _base(tmp_path / "base")
    _, run = _train(tmp_path, base, use_dora=True)
    adapter = run / "checkpoint-2" / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["use_dora"] is True
    out = export(run, merge=True)
    ids = torch.randint(5, 200, (1, 12), generator=torch.Generator().manual_seed(0))
    trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), str(adapter))
    plain = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    torch.testing.assert_close(_logits(merged, ids), _logits(trained.eval(), ids), rtol=0, atol=1e-4)
    assert not torch.allclose(_logits(merged, ids), _logits(plain, ids), atol=1e-3)  # the training changed it


# ----------------------------------------------------------------------------- LoRA names and LLaVA's CLIP tower
# https://github.com/haotian-liu/LLaVA/issues/1380, https://github.com/zjysteven/lmms-finetune/pull/14,
# https://github.com/sgl-project/sglang/pull/11519: target names matched by their last part (q_proj, v_proj) also put
# LoRA on the vision tower's attention, which then fails to serve. A plain name here means the decoder's layers only;
# a regex over full names that reaches the tower is MM010's warning.

def test_plain_lora_names_stay_out_of_llava_s_clip_tower(doctor):
    tree = {"model": {"name": "tiny/llava"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 8}}
    rep = doctor({**tree, "adapter": {"target_modules": ["q_proj", "v_proj"]}}, "MM010")
    assert not rep.codes("warning") and not rep.errors, rep.findings
    rep = doctor({**tree, "adapter": {"target_modules": ".*(q_proj|v_proj)"}}, "MM010")
    assert "MM010" in rep.codes("warning"), rep.findings
    assert "vision" in next(f for f in rep.findings if f.severity == "warning").message


# ----------------------------------------------------------------------------- other tools' adapter keys
# https://github.com/hiyouga/LlamaFactory/issues/5848, https://github.com/hiyouga/LlamaFactory/issues/3042,
# https://github.com/hiyouga/LlamaFactory/issues/2792, https://github.com/huggingface/trl/issues/2418: continuing a LoRA
# from an adapter folder (`adapter_name_or_path`); https://github.com/hiyouga/LlamaFactory/issues/7997 (additional_target
# / modules_to_save beside LoRA); https://github.com/huggingface/peft/pull/1244 (use_rslora: alpha / sqrt(r)). Such a
# config is refused as unknown keys, and the hint was wrong: 'use_rslora' and 'adapter_name_or_path' -> "did you mean
# 'adapter.use_dora'?", 'modules_to_save' -> 'adapter.target_modules' (run).

@pytest.mark.parametrize(("key", "ours", "says"), [
    ("use_rslora", "adapter.alpha", "adapter.alpha = alpha * sqrt(r)"),
    ("adapter.modules_to_save", "adapter.train_components", "trained in full and saved with the adapter"),
    ("additional_target", "adapter.train_components", "LLaMA-Factory"),
    ("adapter_name_or_path", "train.resume", "resuming the run that wrote it"),
    ("lora_model_dir", "train.resume", "merge it into its base"),
])
def test_other_tools_adapter_keys_are_answered_with_ours(tmp_path, key, ours, says):
    text = refusal_of_key(tmp_path, key, "x")
    assert f"did you mean '{ours}'?" in text and says in text, text
    assert "adapter.use_dora" not in text
