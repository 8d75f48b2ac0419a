"""Broken setups from the thirty-seventh batch of public bug reports (docs/doctor.md, "Public bug reports, batch 37:
optimizers, learning-rate schedules, gradient accumulation and clipping"): another optimizer at resume, bitsandbytes'
optimizers over FSDP2 shards, the scheduler stepped once per update, weight decay only where asked, the logged
gradient norm beside clipping, optimizers mmtune does not offer. Each is rebuilt on a tiny Qwen2 saved with
save_pretrained and trained for real on the CPU (or a config through the resolved run and the doctor).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import sums_jsonl
from test_public_reports_batch35 import _base  # a tiny Qwen2 folder as save_pretrained writes it


def _config(tmp_path: Path, name: str = "run", train: dict | None = None, adapter: dict | None = None,
            overrides: list[str] | None = None):
    import yaml

    from mmtune.config import load_config

    tree = {"output_dir": str(tmp_path / name), "model": {"name": str(_base(tmp_path / "base")),
                                                           "gradient_checkpointing": False},
            "data": {"train": sums_jsonl(tmp_path, 16), "max_length": 64},
            "adapter": {"method": "lora", "r": 4, "dropout": 0.0, **(adapter or {})},
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "lr": 0.01, "precision": "fp32",
                      "device": "cpu", "seed": 0, **(train or {})},
            "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return load_config(path, overrides or [])


def _rows(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "train"]


def _resume(out: Path, *overrides: str):
    """`mmtune train` again on the run folder with `key=value` overrides (the saved config, layered)."""
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    return train(build_run(load_config(out / "config.resolved.yaml", list(overrides))))


# ----------------------------------------------------------------------------- another optimizer at resume
# https://github.com/bitsandbytes-foundation/bitsandbytes/issues/782, https://github.com/axolotl-ai-cloud/axolotl/issues/864:
# a run saved by one optimizer (paged_adamw_32bit) resumed with another (adamw_torch) fails, and the workaround renames
# the saved moments (state1 -> exp_avg) by hand. optimizer.load_state_dict checks only the groups' sizes: mmtune loaded
# adamw's state into bitsandbytes' AdamW8bit and the first step raised "KeyError: 'state1'" (after the model had
# loaded), or kept Adam's moments as a stray state beside SGD's momentum and saved them again.
def _saved_optimizer_state(out: Path) -> dict:
    from mmtune.train.checkpoint import list_checkpoints, read_checkpoint_state

    return read_checkpoint_state(list_checkpoints(out)[-1])["optimizer"]["state"]


def test_another_optimizer_at_resume_starts_fresh_from_the_trained_weights(tmp_path, capsys):
    from mmtune.build import build_run
    from mmtune.train.loop import train

    cfg = _config(tmp_path)
    train(build_run(cfg))
    out = Path(cfg.output_dir)
    assert all("exp_avg" in s for s in _saved_optimizer_state(out).values())
    _resume(out, "train.optimizer=sgd", "train.max_steps=4", "train.accept_changes=true")
    assert [r["step"] for r in _rows(out)] == [1, 2, 3, 4]
    # SGD's own state only: Adam's moments were not loaded, so they are not saved again either
    state = _saved_optimizer_state(out)
    assert state and all(set(s) == {"momentum_buffer"} for s in state.values()), [sorted(s) for s in state.values()]
    said = " ".join(capsys.readouterr().out.split())
    assert "holds the state of train.optimizer=adamw; this run steps with sgd" in said


def test_adamw_resumed_as_adamw_8bit_trains_on(tmp_path):
    pytest.importorskip("bitsandbytes")
    from mmtune.build import build_run
    from mmtune.train.loop import train

    cfg = _config(tmp_path)
    train(build_run(cfg))
    out = Path(cfg.output_dir)
    _resume(out, "train.optimizer=adamw_8bit", "train.max_steps=4", "train.accept_changes=true")  # was KeyError 'state1'
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and all(r["loss"] == r["loss"] for r in rows)


# https://github.com/axolotl-ai-cloud/axolotl/issues/864 (paged_adamw_32bit "will cause an error when resuming from
# checkpoint"): the same paged optimizer resumed continues exactly on the CPU (its 32-bit state1 / state2 saved and
# loaded): 2 steps + 2 resumed equal 4 straight, loss for loss. The CUDA paged-memory error itself needs a GPU.
def test_paged_adamw_resumes_exactly(tmp_path):
    pytest.importorskip("bitsandbytes")
    from mmtune.build import build_run
    from mmtune.train.loop import train

    opts = {"optimizer": "paged_adamw", "scheduler": "constant"}
    straight = _config(tmp_path, "straight", train={**opts, "max_steps": 4})
    train(build_run(straight))
    split = _config(tmp_path, "split", train=opts)
    train(build_run(split))
    _resume(Path(split.output_dir), "train.max_steps=4", "train.accept_changes=true")
    losses = [[r["loss"] for r in _rows(Path(c.output_dir))] for c in (straight, split)]
    assert len(losses[1]) == 4 and losses[1] == pytest.approx(losses[0], rel=1e-6, abs=1e-7)


# ----------------------------------------------------------------------------- bitsandbytes' optimizers over FSDP2
# https://github.com/hiyouga/LlamaFactory/issues/5619, https://github.com/bitsandbytes-foundation/bitsandbytes/issues/89,
# https://github.com/meta-pytorch/torchtune/issues/1856: adamw_8bit / paged optimizers under FSDP fail at the first
# optimizer step. Rebuilt on 2 CPU ranks: "Operator bitsandbytes.optimizer_update_32bit.default does not have a
# sharding strategy registered", after the model loaded. Now the resolved run refuses it (so `mmtune train` stops
# before loading anything and the doctor says it, MM098); one process and ddp keep plain tensors and are accepted.
def _resolve(cfg):
    from mmtune.resolve import resolve_run
    from mmtune.resolve.target import local_target

    return resolve_run(cfg, local_target("cpu"))


@pytest.mark.parametrize("optimizer", ["adamw_8bit", "paged_adamw_8bit", "paged_adamw"])
def test_a_bitsandbytes_optimizer_over_fsdp_on_two_processes_is_refused_at_start(tmp_path, monkeypatch, optimizer):
    from mmtune.errors import ConfigError

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError) as e:
        _resolve(_config(tmp_path, train={"strategy": "fsdp", "optimizer": optimizer}))
    assert "does not have a sharding strategy registered" in str(e.value)
    assert e.value.where == "train.optimizer" and "train.optimizer=adamw" in e.value.fix
    assert "train.strategy=ddp" in e.value.fix
    # what the fix offers resolves
    assert _resolve(_config(tmp_path, train={"strategy": "fsdp", "optimizer": "adamw"})).strategy == "fsdp"
    assert _resolve(_config(tmp_path, train={"strategy": "ddp", "optimizer": optimizer})).strategy == "ddp"
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process: FSDP2 keeps plain tensors, the update runs (trained, 2 steps)
    assert _resolve(_config(tmp_path, train={"strategy": "fsdp", "optimizer": optimizer})).strategy == "fsdp"


def test_the_doctor_says_it_too(tmp_path, monkeypatch):
    from mmtune.doctor.runner import run_doctor

    monkeypatch.setenv("WORLD_SIZE", "2")
    _config(tmp_path, train={"strategy": "fsdp", "optimizer": "adamw_8bit"})
    rep = run_doctor(tmp_path / "run.yaml", [], None, only=["MM012"])  # a check that needs the resolved run
    errors = [f for f in rep.findings if f.severity == "error"]
    assert [f.code for f in errors] == ["MM098"], errors  # the resolved run cannot be built: said, with its fix
    assert "bitsandbytes' optimizer kernels step plain tensors" in errors[0].message


# ----------------------------------------------------------------------------- the scheduler, once per update
# https://github.com/huggingface/accelerate/issues/662, https://github.com/huggingface/accelerate/issues/1382,
# https://github.com/huggingface/accelerate/issues/2926, https://github.com/huggingface/transformers/pull/24088,
# https://github.com/jzhang38/EasyContext/issues/21: a scheduler passed through `accelerator.prepare` steps
# num_processes times per optimizer step, so warmup ends early and the decay reaches its end halfway on 2 GPUs.
# mmtune never prepares the scheduler (a torch LambdaLR over optimizer steps) and steps it once per update: the
# scheduler has counted exactly the updates, whatever the accumulation.
def test_the_scheduler_is_torchs_own_and_counts_optimizer_steps(tmp_path):
    from torch.optim.lr_scheduler import LambdaLR

    from mmtune.build import build_run
    from mmtune.train.loop import train

    run = build_run(_config(tmp_path, train={"max_steps": 3, "grad_accum": 2, "warmup_steps": 1}))
    assert type(run.scheduler) is LambdaLR  # not accelerate's AcceleratedScheduler
    train(run)
    assert run.scheduler.last_epoch == 3
    assert [r["step"] for r in _rows(Path(run.cfg.output_dir))] == [1, 2, 3]


# ----------------------------------------------------------------------------- weight decay only where asked
# https://github.com/facebookresearch/bitsandbytes/issues/13 (8-bit Adam's default weight_decay differs from AdamW's
# and changed results), https://github.com/Lightning-AI/lit-llama/issues/254, https://github.com/oumi-ai/oumi/pull/341:
# decay applied to norms and biases, or a library default (torch AdamW and bitsandbytes' AdamW8bit both default
# to weight_decay=0.01) applied though the config said nothing. Each group carries its own weight_decay: the
# config's on matrices, 0 on 1-D tensors (norms, biases), 0 everywhere by default.
def _decay_by_rank(run) -> dict[int, set[float]]:
    out: dict[int, set[float]] = {}
    for g in run.optimizer.param_groups:
        for p in g["params"]:
            out.setdefault(p.ndim, set()).add(g["weight_decay"])
    return out


@pytest.mark.parametrize("optimizer", ["adamw", "adamw_8bit"])
def test_weight_decay_is_the_configs_on_matrices_and_never_a_library_default(tmp_path, optimizer):
    if optimizer != "adamw":
        pytest.importorskip("bitsandbytes")
    from mmtune.build import build_run

    lora = build_run(_config(tmp_path, "lora", train={"optimizer": optimizer}))
    assert _decay_by_rank(lora) == {2: {0.0}}  # the default 0, not the optimizer class's 0.01
    full = build_run(_config(tmp_path, "full", adapter={"method": "full"},
                             train={"optimizer": optimizer, "weight_decay": 0.1}))
    assert _decay_by_rank(full) == {2: {0.1}, 1: {0.0}}  # norms and biases never decayed


# ----------------------------------------------------------------------------- grad_norm above max_grad_norm
# https://github.com/hiyouga/LlamaFactory/issues/3996, https://github.com/hiyouga/LlamaFactory/issues/7710,
# https://github.com/verl-project/verl/issues/2282, https://github.com/pytorch/torchtitan/issues/1500: "max_grad_norm
# does not work: grad_norm is still above it". The logged norm is the one before clipping (what clip_grad_norm_
# returns); the update is clipped. Pinned: step 1 logs the same norm at max_grad_norm 1e-3 and 10, and the clipped run
# moved less (its step-2 loss is nearer step 1's). train.max_grad_norm's description now says so (docs/config.md).
def test_the_logged_grad_norm_is_before_clipping_and_the_update_is_clipped(tmp_path):
    from mmtune.build import build_run
    from mmtune.train.loop import train

    rows = {}
    for clip in (1e-3, 10.0):
        cfg = _config(tmp_path, f"clip{clip}", train={"max_grad_norm": clip, "scheduler": "constant"})
        train(build_run(cfg))
        rows[clip] = _rows(Path(cfg.output_dir))
    tight, loose = rows[1e-3], rows[10.0]
    assert tight[0]["grad_norm"] == pytest.approx(loose[0]["grad_norm"], rel=1e-6)
    assert 1e-3 < tight[0]["grad_norm"] < 10.0
    assert abs(tight[1]["loss"] - tight[0]["loss"]) < abs(loose[1]["loss"] - loose[0]["loss"])


def test_max_grad_norm_is_described_as_clipping_with_the_norm_logged_before_it():
    from mmtune.config.schema import TrainConfig

    text = TrainConfig.model_fields["max_grad_norm"].description or ""
    assert "before clipping" in text and "null" in text


# ----------------------------------------------------------------------------- optimizers mmtune does not offer
# https://github.com/huggingface/transformers/issues/11612, https://github.com/huggingface/transformers/issues/7789,
# https://github.com/kohya-ss/sd-scripts/issues/342: Adafactor's relative_step / lr combinations fail inside the
# optimizer or the scheduler once training starts. mmtune offers AdamW (torch or bitsandbytes) and SGD; another name
# is a config error before anything loads, naming the key and the choices.
@pytest.mark.parametrize("name", ["adafactor", "lion_8bit", "schedule_free_adamw"])
def test_an_optimizer_mmtune_does_not_offer_is_a_config_error_with_the_choices(tmp_path, name):
    from mmtune.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        _config(tmp_path, overrides=[f"train.optimizer={name}"])
    assert "train.optimizer" in str(e.value) and "'adamw'" in str(e.value) and name in str(e.value)
