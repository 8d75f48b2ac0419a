"""Every tiny twin: real class, processor output on real media, finite loss and gradients, components."""

from __future__ import annotations

import pytest
import torch

from mmtune.models.examples import example_batch
from mmtune.models.families import FAMILIES, get_family
from mmtune.models.tiny import TINY, build_tiny, tiny_spec
from tests.family_registry import TWINS, family_of_twin

# twin -> the class it must be an instance of: the family's own (an Auto class resolves to the config's)
CLASSES = {t: ("Qwen2ForCausalLM" if family_of_twin(t).model_class == "AutoModelForCausalLM"
               else family_of_twin(t).model_class) for t in TWINS}
# Parameters a real forward legitimately leaves without gradient: LLaVA reads CLIP's penultimate
# layer (vision_feature_layer=-2), Whisper-style sinusoidal positions are fixed, the Omni audio
# tower's bos/eos embedding is only used when generating speech.
NO_GRAD_OK = ("model.vision_tower.encoder.layers.1.", "model.vision_tower.post_layernorm.",
              "model.audio_tower.embed_positions.", "model.audio_tower.audio_bos_eos_token.",
              # the same Omni parts under transformers 5.17's module names (mmtune.compat.layouts)
              "audio_tower.embed_positions.", "audio_tower.audio_bos_eos_token.",
              # Phi-4-multimodal reads its SigLIP tower's penultimate layer (feature_layer=-2: the last layer,
              # post_layernorm and pooling head unused), and projects audio with the speech or the vision-speech
              # MLP by whether the batch holds an image (this batch does: the speech MLP is unused)
              "model.embed_tokens_extend.image_embed.img_processor.encoder.layers.1.",
              "model.embed_tokens_extend.image_embed.img_processor.post_layernorm.",
              "model.embed_tokens_extend.image_embed.img_processor.head.",
              "model.embed_tokens_extend.audio_embed.up_proj_for_speech.",
              "model.embed_tokens_extend.audio_embed.down_proj_for_speech.")


def test_every_tiny_twin_belongs_to_a_registered_family():
    assert set(TINY) == set(CLASSES)
    assert {f.tiny for f in FAMILIES.values() if f.tiny} == set(CLASSES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_tiny_twin_forward_backward_with_processor_output(name):
    fam = get_family(tiny_spec(name).family)
    model, processor = build_tiny(name)
    assert type(model).__name__ == CLASSES[name]
    batch = example_batch(processor, fam.modalities)
    for media_key in fam.media_keys.items():  # the family's own batch key per medium
        if media_key[0] in fam.modalities and not (name.startswith("tiny/llava") and media_key[0] == "video"):
            assert media_key[1] in batch, f"{name}: processor gave no {media_key[1]}"
    out = model(**batch)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    # every parameter belongs to a named component (nothing falls into "other")
    comps = {n: fam.component_of(n) for n, _ in model.named_parameters()}
    assert "other" not in set(comps.values()), [n for n, c in comps.items() if c == "other"]
    expected = {"decoder", "lm_head"} | ({"vision", "projector"} if {"image", "video"} & set(fam.modalities) else set()) \
        | ({"audio", "projector"} if "audio" in fam.modalities else set())
    assert set(comps.values()) == expected
    for n, p in model.named_parameters():
        if p.grad is None:
            assert n.startswith(NO_GRAD_OK), f"{name}: {n} got no gradient"
        else:
            assert torch.isfinite(p.grad).all(), n
    # media really reached the model: the projector got a non-zero gradient
    if "projector" in expected:
        assert any(p.grad is not None and p.grad.abs().sum() > 0
                   for n, p in model.named_parameters() if comps[n] == "projector")


def test_tiny_onevision_batches_images_with_different_view_counts():
    """Anyres views depend on the aspect ratio (a wide image gets 3, a square one 5): the collator pads
    the views, and the model keeps each image's real ones (by image_sizes), as in a processor batch."""
    from PIL import Image

    from mmtune.data.collate import Collator

    model, processor = build_tiny("tiny/llava-onevision")
    text = processor.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],
                                         add_generation_prompt=True)
    items = [{k: v[0] for k, v in processor(text=[text], images=[Image.new("RGB", size, (200, 30, 30))],
                                             return_tensors="pt").items()} for size in ((90, 40), (60, 60))]
    assert items[0]["pixel_values"].shape[0] != items[1]["pixel_values"].shape[0]
    for it in items:  # one record each, as the encoder produces them
        it["pixel_values"] = it["pixel_values"][None]
        it["image_sizes"] = it["image_sizes"][None]
        it["batch_num_images"] = it["batch_num_images"].reshape(1)
    batch = Collator(processor.tokenizer.pad_token_id)(items)
    out = model(**batch, labels=batch["input_ids"])
    assert torch.isfinite(out.loss)


def test_tiny_omni_processor_expands_audio_and_video_placeholders():
    model, processor = build_tiny("tiny/qwen2.5-omni")
    batch = example_batch(processor, ("video", "audio"), audio_seconds=2.0)
    ids = batch["input_ids"][0]
    n_audio = int((ids == model.config.audio_token_index).sum())
    n_video = int((ids == model.config.video_token_index).sum())
    assert n_audio == 50  # 2 s of 16 kHz audio -> 200 mel frames -> 50 tokens (25 per second)
    grid = batch["video_grid_thw"][0]
    assert n_video == int(grid.prod()) // 4
