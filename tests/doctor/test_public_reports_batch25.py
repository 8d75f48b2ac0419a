"""Broken setups from the twenty-fifth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 25:
packing, long context and position ids"): packed rows under FlashAttention-2, Qwen's YaRN recipe for long context,
sliding-window attention under SDPA, Qwen2-VL's legacy "mrope" rope type. Rebuilt on the tiny twins; the misses are
fixed (a packed micro-batch of several rows under FA2, MM027 ignoring a static RoPE scaling), the rest pinned.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from doctor_helpers import context_for, model_folder, run_codes  # noqa: E402


def _encoded(name, tmp_path, **overrides):
    """test_packing's records on a tiny model: (model, collator, encoded items)."""
    from tests.data.test_packing import _setup

    return _setup(name, tmp_path, **overrides)


def _loss(model, batch):
    from mmtune.loss import loss_sum

    with __import__("torch").no_grad():
        total, n = loss_sum(model, batch)
    return float(total / n), int(n)


def _text_positions(batch):
    pos = batch["position_ids"]
    return pos[0] if pos.dim() == 3 else pos  # M-RoPE (4, rows, tokens): row 0 holds the text positions


# ----------------------------------------------------------------------------- packed rows under FlashAttention-2
# https://github.com/huggingface/trl/pull/3526, https://github.com/OpenRLHF/OpenRLHF/issues/377,
# https://github.com/huggingface/transformers/issues/38007: transformers' FA2 reads packed records from position_ids
# only in a one-row batch ("flattened sequences only"); two packed rows per micro-batch ran plain causal attention
# over each row, every record attending to the records packed before it. Now a micro-batch's rows are joined.
@pytest.mark.parametrize("name", ["tiny/qwen2", "tiny/qwen2-vl"])
def test_a_packed_micro_batch_under_fa2_is_one_row_fa2_reads_records_from(name, tmp_path):
    from transformers.modeling_flash_attention_utils import _is_packed_sequence

    from mmtune.compat.rope_index import rope_index_of
    from mmtune.data.packing import PackedRows, joins_rows

    model, collate, items = _encoded(name, tmp_path)
    rope = rope_index_of(model)
    # unpacked batches carry no position_ids: the model makes its own (Qwen2-VL's 3-D ones never reach FA2 as
    # "packed": https://github.com/QwenLM/Qwen3.8/issues/104, https://github.com/huggingface/transformers/pull/47342)
    assert "position_ids" not in collate(items)
    rows = [[0, 1, 2], [3]]  # two rows of one micro-batch (train.micro_batch_size=2)

    per_row = collate(PackedRows(items, rope, join=joins_rows("sdpa")).__getitems__(rows))
    assert per_row["input_ids"].shape[0] == 2
    # what FA2 would do with it: no varlen, so records see each other (SDPA masks each row's records itself)
    assert not _is_packed_sequence(_text_positions(per_row), batch_size=2)

    joined = collate(PackedRows(items, rope, join=joins_rows("flash_attention_2")).__getitems__(rows))
    assert joined["input_ids"].shape[0] == 1 and "attention_mask" not in joined
    assert _is_packed_sequence(_text_positions(joined), batch_size=1)
    assert joined["input_ids"].shape[1] == sum(int(it["input_ids"].shape[0]) for it in items)
    # joining is exact: the same loss over the same answer tokens as the unpacked batch (SDPA on this CPU)
    loss0, n0 = _loss(model, collate(items))
    loss1, n1 = _loss(model, joined)
    assert n1 == n0 and abs(loss1 - loss0) < 1e-5, (loss0, loss1)


def test_the_packing_decision_says_fa2_rows_are_joined():
    from mmtune.config.schema import RunConfig
    from mmtune.models.families import get_family
    from mmtune.resolve.decisions import decide_packing

    cfg = RunConfig.model_validate({"model": {"name": "tiny/qwen2"}, "data": {"packing": True, "max_length": 512},
                                    "train": {"micro_batch_size": 4}})
    family = get_family("qwen2")
    fa2 = decide_packing(cfg, family, "flash_attention_2")
    assert "joined as one sequence of up to 2048 tokens" in fa2.value and "one-row batch" in fa2.reason
    assert "joined" not in decide_packing(cfg, family, "sdpa").value
    one = cfg.model_copy(update={"train": cfg.train.model_copy(update={"micro_batch_size": 1})})
    assert "joined" not in decide_packing(one, family, "flash_attention_2").value


# ----------------------------------------------------------------------------- MM027 and a static RoPE scaling
# https://github.com/unslothai/unsloth/issues/3083, https://github.com/ggml-org/llama.cpp/pull/10698,
# https://github.com/hiyouga/LlamaFactory/pull/8101: Qwen's card extends 32k to 128k with `rope_scaling: {type: yarn,
# factor: 4, original_max_position_embeddings: 32768}`, max_position_embeddings left at 32768. MM027 read only
# max_position_embeddings: a false warning with the fix "data.max_length=32768" for exactly the run YaRN is for.
def _mm027(tmp_path, name, rope, max_length, tiny="tiny/qwen2", **tree):
    folder = model_folder(tmp_path, tiny, name, config_json={"rope_scaling": rope, "max_position_embeddings": 2048})
    data = {"train": "synthetic:counting", "max_length": max_length, **tree.pop("data", {})}
    rep = run_codes(context_for(tmp_path, {"model": {"name": str(folder)}, "data": data, **tree}), "MM027")
    return [f for f in rep.findings if f.code == "MM027"]


def test_mm027_reads_the_window_qwens_yarn_recipe_stretches_to(tmp_path):
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    assert _mm027(tmp_path, "a", yarn, 6144) == []
    (past,) = _mm027(tmp_path, "b", yarn, 9000)
    assert past.fix == "data.max_length=8192" and "yarn x4 from 2048 = 8192" in past.message


def test_mm027_still_warns_past_an_unscaled_or_already_stretched_window(tmp_path):
    (plain,) = _mm027(tmp_path, "a", None, 6144)
    assert plain.fix == "data.max_length=2048"
    # a linear factor without original_max_position_embeddings: the config already states the stretched window
    # (chinese-alpaca-2-13b-16k: 16384 and linear 4, https://github.com/hiyouga/LlamaFactory/issues/1298)
    (linear,) = _mm027(tmp_path, "b", {"type": "linear", "factor": 4.0}, 6144)
    assert linear.fix == "data.max_length=2048"


# https://github.com/vllm-project/vllm/pull/25384, https://github.com/vllm-project/vllm/issues/10293: YaRN on an M-RoPE
# model (Qwen-VL's long-video recipe: rope_scaling yarn with mrope_section). transformers builds and runs it; MM027
# reads its stretched window as for a text model.
def test_yarn_with_mrope_sections_builds_runs_and_counts_its_window(tmp_path):
    import torch

    from mmtune.models.tiny import build_tiny, tiny_config_and_processor

    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "mrope_section": [2, 3, 3],
            "rope_theta": 10000.0}
    text = tiny_config_and_processor("tiny/qwen2-vl")[0].text_config.to_dict()
    model, _ = build_tiny("tiny/qwen2-vl", text_config={**text, "rope_parameters": yarn})
    assert model.config.text_config.rope_parameters["rope_type"] == "yarn"
    assert torch.isfinite(model(input_ids=torch.arange(1, 21)[None]).logits).all()
    # written where the decoder reads it (text_config.rope_parameters), its window counts and MM238 is silent
    folder = model_folder(tmp_path, "tiny/qwen2-vl", "vl")
    raw = json.loads((folder / "config.json").read_text())
    raw["text_config"]["rope_parameters"] = yarn
    (folder / "config.json").write_text(json.dumps(raw))
    ctx = context_for(tmp_path, {"model": {"name": str(folder)}, "data": {"train": "synthetic:counting", "max_length": 6144}})
    assert run_codes(ctx, "MM027", "MM238").findings == []


# https://github.com/sgl-project/sglang/pull/26187, https://github.com/huggingface/text-generation-inference/issues/2909:
# a YaRN entry written where the model does not read it is silently dropped. A VLM folder saved by transformers 5 has
# a text_config with its own rope_parameters; the card's `rope_scaling` added at the top of config.json stays on the
# outer config, and the decoder runs unscaled. MM238 (new) says so.
def test_mm238_a_top_level_rope_scaling_the_decoder_never_reads(tmp_path):
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "mrope_section": [2, 3, 3]}
    folder = model_folder(tmp_path, "tiny/qwen2-vl", "vl", config_json={"rope_scaling": yarn, "max_position_embeddings": 2048})
    ctx = context_for(tmp_path, {"model": {"name": str(folder)}, "data": {"train": "synthetic:counting", "max_length": 6144}})
    rep = run_codes(ctx, "MM027", "MM238")
    (dropped,) = [f for f in rep.findings if f.code == "MM238"]
    assert dropped.severity == "error" and "text_config" in dropped.fix and "(default)" in dropped.message
    assert [f.fix for f in rep.findings if f.code == "MM027"] == ["data.max_length=2048"]  # the window it really has
    plain = model_folder(tmp_path, "tiny/qwen2-vl", "plain", config_json={"rope_scaling": {"type": "mrope",
                                                                                           "mrope_section": [2, 3, 3]}})
    ctx = context_for(tmp_path, {"model": {"name": str(plain)}, "data": {"train": "synthetic:counting"}})
    assert run_codes(ctx, "MM238").findings == []  # the legacy "mrope" name is no scaling


# https://github.com/unslothai/unsloth/issues/1016, https://github.com/JIA-Lab-research/LongLoRA/issues/151,
# https://github.com/meta-llama/llama/issues/953: "the current text generation call will exceed the model's predefined
# maximum length": the eval prompt (up to data.max_length) plus eval.max_new_tokens runs past the context.
def test_mm027_says_when_eval_generation_runs_past_the_context(tmp_path):
    (gen,) = _mm027(tmp_path, "a", None, 2000, data={"eval": "synthetic:counting"}, eval={"max_new_tokens": 256})
    assert gen.where == "eval.max_new_tokens" and gen.fix == "eval.max_new_tokens=48"


# ----------------------------------------------------------------------------- sliding-window attention under SDPA
# https://github.com/hiyouga/LlamaFactory/issues/7063, https://github.com/hiyouga/LlamaFactory/issues/7096,
# https://github.com/gensyn-ai/rl-swarm/issues/52: "Sliding Window Attention is enabled but not implemented for
# `sdpa`; unexpected results may be encountered". transformers 5 builds the window into the SDPA mask; with
# packing, each record still sees only itself within the window.
def test_sliding_window_under_sdpa_is_applied_and_packing_stays_exact(tmp_path):
    from mmtune.data.packing import pack_row

    window = {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0}
    model, collate, items = _encoded("tiny/qwen2", tmp_path, attn_implementation="sdpa", **window)
    assert model.config.layer_types[0] == "sliding_attention"
    loss0, n0 = _loss(model, collate(items))
    loss1, n1 = _loss(model, collate([pack_row(items[:3]), pack_row(items[3:])]))
    assert n1 == n0 and abs(loss1 - loss0) < 1e-5, (loss0, loss1)
    eager, collate_e, _ = _encoded("tiny/qwen2", tmp_path, attn_implementation="eager", **window)
    assert abs(_loss(eager, collate_e(items))[0] - loss0) < 1e-5  # SDPA applies the window as eager does
    full, collate_f, _ = _encoded("tiny/qwen2", tmp_path, attn_implementation="sdpa")
    assert abs(_loss(full, collate_f(items))[0] - loss0) > 1e-4  # and the window bites on these records


# ----------------------------------------------------------------------------- Qwen2-VL's legacy "mrope" rope type
# https://github.com/huggingface/transformers/issues/33401, https://github.com/QwenLM/Qwen3-VL/issues/209,
# https://github.com/vllm-project/vllm/issues/8388: `rope_scaling: {type: mrope, mrope_section}` read as another
# rope type (KeyError, "Unrecognized keys in rope_scaling", `assert "factor" in rope_scaling`).
def test_a_legacy_mrope_config_loads_with_its_sections(tmp_path):
    from mmtune.models.model_config import load_hf_config

    folder = model_folder(tmp_path, "tiny/qwen2-vl", config_json={"rope_scaling": {"type": "mrope",
                                                                                   "mrope_section": [2, 3, 3]}})
    rope = load_hf_config(str(folder)).get_text_config().rope_parameters
    assert rope["rope_type"] == "default" and rope["mrope_section"] == [2, 3, 3]
