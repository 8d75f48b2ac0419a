"""Broken setups from the twenty-seventh batch of public bug reports (docs/doctor.md, "Public bug reports, batch 27:
after training: the trained model misbehaves at inference"): what a trained run's exports, `mmtune chat` and
`mmtune serve --backend vllm` do with the run's settings. Rebuilt on tiny twins trained two steps for real (a tiny
Qwen2 and a tiny Qwen2-VL saved with save_pretrained as the bases); the misses are fixed here, the rest pinned.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from doctor_helpers import context_for, run_codes, sums_jsonl


def _train(tmp: Path, name: str, base: Path, data: dict, adapter: dict):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    tree = {"output_dir": str(tmp / name), "model": {"name": str(base), "gradient_checkpointing": False},
            "data": data, "adapter": adapter,
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "lr": 0.05, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 0, "seed": 0, "save_every": 2},
            "eval": {"every": None, "max_new_tokens": 5}, "logging": {"tensorboard": False}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    train(build_run(load_config(path, [])))
    return tmp / name


# A base whose generation_config.json says do_sample=false beside temperature / top_p, as Llama-2-chat's and
# Vicuna's did: transformers 4.39-4.4x refused to save it ("The generation config instance is invalid").
SAMPLING_LEFTOVERS = {"do_sample": False, "temperature": 0.9, "top_p": 0.6}
SYSTEM = "Answer with the number only."


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """A tiny Qwen2 base with SAMPLING_LEFTOVERS, a two-step LoRA run on it with a system prompt, and its
    adapter and merged exports."""
    from mmtune.export import export
    from mmtune.models.tiny import build_tiny

    tmp = tmp_path_factory.mktemp("b27_text")
    base = tmp / "base"
    model, tok = build_tiny("tiny/qwen2", seed=0)
    model.save_pretrained(base)
    tok.save_pretrained(base)
    raw = json.loads((base / "generation_config.json").read_text())
    (base / "generation_config.json").write_text(json.dumps({**raw, **SAMPLING_LEFTOVERS}))
    run = _train(tmp, "run", base, {"train": sums_jsonl(tmp), "max_length": 64, "system_prompt": SYSTEM},
                 {"method": "lora", "r": 4, "dropout": 0.0})
    ckpt = run / "checkpoint-2"
    return {"tmp": tmp, "base": base, "run": run, "adapter": export(ckpt), "merged": export(ckpt, merge=True)}


@pytest.fixture(scope="module")
def vl_run(tmp_path_factory):
    """A tiny Qwen2-VL base folder and a two-step LoRA run on it with model.min_pixels / max_pixels set."""
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.models.tiny import build_tiny
    from mmtune.train.loop import train

    tmp = tmp_path_factory.mktemp("b27_vl")
    base = tmp / "base"
    model, proc = build_tiny("tiny/qwen2-vl", seed=0)
    model.save_pretrained(base)
    proc.save_pretrained(base)
    tree = {"output_dir": str(tmp / "run"),
            "model": {"name": str(base), "gradient_checkpointing": False, "min_pixels": 784, "max_pixels": 3136},
            "data": {"train": "synthetic:counting", "synthetic_train_size": 4},
            "adapter": {"method": "lora", "r": 4},
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "lr": 1e-3, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 0, "seed": 0, "save_every": 2},
            "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(tree))
    train(build_run(load_config(path, [])))
    return {"tmp": tmp, "base": base, "run": tmp / "run"}


def _image_caps(folder: Path) -> dict:
    raw = json.loads((folder / "processor_config.json").read_text())
    return raw.get("image_processor", raw)["size"]


# ----------------------------------------------------------------------------- vLLM beside an adapter
# https://github.com/QwenLM/Qwen3-VL/issues/1025 (Qwen2.5-VL answers unlike transformers' in vLLM: the pixel range
# set on the transformers side only), https://github.com/vllm-project/vllm/issues/15364,
# https://github.com/vllm-project/vllm/issues/27981, https://github.com/2U1/Qwen-VL-Series-Finetune/issues/107: vLLM
# sizes images by the processor it builds, and beside a LoRA adapter it builds it from the base model's folder.
# The card's `vllm serve BASE --lora-modules ...` line and `mmtune serve --backend vllm` served a run trained at
# model.max_pixels=3136 with the base's 12544 (Qwen2-VL's hub default: 12845056) and said nothing.

def test_vllm_beside_an_adapter_gets_the_runs_pixel_range(vl_run):
    from mmtune.export import export
    from mmtune.serve.engine import ServeOptions
    from mmtune.serve.vllm import plan_vllm

    kwargs = ["--mm-processor-kwargs", '{"min_pixels":784,"max_pixels":3136}']
    plan = plan_vllm(str(vl_run["run"]), ServeOptions(), host="127.0.0.1", port=8000)
    at = plan.cmd.index("--mm-processor-kwargs")
    assert plan.cmd[at:at + 2] == kwargs
    assert any(what == "vLLM processor" for what, _, _ in plan.decisions)
    out = export(vl_run["run"] / "checkpoint-2")
    card = (out / "README.md").read_text()
    assert "--mm-processor-kwargs '{\"min_pixels\":784,\"max_pixels\":3136}'" in card
    # The base's own processor keeps its range: the flag is what carries the run's.
    assert _image_caps(vl_run["base"]) != {"longest_edge": 3136, "shortest_edge": 784}


def test_exported_folders_carry_the_runs_processor(vl_run):
    """Pinned (a): transformers loads the processor from the export itself, which holds the run's range; a merged
    folder served by vLLM needs no flag."""
    from mmtune.export import export
    from mmtune.serve.engine import ServeOptions
    from mmtune.serve.vllm import plan_vllm

    ckpt = vl_run["run"] / "checkpoint-2"
    adapter = ckpt / "export" if (ckpt / "export").is_dir() else export(ckpt)
    merged = export(ckpt, merge=True)
    for folder in (ckpt / "adapter", adapter, merged):
        assert _image_caps(folder) == {"longest_edge": 3136, "shortest_edge": 784}, folder
    plan = plan_vllm(str(merged), ServeOptions(), host="127.0.0.1", port=8000)
    assert "--mm-processor-kwargs" not in plan.cmd


# https://github.com/vllm-project/vllm/issues/11406 (Qwen2-VL LoRA adapters take no effect in vLLM),
# https://github.com/vllm-project/vllm/issues/48019, https://github.com/vllm-project/vllm/pull/48149 (a text LoRA
# trained on the plain causal LM, keys `model.layers...`, silently no-ops on the VLM wrapper, whose decoder vLLM maps
# from `model.language_model.`). Pinned (a): mmtune trains LoRA on the VLM class itself, so every adapter key is the
# wrapper's `base_model.model.model.language_model.layers...` form, the one vLLM's Qwen2-VL mapping reads.

def test_adapter_keys_are_the_vlm_classes_own(vl_run):
    from safetensors import safe_open

    with safe_open(str(vl_run["run"] / "checkpoint-2" / "adapter" / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and all(k.startswith("base_model.model.model.language_model.layers.") for k in keys), keys[:3]


# ----------------------------------------------------------------------------- chat with an export
# https://github.com/hiyouga/LlamaFactory/issues/1650, https://github.com/shibing624/MedicalGPT/issues/257,
# https://github.com/huggingface/trl/pull/4645: a model fine-tuned with a system prompt asked without it answers
# otherwise. The export's card says `mmtune chat EXPORT`; a merged export was chatted with "as published, no
# fine-tuning" (no system prompt, 16 new tokens instead of the run's 5) and an adapter export was refused.

def test_chat_with_a_merged_export_answers_as_its_run(text_run):
    from mmtune.chat import load_session

    session = load_session(str(text_run["merged"]))
    assert session.encoder.cfg.data.system_prompt == SYSTEM
    assert session.max_new_tokens == 5
    assert "exported from" in session.source
    assert session.encoder.cfg.model.name == str(text_run["merged"].resolve())


def test_chat_with_an_adapter_export_loads_its_runs_weights(text_run):
    import torch

    from mmtune.chat import load_session

    of_run = load_session(str(text_run["run"]))
    of_export = load_session(str(text_run["adapter"]))
    assert of_export.encoder.cfg.data.system_prompt == SYSTEM
    trained = {n: p for n, p in of_run.model.named_parameters() if "lora_B" in n}
    loaded = dict(of_export.model.named_parameters())
    assert trained and any(p.abs().sum() > 0 for p in trained.values())
    assert all(torch.equal(p, loaded[n]) for n, p in trained.items())


def test_an_adapter_export_whose_run_is_gone_says_so(text_run, tmp_path):
    import shutil

    from mmtune.chat import load_session
    from mmtune.errors import MMTuneError

    moved = tmp_path / "adapter"
    shutil.copytree(text_run["adapter"], moved)
    marker = moved / ".mmtune-export.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "checkpoint": str(tmp_path / "gone")}))
    with pytest.raises(MMTuneError, match="adapter export whose run is gone"):
        load_session(str(moved))


# ----------------------------------------------------------------------------- generation_config on save
# https://github.com/haotian-liu/LLaVA/issues/1635, https://github.com/huggingface/transformers/issues/29988,
# https://github.com/hiyouga/LlamaFactory/issues/2545, https://github.com/hiyouga/LlamaFactory/issues/2837,
# https://github.com/modelscope/ms-swift/issues/1943, https://github.com/QwenLM/Qwen3-ASR/issues/210: "ValueError: The
# generation config instance is invalid ... `do_sample` is set to `False`. However, `temperature` is set to `0.9`"
# at the end of training or at the merge. Pinned (a): with transformers >= 5.17 a full checkpoint and a merged
# export save the base's file as it is, and generation (always greedy here) reads it.

def test_a_generation_config_with_sampling_leftovers_saves_and_exports(text_run):
    from mmtune.chat import load_session

    merged = json.loads((text_run["merged"] / "generation_config.json").read_text())
    assert {k: merged.get(k) for k in SAMPLING_LEFTOVERS} == SAMPLING_LEFTOVERS
    full = _train(text_run["tmp"], "full", text_run["base"], {"train": sums_jsonl(text_run["tmp"]), "max_length": 64},
                  {"method": "full"})
    saved = json.loads((full / "checkpoint-2" / "model" / "generation_config.json").read_text())
    assert {k: saved.get(k) for k in SAMPLING_LEFTOVERS} == SAMPLING_LEFTOVERS
    session = load_session(str(text_run["merged"]))
    assert isinstance(session.ask("What is 1+1?"), str)


# ----------------------------------------------------------------------------- empty answers
# https://github.com/bigcode-project/starcoder/issues/81, https://github.com/zai-org/ChatGLM-6B/issues/830,
# https://github.com/samlhuillier/code-llama-fine-tune-notebook/issues/7: the fine-tuned model answers with an
# empty string. Pinned (b): records whose answer is empty or only whitespace are MM014's error, so a run never
# trains the model to stop at once.

def test_empty_and_blank_answers_are_refused(tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"What is {i}+1?"},
                          {"role": "assistant", "content": ["", " ", "\n", str(i + 1)][i % 4]}]} for i in range(8)]
    data = tmp_path / "blank.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = run_codes(context_for(tmp_path, {"model": {"name": "tiny/qwen2"}, "data": {"train": str(data)}}), "MM014")
    [finding] = [f for f in report.findings if f.code == "MM014"]
    assert finding.severity == "error" and "6 of 8 records: no answer" in finding.message
