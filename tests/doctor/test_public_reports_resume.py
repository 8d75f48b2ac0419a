"""Broken setups from the sixth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 5:
checkpoints, resume, export and serving"): what goes wrong after or around the training steps. Each is rebuilt on a
tiny twin trained for real (a run folder, its checkpoint, a base model folder changed after training); the ones
mmtune missed are caught now, and their clean twins left alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import sums_jsonl


def _base(folder: Path, seed: int = 0, **config) -> Path:
    """A tiny Qwen2 model folder as save_pretrained writes it (config, tokenizer, real weights)."""
    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2", seed=seed, **config)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _train(tmp_path: Path, base: Path, name: str = "run", **adapter):
    """A two-step LoRA run on `base` (fp32 on the CPU); returns (config, the run folder)."""
    import yaml

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    tree = {"output_dir": str(tmp_path / name), "model": {"name": str(base), "gradient_checkpointing": False},
            "data": {"train": sums_jsonl(tmp_path), "max_length": 64},
            "adapter": {"method": "lora", "r": 4, "dropout": 0.0, **adapter},
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 2, "lr": 0.05, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 0, "seed": 0, "save_every": 2},
            "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    cfg = load_config(path, [])
    train(build_run(cfg))
    return cfg, Path(cfg.output_dir)


# ----------------------------------------------------------------------------- another number of processes
# https://github.com/huggingface/transformers/issues/22580 (8 GPUs, stopped, resumed on 24: "the global batch size
# will also increase"), https://github.com/huggingface/transformers/issues/23152,
# https://github.com/NVIDIA/Megatron-LM/issues/2829: a checkpoint resumed on another number of GPUs. mmtune refused
# a train.grad_accum change on resume but let a change of processes through, which changes the global batch the
# same way, with notes about the data position only (run: a 2-rank torchrun checkpoint resumed on 1 process).

def test_resume_on_another_number_of_processes_that_changes_the_global_batch(tmp_path):
    from mmtune.config import load_config
    from mmtune.errors import ConfigError
    from mmtune.train import resume_guard
    from mmtune.train.checkpoint import read_meta

    cfg, run = _train(tmp_path, _base(tmp_path / "base"))
    ckpt = run / "checkpoint-2"
    meta = read_meta(ckpt)
    assert resume_guard.saved_processes(ckpt) == 1  # the premise: the checkpoint says who wrote it
    # the same launch: nothing to say
    assert resume_guard.check(ckpt, cfg, 2, meta.get("data"), processes=1) == {}
    # resumed under torchrun on 2 processes, micro-batch and accumulation unchanged: 4 -> 8 per step
    with pytest.raises(ConfigError) as e:
        resume_guard.check(ckpt, cfg, 2, meta.get("data"), processes=2)
    assert "train.global_batch" in e.value.what and "'4 per step (1 process(es)" in e.value.what
    assert "torchrun --nproc_per_node 1" in e.value.fix and "train.grad_accum=1 to keep 4 per step" in e.value.fix
    # the way out it names: half the accumulation keeps 4 per step; only grad_accum differs then (accepted)
    halved = load_config(run / "config.resolved.yaml", ["train.grad_accum=1", "train.accept_changes=true"])
    assert set(resume_guard.check(ckpt, halved, 2, meta.get("data"), processes=2)) == {"train.grad_accum"}
    # and on purpose: accepted and recorded like any other change
    accepted = load_config(run / "config.resolved.yaml", ["train.accept_changes=true"])
    assert set(resume_guard.check(ckpt, accepted, 2, meta.get("data"), processes=2)) == {"train.global_batch"}


# ----------------------------------------------------------------------------- merging LoRA on a tied lm_head
# https://github.com/huggingface/transformers/issues/45127, https://github.com/unslothai/unsloth/issues/1971,
# https://github.com/huggingface/peft/issues/2777: lm_head tied to the input embeddings (Qwen2-VL-2B, Qwen2.5-VL-3B)
# with LoRA on it; the merged model answers otherwise than the adapter did. MM037 warned, but `mmtune export --merge`
# itself merged into the shared matrix: its logits differed from the trained adapter's by up to 7 (argmax agreeing
# on 2 tokens of 12).

def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=ids).logits


def test_merged_export_of_lora_on_a_tied_lm_head_computes_what_was_trained(tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from mmtune.export import export

    base = _base(tmp_path / "tied", tie_word_embeddings=True)
    _, run = _train(tmp_path, base, target_modules=["q_proj", "lm_head:lm_head"])
    out = export(run, merge=True)
    ids = torch.randint(5, 200, (1, 12), generator=torch.Generator().manual_seed(0))
    trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                        str(run / "checkpoint-2" / "adapter")).eval()
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    torch.testing.assert_close(_logits(merged, ids), _logits(trained, ids), rtol=0, atol=1e-4)
    assert merged.config.tie_word_embeddings is False
    notes = json.loads((out / ".mmtune-export.json").read_text())["notes"]
    assert any("stores the two apart" in n for n in notes), notes


def test_merged_export_of_lora_beside_a_tied_lm_head_stays_tied(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from mmtune.export import export

    base = _base(tmp_path / "tied", tie_word_embeddings=True)
    _, run = _train(tmp_path, base)  # LoRA on the decoder only: nothing to untie
    out = export(run, merge=True)
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert merged.config.tie_word_embeddings is True
    assert merged.lm_head.weight.data_ptr() == merged.get_input_embeddings().weight.data_ptr()
    assert not any("apart" in n for n in json.loads((out / ".mmtune-export.json").read_text())["notes"])


# ----------------------------------------------------------------------------- the base model changed after training
# https://github.com/huggingface/peft/issues/460, https://github.com/huggingface/peft/issues/1710,
# https://github.com/hiyouga/LlamaFactory/issues/1320: "Error(s) in loading state_dict for PeftModelForCausalLM:
# size mismatch for base_model.model...lora_A.default.weight" (the adapter on another base than it was trained on).
# Rebuilt: model.name a local folder, replaced after training by a model of other sizes. `mmtune export --merge`
# crashed with peft's raw RuntimeError; `mmtune chat` stopped, but with a fix for training ("train.resume=false").

def test_base_model_replaced_after_training_is_named_by_export_and_chat(tmp_path):
    import shutil

    from mmtune.chat import load_session
    from mmtune.errors import MMTuneError
    from mmtune.export import export

    base = _base(tmp_path / "base")
    _, run = _train(tmp_path, base)
    shutil.rmtree(base)
    _base(base, intermediate_size=256)  # another model at the same path
    for action in (lambda: export(run, merge=True), lambda: load_session(str(run), device="cpu")):
        with pytest.raises(MMTuneError) as e:
            action()
        assert f"model.name={base}" in e.value.what and "not the model this run was trained on" in e.value.what
        assert "saved (" in e.value.what and "128" in e.value.what and "the base model (" in e.value.what \
            and "256" in e.value.what  # a tensor, both shapes
        assert "train.resume" not in e.value.fix and "config.resolved.yaml" in e.value.fix
    # the clean twin: the same model put back, both work
    shutil.rmtree(base)
    _base(base)
    assert (export(run, merge=True) / "config.json").is_file()
    assert load_session(str(run), device="cpu").model is not None


# ----------------------------------------------------------------------------- an adapter for an older peft
# https://github.com/huggingface/peft/issues/1979, https://github.com/huggingface/peft/issues/2275,
# https://github.com/hiyouga/LlamaFactory/issues/5348: "TypeError: LoraConfig.__init__() got an unexpected keyword
# argument ..." loading an adapter saved by a newer peft. The export's model card gave the peft code with no version:
# its adapter_config.json (peft 0.21.2) is refused by peft 0.12.0 and 0.13.0 and read by 0.14.0 (measured).

def test_adapter_card_names_the_peft_that_reads_it(tmp_path):
    import peft

    from mmtune.export import export

    _, run = _train(tmp_path, _base(tmp_path / "base"))
    card = (export(run) / "README.md").read_text()
    assert "peft>=0.14" in card and f"peft {peft.__version__}" in card
    assert "peft>=0.14" not in (export(run, merge=True) / "README.md").read_text()  # no peft needed there
