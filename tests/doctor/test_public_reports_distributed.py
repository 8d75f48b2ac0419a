"""Public bug reports, batch 9: distributed training and quantization (docs/doctor.md, the section of that name).

Each broken setup of a public thread rebuilt on a tiny twin: the misses fixed (each test fails without its fix) and
the rows that are impossible by construction pinned."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from doctor_helpers import TINY_VL

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
from torchrun import failure, launch, torchrun_cmd  # noqa: E402


def _mixed_records(folder: Path, n: int = 8) -> Path:
    """Image records and text-only records, alternating (a VQA set with some text-only turns)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        if i % 2 == 0:
            Image.new("RGB", (64, 64), (20 * i, 200, 100)).save(folder / f"img{i}.png")
            content = [{"type": "image", "path": f"img{i}.png"}, {"type": "text", "text": "What colour is it?"}]
        else:
            content = [{"type": "text", "text": f"What is {i} plus one?"}]
        rows.append({"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": str(i + 1)}]})
    path = folder / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ----------------------------------------------------------------------------- LoRA on the vision tower under DDP
# https://github.com/hiyouga/LlamaFactory/issues/5680 (Qwen2-VL, LoRA on every linear with the vision tower unfrozen,
# torchrun: fails after a while), https://github.com/huggingface/trl/issues/6617 (a VLM's tower trainable beside
# text-only batches: DDP's reducer error that does not name the cause). mmtune set DDP find_unused_parameters only for
# towers / projectors trained in full, not for LoRA placed on their layers, and the doctor's MM013 warning told the user
# "mmtune sets find_unused_parameters for mixed-modality data". On 2 gloo ranks the tiny Qwen2-VL with LoRA on
# `vision:qkv` stopped at its second step: "Expected to have finished reduction in the prior iteration before starting
# a new one. This error indicates that your module has parameters that were not used in producing loss".

@pytest.mark.slow  # ~25 s on 2 cores: two ranks start, load and train 3 steps
@pytest.mark.distributed
def test_lora_on_the_vision_tower_under_ddp_trains_on_mixed_records(tmp_path):
    data = _mixed_records(tmp_path / "data")
    cfg = {"output_dir": str(tmp_path / "run"), "model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": False},
           "data": {"train": str(data), "max_length": 256},
           "adapter": {"method": "lora", "r": 4, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "vision:qkv"]},
           "train": {"max_steps": 3, "micro_batch_size": 1, "grad_accum": 1, "lr": 1e-3, "precision": "fp32",
                     "device": "cpu", "warmup_steps": 1, "seed": 0},
           "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = launch(lambda port: torchrun_cmd(port, "-m", "mmtune.cli", "train", str(path), "--skip-checks"),
                 timeout=600, env=env)
    assert out.returncode == 0, failure(out)
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "train"]
    assert steps == [1, 2, 3]
    decisions = json.loads((tmp_path / "run" / "summary.json").read_text())["decisions"]
    assert any("find_unused_parameters=True: vision" in d for d in decisions), decisions


def test_ddp_unused_components_count_lora_on_a_tower_but_not_on_the_decoder():
    """The rule the run applies (build.ddp_unused_components), on the adapted tiny twin itself: LoRA on the vision
    blocks names the vision component, LoRA on the decoder alone names nothing (DDP's cheaper default kept)."""
    from mmtune.build import ddp_unused_components
    from mmtune.config.loader import validate
    from mmtune.doctor.pieces import build_adapted
    from mmtune.resolve import local_target, resolve_run

    def adapted(tree):
        return build_adapted(resolve_run(validate(tree), local_target("cpu")))

    vision = adapted({**TINY_VL, "adapter": {"target_modules": ["q_proj", "vision:qkv"]}})
    assert ddp_unused_components(vision.loaded.family, vision.result.model) == ["vision"]
    decoder = adapted(TINY_VL)
    assert ddp_unused_components(decoder.loaded.family, decoder.result.model) == []


def test_mm013_lora_on_the_tower_with_mixed_records_is_handled_not_a_warning(doctor):
    rep = doctor({**TINY_VL, "adapter": {"target_modules": ["q_proj", "vision:qkv"]}}, "MM013")
    assert rep.codes("warning") == set() and rep.errors == [], rep.findings
    assert "find_unused_parameters=True" in rep.findings[0].message and "LoRA" in rep.findings[0].message


# ----------------------------------------------------------------------------- more processes than GPUs
# https://github.com/tatsu-lab/stanford_alpaca/issues/67, https://github.com/yunqing-me/WatermarkDM/issues/8,
# https://github.com/HRNet/HRNet-Semantic-Segmentation/issues/171 ("CUDA error: invalid device ordinal" with
# --nproc_per_node above the GPUs), https://github.com/NVIDIA/Megatron-LM/issues/661,
# https://github.com/facebookresearch/fairchem/issues/597 ("Duplicate GPU detected : rank 1 and rank 0 both on CUDA
# device"). accelerate 1.15 maps LOCAL_RANK modulo the GPU count, so two ranks share a GPU and NCCL refuses them at the
# first collective, after the model was read. The CPU machine has no GPU: torch's two answers are patched, as the
# CUDA_VISIBLE_DEVICES test of batch 4 does; the rest is local_target as `mmtune train` calls it.

def test_more_processes_per_node_than_gpus_is_refused_at_start(monkeypatch):
    import torch

    from mmtune.errors import ConfigError
    from mmtune.resolve import local_target

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(ConfigError) as e:
        local_target("auto")
    assert "4 processes" in str(e.value) and "sees 2 GPU(s)" in str(e.value) and "Duplicate GPU" in str(e.value)
    assert e.value.where.startswith("LOCAL_WORLD_SIZE") and "--nproc_per_node 2" in e.value.fix
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ConfigError) as e:
        local_target("auto")
    assert "CUDA_VISIBLE_DEVICES='0,1'" in str(e.value) and "CUDA_VISIBLE_DEVICES" in e.value.fix
    # two nodes of 2 processes on 2-GPU machines: fine (the check reaches the GPU's own properties next)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    from mmtune.resolve.launch_env import too_many_processes

    assert too_many_processes(2) is None
    # a launcher that sets only WORLD_SIZE (16 processes over two 8-GPU nodes) is not judged by it
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    monkeypatch.setenv("WORLD_SIZE", "16")
    assert too_many_processes(8) is None
    # a CPU run starts as many processes as it likes (gloo)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert local_target("cpu").processes == 4


# ----------------------------------------------------------------------------- uneven batches per rank
# https://github.com/microsoft/PyMarlin/issues/80, https://github.com/Lightning-AI/pytorch-lightning/issues/9851,
# https://github.com/pytorch/pytorch/issues/33148: a rank with fewer batches leaves the others waiting in DDP's
# all-reduce (a hang). mmtune's batch stream is endless (epoch after epoch, to train.max_steps) and each epoch gives
# every rank the same number of micro-batches, also with length grouping and packing.

@pytest.mark.parametrize("kw", [{}, {"lengths": True}, {"lengths": True, "pack": 64}])
def test_every_rank_gets_as_many_micro_batches(kw):
    import random

    from mmtune.data.batches import micro_batches_of_epoch

    lengths = [random.Random(i).randint(5, 60) for i in range(23)]
    args = {"lengths": lengths} if kw.get("lengths") else {}
    if "pack" in kw:
        args["pack"] = kw["pack"]
    for epoch in (0, 1):
        counts = {len(micro_batches_of_epoch(23, seed=0, epoch=epoch, micro_batch_size=2, rank=r, world_size=3, **args))
                  for r in range(3)}
        assert len(counts) == 1 and counts.pop() > 0


# ----------------------------------------------------------------------------- 4-bit on the CPU, its compute dtype
# https://github.com/bitsandbytes-foundation/bitsandbytes/pull/2077, https://github.com/bigcode-project/bigcode-evaluation-harness/issues/192,
# https://github.com/h2oai/h2ogpt/pull/682: BitsAndBytesConfig's bnb_4bit_compute_dtype defaults to float32 ("Input
# type into Linear4bit is torch.float16, but bnb_4bit_compute_dtype=torch.float32 (default). This will lead to slow
# inference or training speed"). https://github.com/huggingface/peft/issues/1149,
# https://github.com/bitsandbytes-foundation/bitsandbytes/issues/1569: prepare_model_for_kbit_training upcasts the
# non-quantized weights to fp32 (more memory than bf16 LoRA). mmtune builds the 4-bit layers with the run's compute
# dtype and keeps the other weights in it (adapter.kbit_upcast=false); with bitsandbytes' CPU backend the tiny twin's
# QLoRA trains its steps here.

def test_qlora_computes_in_the_run_dtype_and_trains_on_the_cpu(tmp_path):
    import torch

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.loop import train

    pytest.importorskip("bitsandbytes")
    tree = {"output_dir": str(tmp_path / "run"), "model": {"name": "tiny/qwen2"},
            "data": {"train": "synthetic:arithmetic", "synthetic_train_size": 8}, "adapter": {"method": "qlora"},
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "precision": "bf16", "device": "cpu"},
            "logging": {"tensorboard": False}}
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(tree))
    run = build_run(load_config(path, []))
    model = run.unwrapped_model()
    four_bit = [m for m in model.modules() if type(m).__name__ == "Linear4bit" and hasattr(m, "compute_dtype")]
    assert four_bit and {m.compute_dtype for m in four_bit} == {torch.bfloat16}
    frozen = {p.dtype for n, p in model.named_parameters() if not p.requires_grad and p.dtype.is_floating_point}
    assert frozen == {torch.bfloat16}  # norms and embeddings not upcast to fp32
    assert run.resolved.decision("adapter.kbit_upcast").value == "false"
    train(run)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2]


# ----------------------------------------------------------------------------- the vision tower kept out of 4-bit
# https://github.com/unslothai/unsloth/issues/1347 (Qwen2-VL answers nonsense only when loaded in 4-bit),
# https://github.com/unslothai/unsloth/pull/4209 (llm_int8_skip_modules not reaching a VLM's tower). mmtune quantizes
# the decoder's linear layers only: the tower, projector and lm_head stay in the compute dtype (the resolved run says
# so; MM004 reports a quantized tower as an error).

def test_qlora_quantizes_the_decoder_only():
    from mmtune.adapters import host_component_of
    from mmtune.config.loader import validate
    from mmtune.doctor.pieces import build_adapted
    from mmtune.resolve import local_target, resolve_run

    pytest.importorskip("bitsandbytes")
    resolved = resolve_run(validate({**TINY_VL, "adapter": {"method": "qlora"}, "train": {"precision": "bf16"}}),
                           local_target("cpu"))
    assert "vision/audio/projector/lm_head stay in the compute dtype" in resolved.decision("adapter.method").reason
    a = build_adapted(resolved)
    four_bit = {host_component_of(a.loaded.family, n + ".weight") for n, m in a.result.model.named_modules()
                if type(m).__name__ == "Linear4bit"}
    assert four_bit == {"decoder"}
