"""LLaVA-style composition from tiny CLIP + tiny Qwen2 parts: weights copied, saved, reloaded, trained."""

from __future__ import annotations

import pytest
import torch

from mmtune.config.schema import RunConfig
from mmtune.models.compose import compose_llava, save_composed
from mmtune.models.examples import example_batch


def parts():
    from transformers import CLIPVisionConfig, CLIPVisionModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    from mmtune.models.local_tokenizer import chat_template
    from mmtune.models.tiny import build_tiny

    torch.manual_seed(1)
    clip = CLIPVisionModel(CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, image_size=56, patch_size=14))
    ip = CLIPImageProcessorPil(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    lm, tok = build_tiny("tiny/qwen2", seed=2)
    tok.chat_template = chat_template(image="<image>\n")
    return clip, ip, lm, tok


@pytest.mark.parametrize("projector", ["mlp2x_gelu", "linear"])
def test_compose_copies_parts_and_trains(projector):
    clip, ip, lm, tok = parts()
    c = compose_llava(clip, lm, tokenizer=tok, image_processor=ip, projector=projector)
    m = c.model
    assert type(m).__name__ == "LlavaForConditionalGeneration"
    assert m.config.projector_hidden_act == ("gelu" if projector == "mlp2x_gelu" else "linear")
    for k, v in clip.state_dict().items():
        torch.testing.assert_close(m.model.vision_tower.state_dict()[k], v)
    assert all(p.device.type == "cpu" for p in m.parameters())  # never meta (failure mode 8)
    ids = torch.tensor([[3, 17, 42, 99]])
    with torch.no_grad():
        torch.testing.assert_close(m(input_ids=ids).logits, lm(input_ids=ids).logits)  # text path = the LM
    batch = example_batch(c.processor, ("image",))
    assert int((batch["input_ids"] == m.config.image_token_index).sum()) == 16  # 4x4 patches, CLS dropped
    out = m(**batch)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert m.model.multi_modal_projector.linear_1.weight.grad.abs().sum() > 0


def test_composed_folder_reloads_and_two_stage_training_merges_in_one_dtype(tmp_path):
    from mmtune.adapters import apply_adapters
    from mmtune.build import load_model
    from mmtune.models.audits import dtype_audit

    clip, ip, lm, tok = parts()
    composed = tmp_path / "composed"
    save_composed(compose_llava(clip, lm, tokenizer=tok, image_processor=ip), composed)

    # stage 1: projector only (method full, everything else frozen), saved as a full folder in bf16
    cfg1 = RunConfig(model={"name": str(composed), "gradient_checkpointing": False},
                     adapter={"method": "full", "freeze_components": ["vision", "decoder", "lm_head"]},
                     train={"lr": 1e-2})
    s1 = load_model(cfg1, device="cpu", dtype="fp32")
    assert s1.family.name == "llava"
    r1 = apply_adapters(s1.model, s1.family, cfg1.adapter, cfg1.train)
    assert {g["component"] for g in r1.param_groups} == {"projector"}
    batch = example_batch(s1.processor, ("image",))
    before = s1.model.model.multi_modal_projector.linear_1.weight.detach().clone()
    opt = torch.optim.AdamW(r1.param_groups)
    for _ in range(2):
        s1.model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
    assert not torch.equal(before, s1.model.model.multi_modal_projector.linear_1.weight)
    stage1 = tmp_path / "stage1"
    s1.model.to(torch.bfloat16).save_pretrained(stage1)
    s1.processor.save_pretrained(stage1)

    # stage 2: LoRA on the LM + projector in full, from the stage-1 folder; merge; reload in bf16
    cfg2 = RunConfig(model={"name": str(stage1), "gradient_checkpointing": False},
                     adapter={"method": "lora", "r": 4, "train_components": ["projector"]})
    s2 = load_model(cfg2, device="cpu", dtype="fp32")
    torch.testing.assert_close(s2.model.model.multi_modal_projector.linear_1.weight,
                               s1.model.model.multi_modal_projector.linear_1.weight.float())
    r2 = apply_adapters(s2.model, s2.family, cfg2.adapter, cfg2.train)
    assert r2.table.trainable_of("vision") == 0 and r2.table.lora_by_component.keys() == {"decoder"}
    opt = torch.optim.AdamW(r2.param_groups, lr=1e-2)
    r2.model(**batch).loss.backward()
    opt.step()
    merged = r2.model.merge_and_unload()
    final = tmp_path / "merged"
    merged.to(torch.bfloat16).save_pretrained(final)
    s2.processor.save_pretrained(final)
    again = load_model(RunConfig(model={"name": str(final)}), device="cpu", dtype="bf16")
    assert dtype_audit(again.model, torch.bfloat16) == {}
    assert {p.dtype for p in again.model.parameters()} == {torch.bfloat16}
    assert not any("lora" in n for n, _ in again.model.named_parameters())
