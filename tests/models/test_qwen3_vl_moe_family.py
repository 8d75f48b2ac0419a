"""Qwen3-VL-MoE's own facts beyond the contract tests: the hub names pick it over the dense Qwen3-VL (whose
hub pattern `qwen3-vl` also matches them), and LoRA's default targets stay off the fused experts and the router."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("name,family", [
    ("Qwen/Qwen3-VL-30B-A3B-Instruct", "qwen3_vl_moe"), ("Qwen/Qwen3-VL-30B-A3B-Thinking", "qwen3_vl_moe"),
    ("Qwen/Qwen3-VL-235B-A22B-Instruct", "qwen3_vl_moe"), ("Qwen/Qwen3-VL-8B-Instruct", "qwen3_vl"),
    ("Qwen/Qwen3-VL-4B-Thinking", "qwen3_vl"),
])
def test_hub_names_pick_the_moe_family_only_for_moe_sizes(name, family):
    from mmtune.models.families import family_for_hub_name

    assert family_for_hub_name(name).name == family


def test_embedded_configs_resolve_to_the_family():
    from mmtune.models.configs import embedded, hf_config
    from mmtune.models.families import family_for_config

    for hub_id in ("Qwen/Qwen3-VL-30B-A3B-Thinking", "Qwen/Qwen3-VL-235B-A22B-Instruct"):
        assert family_for_config(hf_config(embedded(hub_id))).name == "qwen3_vl_moe", hub_id


def test_default_lora_wraps_attention_not_experts_or_router():
    """adapter.target_modules=auto on the twin: LoRA on q/k/v/o of every decoder layer; the fused 3-D experts
    and the router (`mlp.gate`, an nn.Linear a bare `gate` name would reach) stay plain and frozen. A guard on the
    whole path (Family.lora_targets -> adapters.py's full names -> peft), which on transformers 5's MoE classes once
    put LoRA where it was not asked (the Qwen3-Omni note in docs/internals.md)."""
    from mmtune.build import build_model_and_adapters
    from mmtune.config import load_config
    from mmtune.resolve import gpu_target, resolve_run

    r = resolve_run(load_config(None, ["model.name=tiny/qwen3-vl-moe"]), gpu_target("a100-80gb"))
    _, result = build_model_and_adapters(r, meta=True)
    wrapped = {n.rsplit(".lora_A", 1)[0] for n, _ in result.model.named_parameters() if ".lora_A." in n}
    leaves = {n.rsplit(".", 1)[1] for n in wrapped}
    assert leaves == {"q_proj", "k_proj", "v_proj", "o_proj"}, leaves
    assert all(".language_model.layers." in n for n in wrapped)
    trainable = [n for n, p in result.model.named_parameters() if p.requires_grad]
    assert not [n for n in trainable if ".mlp." in n], trainable


def test_plan_matches_a_real_cpu_step_on_video(tmp_path):
    """The contract tests plan the twin on images; here a video record (timestamps written as text, the experts'
    grouped matmul in fp32) is planned against a real CPU step of the same micro-batch, as tests/plan/test_moe_plan.py
    does for Qwen3-Omni."""
    import json
    from pathlib import Path

    import yaml

    from mmtune.config import load_config
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    data = Path(__file__).resolve().parents[2] / "recipes" / "data"
    row = json.loads((data / "video_audio_qa.jsonl").read_text().splitlines()[0])
    for m in row["messages"]:  # this family has no audio: the video and a written question
        m["content"] = [c for c in m["content"] if c["type"] != "audio"]
    (tmp_path / "d.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"),
        "model": {"name": "tiny/qwen3-vl-moe", "video_frames": 4, "gradient_checkpointing": True},
        "data": {"train": str(tmp_path / "d.jsonl"), "media_root": str(data), "max_length": 2048},
        "adapter": {"method": "lora", "r": 8, "dropout": 0.0},
        "train": {"max_steps": 1, "micro_batch_size": 1, "grad_accum": 1, "precision": "fp32", "device": "cpu",
                  "scheduler": "constant", "seed": 0},
        "logging": {"tensorboard": False},
    }))
    cfg = load_config(tmp_path / "cfg.yaml", [])
    batch = worst_case_batch(resolve_for_plan(cfg)).micro_batch
    assert "pixel_values_videos" in batch
    res = predict(cfg, plan_eval=False)
    measured = measure_step(cfg, batch).peak_allocated_bytes
    assert abs(res.tensor_peak_bytes - measured) / measured <= 0.02, (res.tensor_peak_bytes, measured)
