"""The vision patch embedding run as one matmul (resolve: model.patch_embed; models/patch_embed.py).

Every family with a tiny twin is held to what it says (Family.patch_embed_matmul): where it says so, its twin has
a non-overlapping Conv3d `patch_embed` and the matmul gives the same embeddings and the same weight gradients
(fp32); where it does not, the twin has no such module. Then the decision and the built model that follows it."""

from __future__ import annotations

import pytest

from mmtune.config.schema import RunConfig
from mmtune.models.patch_embed import flat_patch_embeds, run_patch_embeds_as_matmul
from mmtune.resolve import local_target, resolve_run
from tests.family_registry import TWINS, family_of_twin


def _embed_and_grads(module, x):
    module.zero_grad()
    out = module(x)
    (out * (x.new_ones(out.shape[-1]).cumsum(0))).sum().backward()  # a weighting that tells dims apart
    return out.detach().clone(), {k: p.grad.clone() for k, p in module.named_parameters()}


@pytest.mark.parametrize("twin", TWINS)
def test_a_family_runs_its_patch_embedding_as_a_matmul_exactly_where_it_says_so(twin):
    import torch

    from mmtune.models.tiny import build_tiny

    torch.manual_seed(0)
    model, _ = build_tiny(twin)
    found = flat_patch_embeds(model)
    family = family_of_twin(twin)
    assert bool(found) == family.patch_embed_matmul, f"{twin}: Family.patch_embed_matmul disagrees with the model"
    for _, module in found:
        module.requires_grad_(True)
        with torch.no_grad():  # a bias of zeros would hide a bias left out
            if module.proj.bias is not None:
                module.proj.bias.normal_()
        x = torch.randn(7, module.proj.weight[0].numel())  # 7 flattened patches, as the processor gives them
        want, want_grads = _embed_and_grads(module, x)
    names = run_patch_embeds_as_matmul(model)
    assert names == [n for n, _ in found]
    for _, module in found:
        got, got_grads = _embed_and_grads(module, x)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        for k in want_grads:
            torch.testing.assert_close(got_grads[k], want_grads[k], rtol=1e-5, atol=1e-4)


def test_the_decision_and_the_built_model_follow_the_family():
    import torch

    from mmtune.build import load_model

    vl = resolve_run(RunConfig.model_validate({"model": {"name": "tiny/qwen2-vl"}}), local_target("cpu"))
    assert vl.patch_embed_matmul and vl.to_dict()["patch_embed_matmul"] is True
    assert "verified exact for qwen2_vl" in vl.decision("model.patch_embed").reason
    loaded = load_model(vl)
    module = loaded.model.get_submodule("model.visual.patch_embed")
    assert module.proj.forward.__func__.__name__ == "_matmul_forward" and type(module.proj) is torch.nn.Conv3d
    assert "model.visual.patch_embed.proj.weight" in loaded.model.state_dict()  # checkpoints unchanged
    assert any(d.startswith("vision patch embedding: model.visual.patch_embed run as one matmul")
               for d in loaded.decisions)
    meta = load_model(vl, meta=True)  # the planner's model: the same forward
    assert meta.model.get_submodule("model.visual.patch_embed.proj").forward.__func__.__name__ == "_matmul_forward"
    llava = resolve_run(RunConfig.model_validate({"model": {"name": "tiny/llava"}}), local_target("cpu"))
    assert not llava.patch_embed_matmul and llava.decision("model.patch_embed") is None


def test_the_conv_still_runs_its_hooks_and_convolves_what_is_not_one_patch():
    """The swap is on the Conv3d's forward: it is still called (a hook on it runs, as ZeRO-3's gathering does),
    and an input that is not one patch per item (a whole volume) gets the convolution itself."""
    import torch

    holder = torch.nn.Module()
    holder.patch_embed = torch.nn.Module()
    holder.patch_embed.proj = torch.nn.Conv3d(3, 8, kernel_size=(2, 4, 4), stride=(2, 4, 4), bias=True)
    volume = torch.randn(1, 3, 4, 8, 8)  # 2 x 2 x 2 patches in one item
    want = holder.patch_embed.proj(volume)
    calls = []
    holder.patch_embed.proj.register_forward_pre_hook(lambda mod, args: calls.append(args[0].shape))
    assert run_patch_embeds_as_matmul(holder) == ["patch_embed"]
    torch.testing.assert_close(holder.patch_embed.proj(volume), want)  # the convolution, not a reshape
    patches = torch.randn(5, 3, 2, 4, 4)
    got = holder.patch_embed.proj(patches)
    assert got.shape == (5, 8, 1, 1, 1) and len(calls) == 2
    torch.testing.assert_close(got, torch.nn.functional.conv3d(patches, holder.patch_embed.proj.weight,
                                                               holder.patch_embed.proj.bias, stride=(2, 4, 4)))


def test_an_overlapping_or_lora_wrapped_projection_is_left_alone():
    import torch

    class Embed(torch.nn.Module):
        def __init__(self, stride):
            super().__init__()
            self.proj = torch.nn.Conv3d(3, 8, kernel_size=(2, 4, 4), stride=stride, bias=False)

    holder = torch.nn.Module()
    holder.patch_embed = Embed((1, 2, 2))  # overlapping windows: a real convolution
    assert flat_patch_embeds(holder) == [] and run_patch_embeds_as_matmul(holder) == []
    holder.patch_embed = Embed((2, 4, 4))
    holder.patch_embed.proj = torch.nn.Sequential(holder.patch_embed.proj)  # e.g. peft's LoRA wrapper around it
    assert flat_patch_embeds(holder) == []
