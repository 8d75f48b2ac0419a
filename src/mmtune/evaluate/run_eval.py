"""Evaluation of a run: token-weighted eval loss, and task metrics on greedy-generated answers."""

from __future__ import annotations


def generate_answers(model, encoder, records, *, device, dtype, pad_id: int, batch_size: int,
                     max_new_tokens: int, autocast, streamer=None, progress: str | None = None) -> list[str]:
    """Greedy answers to the records' prompts. `streamer` (a transformers streamer, one record at a
    time) receives the tokens as they come: `mmtune chat` answers through this same function.
    `progress`: a label to show the batches' progress under (console.TaskBar)."""
    import torch

    from ..console import TaskBar
    from ..data.collate import Collator

    tok = getattr(encoder.processor, "tokenizer", encoder.processor)
    collate = Collator(pad_id, dtype, padding_side="left")
    answers: list[str] = []
    model.eval()
    with TaskBar(progress or "", len(records), enabled=None if progress else False) as bar:
        for start in range(0, len(records), batch_size):
            chunk = records[start:start + batch_size]
            batch = collate([encoder.encode_prompt(r) for r in chunk])
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.no_grad(), autocast():
                out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=pad_id, eos_token_id=tok.eos_token_id,
                                     **({"streamer": streamer} if streamer is not None else {}))
            new = out[:, batch["input_ids"].shape[1]:]
            answers.extend(s.strip() for s in tok.batch_decode(new, skip_special_tokens=True))
            bar.advance(len(chunk))
    return answers


def eval_loss(model, encoder, collator, records, *, device, batch_size: int, autocast,
              progress: str | None = None) -> float:
    import torch

    from ..console import TaskBar
    from ..loss import loss_sum, to_device

    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad(), TaskBar(progress or "", len(records), enabled=None if progress else False) as bar:
        for start in range(0, len(records), batch_size):
            chunk = records[start:start + batch_size]
            batch = collator([encoder.encode(r) for r in chunk])
            with autocast():
                s, n = loss_sum(model, to_device(batch, device))
            total += float(s)
            tokens += int(n)
            bar.advance(len(chunk))
    return total / max(tokens, 1)


def references(encoder, record) -> list[str]:
    """Accepted answers: the record's own list (e.g. InfoVQA's several answers), else its answer."""
    refs = getattr(record, "references", None)
    return [str(x) for x in refs] if refs else [encoder.answer_text(record)]


def evaluate(run, records, *, with_generation: bool | None = None) -> tuple[dict, list[dict]]:
    """(metrics, per-record predictions) on `records` with the run's current weights."""
    from . import metrics as M

    cfg = run.cfg
    model = run.unwrapped_model()
    was_training = model.training
    device = run.accelerator.device
    out = {"eval_loss": eval_loss(model, run.encoder, run.collator, records, device=device,
                                  batch_size=cfg.eval.batch_size, autocast=run.accelerator.autocast,
                                  progress="eval loss")}
    preds: list[dict] = []
    gen = cfg.eval.generate if with_generation is None else with_generation
    mixture = isinstance(cfg.data.eval, list)
    if gen and (cfg.eval.metrics or mixture):
        answers = generate_answers(model, run.encoder, records, device=device, dtype=run.resolved.compute_dtype,
                                   pad_id=run.collator.pad_token_id, batch_size=cfg.eval.batch_size,
                                   max_new_tokens=cfg.eval.max_new_tokens, autocast=run.accelerator.autocast,
                                   progress="eval answers")
        refs = [references(run.encoder, r) for r in records]
        if mixture:
            from .per_source import per_source_metrics

            out.update(per_source_metrics(cfg, records, answers, refs))
        else:
            out.update(M.compute(cfg.eval.metrics, answers, refs))
        preds = [{"id": r.id, "prediction": a, "references": rs, **({"source": r.origin} if r.origin else {})}
                 for r, a, rs in zip(records, answers, refs)]
    if was_training:
        model.train()
    return out, preds
