"""Broken setups from batch 41 of public bug reports (docs/doctor.md, "Public bug reports, batch 41: host RAM and
model loading"): tiny Qwen2-VL twins saved with save_pretrained and then broken (a decoder layer left out, a DDP /
torch.compile state dict saved as is, a hole in the layer stack, only pytorch_model.bin, fp32 weights, many
shards), run through the doctor and the loader every command uses.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from doctor_helpers import TINY_VL

from mmtune.build import load_model
from mmtune.config.schema import RunConfig
from mmtune.errors import ModelLoadError


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A whole tiny Qwen2-VL folder (config, processor, weights in one safetensors file) and its tensors."""
    from safetensors.torch import load_file

    from mmtune.models.tiny import build_tiny

    model, proc = build_tiny("tiny/qwen2-vl")
    folder = tmp_path_factory.mktemp("whole") / "m"
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder, load_file(str(folder / "model.safetensors"))


def _copy(saved, tmp_path, tensors=None, name="m"):
    """A copy of the saved folder, its weights replaced by `tensors` when given."""
    from safetensors.torch import save_file

    folder = tmp_path / name
    shutil.copytree(saved[0], folder)
    if tensors is not None:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def _cfg(folder, **adapter):
    return RunConfig(model={"name": str(folder)}, adapter=adapter or {"train_components": ["projector"]})


# ----------------------------------------------------------------------------- a weight the checkpoint lacks
# https://github.com/X2FD/LVIS-INSTRUCT4V/issues/12, https://github.com/Q-Future/Q-Instruct/issues/13,
# https://github.com/QwenLM/Qwen2.5-Omni/issues/167: "Some weights of the model checkpoint ... were not used" /
# "newly initialized", and training went on. transformers only logs it, and mmtune's log did not show it: a
# checkpoint without decoder layer 1 trained its two steps on a random layer.

def test_a_checkpoint_missing_a_decoder_layer_stops_the_load(saved, tmp_path):
    partial = _copy(saved, tmp_path, {k: v for k, v in saved[1].items() if ".layers.1." not in k})
    with pytest.raises(ModelLoadError) as e:
        load_model(_cfg(partial), device="cpu", dtype="bf16")
    assert "12 weight(s)" in e.value.what and "layers.1." in e.value.what and "decoder 12" in e.value.what
    assert "complete checkpoint" in e.value.fix
    whole = load_model(_cfg(saved[0]), device="cpu", dtype="bf16")  # the folder it was cut from loads
    assert not [d for d in whole.decisions if d.startswith("weights:")], whole.decisions


# ----------------------------------------------------------------------------- a wrapper's state dict saved as is
# https://github.com/NVIDIA/apex/issues/647 (DDP prefixes state_dict with `module.`), https://github.com/huggingface/
# transformers/issues/28041 and https://github.com/karpathy/nanoGPT/issues/325 (`_orig_mod.` after torch.compile):
# no name matches the model. The doctor said only MM052's "has no projector weights", fix: train the projector.

@pytest.mark.parametrize("prefix", ["module.", "_orig_mod."])
def test_a_wrapper_prefixed_state_dict_is_named_by_the_doctor_and_the_load(saved, tmp_path, doctor, prefix):
    folder = _copy(saved, tmp_path, {prefix + k: v for k, v in saved[1].items()})
    rep = doctor({**TINY_VL, "model": {"name": str(folder)}}, "MM368", "MM052", "MM024")
    assert [f.code for f in rep.errors] == ["MM368"], rep.findings
    assert repr(prefix) in rep.errors[0].message and f"without the {prefix!r} prefix" in rep.errors[0].fix
    with pytest.raises(ModelLoadError) as e:
        load_model(_cfg(folder), device="cpu", dtype="bf16")
    assert f"starts with {prefix!r}" in e.value.what and "prefix" in e.value.fix
    clean = doctor({**TINY_VL, "model": {"name": str(saved[0])}, "adapter": {"train_components": ["projector"]}},
                   "MM368", "MM052", "MM024")
    assert clean.errors == [], clean.errors


def test_a_hole_in_the_layer_stack_is_the_doctors_error(saved, tmp_path, doctor):
    moved = {k.replace("model.layers.1.", "model.layers.2."): v for k, v in saved[1].items()}
    folder = _copy(saved, tmp_path, moved)
    rep = doctor({**TINY_VL, "model": {"name": str(folder)}, "adapter": {"train_components": ["projector"]}},
                 "MM368")
    assert [f.code for f in rep.errors] == ["MM368"] and "model.layers" in rep.errors[0].message
    assert "layer(s) 1 " in rep.errors[0].message
    with pytest.raises(ModelLoadError):
        load_model(_cfg(folder), device="cpu", dtype="bf16")


# ----------------------------------------------------------------------------- a projector the run trains from scratch
# The one weight allowed to start at random: a composed model's new projector, trained by the run (MM052's case,
# https://github.com/haotian-liu/LLaVA/issues/808). Kept frozen it is the load's error too.

def test_a_missing_projector_loads_when_the_run_trains_it(saved, tmp_path):
    folder = _copy(saved, tmp_path, {k: v for k, v in saved[1].items() if "merger" not in k})
    lm = load_model(_cfg(folder), device="cpu", dtype="bf16")
    assert any(d.startswith("weights: the projector is not in") for d in lm.decisions), lm.decisions
    with pytest.raises(ModelLoadError) as e:
        load_model(_cfg(folder, method="lora"), device="cpu", dtype="bf16")
    assert "projector" in e.value.what


# ----------------------------------------------------------------------------- pinned: fp32, .bin only, many shards
# https://github.com/hitz-zentroa/GoLLIE/issues/3 (weights uploaded in fp32, "needs 33 GB ... loaded by fp32",
# killed), https://github.com/zai-org/ChatGLM-6B/issues/7 (`from_pretrained(...).half()`: loaded in fp32 first):
# the compute dtype is passed to from_pretrained, so an fp32 checkpoint is cast while it loads. A folder with only
# pytorch_model.bin and one in many shards load the same weights.

def test_fp32_bin_only_and_sharded_checkpoints_load_in_the_compute_dtype(saved, tmp_path):
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny("tiny/qwen2-vl")
    fp32 = tmp_path / "fp32"
    shutil.copytree(saved[0], fp32)
    model.float().save_pretrained(fp32, max_shard_size="200KB")  # 5 shards and an index, fp32 on disk
    assert len(list(fp32.glob("model-0000*-of-*.safetensors"))) > 1
    binonly = _copy(saved, tmp_path, name="bin")
    torch.save(saved[1], binonly / "pytorch_model.bin")
    (binonly / "model.safetensors").unlink()
    ref = load_model(_cfg(saved[0]), device="cpu", dtype="bf16").model.state_dict()
    for folder in (fp32, binonly):
        got = load_model(_cfg(folder), device="cpu", dtype="bf16").model
        assert {p.dtype for p in got.parameters()} == {torch.bfloat16}
        sd = got.state_dict()
        assert sd.keys() == ref.keys() and all(torch.equal(sd[k], ref[k]) for k in ref)


# ----------------------------------------------------------------------------- lm_head saved tied, declared untied
# https://github.com/LLaVA-VL/LLaVA-NeXT/issues/315 (llava-onevision-qwen2-0.5b: no lm_head weights, "set
# tie_word_embeddings true"), https://github.com/QwenLM/Qwen3-VL-Embedding/issues/89, https://github.com/wyf3/
# llm_related/issues/28 ("Some weights of Qwen2ForCausalLM were not initialized": lm_head.weight): the output layer
# started at random. A checkpoint whose config says tied loads with lm_head shared, no word needed.

def test_lm_head_missing_from_an_untied_checkpoint_names_tie_word_embeddings(tmp_path):
    import json

    from safetensors.torch import load_file, save_file

    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2")
    assert model.config.tie_word_embeddings is False
    folder = tmp_path / "untied"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    weights = folder / "model.safetensors"
    save_file({k: v for k, v in load_file(str(weights)).items() if not k.startswith("lm_head.")}, str(weights),
              metadata={"format": "pt"})
    with pytest.raises(ModelLoadError) as e:
        load_model(RunConfig(model={"name": str(folder)}), device="cpu", dtype="bf16")
    assert "lm_head 1: lm_head.weight" in e.value.what and '"tie_word_embeddings": true' in e.value.fix
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "tie_word_embeddings": True}))
    lm = load_model(RunConfig(model={"name": str(folder)}), device="cpu", dtype="bf16").model
    assert lm.lm_head.weight.data_ptr() == lm.model.embed_tokens.weight.data_ptr()
