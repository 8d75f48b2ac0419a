"""Broken setups from the forty-eighth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 48:
evaluation during training: memory, speed, metrics and choosing the best checkpoint"): a best metric that is never
computed, a direction that keeps the worst checkpoint, a mixture's score read the wrong way, eval sets with no
usable record, and generation that must use the KV cache whatever config.json says. Each is rebuilt on a tiny
twin through what the user runs: the config resolved as `mmtune train` resolves it at start, the doctor's MM028,
a two-step run, `generate_answers` (what evaluation calls).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from doctor_helpers import context_for, run_codes, sums_jsonl


def _tree(tmp_path: Path, **ev) -> dict:
    return {"model": {"name": "tiny/qwen2"}, "output_dir": str(tmp_path / "run"),
            "data": {"train": sums_jsonl(tmp_path, 8), "eval": sums_jsonl(tmp_path, 4), "max_length": 64},
            "train": {"device": "cpu", "max_steps": 2}, "eval": {"every": 1, **ev}}


def _start_refusal(tmp_path: Path, tree: dict):
    """The ConfigError `mmtune train` stops with at start (the run resolved as train resolves it)."""
    from mmtune.config.schema import RunConfig
    from mmtune.errors import ConfigError
    from mmtune.resolve import local_target, resolve_run

    with pytest.raises(ConfigError) as e:
        resolve_run(RunConfig.model_validate(tree), local_target("cpu"))
    return e.value


def _resolved_direction(tree: dict) -> bool:
    from mmtune.config.schema import RunConfig
    from mmtune.resolve import local_target, resolve_run

    return resolve_run(RunConfig.model_validate(tree), local_target("cpu")).greater_is_better


def _mm028(tmp_path: Path, tree: dict) -> list:
    return [f for f in run_codes(context_for(tmp_path, tree), "MM028").findings if f.code == "MM028"]


# ----------------------------------------------------------------------------- a best metric never computed
# https://github.com/huggingface/transformers/pull/31450, https://github.com/hiyouga/LlamaFactory/issues/7906,
# https://github.com/modelscope/ms-swift/issues/4323, https://github.com/urchade/GLiNER/issues/140: "KeyError: The
# `metric_for_best_model` training argument is set to ..., which is not found in the evaluation metrics", hours in.
# mmtune refused a name outside eval.metrics, but with eval.generate=false (loss only, the fast evaluation) a
# generation metric such as exact_match passed, was never computed, and the loop skipped the comparison every
# time: no best checkpoint at all, silently, while the start screen said "best by exact_match".
def test_a_best_metric_generation_never_computes_stops_the_start_and_the_doctor(tmp_path):
    tree = _tree(tmp_path, generate=False, metrics=["exact_match"], best_metric="exact_match")
    err = _start_refusal(tmp_path, tree)
    assert err.where == "eval.best_metric" and "eval.generate=false" in err.what
    assert "eval.generate=true" in err.fix and "eval.best_metric=eval_loss" in err.fix
    found = _mm028(tmp_path, tree)
    assert [f.severity for f in found] == ["error"] and "eval.generate=false" in found[0].message
    # the clean twin: the same loss-only evaluation choosing by eval_loss starts
    ok = _tree(tmp_path, generate=False, metrics=["exact_match"], best_metric="eval_loss")
    assert _resolved_direction(ok) is False and _mm028(tmp_path, ok) == []


# ----------------------------------------------------------------------------- a direction that keeps the worst
# https://github.com/huggingface/transformers/pull/31142 ("after 7h of training I realized that the worst model was
# saved"), https://github.com/nursery42/WenTianSearch/issues/4: greater_is_better contradicting the metric. A config
# with eval.greater_is_better=true (carried over from an accuracy run) and eval_loss kept checkpoint-1, the highest
# loss, as `best` in a two-step run (run: 5.98 kept over 5.85).
@pytest.mark.parametrize("metric, requested", [("eval_loss", True), ("exact_match", False)])
def test_a_direction_that_contradicts_the_metric_is_refused(tmp_path, metric, requested):
    tree = _tree(tmp_path, best_metric=metric, greater_is_better=requested)
    err = _start_refusal(tmp_path, tree)
    assert err.where == "eval.greater_is_better" and "worst" in err.what
    assert "remove eval.greater_is_better" in err.fix
    found = _mm028(tmp_path, tree)
    assert [f.severity for f in found] == ["error"] and found[0].where == "eval.greater_is_better"
    # the direction the metric has, said explicitly, is fine
    assert _resolved_direction(_tree(tmp_path, best_metric=metric, greater_is_better=not requested)) is (not requested)


# ----------------------------------------------------------------------------- a mixture's score read upside down
# The same worst-checkpoint outcome without any setting (https://github.com/huggingface/transformers/pull/31142: a
# per-dataset loss name not recognised as a loss): a mixture whose sources are scored by different lower-is-better
# metrics (mae and rmse, or wer and cer) reports `mixture/score`, and "score" was inferred higher-is-better, so
# eval.best_metric=mixture/score kept the largest error. Now it goes the way its sources' metrics go.
def test_a_mixture_score_of_error_metrics_is_lower_is_better(tmp_path):
    ev = sums_jsonl(tmp_path, 4)
    tree = _tree(tmp_path, best_metric="mixture/score")
    tree["data"]["eval"] = [{"path": ev, "name": "a", "metrics": ["mae"]}, {"path": ev, "name": "b", "metrics": ["rmse"]}]
    assert _resolved_direction(tree) is False
    tree["data"]["eval"] = [{"path": ev, "name": "a", "metrics": ["anls"]}, {"path": ev, "name": "b", "metrics": ["f1"]}]
    assert _resolved_direction(tree) is True
    assert _mm028(tmp_path, tree) == []


# ----------------------------------------------------------------------------- eval sets with nothing to evaluate
# https://github.com/hiyouga/LlamaFactory/issues/8133 and the "eval skipped silently" threads: an eval file that is
# empty, or whose records are all over the length limit, gave no evaluation at all. Pinned: `mmtune train` stops
# before the first step.
def test_an_eval_set_of_only_too_long_records_stops_the_start(tmp_path):
    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.errors import MMTuneError

    long = tmp_path / "long.jsonl"
    long.write_text("".join(json.dumps({"messages": [{"role": "user", "content": "word " * 200},
                                                     {"role": "assistant", "content": "1"}]}) + "\n" for _ in range(3)))
    tree = _tree(tmp_path)
    tree["data"].update(eval=str(long), on_bad_record="skip")
    tree.update(adapter={"method": "lora", "r": 4}, logging={"tensorboard": False})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(tree))
    with pytest.raises(MMTuneError, match="no usable eval record"):
        build_run(load_config(tmp_path / "c.yaml", []))
    assert not (tmp_path / "run" / "summary.json").exists()


# ----------------------------------------------------------------------------- generation without the KV cache
# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/235, https://github.com/unslothai/unsloth/issues/4165,
# https://github.com/EleutherAI/lm-evaluation-harness/issues/2214: generation-based evaluation many times slower
# than training. A model folder whose config.json says `use_cache: false` (saved by a run with gradient
# checkpointing, batch 10) still generates with the cache in evaluation: after the prompt, one token per forward.
def test_evaluation_generates_with_the_kv_cache_whatever_config_json_says(tmp_path):
    from contextlib import nullcontext

    from mmtune.build import build_model_and_adapters
    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record
    from mmtune.evaluate.run_eval import generate_answers
    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2", seed=0)
    model.config.use_cache = False
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    tree = _tree(tmp_path)
    tree["model"] = {"name": str(tmp_path / "m"), "gradient_checkpointing": False}
    resolved = context_for(tmp_path, tree).need("resolved")
    model = build_model_and_adapters(resolved)[0].model
    assert json.loads((tmp_path / "m" / "config.json").read_text())["use_cache"] is False
    widths = []
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    decoder.register_forward_pre_hook(
        lambda mod, args, kw: widths.append((kw.get("input_ids") if kw.get("input_ids") is not None
                                             else kw["inputs_embeds"]).shape[1]), with_kwargs=True)
    record = Record("q", "q.jsonl:1", [{"role": "user", "content": [{"type": "text", "text": "What is 3+4?"}]},
                                       {"role": "assistant", "content": [{"type": "text", "text": "7"}]}])
    generate_answers(model, Encoder.for_run(resolved), [record], device="cpu", dtype=None,
                     pad_id=resolved.pad_token_id, batch_size=1, max_new_tokens=4, autocast=nullcontext)
    # the prompt once, then each new token alone: the cache is used (without it every forward is the whole text)
    assert len(widths) >= 2 and widths[0] > 1 and set(widths[1:]) == {1}, widths


# ----------------------------------------------------------------------------- an eval set larger than the training
# https://github.com/hiyouga/LlamaFactory/issues/6633 (validation 20 minutes to over an hour per evaluation),
# https://github.com/modelscope/ms-swift/issues/7092 (evaluation during Qwen2.5-VL training "very slow"),
# https://github.com/unslothai/unsloth/issues/4165 (generate every 50 steps "very slow"): every evaluation reads
# the whole eval set and generates an answer per record, token by token. A two-step run of 2 records a step with a
# 4-record eval set at eval.every=1 evaluated 8 records with generation for 4 trained, and nothing said so.
def test_mm473_warns_when_evaluation_reads_more_records_than_training(tmp_path):
    tree = _tree(tmp_path)
    tree["train"].update(micro_batch_size=2, grad_accum=1)
    [f] = [f for f in run_codes(context_for(tmp_path, tree), "MM002", "MM473").findings if f.code == "MM473"]
    assert f.severity == "warning" and "reads 8 records per process" in f.message and "training 4" in f.message
    assert "greedy generation of up to" in f.message and f.fix.startswith("data.eval_max_samples=2")
    # the fix it names: a 2-record sample of the eval set, or one evaluation at the end, is silent
    tree["data"]["eval_max_samples"] = 2
    assert not [f for f in run_codes(context_for(tmp_path, tree), "MM002", "MM473").findings if f.code == "MM473"]
    del tree["data"]["eval_max_samples"]
    tree["eval"]["every"] = 2
    assert not [f for f in run_codes(context_for(tmp_path, tree), "MM002", "MM473").findings if f.code == "MM473"]
