"""load_model: dtype, device, attention, checkpointing, meta, offline errors (tiny twins on CPU)."""

from __future__ import annotations

import pytest
import torch

from mmtune.build import load_model
from mmtune.config.schema import RunConfig
from mmtune.errors import ConfigError, ModelLoadError
from mmtune.models.audits import check_dtypes, check_no_meta, dtype_audit
from mmtune.models.checkpointing import is_checkpointing


def cfg(name="tiny/qwen2-vl", **adapter):
    return RunConfig(model={"name": name}, adapter=adapter or {})


@pytest.mark.parametrize("name", ["tiny/qwen2", "tiny/qwen2-vl"])
def test_load_tiny_one_dtype_sdpa_checkpointing(name):
    lm = load_model(cfg(name), device="cpu", dtype="bf16")
    floats = {p.dtype for p in lm.model.parameters() if p.is_floating_point()}
    assert floats == {torch.bfloat16}
    assert lm.attn_implementation == "sdpa"
    assert lm.model.config._attn_implementation == "sdpa"
    from mmtune.resolve import resolve_here

    d = resolve_here(cfg(name)).decision("model.attn_implementation")  # the decision, with its reason
    assert d.value == "sdpa" and d.reason.startswith("auto:")
    assert is_checkpointing(lm.model)
    assert lm.family.name == ("qwen2" if name == "tiny/qwen2" else "qwen2_vl")


def test_dtype_audit_names_fp32_module_in_bf16_model():
    lm = load_model(cfg(), device="cpu", dtype="bf16")
    assert dtype_audit(lm.model, torch.bfloat16) == {}
    lm.model.model.visual.merger.float()  # the seed-000 symptom: a projector left in fp32
    bad = dtype_audit(lm.model, torch.bfloat16)
    assert set(bad) == {"model.visual.merger.ln_q", "model.visual.merger.mlp.0", "model.visual.merger.mlp.2"}
    assert set(bad.values()) == {"float32"}
    with pytest.raises(ModelLoadError, match="model.visual.merger.mlp.0"):
        check_dtypes(lm.model, torch.bfloat16)


def test_meta_load_allocates_nothing_and_meta_check_refuses_it():
    lm = load_model(cfg(), device="cpu", dtype="bf16", meta=True)
    devices = {p.device.type for p in lm.model.parameters()}
    assert devices == {"meta"}
    real = load_model(cfg(), device="cpu", dtype="bf16").model
    assert [n for n, _ in lm.model.named_parameters()] == [n for n, _ in real.named_parameters()]
    check_no_meta(real)
    with pytest.raises(ModelLoadError, match="meta device"):
        check_no_meta(lm.model)


def test_offline_missing_hub_model_names_files_and_download_command(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelLoadError) as e:
        load_model(RunConfig(model={"name": "Qwen/Qwen2-VL-7B-Instruct", "family": "qwen2_vl"}),
                   device="cpu", dtype="bf16")
    msg = str(e.value)
    assert "config.json" in msg and "safetensors" in msg and "preprocessor_config.json" in msg
    assert "mmtune download Qwen/Qwen2-VL-7B-Instruct" in msg


def test_local_folder_without_weights_lists_what_is_missing(tmp_path):
    lm = load_model(cfg("tiny/qwen2"), device="cpu", dtype="fp32")
    lm.model.config.save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=r"lacks: model weights .*tokenizer"):
        load_model(RunConfig(model={"name": str(tmp_path), "family": "qwen2"}), device="cpu", dtype="fp32")


def test_saved_tiny_folder_loads_back_with_same_logits(tmp_path):
    lm = load_model(RunConfig(model={"name": "tiny/qwen2", "gradient_checkpointing": False}),
                    device="cpu", dtype="fp32")
    lm.model.save_pretrained(tmp_path)
    lm.processor.save_pretrained(tmp_path)
    again = load_model(RunConfig(model={"name": str(tmp_path), "gradient_checkpointing": False}),
                       device="cpu", dtype="fp32")
    assert again.family.name == "qwen2"
    ids = torch.tensor([[1, 5, 9, 30]])
    torch.testing.assert_close(lm.model(input_ids=ids).logits, again.model(input_ids=ids).logits)


def test_flash_attention_refused_on_cpu_with_reason():
    c = RunConfig(model={"name": "tiny/qwen2", "attn_implementation": "flash_attention_2"})
    with pytest.raises(ConfigError, match="flash_attention_2 cannot be used"):
        load_model(c, device="cpu", dtype="bf16")


def test_device_map_is_refused_for_training():
    c = RunConfig(model={"name": "tiny/qwen2", "device_map": "auto"})
    with pytest.raises(ConfigError, match="device_map placement/offload is not supported for training"):
        load_model(c, device="cpu", dtype="fp32")


def test_meta_build_of_a_real_model_from_its_embedded_config_offline(monkeypatch, tmp_path):
    import huggingface_hub.constants as c

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    lm = load_model(RunConfig(model={"name": "Qwen/Qwen2-VL-7B-Instruct"}), device="cpu", dtype="bf16", meta=True)
    assert type(lm.model).__name__ == "Qwen2VLForConditionalGeneration" and lm.family.name == "qwen2_vl"
    n = sum(p.numel() for p in lm.model.parameters())
    assert 8.0e9 < n < 8.5e9  # Qwen2-VL-7B has 8.29 B parameters
    assert {p.device.type for p in lm.model.parameters()} == {"meta"}
