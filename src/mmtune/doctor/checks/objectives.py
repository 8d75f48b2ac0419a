"""Objective checks (train.objective=grpo / dpo): the rewards GRPO scores with, its completion budget against the
data's answers, and whether the reference model the KL / DPO loss compares with can be had.

The DPO pair checks (a pair without a rejected side or with media of its own: MM083; chosen equal to rejected:
MM084) live with the data checks, from the same scan. Unknown built-in reward names are refused when the config
loads (MM019, with a did-you-mean). G need not divide any batch: a micro-batch holds prompts and every prompt's G
completions are sampled and normalised inside it (TRL's `per_device_train_batch_size % num_generations` counts
completions; mmtune's layout never splits a group), so there is nothing to check there.
"""

from __future__ import annotations

from ..findings import error, info, warning
from ..registry import check


def _grpo(cfg) -> bool:
    return cfg.train.objective == "grpo"


@check("MM120", "GRPO's rewards can be imported", fast=True)
def rewards_import(ctx):
    """A reward given as `pkg.module:function` is imported when the run builds its objective: a typo or a module
    not installed here would stop the run after the model has loaded. Built-in names are checked at load time."""
    from ...errors import ConfigError
    from ...evaluate.rewards import reward_function

    cfg = ctx.need("cfg")
    if not _grpo(cfg):
        return
    for i, r in enumerate(cfg.train.grpo.rewards):
        if ":" not in r.name:
            continue
        try:
            fn = reward_function(r.name, r.pattern)
        except ConfigError as e:
            yield error(e.what, where=f"train.grpo.rewards[{i}]", fix=e.fix)
            continue
        if not callable(fn):
            yield error(f"reward {r.name!r} is a {type(fn).__name__}, not a function", where=f"train.grpo.rewards[{i}]",
                        fix="name a function fn(completions, references) -> list of floats (docs/preference.md)")


@check("MM121", "GRPO's rewards return one number per completion on a real record", needs=("cfg", "scan"))
def rewards_return_numbers(ctx):
    """Each reward is called as the step calls it, on training records' own reference answers (as if the model had
    answered them exactly), then on an empty completion: a reward that raises, returns text, None, NaN or the wrong
    count would stop the run at its first step (or, raising on what it cannot parse, at the first step that samples
    such an answer); one that gives the reference answer itself no more than it gives a wrong answer rewards
    nothing the task asks for (an info: a format reward may legitimately ignore the answer's content)."""
    from ...errors import ConfigError
    from ...evaluate.rewards import reward_function, score

    cfg = ctx.need("cfg")
    if not _grpo(cfg):
        return
    samples = [r for s in ctx.need("scan").splits if s.split == "train" for r in s.samples]
    pairs = []
    for rec in samples:
        refs = [a for a in [rec.answer_text(), *rec.references] if a and a.strip()]
        if refs:
            pairs.append((rec, refs))
    if not pairs:
        return
    for i, r in enumerate(cfg.train.grpo.rewards):
        where = f"train.grpo.rewards[{i}]"
        try:
            fn = reward_function(r.name, r.pattern)
        except ConfigError:
            continue  # MM120's finding
        completions = [refs[0] for _, refs in pairs]
        references = [refs for _, refs in pairs]
        try:
            got = score(fn, r.name, completions, references)
        except ConfigError as e:  # score names what it returned, or what it raised (the user's code)
            yield error(f"{e.what} (called on {len(pairs)} training record(s)' reference answers)",
                        where=pairs[0][0].where(), fix=e.fix)
            continue
        # and on an empty completion (what a model that ends at once samples; a cut answer is as bare): a reward that
        # raises when its regex finds nothing passes the reference answers and ends the run at a later step
        try:
            wrong = score(fn, r.name, [""] * len(pairs), references)
        except ConfigError as e:
            yield error(f"{e.what}: a sampled completion need not hold what the reward looks for, and the run stops "
                        "at the first step that samples one", where=where, fix=e.fix)
            continue
        if all(a <= b for a, b in zip(got, wrong)):
            yield info(f"reward {r.name!r} gives the reference answers themselves no more than a wrong answer "
                       f"({sum(got) / len(got):.3g} vs {sum(wrong) / len(wrong):.3g} on {len(pairs)} record(s)): it "
                       "does not reward the task's answer", where=where,
                       fix="fine for a format reward; otherwise check the reward against the data's answers")


@check("MM122", "train.grpo.max_completion_length covers the training answers", needs=("cfg", "scan", "resolved"))
def completion_budget(ctx):
    """A sampled completion stops at max_completion_length tokens: a record whose shortest reference needs more
    can never be answered in full, so exact-match style rewards give it 0 in every completion, the group's
    advantages are all 0 and the prompt trains nothing."""
    cfg, resolved = ctx.need("cfg"), ctx.need("resolved")
    if not _grpo(cfg):
        return
    limit = cfg.train.grpo.max_completion_length
    for s in ctx.need("scan").splits:
        if s.split != "train" or not s.answers_cut:
            continue
        longest, where = s.answer_longest
        approx = "" if resolved.exact_text_tokens else " (the stand-in tokenizer's count: approximate)"
        make = warning if resolved.exact_text_tokens else info
        share = s.answers_cut / max(1, s.answers)
        if share >= 0.5 and resolved.exact_text_tokens:
            make = error
        yield make(f"train: {s.answers_cut} of {s.answers} records have reference answers longer than "
                   f"train.grpo.max_completion_length={limit} tokens (longest: {longest}){approx}: no completion can "
                   "reach them, so their rewards and advantages stay 0", where=where,
                   fix=f"train.grpo.max_completion_length={longest}")


@check("MM123", "the reference model of the KL / DPO loss can be had", needs=("cfg", "gpu", "plan"))
def reference_model(ctx):
    """dpo, and grpo with beta > 0, compare with a reference model: the base with the adapters disabled under
    LoRA / QLoRA (free), a frozen copy of the starting weights under full fine-tuning (one more model's weights
    on the GPU, planned as such). When the plan does not fit and the copy is what tips it over, the way out is
    not a smaller batch but no copy: LoRA, or grpo without the KL."""
    from ...objectives import needs_frozen_copy

    cfg = ctx.need("cfg")
    if not needs_frozen_copy(cfg):
        return
    from ...plan.margin import fits

    plan, gpu = ctx.need("plan"), ctx.need("gpu")
    # the copy: every weight of the model in the compute dtype (build.run_objective's deepcopy + .to(dtype))
    copy_bytes = plan.total_params * {"bf16": 2, "fp16": 2}.get(plan.precision, 4)
    gib = copy_bytes / 2**30
    kind = cfg.train.objective
    fix = "adapter.method=lora (the reference is the base with the adapters disabled: no copy)" + (
        " or train.grpo.beta=0 (no KL, no reference)" if kind == "grpo" else "")
    if plan.fits:
        yield info(f"{kind}: the frozen reference copy ({gib:.1f} GiB) is planned beside the model and fits",
                   where="adapter.method")
    elif fits(plan.process_total_bytes - copy_bytes, gpu.total_bytes, plan.required_margin_pct):
        yield error(f"{kind} with adapter.method=full holds a frozen reference copy of the weights ({gib:.1f} GiB): "
                    f"without it the step would fit the {gpu.name}, with it it does not", where="adapter.method",
                    fix=fix)
    else:
        yield warning(f"{kind} with adapter.method=full holds a frozen reference copy ({gib:.1f} GiB) on a step that "
                      f"does not fit the {gpu.name} even without it (MM001 has the fit)", where="adapter.method",
                      fix=fix)
