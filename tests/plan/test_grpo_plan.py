"""The plan of a GRPO run is the trace of the loop's own GRPO step with its generation phase traced (plan/grpo.py):
G generate calls of the micro-batch's prompts (prompt forward + KV cache to the completion length), then G
training forwards at prompt + completion length, the reference forward when beta > 0. Planned against a real CPU
step of the same batch (tiny Qwen2-VL, real sampling), as the other plan-vs-real tests compare them: the step's
peak, and the generation phase's rise over the state alive around it."""

from __future__ import annotations

import pytest
import torch

from mmtune.config import load_config
from mmtune.plan.batch import Declared

G, C = 4, 16
COMMON = ["model.name=tiny/qwen2-vl", "data.max_length=128", "train.precision=fp32", "train.grad_accum=2",
          "model.gradient_checkpointing=false", "train.device=cpu", "train.objective=grpo",
          f"train.grpo.generations={G}", f"train.grpo.max_completion_length={C}"]
DECLARED = Declared(images=[(112, 112)], tokens=96)  # 80 prompt tokens + 16 completion tokens


@pytest.mark.parametrize("method,beta", [("lora", 0.0), ("full", 0.04)])
def test_grpo_plan_matches_a_real_cpu_step(method, beta):
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    cfg = load_config(None, [*COMMON, f"adapter.method={method}", f"train.grpo.beta={beta}"])
    b = worst_case_batch(resolve_for_plan(cfg), declared=DECLARED).micro_batch
    assert b["input_ids"].shape == (1, 96 - C)  # the prompt alone: the completions are sampled in the step
    res = predict(cfg, declared=DECLARED)
    # The real step samples (temperature 1, random weights): its completions run to the full length here, as the
    # plan assumes (a shorter one would make the real peak lower and this comparison fail, deterministically).
    measured = measure_step(cfg, b).peak_allocated_bytes
    assert abs(res.tensor_peak_bytes - measured) / measured <= 0.02, (res.tensor_peak_bytes, measured)
    g = res.generation
    assert g["sequences_per_micro_batch"] == G and g["prompt_tokens"] == 96 - C and g["max_completion_length"] == C
    assert res.peak_phase.startswith("training") and g["training_peak_bytes"] == res.tensor_peak_bytes
    assert 0 < g["generation_peak_bytes"] < g["training_peak_bytes"]
    # Step time includes G generate calls per micro-batch, each C bandwidth-bound decode steps.
    assert res.step_time_s == pytest.approx(g["training_s_per_step"] + g["generation_s_per_step"])
    assert g["generation_s_per_step"] >= 2 * G * C * g["decode_s_per_token"]
    if beta > 0:  # full fine-tuning: the frozen reference copy held as weights
        assert res.breakdown["weights"] >= 0.9 * res.breakdown["trainable_parameters"]
        assert any("frozen reference copy" in d for d in res.decisions)


def test_generation_phase_matches_a_real_generate():
    """The planned rise of live tensors during one generation call (prompt forward, KV cache, sampler) against
    the CPU allocator's peak over the objective's real sampling (G generate calls) on the same prompts."""
    from mmtune.build import build_model_and_adapters, run_objective
    from mmtune.compat.torch_internals import cpu_allocator_peak
    from mmtune.data.prompts import REFS
    from mmtune.loss import model_inputs
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.planner import predict, resolve_for_plan
    from mmtune.resolve import local_target, resolve_run

    cfg = load_config(None, [*COMMON, "adapter.method=lora"])
    b = worst_case_batch(resolve_for_plan(cfg), declared=DECLARED).micro_batch
    planned = predict(cfg, declared=DECLARED).generation["generation_above_state_bytes"]
    resolved = resolve_run(cfg, local_target("cpu"), for_training=True)
    torch.manual_seed(cfg.train.seed)
    _, adapters = build_model_and_adapters(resolved, device=torch.device("cpu"))
    objective = run_objective(cfg, adapters.model, resolved)
    prompt = {k: v for k, v in model_inputs(b).items() if k != REFS}
    out = []
    measured = cpu_allocator_peak(lambda: out.append(objective._sample(adapters.model, prompt)))
    assert [tuple(c.shape) for c in out[0]] == [(1, C)] * G  # every completion at the full length, as planned
    assert abs(planned - measured) / measured <= 0.02, (planned, measured)


def test_search_may_lower_g_when_nothing_else_fits():
    """--search keeps G while some micro-batch fits; only then it tries fewer completions per prompt."""
    from mmtune.plan.search import grpo_generation_candidates

    assert grpo_generation_candidates(8) == [4, 2]
    assert grpo_generation_candidates(2) == []
