"""Generation checks: evaluation settings against the eval set's own answers."""

from __future__ import annotations

from ..findings import info, warning
from ..registry import check


@check("MM036", "eval.max_new_tokens covers the eval set's reference answers", needs=("cfg", "scan", "resolved"))
def answers_fit_generation(ctx):
    """Evaluation generates at most eval.max_new_tokens tokens; an answer that needs more is cut, and
    exact-match style metrics score it wrong however well the model learned it. A warning, not an
    error: training is unaffected, the reported metrics are low."""
    cfg, scan, resolved = ctx.need("cfg"), ctx.need("scan"), ctx.need("resolved")
    limit = cfg.eval.max_new_tokens
    approx = "" if resolved.exact_text_tokens else \
        " (counted with the stand-in tokenizer, not the model's own: approximate until the model is downloaded)"
    for s in scan.splits:
        if s.split != "eval" or not s.answers_cut:
            continue
        longest, where = s.answer_longest
        make = warning if resolved.exact_text_tokens else info
        yield make(f"{s.split}: {s.answers_cut} of {s.answers} evaluated records have reference answers longer than "
                   f"eval.max_new_tokens={limit} tokens (longest: {longest} tokens): generation stops before the "
                   f"answer ends, so they are scored wrong{approx}", where=where, fix=f"eval.max_new_tokens={longest}")
