"""How many tokens evaluation generates when the config leaves `eval.max_new_tokens` unset: enough for the eval
set's longest reference answer, decided once when the eval set is read (build.attach_eval_data, for `mmtune train`
and `mmtune eval`), recorded in the resolved run with its reason; the plan's eval phase and the doctor's MM036 apply
the same rule to the same answers.

Why not a fixed 16: a caption, a sentence or a tool call is longer, generation stops at the 16th token and the
metrics score the cut answer wrong however well the model learned it -- the run looks as if it failed. A larger
budget costs nothing for answers that end: generation stops at the turn end; it costs time only while a model has
not yet learned to stop, and that is capped (CAP).

A set value (the config, a profile, the command line, a data format's default such as asr's 128) is kept: the
doctor's MM036 says when it cuts answers.
"""

from __future__ import annotations

import math

from .decisions import Decision

DEFAULT = 16  # the schema's default: what short answers (a number, a word, a yes/no) need
CAP = 1024  # a model that never stops generates this much per eval record at most


def is_set(cfg) -> bool:
    """The config (or a profile, an override, a format's default) gave eval.max_new_tokens."""
    return "max_new_tokens" in cfg.eval.model_fields_set


def budget_for(longest: int) -> int:
    """Tokens to generate for a longest answer of `longest` tokens: 10 % over it (an answer a little longer than its
    reference is scored, not cut, by the overlap metrics) plus the turn end that stops generation; DEFAULT at
    least, CAP at most."""
    return max(DEFAULT, min(CAP, math.ceil(longest * 1.1) + 1))


def answer_tokens(encoder, records) -> list[tuple[int, str]]:
    """(tokens, where) per record: the longest of the answers it accepts (the trained answer as the template writes
    it, a tool call included, and its `references`), counted with the run's tokenizer, without special tokens."""
    texts, owners = [], []
    for i, rec in enumerate(records):
        for ref in (encoder.answer_text(rec), *rec.references):
            if ref and ref.strip():
                texts.append(ref.strip())
                owners.append(i)
    need = [0] * len(records)
    if texts:
        ids = encoder.tokenizer(texts, add_special_tokens=False)["input_ids"]  # one batched call: fast tokenizers
        for i, row in zip(owners, ids):
            need[i] = max(need[i], len(row))
    return [(n, rec.where()) for n, rec in zip(need, records)]


def decide(cfg, encoder, records) -> Decision | None:
    """The eval budget for these (checked) eval records, or None when the config sets it or nothing is
    generated. The value is `budget_for` the longest answer; the reason names that answer's record."""
    if is_set(cfg) or not cfg.eval.generate or not records:
        return None
    if not (cfg.eval.metrics or isinstance(cfg.data.eval, list)):  # run_eval generates only to score
        return None
    longest, where = max(answer_tokens(encoder, records), key=lambda t: t[0])
    value = budget_for(longest)
    why = (f"unset: the longest reference answer of the {len(records)} eval records is {longest} tokens ({where}); "
           f"10 % over it plus the turn end")
    if value == DEFAULT:
        why = f"unset: the default covers the {len(records)} eval records' answers (longest: {longest} tokens)"
    elif value == CAP:
        why += f", capped at {CAP} (set eval.max_new_tokens to generate more)"
    return Decision("eval.max_new_tokens", str(value), why, changed=value != cfg.eval.max_new_tokens)


def apply(run) -> None:
    """Decide on run.eval_set and put the value in force: run.cfg, the resolved run (config.resolved.yaml's
    decisions) and the start-up summary."""
    import dataclasses

    d = decide(run.cfg, run.encoder, run.eval_set.records if run.eval_set is not None else [])
    if d is None:
        return
    cfg = run.cfg.model_copy(update={"eval": run.cfg.eval.model_copy(update={"max_new_tokens": int(d.value)})})
    run.cfg = cfg
    run.resolved = dataclasses.replace(run.resolved, cfg=cfg, decisions=(*run.resolved.decisions, d))
    run.decisions.append(d.line())
