"""Broken setups from the tenth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 10: tokenizer,
padding, generation and evaluation"): what evaluation, `mmtune chat` and `mmtune serve` generate and how it is scored.
Each is rebuilt on a tiny Qwen2 saved with save_pretrained and then changed (its tokenizer's eos, its
generation_config.json, its weights); the misses are fixed here and their clean twins left alone.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

from doctor_helpers import sums_jsonl


def _base(folder: Path, eos: str | None = None, generation_eos=None, **config) -> Path:
    """A tiny Qwen2 folder as save_pretrained writes it; `eos` replaces the tokenizer's eos token and
    `generation_eos` the eos_token_id of its generation_config.json (keys as the hub's files have them)."""
    from mmtune.models.tiny import build_tiny

    model, tok = build_tiny("tiny/qwen2", seed=0, tie_word_embeddings=False, **config)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if eos is not None:
        raw = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**raw, "eos_token": eos}))
    if generation_eos is not None:
        raw = json.loads((folder / "generation_config.json").read_text())
        (folder / "generation_config.json").write_text(json.dumps({**raw, "eos_token_id": generation_eos}))
    return folder




def _tree(tmp_path: Path, base: Path, **model) -> dict:
    return {"model": {"name": str(base), "gradient_checkpointing": False, **model},
            "data": {"train": sums_jsonl(tmp_path), "max_length": 64},
            "adapter": {"method": "lora", "r": 4}, "train": {"precision": "fp32", "device": "cpu"}}


def _always_emits(model, token: int) -> None:
    """Weights that make greedy decoding write `token` at every step, whatever the prompt: every embedding
    carries a large constant in dimension 0, the final norm keeps only that dimension, and lm_head reads it
    into `token`'s logit alone (the decoder layers' small random outputs cannot flip its sign)."""
    import torch

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    with torch.no_grad():
        inner.get_input_embeddings().weight[:, 0] = 50.0
        norm = inner.model.norm.weight
        norm.zero_()
        norm[0] = 1.0
        head = inner.get_output_embeddings().weight
        head.zero_()
        head[token, 0] = 1.0


class _Counter:
    """A transformers streamer that counts the tokens generated (its first put() is the prompt)."""

    def __init__(self):
        self.calls = 0

    def put(self, value):
        self.calls += 1

    def end(self):
        pass

    @property
    def generated(self) -> int:
        return self.calls - 1


def _loaded(tmp_path, base: Path):
    from doctor_helpers import context_for

    from mmtune.build import build_model_and_adapters
    from mmtune.data.encode import Encoder

    resolved = context_for(tmp_path, _tree(tmp_path, base)).need("resolved")
    return resolved, build_model_and_adapters(resolved)[0].model, Encoder.for_run(resolved)


def _question(text: str = "What is 3+4?"):
    from mmtune.data.records import Record

    return Record("q", "q.jsonl:1", [{"role": "user", "content": [{"type": "text", "text": text}]},
                                     {"role": "assistant", "content": [{"type": "text", "text": "7"}]}])


# ----------------------------------------------------------------------------- the stop token generation_config lists
# https://github.com/vllm-project/vllm/issues/4180 (Llama 3 8B Instruct served by vLLM "was not stopping": it writes
# <|eot_id|>, while tokenizer_config.json's eos is <|end_of_text|>; fixed in https://github.com/vllm-project/vllm/pull/4182
# by reading generation_config.json's eos_token_id list), https://github.com/oobabooga/textgen/issues/5885,
# https://github.com/Blaizzy/mlx-vlm/issues/244 (Gemma 3 it "endless outputting": <end_of_turn> (106) until max tokens,
# the loop compared with tokenizer.eos_token_id = <eos> (1); gemma-3-*-it's generation_config lists [1, 106]).
# mmtune's evaluation, chat and serve passed eos_token_id=tokenizer.eos_token_id to generate, replacing the model's list,
# and MM063 warned "use the instruct variant" of a model that was one.

def test_generation_stops_at_the_eos_ids_generation_config_lists(tmp_path):
    from mmtune.evaluate.run_eval import generate_answers

    base = _base(tmp_path / "llama3_style", eos="<|endoftext|>", generation_eos=[2, 0])
    resolved, model, enc = _loaded(tmp_path, base)
    tok = enc.tokenizer
    turn_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token == "<|endoftext|>" and list(model.generation_config.eos_token_id) == [turn_end, 0]  # premise
    _always_emits(model, turn_end)
    counter = _Counter()
    kw = dict(device="cpu", dtype=None, pad_id=resolved.pad_token_id, batch_size=1, autocast=nullcontext)
    [answer] = generate_answers(model, enc, [_question()], max_new_tokens=12, streamer=counter, **kw)
    assert counter.generated == 1 and answer == ""  # stopped at the turn end, not 12 tokens of <|im_end|>


def test_generation_config_without_the_turn_end_still_runs_on(tmp_path):
    """The clean twin of the fix's reach: a base model's files (generation_config lists only <|endoftext|>) give
    no stop at <|im_end|>, so generation runs to max_new_tokens, as MM063 says."""
    from mmtune.evaluate.run_eval import generate_answers

    base = _base(tmp_path / "base_model", eos="<|endoftext|>", generation_eos=0)
    resolved, model, enc = _loaded(tmp_path, base)
    _always_emits(model, enc.tokenizer.convert_tokens_to_ids("<|im_end|>"))
    counter = _Counter()
    generate_answers(model, enc, [_question()], device="cpu", dtype=None, pad_id=resolved.pad_token_id,
                     batch_size=1, max_new_tokens=5, autocast=nullcontext, streamer=counter)
    assert counter.generated == 5


def test_mm063_reads_the_stop_ids_of_generation_config(tmp_path, doctor):
    llama3 = _base(tmp_path / "llama3_style", eos="<|endoftext|>", generation_eos=[2, 0])
    report = doctor(_tree(tmp_path, llama3), "MM063")
    assert "MM063" not in report.codes() and not report.not_run  # run, and silent
    base = _base(tmp_path / "base_model", eos="<|endoftext|>", generation_eos=0)
    [f] = [f for f in doctor(_tree(tmp_path, base), "MM063").findings if f.code == "MM063"]
    assert f.severity == "warning" and "'<|endoftext|>' (id 0)" in f.message and "generation_config.json" in f.message
    assert "add 2 to eos_token_id in the checkpoint's generation_config.json" in f.fix


def test_serve_stops_at_the_same_ids(tmp_path):
    """`mmtune serve` decides each row's stop with the set evaluation uses (a list, not the tokenizer's one id)."""
    from types import SimpleNamespace

    from mmtune.serve.batcher import Batcher, Job
    from mmtune.serve.protocol import Sampling

    _, model, enc = _loaded(tmp_path, _base(tmp_path / "llama3_style", eos="<|endoftext|>", generation_eos=[2, 0]))
    batcher = Batcher(SimpleNamespace(encoder=enc, model=model), max_batch=1, window_s=0.0, max_pending=1)
    assert batcher._eos == [0, 2]  # the tokenizer's eos first, then generation_config's
    prompt = enc.encode_prompt(_question())
    job = Job(inputs=prompt, sampling=Sampling(max_tokens=8, temperature=0.0, top_p=1.0), emit=lambda event: None)
    job.step(2, enc.tokenizer, batcher._eos)
    assert job.finish == "stop" and job.eos_seen == 1 and job.tokens == []


# ----------------------------------------------------------------------------- use_cache saved as false
# https://github.com/hiyouga/LlamaFactory/issues/1161 (inference "much slower" after training: the maintainer's answer,
# check use_cache in config.json), https://github.com/huggingface/trl/pull/3891 (review: with use_cache=False set for
# gradient checkpointing "the final model will have use_cache=False and much slower inference"),
# https://github.com/turbo-llm/turbo-alignment/issues/47. mmtune set config.use_cache=False with checkpointing, and
# checkpoints (model/config.json) and both exports (merged, full) saved it.

def test_gradient_checkpointing_leaves_the_saved_use_cache_alone(tmp_path):
    from doctor_helpers import context_for

    from mmtune.build import build_model_and_adapters
    from mmtune.data.collate import Collator
    from mmtune.data.encode import Encoder
    from mmtune.loss import loss_sum
    from mmtune.models.checkpointing import is_checkpointing

    tree = _tree(tmp_path, _base(tmp_path / "base"), gradient_checkpointing=True)
    tree["adapter"] = {"method": "full"}
    resolved = context_for(tmp_path, tree).need("resolved")
    model = build_model_and_adapters(resolved)[0].model
    assert is_checkpointing(model)  # premise: checkpointing is on
    model.train()
    enc = Encoder.for_run(resolved)
    batch = Collator(resolved.pad_token_id, None)([enc.encode(_question())])
    total, tokens = loss_sum(model, batch)
    total.backward()  # the training forward runs without a cache by itself
    assert tokens > 0 and model.get_input_embeddings().weight.grad is not None
    model.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["use_cache"] is True


# ----------------------------------------------------------------------------- scoring a reasoning block
# https://github.com/hiyouga/LlamaFactory/issues/9392 (Qwen3-VL-4B-Instruct fine-tuned on data without any think tags
# answers with an empty <think></think>), https://github.com/EleutherAI/lm-evaluation-harness/issues/3161 and
# https://github.com/EleutherAI/lm-evaluation-harness/pull/3240 (Qwen3's IFEval 0.28 -> 0.59 once the thinking is
# trimmed before scoring), https://github.com/IBM/AssetOpsBench/pull/418. mmtune scored the raw text: exact match 0.

def test_metrics_score_the_answer_after_a_reasoning_block():
    from mmtune.evaluate import metrics as M

    preds = ["<think>\n\n</think>\n\n7", "the sum is 3 and 4</think>\n7", "<think>it is 8</think> 8 ", "7"]
    refs = [["7"], ["7"], ["7"], ["7"]]
    out = M.compute(["exact_match", "anls", "mae", "f1"], preds, refs)
    assert out["exact_match"] == 0.75 and out["mae"] == 0.25 and out["unparsable"] == 0.0  # one answer is wrong: 8
    # references written with their reasoning are scored by their final answer too
    assert M.compute(["exact_match"], ["7"], [["<think>3+4</think>7"]])["exact_match"] == 1.0


def test_metrics_pins_trailing_period_and_whitespace():
    """'3.' against '3', a trailing newline: the VQA normalisation exact_match uses drops both (pinned)."""
    from mmtune.evaluate import metrics as M

    assert M.compute(["exact_match"], ["3.", " 3\n", "Three"], [["3"], ["3"], ["3"]])["exact_match"] == 1.0


# https://github.com/OpenBMB/UltraRAG/pull/510 (a gold answer "A" normalised to the empty string: accuracy 1.0 whatever
# the model answered), https://github.com/EvolvingLMMs-Lab/lmms-eval/pull/794 ('Black.' against ten 'black' scored 0).
# mmtune's exact_match, vqa_accuracy and f1 drop articles: an empty generation scored 1.0 against a choice "A".

def test_an_empty_answer_never_matches_a_one_letter_choice():
    from mmtune.evaluate import metrics as M

    names = ["exact_match", "vqa_accuracy", "f1"]
    assert M.compute(names, ["", "the", "B"], [["A"], ["A"], ["A"]]) == {n: 0.0 for n in names}
    assert M.compute(names, ["A", "a.", "(A)"], [["A"], ["A"], ["a"]]) == {n: 1.0 for n in names}
    # articles inside a longer answer still go, and the scorer's normalisation of both sides stays (lmms-eval#794)
    assert M.compute(names, ["The cat", "Black."], [["cat"], ["black"] * 10]) == {n: 1.0 for n in names}


# ----------------------------------------------------------------------------- sampling defaults in generation_config
# https://github.com/modelscope/evalscope/issues/736 (the official Qwen2.5-VL-7B-Instruct scored differently on two
# evaluations), https://github.com/macrocosm-os/finetuning/pull/89 (answers differed up to 15 % of the time across
# identical samples until evaluation moved to a deterministic generation config). Qwen2-VL's generation_config.json
# has do_sample, temperature and top_p; mmtune's evaluation passes do_sample=False (pinned: a sampling config
# with temperature 1.5 gives the same answers under two seeds).

def test_evaluation_is_greedy_whatever_generation_config_says(tmp_path):
    import torch

    from mmtune.data.collate import Collator
    from mmtune.evaluate.run_eval import generate_answers

    base = _base(tmp_path / "sampling")
    raw = json.loads((base / "generation_config.json").read_text())
    (base / "generation_config.json").write_text(json.dumps({**raw, "do_sample": True, "temperature": 1.5,
                                                             "top_p": 1.0, "top_k": 0}))
    resolved, model, enc = _loaded(tmp_path, base)
    assert model.generation_config.do_sample  # premise: the folder asks for sampling
    records = [_question("What is 3+4?"), _question("Name a colour")]
    kw = dict(device="cpu", dtype=None, pad_id=resolved.pad_token_id, batch_size=2, max_new_tokens=8,
              autocast=nullcontext)
    answers = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        answers.append(generate_answers(model, enc, records, **kw))
    assert answers[0] == answers[1]
    torch.manual_seed(0)
    with torch.no_grad():  # the same prompts sampled, as generate would with the folder's own config
        batch = Collator(resolved.pad_token_id, None, padding_side="left")([enc.encode_prompt(r) for r in records])
        a = model.generate(**batch, max_new_tokens=8, pad_token_id=resolved.pad_token_id)
        torch.manual_seed(1)
        b = model.generate(**batch, max_new_tokens=8, pad_token_id=resolved.pad_token_id)
    assert not torch.equal(a, b)


# ----------------------------------------------------------------------------- a batch of images of different sizes
# https://github.com/EvolvingLMMs-Lab/lmms-eval/issues/970 (Qwen2-VL-2B on OCRBench: 0.763 at batch size 1, 0.605 at 2),
# https://github.com/vllm-project/vllm/issues/13346 (Qwen2-VL-7B: batched answers unlike the single ones),
# https://github.com/QwenLM/Qwen3-VL/issues/1956. mmtune's evaluation batches records with images of their own sizes
# (per-image patch grids, left padding, the model's own rope index): pinned with a real batched generate of a wide
# and a tall image against each record alone.

def test_batched_eval_of_images_of_different_sizes_matches_one_at_a_time(tmp_path):
    import torch
    from doctor_helpers import TINY_VL, context_for
    from PIL import Image

    from mmtune.build import build_model_and_adapters
    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record
    from mmtune.evaluate.run_eval import generate_answers

    sizes = [(112, 56), (56, 168), (84, 84)]
    records = []
    for i, (w, h) in enumerate(sizes):
        path = tmp_path / f"im{i}.png"
        Image.effect_noise((w, h), 40 + 20 * i).convert("RGB").save(path)
        records.append(Record(f"r{i}", f"q.jsonl:{i + 1}", [
            {"role": "user", "content": [{"type": "image", "path": str(path)}, {"type": "text", "text": "Describe" + " it" * i}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}]}]))
    resolved = context_for(tmp_path, TINY_VL).need("resolved")
    torch.manual_seed(0)
    model = build_model_and_adapters(resolved)[0].model
    enc = Encoder.for_run(resolved)
    grids = [tuple(enc.encode_prompt(r)["image_grid_thw"][0].tolist()) for r in records]
    assert len(set(grids)) == 3  # premise: three patch grids
    kw = dict(device="cpu", dtype=None, pad_id=resolved.pad_token_id, max_new_tokens=6, autocast=nullcontext)
    alone = [generate_answers(model, enc, [r], batch_size=1, **kw)[0] for r in records]
    assert generate_answers(model, enc, records, batch_size=3, **kw) == alone
