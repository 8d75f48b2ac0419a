"""Broken setups from the forty-sixth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 46: mixed
precision on older and consumer cards: fp16, bf16, tf32 and loss scaling"): fp16 weights under a GradScaler, updates
the GradScaler skips without a word and a loss scale that collapses, bf16 a T4 only emulates, and the precision
switches of other tools. The fp16 runs are real: torch's CPU fp16 autocast and GradScaler("cpu") on a tiny Qwen2
saved with save_pretrained, the arithmetic a T4's run does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import refusal_of_key
from test_public_reports_batch37 import _config, _rows


@pytest.fixture(scope="module")
def fp16_lora(tmp_path_factory):
    """A two-step fp16 LoRA run on the CPU: (the built run, its output folder). Its first update overflows at the
    GradScaler's starting scale (65536) and is skipped, the second trains."""
    from mmtune.build import build_run
    from mmtune.train.loop import train

    tmp = tmp_path_factory.mktemp("b46")
    run = build_run(_config(tmp, name="fp16", train={"precision": "fp16"}))
    train(run)
    return run, tmp / "fp16"


# ----------------------------------------------------------------------------- fp16 weights under a GradScaler
# https://github.com/haotian-liu/LLaVA/issues/363, https://github.com/bitsandbytes-foundation/bitsandbytes/issues/945,
# https://github.com/Facico/Chinese-Vicuna/issues/168, https://github.com/mlpc-ucsd/BLIVA/issues/29: "ValueError:
# Attempting to unscale FP16 gradients" -- weights loaded in fp16 and trained (LoRA, or an unfrozen ViT) with --fp16.
# mmtune's trainable weights are fp32 master copies whatever the compute dtype (frozen ones stay fp16), and pure 16-bit
# training without them is refused under fp16 before anything is built.
def test_fp16_trains_fp32_master_weights_and_pure_fp16_is_refused(fp16_lora, tmp_path):
    from mmtune.build import build_run
    from mmtune.errors import ConfigError

    run, _ = fp16_lora
    params = list(run.model.parameters())
    assert {p.dtype for p in params if p.requires_grad} == {__import__("torch").float32}
    assert {str(p.dtype) for p in params if not p.requires_grad} == {"torch.float16"}
    with pytest.raises(ConfigError) as err:
        build_run(_config(tmp_path, name="pure", train={"precision": "fp16", "fp32_trainable": False}))
    assert "refuses to unscale fp16" in str(err.value) and err.value.where == "train.fp32_trainable"


# ----------------------------------------------------------------------------- skipped updates said
# https://github.com/deepspeedai/DeepSpeed/issues/931, https://github.com/NVIDIA/apex/issues/864,
# https://github.com/facebookresearch/swav/issues/47: "Gradient overflow. Skipping step" -- is it normal, how many?
# The GradScaler's skipped updates were one boolean in each metrics row; the run's end said nothing.
def test_skipped_updates_and_the_loss_scale_are_logged_and_summarised(fp16_lora):
    _, out = fp16_lora
    rows = _rows(out)
    assert [r["skipped_update"] for r in rows] == [True, False]  # the first step calibrates the scale
    assert [r["loss_scale"] for r in rows] == [32768.0, 32768.0]  # halved once by the skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped_updates"] == 1 and summary["loss_scale"] == 32768.0


# ----------------------------------------------------------------------------- the loss scale collapses
# https://github.com/NVIDIA/apex/issues/715, https://github.com/NVIDIA/apex/issues/318 ("reducing loss scale to
# 1e-303"), https://github.com/deepspeedai/DeepSpeed/issues/697 ("Model doesn't learn with fp16"),
# https://github.com/modelscope/ms-swift/issues/4374, https://github.com/yangjianxin1/Firefly/issues/68,
# https://github.com/ymcui/Chinese-LLaMA-Alpaca/issues/534 ("Current loss scale already at minimum"): gradients that
# overflow fp16 even unscaled. torch's GradScaler has no floor: every update is skipped, the scale halves towards 0,
# the loss stays finite and the run ends "trained". The loop now stops, as DeepSpeed does at its floor of 1.
def test_a_loss_scale_that_falls_below_one_stops_the_run(tmp_path):
    """Rebuilt with a LoRA scaling of 1e10 (adapter.alpha=4e10, r=4): lora_B starts at 0, so the forward is the base
    model's and the loss finite, while every lora_B's gradient (the output's gradient x 1e10) overflows fp16 at any
    scale the GradScaler tries. Before: 30 steps, every update skipped, the scale 65536 -> 2^-14, the run "done"."""
    from mmtune.build import build_run
    from mmtune.errors import MMTuneError
    from mmtune.train.loop import train

    cfg = _config(tmp_path, train={"precision": "fp16", "max_steps": 30}, adapter={"alpha": 4e10})
    with pytest.raises(MMTuneError) as err:
        train(build_run(cfg))
    assert "loss scale fell to 0.5 at step 17: 17 update(s) in a row were skipped" in str(err.value)
    assert err.value.where == "train.precision" and "train.precision=bf16" in err.value.fix
    rows = _rows(tmp_path / "run")
    assert all(r["skipped_update"] for r in rows) and rows[-1]["loss_scale"] == 1.0
    assert all(r["loss"] < 7 for r in rows)  # the loss stayed finite (and flat) the whole time


# ----------------------------------------------------------------------------- bf16 a T4 only emulates
# https://github.com/pytorch/pytorch/pull/148322, https://github.com/MakazhanAlpamys/Soup/issues/387,
# https://github.com/pytorch/pytorch/issues/124996: torch.cuda.is_bf16_supported() says True on a T4 / RTX 20xx (bf16
# emulated in fp32, slow), so tools that ask it train in bf16 there. A card outside mmtune's catalog is asked without
# emulation (the catalog's own cards carry their bf16 answer).
def test_emulated_bf16_is_not_taken_for_bf16(monkeypatch):
    import types

    import torch

    from mmtune.resolve import target

    props = types.SimpleNamespace(name="NVIDIA GeForce GTX 1660 SUPER", total_memory=6 * 2**30, major=7, minor=5)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    spec = target._local_gpu_spec()
    assert spec.bf16 is False


# ----------------------------------------------------------------------------- other tools' precision switches
# https://github.com/huggingface/transformers/pull/14606, https://github.com/sillsdev/machine.py/issues/70,
# https://github.com/axolotl-ai-cloud/axolotl/pull/2477 (`tf32: true`); https://github.com/huggingface/transformers/issues/43278,
# https://github.com/borisdayma/dalle-mini/pull/190 (evaluation in another dtype than training): such a key was
# "unknown key ... remove it; see docs/config.md", with nothing on what mmtune does instead.
@pytest.mark.parametrize("key, said", [
    ("tf32", "there is no TF32 switch"),
    ("bf16_full_eval", "evaluation runs in the run's own precision"),
    ("train.fp16_full_eval", "evaluation runs in the run's own precision"),
    ("half_precision_backend", "no apex backend"),
    ("upcast_layernorm", "adapter.kbit_upcast=true"),
    ("loss_scale", "GradScaler"),
])
def test_other_tools_precision_keys_are_answered(tmp_path: Path, key, said):
    assert said in refusal_of_key(tmp_path, key, True)
