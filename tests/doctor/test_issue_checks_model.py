"""MM037, MM040, MM043, MM044, MM051, MM124: model checks built from public issue threads (docs/doctor.md lists them).

Each test builds the broken setup from the report (a model folder as the user had it: config.json,
processor, a weights file) and a clean one next to it; both go through the real doctor.
"""

from __future__ import annotations

import json

import pytest
from doctor_helpers import TINY_VL, model_folder


def tree(folder, adapter=None, train=None, family=None):
    model = {"name": str(folder), **({"family": family} if family else {})}
    return {"model": model, "data": {"train": "synthetic:counting", "synthetic_train_size": 8},
            "adapter": adapter or {}, "train": train or {}}


# --------------------------------------------------------------------------- MM037 tied lm_head

def test_mm037_premise_tied_lm_head_is_not_a_separate_component():
    """The report's setup in mmtune: training lm_head of a tied model stops with a misleading error."""
    from mmtune.adapters import apply_adapters
    from mmtune.config.schema import AdapterConfig
    from mmtune.errors import ConfigError
    from mmtune.models.families import get_family
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny("tiny/qwen2", tie_word_embeddings=True)
    assert model.lm_head.weight is model.get_input_embeddings().weight
    with pytest.raises(ConfigError, match="'lm_head' does not exist"):
        apply_adapters(model, get_family("qwen2"), AdapterConfig(train_components=["lm_head"]))


@pytest.mark.parametrize("adapter,train,severity", [
    ({"train_components": ["lm_head"]}, {}, "error"),
    ({"method": "full", "freeze_components": ["lm_head"]}, {}, "error"),
    ({"lr_multipliers": {"lm_head": 0.1}, "train_components": ["lm_head"]}, {}, "error"),
    ({}, {"stages": [{"until": 2, "train": ["lm_head"]}, {"train": ["lora"]}]}, "error"),
    ({"target_modules": ["q_proj", "lm_head:lm_head"]}, {}, "warning"),
])
def test_mm037_tied_lm_head_flagged(doctor, tmp_path, adapter, train, severity):
    folder = model_folder(tmp_path, tie_word_embeddings=True)
    rep = doctor(tree(folder, adapter, train), "MM037")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM037", severity)], rep.findings
    assert "tie" in rep.findings[0].message


def test_mm037_clean_setups_are_silent(doctor, tmp_path):
    tied = model_folder(tmp_path, tie_word_embeddings=True)
    untied = model_folder(tmp_path, name="untied")
    assert doctor(tree(tied), "MM037").findings == []  # LoRA on the decoder of a tied model: fine
    assert doctor(tree(tied, {"method": "full"}), "MM037").findings == []
    assert doctor(tree(untied, {"train_components": ["lm_head"]}), "MM037").findings == []
    assert doctor(tree(untied, {"target_modules": ["q_proj", "lm_head:lm_head"]}), "MM037").findings == []


# --------------------------------------------------------------------------- MM040 quantized checkpoint

BNB = {"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}}


@pytest.mark.parametrize("method,severity", [("full", "error"), ("lora", "warning"), ("qlora", "warning")])
def test_mm040_prequantized_checkpoint(doctor, tmp_path, method, severity):
    folder = model_folder(tmp_path, config_json=BNB)
    rep = doctor(tree(folder, {"method": method}), "MM040")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM040", severity)]
    assert "bitsandbytes" in rep.findings[0].message and "quantization_config" in rep.findings[0].message


def test_mm040_unquantized_checkpoint_is_silent(doctor, tmp_path):
    folder = model_folder(tmp_path)
    for method in ("full", "lora", "qlora"):
        assert doctor(tree(folder, {"method": method}), "MM040").findings == []
    assert doctor(TINY_VL, "MM040").findings == []


# --------------------------------------------------------------------------- MM043 token ids vs embeddings

def test_mm043_tokenizer_larger_than_the_embeddings(doctor, tmp_path):
    """A checkpoint whose config has fewer embedding rows than its tokenizer has tokens (453)."""
    small = model_folder(tmp_path, vocab_size=400)
    rep = doctor(tree(small), "MM043")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM043", "warning")], (rep.findings, rep.not_run)
    assert "453 tokens" in rep.findings[0].message and "400 embedding rows" in rep.findings[0].message
    assert doctor(tree(model_folder(tmp_path, name="ok")), "MM043").findings == []
    assert doctor(TINY_VL, "MM043").findings == []


def test_mm043_media_token_beyond_the_embeddings_is_an_error():
    """E5-V#7: image_token_index == vocab_size, so every image record indexes past the matrix."""
    from mmtune.doctor.checks.model_setup import vocab_findings
    from mmtune.models.tiny import tiny_config_and_processor

    config, processor = tiny_config_and_processor("tiny/qwen2-vl")
    rows = config.get_text_config().vocab_size
    assert list(vocab_findings(processor, rows, 0, "m")) == []
    found = list(vocab_findings(processor, processor.image_token_id, 0, "m"))
    assert [f.severity for f in found] == ["error"] and "image token id 5" in found[0].message


# --------------------------------------------------------------------------- MM044 transformers version

def test_mm044_model_type_unknown_to_this_transformers(doctor, tmp_path):
    folder = model_folder(tmp_path, config_json={"model_type": "qwen9_vl", "transformers_version": "9.0.0"})
    rep = doctor(tree(folder, family="qwen2"), "MM044")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM044", "error")]
    assert "qwen9_vl" in rep.findings[0].message and "pip install -U transformers" in rep.findings[0].fix


def test_mm044_checkpoint_saved_by_a_newer_transformers(doctor, tmp_path):
    import transformers

    major = int(transformers.__version__.split(".")[0])
    newer = model_folder(tmp_path, config_json={"transformers_version": f"{major + 1}.0.0"})
    rep = doctor(tree(newer), "MM044")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM044", "warning")]
    same = model_folder(tmp_path, name="same", config_json={"transformers_version": transformers.__version__})
    assert doctor(tree(same), "MM044").findings == []
    assert doctor(TINY_VL, "MM044").findings == []


# --------------------------------------------------------------------------- MM051 adapter as model

def test_mm051_lora_adapter_folder_as_model(doctor, tmp_path):
    adapter = tmp_path / "lora-out"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2-VL-7B-Instruct",
                                                             "peft_type": "LORA"}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    rep = doctor(tree(adapter), "MM051")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM051", "error")]
    assert rep.findings[0].fix.startswith("model.name=Qwen/Qwen2-VL-7B-Instruct")


def test_mm051_mmtune_checkpoint_folders_as_model(doctor, tmp_path):
    ckpt = tmp_path / "run" / "checkpoint-10"
    (ckpt / "adapter").mkdir(parents=True)
    (ckpt / "adapter" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "base/m"}))
    rep = doctor(tree(ckpt), "MM051")
    assert [f.severity for f in rep.findings] == ["error"] and "mmtune export" in rep.findings[0].fix
    full = tmp_path / "run" / "checkpoint-20"
    (full / "model").mkdir(parents=True)
    (full / "model" / "config.json").write_text("{}")
    rep = doctor(tree(full), "MM051")
    assert [f.fix for f in rep.findings] == [f"model.name={full / 'model'}"]


def test_mm051_real_model_folders_are_silent(doctor, tmp_path):
    assert doctor(tree(model_folder(tmp_path)), "MM051").findings == []
    assert doctor(TINY_VL, "MM051").findings == []


# --------------------------------------------------------------------------- MM052 untrained projector

@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """A LLaVA folder from `compose_llava` (tiny CLIP + tiny Qwen2): its projector is freshly initialised."""
    import torch
    from transformers import CLIPVisionConfig, CLIPVisionModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    from mmtune.models.compose import compose_llava, save_composed
    from mmtune.models.local_tokenizer import chat_template
    from mmtune.models.tiny import build_tiny

    torch.manual_seed(1)  # the parts tests/models/test_compose.py composes
    clip = CLIPVisionModel(CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, image_size=56, patch_size=14))
    ip = CLIPImageProcessorPil(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    lm, tok = build_tiny("tiny/qwen2", seed=2)
    tok.chat_template = chat_template(image="<image>\n")
    folder = tmp_path_factory.mktemp("c") / "composed"
    save_composed(compose_llava(clip, lm, tokenizer=tok, image_processor=ip), folder)
    return folder


def _llava(folder, adapter=None, train=None):
    return {"model": {"name": str(folder), "family": "llava"}, "data": {"train": "synthetic:counting"},
            "adapter": adapter or {}, "train": train or {}}


def test_mm052_frozen_fresh_projector(doctor, composed):
    rep = doctor(_llava(composed, {"freeze_components": ["vision"]}), "MM052")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM052", "error")], (rep.findings, rep.not_run)
    assert "exactly zero" in rep.findings[0].message and "train_components=[projector]" in rep.findings[0].fix


def test_mm052_checkpoint_without_projector_weights(doctor, composed, tmp_path):
    """A language-model checkpoint loaded as LLaVA: the projector is "newly initialized" (LLaVA#808)."""
    import shutil

    from safetensors.torch import load_file, save_file

    bare = tmp_path / "bare"
    shutil.copytree(composed, bare)
    tensors = {k: v for k, v in load_file(bare / "model.safetensors").items() if "projector" not in k}
    save_file(tensors, bare / "model.safetensors", metadata={"format": "pt"})
    rep = doctor(_llava(bare), "MM052")
    assert [f.severity for f in rep.findings] == ["error"] and "no projector weights" in rep.findings[0].message


def test_mm052_projector_trained_or_already_trained_is_silent(doctor, composed, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    stage1 = {"method": "full", "freeze_components": ["vision", "decoder", "lm_head"]}  # seed 004 stage 1
    assert doctor(_llava(composed, stage1), "MM052").findings == []
    assert doctor(_llava(composed, {"train_components": ["projector"]}), "MM052").findings == []
    stages = {"stages": [{"until": 2, "train": ["projector"]}, {"train": ["projector", "decoder_lora"]}]}
    assert doctor(_llava(composed, train=stages), "MM052").findings == []
    trained = tmp_path / "trained"  # the same folder after stage 1: biases moved off zero
    shutil.copytree(composed, trained)
    tensors = load_file(trained / "model.safetensors")
    for k in tensors:
        if "projector" in k and k.endswith(".bias"):
            tensors[k] = tensors[k] + 0.01
    save_file(tensors, trained / "model.safetensors", metadata={"format": "pt"})
    assert doctor(_llava(trained, {"freeze_components": ["vision"]}), "MM052").findings == []
    assert doctor(TINY_VL, "MM052").findings == []


# --------------------------------------------------------------------------- MM050 FA2 head size

def test_mm050_flash_attention_beyond_head_dim_256(doctor, tmp_path):
    fa2 = {"name": None, "attn_implementation": "flash_attention_2"}
    big = model_folder(tmp_path, name="big", head_dim=288)
    rep = doctor({**tree(big), "model": {**fa2, "name": str(big)}}, "MM050", gpu="a100-80gb")
    assert [(f.code, f.severity, f.fix) for f in rep.findings] == [("MM050", "error", "model.attn_implementation=sdpa")]
    assert "head_dim 288" in rep.findings[0].message
    sdpa = {**tree(big), "model": {**tree(big)["model"], "attn_implementation": "sdpa"}}
    assert doctor(sdpa, "MM050", gpu="a100-80gb").findings == []  # sdpa: no limit
    ok = model_folder(tmp_path, name="ok")
    assert doctor({**tree(ok), "model": {**fa2, "name": str(ok)}}, "MM050", gpu="a100-80gb").findings == []


def test_mm050_backward_above_192_needs_an_a100_class_gpu(doctor, tmp_path):
    """flash-attention#277/#328: head_dim 193-256 runs forward everywhere, backward only on A100/H100."""
    mid = model_folder(tmp_path, name="mid", head_dim=224)
    t = {**tree(mid), "model": {"name": str(mid), "attn_implementation": "flash_attention_2"}}
    rep = doctor(t, "MM050", gpu="l4")
    assert [f.severity for f in rep.findings] == ["error"] and "backward on L4" in rep.findings[0].message
    assert doctor(t, "MM050", gpu="a100-80gb").findings == []


def test_mm050_real_architectures_fit_flash_attention():
    """The embedded real configs (text and encoders) are all within FlashAttention-2's limit: no false alarm."""
    from mmtune.doctor.checks.model_setup import FA2_MAX_HEAD_DIM, head_dims
    from mmtune.models.configs import embedded, embedded_names, hf_config

    for name in embedded_names():
        config = hf_config(embedded(name))
        dims = head_dims(getattr(config, "thinker_config", config))
        assert dims and max(dims.values()) <= FA2_MAX_HEAD_DIM, (name, dims)
    assert head_dims(hf_config(embedded("Qwen/Qwen2-VL-7B-Instruct")))["vision"] == 80  # 1280 / 16, not 3584 / 16


# --------------------------------------------------------------------------- MM053 static RoPE scaling

YARN = {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}}


def test_mm053_yarn_on_for_short_sequences(doctor, tmp_path):
    """Qwen's model card YaRN snippet added to config.json, training on 512-token records (Qwen3#1567)."""
    folder = model_folder(tmp_path, config_json={**YARN, "max_position_embeddings": 4096})
    rep = doctor({**tree(folder), "data": {"train": "synthetic:counting", "max_length": 512}}, "MM053")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM053", "warning")], (rep.findings, rep.not_run)
    assert "yarn, factor 4" in rep.findings[0].message


def test_mm053_clean(doctor, tmp_path):
    folder = model_folder(tmp_path, config_json={**YARN, "max_position_embeddings": 4096})
    long = {**tree(folder), "data": {"train": "synthetic:counting", "max_length": 4096}}
    assert doctor(long, "MM053").findings == []  # the run needs the long window
    assert doctor(tree(model_folder(tmp_path, name="plain")), "MM053").findings == []
    assert doctor(TINY_VL, "MM053").findings == []  # M-RoPE is not a scaling
    qwen2_vl = {"model": {"name": "Qwen/Qwen2-VL-7B-Instruct"}, "data": {"train": "synthetic:counting"}}
    assert doctor(qwen2_vl, "MM053").findings == []


# --------------------------------------------------------------------------- MM124 MoE router balancing loss

def test_mm124_premise_the_balancing_loss_needs_labels():
    """The report's mechanism on the real class: with output_router_logits on, the model's own loss (from labels)
    carries the balancing term, while the logits mmtune computes its loss from are the same with or without it."""
    import torch

    from mmtune.models.examples import example_batch
    from mmtune.models.families import get_family
    from mmtune.models.tiny import build_tiny

    fam = get_family("qwen3_omni")
    on, processor = build_tiny("tiny/qwen3-omni")
    batch = example_batch(processor, fam.modalities)
    with torch.no_grad():
        plain = on(**batch)
        routed = on(**batch, output_router_logits=True)
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        no_labels = on(**inputs, output_router_logits=True)
    assert routed.aux_loss is not None and float(routed.aux_loss) > 0
    assert float(routed.loss) > float(plain.loss)  # + router_aux_loss_coef * aux_loss, from labels only
    torch.testing.assert_close(no_labels.logits, plain.logits)  # what mmtune's loss reads: no balancing term


@pytest.mark.parametrize("adapter,severity", [({"method": "full"}, "warning"), ({}, "info")])
def test_mm124_router_logits_on(doctor, tmp_path, adapter, severity):
    folder = model_folder(tmp_path, tiny="tiny/qwen3-omni")
    raw = json.loads((folder / "config.json").read_text())
    raw["text_config"]["output_router_logits"] = True
    (folder / "config.json").write_text(json.dumps(raw))
    rep = doctor(tree(folder, adapter), "MM124")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM124", severity)], rep.findings


def test_mm124_published_setting_is_silent(doctor, tmp_path):
    folder = model_folder(tmp_path, tiny="tiny/qwen3-omni")
    assert doctor(tree(folder, {"method": "full"}), "MM124").findings == []
    assert doctor(tree(model_folder(tmp_path, name="dense")), "MM124").findings == []  # no experts at all
