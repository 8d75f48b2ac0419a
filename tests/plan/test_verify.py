"""`mmtune plan --verify`: its refusals without CUDA, and its measurement on this CPU with a tiny twin."""

import pytest
import torch

from mmtune.config import load_config
from mmtune.errors import MMTuneError

COMMON = ["model.name=tiny/qwen2", "data.max_length=128", "train.precision=fp32", "train.grad_accum=2",
          "adapter.method=lora"]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: --verify runs for real")


@no_cuda
def test_cli_verify_without_cuda_says_it_needs_one(tmp_path):
    from typer.testing import CliRunner

    from mmtune.cli import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  name: tiny/qwen2\n")
    for extra in ([], ["--json"]):
        out = CliRunner().invoke(app, ["plan", str(cfg), "--gpu", "a100-40gb", "--verify", *extra],
                                 env={"COLUMNS": "300"})
        assert out.exit_code == 2, out.output
        assert "needs a CUDA GPU" in out.output and "without --verify" in out.output


@no_cuda
def test_verify_refuses_before_planning_without_cuda():
    from mmtune.plan.verify import verify

    with pytest.raises(MMTuneError, match="CUDA"):
        verify(load_config(None, COMMON), gpu="a100-40gb")


def test_measure_run_on_cpu_matches_the_plan_and_times_the_steps():
    """The measurement function itself, on this CPU: the planned tensor peak of the same run (planned for this
    machine) against the CPU allocator's measured peak, and `steps` timed steps."""
    from mmtune.plan.verify import verify

    v = verify(load_config(None, COMMON), gpu=None, device="cpu", warmup=2, steps=2)
    m = v.measured
    assert m["device"] == "cpu" and m["peak_reserved_bytes"] is None
    assert len(m["step_times_s"]) == 2 and all(t > 0 for t in m["step_times_s"])
    assert abs(v.error_pct["peak_allocated"]) <= 2.0, v
    assert v.predicted["step_time_s"] > 0 and v.error_pct["step_time"] is None  # a CPU time is not a GPU's


def test_random_weights_build_from_the_config_without_weights_files(tmp_path):
    """A model known only by its config (here a folder with config.json and tokenizer, no weights) is built at
    its real architecture with random weights on the device."""
    from mmtune.build import build_model_and_adapters
    from mmtune.resolve import local_target, resolve_run
    from tests.train.conftest import config_only_folder

    folder = config_only_folder(tmp_path / "m", layers=3, weights_stub=True)
    cfg = load_config(None, COMMON[1:] + [f"model.name={folder}"])
    loaded, result = build_model_and_adapters(resolve_run(cfg, local_target("cpu")), device="cpu",
                                              random_weights=True)
    assert any("random weights" in d for d in loaded.decisions)
    assert len(loaded.model.model.layers) == 3
    assert all(p.device.type == "cpu" and torch.isfinite(p).all() for p in result.model.parameters())


def test_layers_cut_the_decoder_of_the_plan_and_of_the_built_model():
    from mmtune.models.model_config import DECODER_LAYERS, meta_config

    cfg = load_config(None, ["model.name=Qwen/Qwen2.5-7B-Instruct"])
    assert meta_config(cfg).num_hidden_layers == 28
    token = DECODER_LAYERS.set(3)
    try:
        c = meta_config(cfg)
    finally:
        DECODER_LAYERS.reset(token)
    assert c.num_hidden_layers == 3 and len(c.layer_types) == 3
    assert meta_config(cfg).num_hidden_layers == 28  # only inside the context
    from mmtune.plan.verify import verify

    with pytest.raises(MMTuneError, match="--layers"):
        verify(load_config(None, COMMON), gpu=None, device="cpu", layers=0)



def test_measure_run_runs_the_planned_loss_implementation(tmp_path):
    """`plan --verify` measures the step the plan traced: with train.loss_impl=chunked the measured step uses the
    chunked loss too. A 16k vocabulary makes the difference large (each copy of the full loss's fp32 logits of a
    128-token row is 8 MiB, more than the rest of the step), so measuring the full loss misses the plan by ~80 %."""
    from mmtune.plan.verify import verify
    from tests.train.conftest import config_only_folder

    folder = config_only_folder(tmp_path / "m", layers=None, vocab_size=16384, weights_stub=True)
    cfg = load_config(None, COMMON[1:] + [f"model.name={folder}", "train.loss_impl=chunked"])
    v = verify(cfg, gpu=None, device="cpu", warmup=2, steps=1)
    assert abs(v.error_pct["peak_allocated"]) <= 2.0, v
