"""Broken setups from the forty-third batch of public bug reports (docs/doctor.md, "Public bug reports, batch 43:
serving what you trained"): what the folders `mmtune export` writes give to vLLM, SGLang, TGI, llama.cpp's GGUF
converter and Ollama. Rebuilt on a tiny Qwen2.5-VL saved with save_pretrained as the base, trained two steps with
LoRA for real and exported (adapter and merged); the misses are fixed here, the rest pinned.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml


@pytest.fixture(scope="module")
def vl_exports(tmp_path_factory):
    """A tiny Qwen2.5-VL base folder, a two-step LoRA run on it, and the run's adapter and merged exports."""
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.export import export
    from mmtune.models.tiny import build_tiny
    from mmtune.train.loop import train

    tmp = tmp_path_factory.mktemp("b43_vl")
    base = tmp / "base"
    model, proc = build_tiny("tiny/qwen2.5-vl", seed=0)
    model.save_pretrained(base)
    proc.save_pretrained(base)
    tree = {"output_dir": str(tmp / "run"), "model": {"name": str(base), "gradient_checkpointing": False},
            "data": {"train": "synthetic:counting", "synthetic_train_size": 4},
            "adapter": {"method": "lora", "r": 4},
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "lr": 1e-3, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 0, "seed": 0, "save_every": 2},
            "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(tree))
    train(build_run(load_config(path, [])))
    ckpt = tmp / "run" / "checkpoint-2"
    return {"base": base, "adapter": export(ckpt), "merged": export(ckpt, merge=True)}


@pytest.mark.parametrize("kind", ["adapter", "merged"])
def test_exports_carry_the_chat_template_where_tgi_and_gguf_converters_read_it(vl_exports, kind):
    """text-generation-inference#3247 ("template not found": TGI reads tokenizer_config.json only),
    ik_llama.cpp#668 (an older gguf-py writes no tokenizer.chat_template from a .jinja file), ollama#6823 and
    buriedsignals/spotlight#32 (the GGUF without a template rambles in Ollama): transformers 5 saved the template
    as chat_template.jinja alone, so the export's tokenizer_config.json had none. Now it holds the same text, and
    transformers still loads the .jinja file's."""
    from transformers import AutoTokenizer

    out = vl_exports[kind]
    jinja = (out / "chat_template.jinja").read_text()
    assert "<|im_start|>" in jinja
    assert json.loads((out / "tokenizer_config.json").read_text()).get("chat_template") == jinja
    assert AutoTokenizer.from_pretrained(out).chat_template == jinja


def test_an_existing_tokenizer_config_template_is_left_as_it_is(tmp_path):
    """A tokenizer saved by an older transformers (template inside tokenizer_config.json) keeps its own text."""
    from mmtune.export.template_files import inline_chat_template

    (tmp_path / "chat_template.jinja").write_text("new")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "old"}))
    assert not inline_chat_template(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["chat_template"] == "old"
    assert not inline_chat_template(tmp_path / "missing")


def test_the_merged_card_says_its_config_needs_transformers_5(vl_exports):
    """vllm#42624, sgl-project/mini-sglang#13, vllm#50428: a config.json written by transformers 5 keeps RoPE in
    `rope_parameters`; a server on transformers 4.x builds the config with its default rope_theta, silently. The
    merged export's config is that layout (the tiny twin's text_config has rope_parameters and no rope_theta), so
    its card names the requirement; an adapter export is served on the base's own config and says nothing."""
    config = json.loads((vl_exports["merged"] / "config.json").read_text())
    assert "rope_parameters" in config["text_config"] and "rope_theta" not in config["text_config"]
    card = (vl_exports["merged"] / "README.md").read_text()
    assert "transformers>=5 to read this config.json" in card and "rope_parameters" in card
    assert "transformers>=5 to read this config.json" not in (vl_exports["adapter"] / "README.md").read_text()
    from mmtune.export.card import config_layout_requirement

    legacy = {"model_type": "qwen2", "rope_theta": 1e6, "transformers_version": "4.49.0"}
    (vl_exports["merged"].parent / "legacy").mkdir(exist_ok=True)
    (vl_exports["merged"].parent / "legacy" / "config.json").write_text(json.dumps(legacy))
    assert config_layout_requirement(vl_exports["merged"].parent / "legacy") is None


def test_merged_keys_and_architectures_are_the_published_layout(vl_exports):
    """transformers#38403, LlamaFactory#8163 (vLLM 0.8.5: KeyError 'language_model.embed_tokens.weight' on a
    Qwen2.5-VL saved by transformers 4.52 with `model.language_model.*` keys) and llama.cpp#13802 ("Model
    Qwen2_5_VLModel is not supported": a merge saved under the bare model class): the merged export holds the
    base folder's own tensor names (`model.layers.*`, `visual.*`, `lm_head`) and the ForConditionalGeneration
    class, as the published checkpoints do."""
    from safetensors import safe_open

    def keys(folder: Path) -> set[str]:
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            return set(f.keys())

    merged = keys(vl_exports["merged"])
    assert merged == keys(vl_exports["base"])
    assert not any(k.startswith(("model.language_model.", "model.visual.")) for k in merged)
    assert any(k.startswith("visual.") for k in merged) and any(k.startswith("model.layers.") for k in merged)
    config = json.loads((vl_exports["merged"] / "config.json").read_text())
    assert config["architectures"] == ["Qwen2_5_VLForConditionalGeneration"]


def test_serve_backend_vllm_says_which_transformers_reads_the_merged_config(vl_exports):
    """The same requirement as a start-up decision of `mmtune serve EXPORT --backend vllm` (vllm#42624)."""
    from mmtune.serve.engine import ServeOptions
    from mmtune.serve.vllm import plan_vllm

    plan = plan_vllm(str(vl_exports["merged"]), ServeOptions(), host="127.0.0.1", port=8000)
    assert [why for what, _, why in plan.decisions if what == "vLLM's transformers"][0].startswith("transformers>=5")
