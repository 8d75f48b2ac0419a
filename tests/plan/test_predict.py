"""The planner against independent measurement on tiny models, the CLI, search, and bad input."""

import json

import pytest

from mmtune.config import load_config
from mmtune.plan.batch import Declared

COMMON = ["data.max_length=256", "train.precision=fp32", "train.grad_accum=2"]


def _cfg(*over):
    return load_config(None, COMMON + list(over))


@pytest.mark.parametrize("over,declared", [
    (["model.name=tiny/qwen2", "adapter.method=lora", "model.gradient_checkpointing=true"], Declared()),
    (["model.name=tiny/qwen2-vl", "adapter.method=qlora", "model.gradient_checkpointing=false"],
     Declared(images=[(112, 112)])),
])
def test_planned_peak_matches_measured_on_cpu(over, declared):

    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    cfg = _cfg(*over)
    res = predict(cfg, declared=declared)
    batch = worst_case_batch(resolve_for_plan(cfg), declared=declared).micro_batch
    measured = measure_step(cfg, batch).peak_allocated_bytes
    err = abs(res.tensor_peak_bytes - measured) / measured
    assert err <= 0.02, (res.tensor_peak_bytes, measured)
    assert res.breakdown["weights"] > 0 and res.breakdown["trainable_parameters"] > 0


def test_gpu_plan_adds_allocator_and_cuda_overheads_and_json_fields():
    from mmtune.plan.planner import predict

    cfg = _cfg("model.name=tiny/qwen2-vl", "train.precision=bf16")
    r = predict(cfg, gpu="T4", declared=Declared(images=[(112, 112)]))
    assert r.precision == "fp16"  # T4 has no bf16: the plan follows train's decision
    assert r.peak_allocated_bytes >= r.tensor_peak_bytes
    assert r.peak_reserved_bytes >= r.peak_allocated_bytes
    assert r.process_total_bytes > r.peak_reserved_bytes  # CUDA context + workspace
    d = json.loads(r.to_json())
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "breakdown", "fits", "step_time_s",
                "process_total_bytes", "peak_phase", "media_tokens"):
        assert key in d
    assert d["media_tokens"]["image"]["max"] == 16  # 112x112 -> 4x4 merged patches
    assert d["fits"] is True and d["step_time_s"] > 0


def test_distributed_shards_state_per_gpu():
    from mmtune.plan.planner import predict

    cfg = _cfg("model.name=tiny/qwen2", "adapter.method=full", "model.gradient_checkpointing=false")
    one = predict(cfg, gpu="a100-40gb")
    z3 = predict(cfg, gpu="a100-40gb", gpus=4, strategy="zero3")
    ddp = predict(cfg, gpu="a100-40gb", gpus=4, strategy="ddp")
    assert ddp.peak_allocated_bytes > one.peak_allocated_bytes  # DDP adds gradient buckets
    assert z3.breakdown["gathered_units"] > 0
    assert z3.process_total_bytes > 0 and z3.strategy == "zero3"


def test_search_result_fits_by_the_planner():
    from mmtune.gpus import GPUS
    from mmtune.plan.planner import predict
    from mmtune.plan.search import _with, search

    cfg = _cfg("model.name=tiny/qwen2", "adapter.method=lora", "train.micro_batch_size=1", "train.grad_accum=8",
               "data.max_length=2048")
    big = predict(cfg.model_copy(update={"train": cfg.train.model_copy(update={"micro_batch_size": 8, "grad_accum": 1})}),
                  gpu="t4")
    small = predict(cfg, gpu="t4")
    # A GPU that holds micro-batch 1 but not 8, with the margin rule's headroom (plan/margin.py).
    from mmtune.plan.margin import fits, required_headroom

    mid = (small.process_total_bytes + big.process_total_bytes) // 2
    usable = mid + required_headroom(mid)
    assert fits(small.process_total_bytes, usable) and not fits(big.process_total_bytes, usable)
    gpu = GPUS["t4"].__class__(**{**GPUS["t4"].__dict__, "usable_bytes": usable})
    res = search(cfg, gpu=gpu, micro_batches=(1, 2, 8), methods=["lora"], optimizers=["adamw"], checkpointing=[True])
    assert res.best is not None
    assert res.best.overrides["train.micro_batch_size"] * res.best.overrides["train.grad_accum"] == 8
    again = predict(_with(cfg, res.best.overrides), gpu=gpu)
    assert again.fits
    assert any(c.result is not None and not c.result.fits for c in res.tried)


def test_unknown_gpu_lists_known_ones():
    from mmtune.errors import ConfigError
    from mmtune.plan.planner import predict

    with pytest.raises(ConfigError) as e:
        predict(_cfg("model.name=tiny/qwen2"), gpu="a200")
    assert "h100" in str(e.value)


def test_cli_plan_json(tmp_path):
    from typer.testing import CliRunner

    from mmtune.cli import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  name: tiny/qwen2\ndata:\n  max_length: 128\ntrain:\n  precision: fp32\n")
    out = CliRunner().invoke(app, ["plan", str(cfg), "train.micro_batch_size=2", "--gpu", "l4", "--json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.stdout[out.stdout.index("{"):])
    assert d["gpu_id"] == "l4" and d["batch"]["micro_batch_size"] == 2 and d["batch"]["tokens_per_record"] == 128


def test_embedded_real_configs_have_real_sizes():
    import torch
    from accelerate import init_empty_weights

    from mmtune.models.configs import embedded, hf_config

    spec = embedded("Qwen/Qwen2.5-7B-Instruct")
    assert embedded("qwen2.5-7b-instruct") is spec
    import transformers

    with init_empty_weights():
        m = transformers.AutoModelForCausalLM.from_config(hf_config(spec), dtype=torch.bfloat16)
    n = sum(p.numel() for p in m.parameters())
    assert 7.6e9 < n < 7.65e9  # Qwen2.5-7B: 7.62 B parameters


def test_a_micro_batch_no_machine_could_build_is_refused_naming_its_key():
    """`mmtune plan ... train.micro_batch_size=100000` on an image model: the planner collates that many copies of the
    worst record in host memory to trace them, and died in the CPU allocator ("can't allocate memory: you tried to
    allocate 30105600000 bytes"); 10**12 records raised MemoryError. Refused first, with the key and the sizes."""
    from mmtune.errors import ConfigError
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.planner import resolve_for_plan

    resolved = resolve_for_plan(_cfg("model.name=tiny/qwen2-vl", "train.micro_batch_size=1000000000000"))
    with pytest.raises(ConfigError) as e:
        worst_case_batch(resolved, declared=Declared(images=[(112, 112)]))
    assert e.value.where == "train.micro_batch_size" and "available RAM" in str(e.value)
    assert worst_case_batch(resolve_for_plan(_cfg("model.name=tiny/qwen2-vl")),
                            declared=Declared(images=[(112, 112)])).micro_batch["input_ids"].shape[0] == 1


@pytest.mark.parametrize("declared,words", [
    (Declared(images=[(13500, 13500)]), "decompression bomb"),  # 182 Mpx: 0.5 GB to build were the check gone
    (Declared(audio_seconds=[float("nan")]), "positive seconds"),
    (Declared(images=[(0, 5)]), "no pixels"),
])
def test_declared_media_no_record_could_hold_are_refused(declared, words):
    """`mmtune plan --image 99999x99999` made a 30 GB PIL image and the kernel's out-of-memory killer ended the process
    (and could have taken any other); `--image 0x5` divided by zero in the processor. Refused with the flag."""
    from mmtune.errors import ConfigError
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.planner import resolve_for_plan

    with pytest.raises(ConfigError, match=words) as e:
        worst_case_batch(resolve_for_plan(_cfg("model.name=tiny/qwen2-vl")), declared=declared)
    assert e.value.where == "plan --image/--video/--audio"


def test_declared_media_past_half_the_ram_are_refused_before_any_is_built():
    """A million declared frames (691 GB as RGB): checked on the sizes alone (called directly, so that a regression
    fails here instead of allocating until the kernel kills the test run)."""
    from mmtune.errors import ConfigError
    from mmtune.plan.batch import _check_declared

    with pytest.raises(ConfigError, match="available RAM"):
        _check_declared(Declared(videos=[(10**6, 640, 360)]), 89_478_485)
    _check_declared(Declared(videos=[(8, 640, 360)], audio_seconds=[30.0]), 89_478_485)  # a usual record passes
