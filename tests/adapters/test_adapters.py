"""apply_adapters: LoRA on the decoder only, components in full, freezing, LR groups, QLoRA, save/load."""

from __future__ import annotations

import pytest
import torch

from mmtune.adapters import apply_adapters, component_of
from mmtune.build import load_model
from mmtune.config.schema import RunConfig
from mmtune.errors import ConfigError
from mmtune.models.examples import example_batch
from tests.family_registry import TWINS, family_of_twin


def setup(name="tiny/qwen2-vl", dtype="fp32", ckpt=True, lr=1e-3, **adapter):
    cfg = RunConfig(model={"name": name, "gradient_checkpointing": ckpt}, adapter=adapter,
                    train={"lr": lr})
    lm = load_model(cfg, device="cpu", dtype=dtype)
    res = apply_adapters(lm.model, lm.family, cfg.adapter, cfg.train)
    return lm, res, cfg


def trainable_by_component(res, family):
    out = {}
    for n, p in res.model.named_parameters():
        if p.requires_grad:
            c = component_of(family, n)
            out[c] = out.get(c, 0) + p.numel()
    return out


def test_lora_targets_only_the_decoder():
    lm, res, _ = setup()
    assert res.lora_targets and all(t.startswith("model.language_model.layers.") for t in res.lora_targets)
    assert res.table.lora_by_component == {"decoder": res.table.lora_params}
    assert set(trainable_by_component(res, lm.family)) == {"lora"}
    for comp in ("vision", "projector", "decoder", "lm_head"):
        assert res.table.trainable_of(comp) == 0
    assert res.warnings == []


def test_train_components_projector_and_lr_multipliers():
    lm, res, _ = setup(train_components=["projector"], lr_multipliers={"projector": 10.0})
    by = trainable_by_component(res, lm.family)
    assert set(by) == {"lora", "projector"}
    assert by["projector"] == res.table.trainable_of("projector") == 24832
    lrs = {g["component"]: g["lr"] for g in res.param_groups}
    assert lrs == {"lora": 1e-3, "projector": pytest.approx(1e-2)}
    # groups hold exactly the trainable parameters, each once (selected by identity)
    grouped = [id(p) for g in res.param_groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in res.model.parameters() if p.requires_grad)
    # norms and biases get no weight decay
    assert all(p.ndim >= 2 for g in res.param_groups if g["weight_decay"] for p in g["params"])


def test_full_with_freeze_components():
    lm, res, _ = setup(method="full", freeze_components=["vision", "decoder"])
    by = trainable_by_component(res, lm.family)
    assert set(by) == {"projector", "lm_head"}
    assert res.table.trainable_of("vision") == 0 and res.table.trainable_of("decoder") == 0


def test_targets_matching_nothing_lists_existing_names():
    with pytest.raises(ConfigError, match=r"(?s)\[.query_key_value.\] match no linear.*q_proj"):
        setup(target_modules=["query_key_value"])


def test_nothing_trainable_is_an_error():
    with pytest.raises(ConfigError, match="no parameter is trainable"):
        setup(method="full", freeze_components=["vision", "projector", "decoder", "lm_head"])


def test_lora_on_frozen_component_by_explicit_target_warns():
    lm, res, _ = setup(target_modules=["q_proj", "vision:qkv"], freeze_components=["vision"])
    assert res.table.lora_by_component.keys() == {"decoder", "vision"}
    assert any("'vision' is in adapter.freeze_components but has LoRA" in w for w in res.warnings)


def test_forward_backward_grads_reach_lora_with_checkpointing_and_frozen_embeddings():
    lm, res, _ = setup(train_components=["projector"])
    batch = example_batch(lm.processor, lm.family.modalities)
    res.model.train()
    loss = res.model(**batch).loss
    assert torch.isfinite(loss)
    loss.backward()
    for g in res.param_groups:
        for p in g["params"]:
            assert p.grad is not None and torch.isfinite(p.grad).all()
    assert any(p.grad.abs().sum() > 0 for g in res.param_groups if g["component"] == "lora" for p in g["params"])


def test_loss_falls_on_a_fixed_batch_then_adapter_roundtrip(tmp_path):
    from peft import PeftModel

    from mmtune.models.tiny import build_tiny

    torch.manual_seed(0)  # LoRA init and dropout draw from the global RNG: fix them, whatever ran before
    lm, res, _ = setup(train_components=["projector"], ckpt=False, lr=3e-3)
    batch = example_batch(lm.processor, lm.family.modalities)
    opt = torch.optim.AdamW(res.param_groups)
    losses = []
    res.model.train()
    for _ in range(10):
        loss = res.model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0] and all(b < a for a, b in zip(losses, losses[1:])), losses
    res.model.eval()
    with torch.no_grad():
        before = res.model(**batch).logits
    res.model.save_pretrained(tmp_path)
    saved = {p.name for p in tmp_path.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= saved
    base, _ = build_tiny("tiny/qwen2-vl")  # same seed -> same base weights
    loaded = PeftModel.from_pretrained(base, tmp_path).eval()
    with torch.no_grad():
        after = loaded(**batch).logits
    torch.testing.assert_close(before, after)


def test_qlora_on_cpu():
    import bitsandbytes as bnb

    lm, res, _ = setup(method="qlora", dtype="bf16", train_components=["projector"])
    mods = dict(res.model.named_modules())
    q = [n for n, m in mods.items() if isinstance(m, bnb.nn.Linear4bit)]
    assert q and all(".language_model.layers." in n for n in q)
    # vision tower and projector stay in the compute dtype, never uint8 (failure mode 4)
    for n, p in res.model.named_parameters():
        if component_of(lm.family, n) in ("vision", "projector"):
            assert p.dtype == torch.bfloat16, n
    batch = example_batch(lm.processor, lm.family.modalities)
    batch = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in batch.items()}
    res.model.train()
    loss = res.model(**batch).loss
    assert torch.isfinite(loss)
    loss.backward()
    lora = [p for g in res.param_groups if g["component"] == "lora" for p in g["params"]]
    assert lora and all(p.grad is not None and torch.isfinite(p.grad).all() for p in lora)
    assert any(p.grad.abs().sum() > 0 for p in lora)
    assert res.table.total > 0 and "qlora" in str(res.table)


@pytest.mark.parametrize("name", [family_of_twin(t).tiny for t in TWINS if "projector" in family_of_twin(t).components])
def test_lora_on_decoder_only_for_every_family(name):
    lm, res, _ = setup(name, train_components=["projector"])
    assert res.table.lora_by_component.keys() == {"decoder"}
    by = trainable_by_component(res, lm.family)
    assert set(by) == {"lora", "projector"}
    for comp in ("vision", "audio", "decoder", "lm_head"):
        assert res.table.trainable_of(comp) == 0
    batch = example_batch(lm.processor, lm.family.modalities)
    loss = res.model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for g in res.param_groups if g["component"] == "lora" for p in g["params"])


def test_omni_projector_is_the_audio_proj_and_the_vision_merger():
    lm, res, _ = setup("tiny/qwen2.5-omni", train_components=["projector"])
    trained = {n for n, p in res.model.named_parameters() if p.requires_grad and "lora_" not in n}
    assert any(".audio_tower.proj." in n for n in trained) and any(".visual.merger." in n for n in trained)
    assert not any(".audio_tower.layers." in n or ".visual.blocks." in n for n in trained)


def test_qlora_from_a_saved_folder_uses_transformers_quantizer_and_skips_vision(tmp_path):
    import bitsandbytes as bnb

    from mmtune.models.tiny import build_tiny

    model, processor = build_tiny("tiny/qwen2-vl")
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)  # reloads without torchvision (FramesVideoProcessor)
    cfg = RunConfig(model={"name": str(tmp_path)}, adapter={"method": "qlora", "train_components": ["projector"]})
    lm = load_model(cfg, device="cpu", dtype="bf16")
    q = [n for n, m in lm.model.named_modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(q) == 14 and all(n.startswith("model.language_model.") for n in q)
    assert {p.dtype for n, p in lm.model.named_parameters() if n.startswith("model.visual.")} == {torch.bfloat16}
    res = apply_adapters(lm.model, lm.family, cfg.adapter, cfg.train)
    batch = example_batch(lm.processor, lm.family.modalities)
    batch = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in batch.items()}
    loss = res.model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss)


def test_lora_on_the_last_vision_blocks_by_count_from_the_end():
    """`vision[-1:]:q_proj` picks the last block's q_proj whatever the depth (26 at full size, 2 in the
    twin); the blocks before it stay without LoRA, and gradients reach it (OneVision reads the last layer)."""
    lm, res, _ = setup(name="tiny/llava-onevision", target_modules=["q_proj", "vision[-1:]:q_proj"])
    lora = [n for n, p in res.model.named_parameters() if p.requires_grad and "lora_" in n]
    vision = [n for n in lora if ".vision_tower." in n]
    assert vision and all(".layers.1." in n for n in vision), vision
    batch = example_batch(lm.processor, lm.family.modalities)
    res.model(**batch).loss.backward()
    grads = {n: p.grad for n, p in res.model.named_parameters() if n in vision}
    # lora_B starts at zero, so on the first backward only lora_B has a non-zero gradient
    assert all(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "lora_B" in n)
    with pytest.raises(ConfigError, match="unknown component"):
        setup(name="tiny/llava-onevision", target_modules=["visoin[-1:]:q_proj"])
