"""Evaluation of a run: token-weighted eval loss, and task metrics on greedy-generated answers."""

from __future__ import annotations


class EvalInterrupted(Exception):
    """The run was asked to stop (SIGTERM, Ctrl-C) during an in-training evaluation: the evaluation is given up
    between two batches so the checkpoint is written inside a preemption's grace period (often 30 s), not after
    an evaluation that may take minutes."""


def _check(interrupt) -> None:
    if interrupt is not None and interrupt():
        raise EvalInterrupted


def generate_answers(model, encoder, records, *, device, dtype, pad_id: int, batch_size: int,
                     max_new_tokens: int, autocast, streamer=None, balance=None,
                     progress: str | None = None, interrupt=None) -> list[str]:
    """Greedy answers to the records' prompts. `streamer` (a transformers streamer, one record at a
    time) receives the tokens as they come: `mmtune chat` answers through this same function.
    `progress`: a label to show the batches' progress under (console.TaskBar). `interrupt`: asked before each
    batch (on every rank alike); True raises EvalInterrupted.

    A sharded model (FSDP2) generates in step with the other ranks (`synced_gpus`: a rank whose answers
    are done keeps running forwards while another's are not, or the all-gathers would wait forever), with
    the root's own weights (embeddings, lm_head) gathered for the whole generation: `generate` reaches
    them without calling the root module."""
    from ..console import TaskBar
    from ..data.collate import Collator
    from .stops import model_stop_ids

    tok = getattr(encoder.processor, "tokenizer", encoder.processor)
    # the tokenizer's eos and the model's generation_config eos ids (Llama 3's <|eot_id|>, Gemma's <end_of_turn>)
    stops = model_stop_ids(model, tok)
    collate = Collator(pad_id, dtype, padding_side="left")
    answers: list[str] = []
    model.eval()
    with TaskBar(progress or "", len(records), enabled=None if progress else False) as bar:
        for start in range(0, len(records), batch_size):
            _check(interrupt)
            chunk = records[start:start + batch_size]
            batch = collate([encoder.encode_prompt(r) for r in chunk])
            if balance is not None:  # sharded towers: the same media kinds on every rank (mmtune/media_balance.py)
                batch = balance.balance([batch], collate, prompt=True)[0]
            new = generate_batch(model, batch, device=device, autocast=autocast, pad_id=pad_id,
                                 eos_token_id=stops, max_new_tokens=max_new_tokens, do_sample=False,
                                 **({"streamer": streamer} if streamer is not None else {}))
            new = new[:len(chunk)]  # rows added by `balance` come last
            answers.extend(s.strip() for s in tok.batch_decode(new, skip_special_tokens=True))
            bar.advance(len(chunk))
    return answers


def generate_batch(model, batch: dict, *, device, autocast, pad_id: int, eos_token_id, **generate_kwargs):
    """One `generate` call on a collated, left-padded batch -> the new tokens of each row (prompt cut off).
    Evaluation (greedy) and `mmtune serve` (sampling, stop criteria per request) both generate through it, so
    the server's decoding is evaluation's. A finished row is padded with `pad_id` up to the longest."""
    from contextlib import nullcontext

    import torch

    from ..sharding import is_sharded

    sharded = is_sharded(model)
    batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}  # use_audio_in_video: a bool
    with torch.no_grad(), autocast(), _root_gathered(model) if sharded else nullcontext():
        out = model.generate(**batch, pad_token_id=pad_id, eos_token_id=eos_token_id,
                             **({"synced_gpus": True} if sharded else {}), **generate_kwargs)
    return out[:, batch["input_ids"].shape[1]:]


class _root_gathered:
    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.model.unshard()

    def __exit__(self, *exc):
        self.model.reshard()


def eval_loss_sums(model, encoder, collator, records, *, device, batch_size: int, autocast,
                   real: int | None = None, balance=None, progress: str | None = None,
                   loss_impl: str = "full", interrupt=None, groups: tuple = ()) -> tuple:
    """(summed answer-token loss, answer tokens). Records from index `real` on are padding (a rank's shard
    filled up to the others' length so every rank runs as many forwards): run, but counted nowhere.
    `loss_impl`: the run's train.loss_impl (mmtune.loss.eval_impl: a chunked run evaluates chunked too).
    `groups` (an eval set mixing modalities, data/modality.py): a third item, [[loss sum of each group, then
    "mixed"], [their answer tokens]] (mmtune.loss.grouped_loss_sums), added up on the device, read once at the end."""
    import torch

    from ..console import TaskBar
    from ..loss import IGNORE_INDEX, eval_impl, grouped_loss_sums, loss_sum, to_device

    model.eval()
    total, tokens = 0.0, 0
    by_group = None
    real = len(records) if real is None else real
    with torch.no_grad(), TaskBar(progress or "", len(records), enabled=None if progress else False) as bar:
        for start in range(0, len(records), batch_size):
            _check(interrupt)
            items = []
            for i, r in enumerate(records[start:start + batch_size], start):
                enc = encoder.encode(r)
                if i >= real:
                    enc = {**enc, "labels": torch.full_like(enc["labels"], IGNORE_INDEX)}
                if groups:
                    from ..data.modality import group_input

                    enc = {**enc, **group_input(r, enc, groups)}
                items.append(enc)
            batch = collator(items)
            if balance is not None:
                batch = balance.balance([batch], collator)[0]
            with autocast():
                if groups:
                    s, n, _, sums = grouped_loss_sums(model, to_device(batch, device), len(groups), eval_impl(loss_impl))
                    by_group = sums.double() if by_group is None else by_group + sums.double()
                else:
                    s, n = loss_sum(model, to_device(batch, device), eval_impl(loss_impl))
            total += float(s)
            tokens += int(n)
            bar.advance(len(items))
    if groups:
        return total, tokens, by_group.tolist() if by_group is not None else [[0.0] * (len(groups) + 1)] * 2
    return total, tokens


def _world_sum(acc, total: float, tokens: int) -> tuple[float, int]:
    import torch

    t = acc.reduce(torch.tensor([total, float(tokens)], dtype=torch.float64, device=acc.device), reduction="sum")
    return float(t[0]), int(t[1])


def _by_group(acc, sums: list, groups: tuple) -> dict:
    import torch

    from ..data.modality import MIXED

    if acc.num_processes > 1:
        sums = acc.reduce(torch.tensor(sums, dtype=torch.float64, device=acc.device), reduction="sum").tolist()
    return {f"eval_loss/{g}": s / n for g, s, n in zip((*groups, MIXED), *sums) if n > 0}


def references(encoder, record) -> list[str]:
    """Accepted answers: the record's own list (e.g. InfoVQA's several answers), else its answer."""
    refs = getattr(record, "references", None)
    return [str(x) for x in refs] if refs else [encoder.answer_text(record)]


def evaluate(run, records, *, with_generation: bool | None = None, interrupt=None) -> tuple[dict, list[dict]]:
    """(metrics, per-record predictions) on `records` with the run's current weights.

    Several processes: every rank calls it; each evaluates its shard of the records (rank r takes records
    r, r + world, ...; shards filled to one length), the loss sums and the answers are gathered, and
    every rank returns the metrics of the whole set, as one process would compute them.
    `interrupt` (training's stop request, agreed on by every rank): asked before each batch; True gives the
    evaluation up with EvalInterrupted, the model back in training mode."""
    model = run.unwrapped_model()
    was_training = model.training
    try:
        return _evaluate(run, model, records, with_generation, interrupt)
    finally:
        if was_training:
            model.train()


def _evaluate(run, model, records, with_generation, interrupt) -> tuple[dict, list[dict]]:
    from . import metrics as M

    cfg = run.cfg
    acc = run.accelerator
    device = acc.device
    world, rank = acc.num_processes, acc.process_index
    order = list(range(rank, len(records), world))  # one process: every record
    mine = [records[i] for i in order]
    per_rank = -(-len(records) // world)
    padded = mine + [records[0]] * (per_rank - len(mine))
    from ..media_balance import balance_for

    balance = balance_for(run, records)
    groups = tuple(getattr(run, "eval_loss_groups", ()) or ())
    got = eval_loss_sums(model, run.encoder, run.collator, padded, device=device,
                         batch_size=cfg.eval.batch_size, autocast=acc.autocast, real=len(mine),
                         balance=balance, progress="eval loss", loss_impl=cfg.train.loss_impl,
                         interrupt=interrupt, groups=groups)
    total, tokens = got[:2]
    if world > 1:
        total, tokens = _world_sum(acc, total, tokens)
    out = {"eval_loss": total / max(tokens, 1)}
    if records and all(r.document for r in records):
        import math

        # raw text (data.format=text): every token of each document is predicted once (data/text_windows.py), so
        # exp of the mean token loss is the eval documents' perplexity
        out["eval_perplexity"] = math.exp(out["eval_loss"]) if out["eval_loss"] < 700 else float("inf")
    if groups:  # eval_loss/<modality>: the token-weighted mean over that modality's answer tokens (all ranks)
        out.update(_by_group(acc, got[2], groups))
    preds: list[dict] = []
    gen = cfg.eval.generate if with_generation is None else with_generation
    mixture = isinstance(cfg.data.eval, list)
    if gen and (cfg.eval.metrics or mixture):
        answers = generate_answers(model, run.encoder, padded, device=device, dtype=run.resolved.compute_dtype,
                                   pad_id=run.collator.pad_token_id, batch_size=cfg.eval.batch_size,
                                   max_new_tokens=cfg.eval.max_new_tokens, autocast=acc.autocast,
                                   balance=balance, progress="eval answers", interrupt=interrupt)[:len(mine)]
        if world > 1:
            from accelerate.utils import gather_object

            by_index = dict(gather_object(list(zip(order, answers))))
            answers = [by_index[i] for i in range(len(records))]
        refs = [references(run.encoder, r) for r in records]
        if mixture:
            from .per_source import per_source_metrics

            out.update(per_source_metrics(cfg, records, answers, refs))
        else:
            out.update(M.compute(cfg.eval.metrics, answers, refs))
        preds = [{"id": r.id, "prediction": a, "references": rs, **({"source": r.origin} if r.origin else {})}
                 for r, a, rs in zip(records, answers, refs)]
    return out, preds
