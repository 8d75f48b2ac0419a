"""Generation checks: evaluation settings against the eval set's own answers, and what the model is
taught to generate: the chat template (system turns, the trained stop token) and the tokenizer against
the model (media token ids, embedding size)."""

from __future__ import annotations

from ..findings import error, info, warning
from ..registry import check
from .model_setup import text_part


@check("MM036", "eval.max_new_tokens covers the eval set's reference answers", needs=("cfg", "scan", "resolved"))
def answers_fit_generation(ctx):
    """Evaluation generates at most eval.max_new_tokens tokens; an answer that needs more is cut, and
    exact-match style metrics score it wrong however well the model learned it. A warning, not an
    error: training is unaffected, the reported metrics are low."""
    cfg, scan, resolved = ctx.need("cfg"), ctx.need("scan"), ctx.need("resolved")
    from ...resolve import generation_budget

    decided = not generation_budget.is_set(cfg)  # unset: training decides it from these answers, up to the cap
    approx = "" if resolved.exact_text_tokens else \
        " (counted with the stand-in tokenizer, not the model's own: approximate until the model is downloaded)"
    for s in scan.splits:
        if s.split != "eval" or not s.answers_cut:
            continue
        longest, where = s.answer_longest
        limit = s.answer_limit
        what = f"eval.max_new_tokens={limit}" + (f" (unset: the budget training decides, capped at "
                                                 f"{generation_budget.CAP})" if decided else "")
        make = warning if resolved.exact_text_tokens else info
        yield make(f"{s.split}: {s.answers_cut} of {s.answers} evaluated records have reference answers longer than "
                   f"{what} tokens (longest: {longest} tokens): generation stops before the "
                   f"answer ends, so they are scored wrong{approx}", where=where, fix=f"eval.max_new_tokens={longest}")


# --------------------------------------------------------------------------- template and tokenizer
# These read the model's own tokenizer and chat template: with the stand-in processor (model not
# downloaded) its tokens are not the model's, so they are listed as not run instead of guessed.
NEEDS_OWN_TOKENIZER = "needs the model's own tokenizer files (not downloaded; the stand-in's tokens are not the model's)"


def _exact_encoder(ctx):
    from ..context import NotAvailable

    if not ctx.need("resolved").exact_text_tokens:
        raise NotAvailable(NEEDS_OWN_TOKENIZER)
    return ctx.need("encoder")


def probe_record():
    from ...data.records import Record

    return Record("doctor-probe", "mmtune doctor", [
        {"role": "user", "content": [{"type": "text", "text": "What is 3 + 4?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "7"}]}])


@check("MM062", "the chat template renders system messages", needs=("cfg", "scan", "resolved", "processor_info"))
def system_rendered(ctx):
    """Records with a system turn (or data.system_prompt): a template that drops the system role trains
    without the instruction the user wrote, silently; one that raises stops the run. Checked once on a
    probe conversation, reported only when the data or config has a system message."""
    cfg, scan = ctx.need("cfg"), ctx.need("scan")
    n = sum(s.system_records for s in scan.splits)
    if not n and not cfg.data.system_prompt:
        return
    enc = _exact_encoder(ctx)
    marker = "mmtune-system-probe-4711"
    msgs = [{"role": "system", "content": enc._content([{"type": "text", "text": marker}])},
            *enc._template_messages(probe_record().messages)]
    who = f"{n} record(s) with a system message" if n else "data.system_prompt"
    try:  # the template itself (the encoder's render says a refused system turn in its own words: system_turn.py)
        text = enc.processor.apply_chat_template(msgs, tokenize=False)
    except Exception as e:  # noqa: BLE001 - jinja raises its own TemplateError (e.g. "System role not supported")
        yield error(f"the chat template rejects a system message ({type(e).__name__}: {e}); {who} cannot be "
                    "rendered", where="data.system_prompt" if not n else "model.name",
                    fix="merge the system text into the first user turn, or use a model whose template has a "
                        "system role")
        return
    if marker not in text:
        yield warning(f"the chat template drops system messages: {who} would train without the system text, "
                      "silently", where="data.system_prompt" if not n else "model.name",
                      fix="merge the system text into the first user turn (the template keeps that), or use a "
                          "model whose template renders a system role")


@check("MM063", "answers are trained to end with the token generation stops at",
       needs=("cfg", "resolved", "processor_info"))
def trained_stop_token(ctx):
    """The encoder trains each answer plus the end-of-turn token the template writes after it; generation
    (evaluation, `mmtune chat`, `mmtune serve`) stops at the tokenizer's eos and the eos ids the model's
    generation_config.json lists (evaluate/stops.py). A template that writes no special token after
    the answer never teaches the model to stop; one whose turn end is not the eos (a base model's tokenizer:
    eos <|endoftext|>, turns end with <|im_end|>) teaches a stop generation does not honour. Either way
    generated answers run on to eval.max_new_tokens. Padding never masks it: labels are padded with -100 by
    position, so pad == eos is not a problem here."""
    enc = _exact_encoder(ctx)
    tok = enc.tokenizer
    labels = [int(x) for x in enc.encode(probe_record(), check_length=False)["labels"].reshape(-1).tolist()]
    trained = [x for x in labels if x != -100]
    if not trained:
        return  # the encoder's own "no answer" finding
    last = trained[-1]
    name = tok.convert_ids_to_tokens(last)
    if last not in enc.special_ids:
        yield warning(f"the chat template writes no special token after the answer: trained targets end with "
                      f"{name!r}, so the model never learns to stop and generated answers run to "
                      "eval.max_new_tokens", where="model.name",
                      fix="use the model's instruct/chat template (one that ends each turn with a token such as "
                          "eos), or a tokenizer whose template appends eos_token after assistant turns")
        return
    # Generation stops at the tokenizer's eos and the ids generation_config.json lists (evaluate/stops.py):
    # Llama 3 Instruct and Gemma 3 it end turns with a token only that list names, which is right.
    from ...evaluate.stops import folder_stop_ids
    from .model_setup import model_dir

    stops = folder_stop_ids(model_dir(ctx.need("cfg")), tok)
    if stops and last not in stops:
        names = ", ".join(f"{tok.convert_ids_to_tokens(i)!r} (id {i})" for i in stops)
        yield warning(f"answers are trained to end with {name!r} (id {last}) but generation stops at {names} (the "
                      "tokenizer's eos and generation_config.json's eos_token_id): generated answers run past the "
                      "turn end to eval.max_new_tokens (a base model's tokenizer with a chat template?)",
                      where="model.name",
                      fix=f"use the instruct variant of the model, or add {last} to eos_token_id in the checkpoint's "
                          f"generation_config.json (or set the tokenizer's eos_token to {name!r} in its "
                          "tokenizer_config.json)")


def _probe_renders(ctx):
    """The probe conversation rendered whole, its user turn alone, and that turn as a generation prompt
    (add_generation_prompt=True); None where the template cannot render it (MM030's / the encoder's finding)."""
    enc = _exact_encoder(ctx)
    msgs = enc._template_messages(probe_record().messages)
    try:
        return enc.render(msgs), enc.render(msgs[:1]), enc.render(msgs[:1], add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - reported by MM030 / the encoder
        return None


@check("MM069", "the chat template writes the assistant header when asked for a generation prompt",
       needs=("cfg", "resolved", "processor_info"))
def generation_prompt(ctx):
    """Training renders each answer after its assistant header (`<|im_start|>assistant\\n`); evaluation and
    `mmtune chat` build their prompt with add_generation_prompt=True, expecting the template to end it with
    that header. A template without the `{% if add_generation_prompt %}` clause (a hand-written or generic
    template saved with a fine-tune) ends the prompt after the user turn: the model has never seen an answer
    start there, so it writes the header itself or continues the user turn, and exact-match scores are
    wrong. Training is unaffected (the encoder finds each answer by its text), hence a warning. Templates
    whose answer follows the user turn directly (Mistral's `[/INST]`) need no header and stay silent."""
    rendered = _probe_renders(ctx)
    if rendered is None:
        return
    full, bare, prompt = rendered
    if prompt != bare or not full.startswith(bare):
        return
    start = full.find("7", len(bare))
    header = full[len(bare):start] if start >= 0 else ""
    if not header.strip():
        return
    yield warning(f"the chat template ignores add_generation_prompt: evaluation and `mmtune chat` prompts end after "
                  f"the user turn, without the assistant header {header!r} every trained answer follows, so the model "
                  "starts its answers with that header (or continues the user turn) and generated answers are "
                  "scored wrong", where="model.name",
                  fix="end the chat template with {% if add_generation_prompt %}{{ " + repr(header) +
                      " }}{% endif %} (the model's own chat_template.jinja has it)")


@check("MM072", "each trained answer follows exactly the generation prompt evaluation and chat build",
       needs=("cfg", "resolved", "processor_info"))
def answer_follows_generation_prompt(ctx):
    """The encoder finds each answer by its text, so training works whatever the template writes before it; but
    evaluation, `mmtune chat` and any server build the prompt with add_generation_prompt=True. A template whose
    rendered conversation puts other text there (Qwen3's hybrid template: an empty `<think>\\n\\n</think>\\n\\n`
    before the last answer, absent from the generation prompt; DeepSeek-R1's: a generation prompt that opens
    `<think>\\n`, absent from rendered answers) trains every answer after a context the model never sees when it
    generates: it has to write (or skip) that text itself, untrained, and exact-match scores fall. Sources:
    https://github.com/huggingface/trl/issues/5213, https://github.com/huggingface/trl/pull/3522. No generation
    prompt at all is MM069's finding; whitespace-only differences are left alone."""
    rendered = _probe_renders(ctx)
    if rendered is None:
        return
    full, bare, prompt = rendered
    if prompt == bare or not full.startswith(bare):
        return
    start = full.find("7", len(bare))
    if start < 0:
        return
    trained = full[:start]  # what every trained answer follows
    if trained.rstrip() == prompt.rstrip():
        return
    if trained.startswith(prompt):
        what = (f"the rendered conversation writes {trained[len(prompt):]!r} between the generation prompt and each "
                "answer, and the prompt evaluation and `mmtune chat` generate from ends before it: the model has to "
                "write that text itself, which no trained token taught it")
    elif prompt.startswith(trained):
        what = (f"the generation prompt adds {prompt[len(trained):]!r}, which no trained answer follows (the rendered "
                "conversation puts each answer right after the header): evaluation and `mmtune chat` generate after "
                "a context training never showed")
    else:
        what = (f"the generation prompt ends {prompt[len(bare):]!r} but trained answers follow "
                f"{trained[len(bare):]!r}")
    yield warning(f"the chat template's generation prompt is not what training puts before each answer: {what}; "
                  "generated answers are scored against a context the model was not trained in", where="model.name",
                  fix="use a chat template whose generation prompt is exactly the text before an answer in a rendered "
                      "conversation (a thinking model: its non-thinking template, or write the reasoning block into "
                      "the answers so it is trained)")


MEDIA_ID_KEYS = {"image": ("image_token_id", "image_token_index"), "video": ("video_token_id", "video_token_index"),
                 "audio": ("audio_token_id", "audio_token_index")}


@check("MM064", "the processor's media token ids are the model config's (image_token_id / image_token_index "
       "...)", needs=("cfg", "resolved", "processor_info"))
def media_token_ids(ctx):
    """The processor expands each placeholder into its media token id; the model finds where to put the
    media features by the id in its config (image_token_id / image_token_index). A tokenizer from another
    revision or an added token that shifted the ids gives 'Image features and image tokens do not match'
    at the first step: an error."""
    enc = _exact_encoder(ctx)
    hf = ctx.need("model_config")
    if hf is None:
        return
    for kind, tid in enc.media_token_id.items():
        for key in MEDIA_ID_KEYS[kind]:
            want = getattr(hf, key, None)
            if want is None:
                thinker = getattr(hf, "thinker_config", None)
                want = getattr(thinker, key, None) if thinker is not None else None
            if isinstance(want, int) and want != tid:
                yield error(f"the processor writes {kind} tokens as id {tid} ({enc.placeholder.get(kind)!r}) but the "
                            f"model's config has {key}={want}: the model finds no {kind} tokens to fill ('Image "
                            "features and image tokens do not match')", where=f"model.name ({key})",
                            fix="use the tokenizer/processor files of the same checkpoint and revision as the model")
                break


@check("MM065", "the tokenizer's ids fit the model's embedding", needs=("cfg", "resolved", "processor_info"))
def tokenizer_fits_embedding(ctx):
    """Tokens added to the tokenizer without resizing the model's embeddings: an id at or past the
    embedding's rows is 'index out of range' on CPU and a device-side assert on GPU. An error when a token
    the run writes (special, media, pad) is out of range; a warning when only other added tokens are."""
    enc = _exact_encoder(ctx)
    hf = ctx.need("model_config")
    vocab = getattr(text_part(hf, ctx.need("resolved").family), "vocab_size", None) if hf is not None else None
    if not isinstance(vocab, int):
        return
    tok = enc.tokenizer
    used = set(enc.special_ids) | set(enc.media_token_id.values()) | {ctx.need("resolved").pad_token_id}
    over = sorted(i for i in used if isinstance(i, int) and i >= vocab)
    if over:
        names = tok.convert_ids_to_tokens(over[:3])
        yield error(f"the tokenizer has {len(over)} token(s) the run writes with ids past the model's embedding "
                    f"(vocab_size={vocab}): {', '.join(f'{n!r}={i}' for n, i in zip(names, over))}: 'index out of "
                    "range' / a device-side assert at the first step", where="model.name (vocab_size)",
                    fix="use the tokenizer of the same checkpoint, or resize the model's embeddings for the added "
                        "tokens and train them (adapter.modules_to_save / full fine-tuning)")
    elif len(tok) > vocab:
        yield warning(f"the tokenizer has {len(tok)} tokens, more than the model's vocab_size={vocab}: a record whose "
                      "text tokenizes to an added token past the embedding fails with 'index out of range'",
                      where="model.name (vocab_size)",
                      fix="use the tokenizer of the same checkpoint as the model")


@check("MM195", "earlier answers of multi-turn records are trained, or said not to be",
       needs=("cfg", "scan", "resolved", "processor_info"))
def history_rewritten_answers(ctx):
    """Qwen3's template (Qwen3.5's, QwQ's) renders an answer without its `<think>` block once a later user turn
    follows it, as a server shows it in history; the model writes each new answer, reasoning included, after the
    generation prompt. The encoder therefore leaves such earlier answers as context, not trained (data/history_turns.py):
    trained as history shows them they would teach answering without thinking where the model thinks. A warning
    naming how many answers that leaves untrained, when the data has answers before a later user turn; silent for
    templates that render history as they render the last answer (Qwen2's, Qwen2.5's) and for single-answer data.
    Sources: https://github.com/modelscope/ms-swift/issues/4939, https://github.com/hiyouga/LlamaFactory/issues/10336,
    https://github.com/hiyouga/LlamaFactory/issues/8634, https://github.com/modelscope/ms-swift/issues/9829."""
    from ...data.history_turns import rewritten_answers

    splits = [s for s in ctx.need("scan").splits if s.earlier_answers]
    if not splits:
        return
    enc = _exact_encoder(ctx)
    probe = enc._template_messages([
        {"role": "user", "content": [{"type": "text", "text": "What is 3 + 4?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "<think>\nadd them\n</think>\n\n7"}]},
        {"role": "user", "content": [{"type": "text", "text": "And 3 + 5?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "8"}]}])
    try:
        if not rewritten_answers(enc, probe):
            return
    except Exception:  # noqa: BLE001 - a template that cannot render the probe: MM030's / the encoder's finding
        return
    for s in splits:
        yield warning(f"{s.split}: {s.earlier_answers} answer(s) in {s.earlier_answer_records} multi-turn record(s) come "
                      "before a later user turn (or are tool calls before their results), and this chat template "
                      "renders such an answer otherwise in history (Qwen3's drops its <think> block): they are context, "
                      "not trained; only the answers after each record's last user turn (and no call before its result) "
                      "are", where=s.earlier_answer_first,
                      fix="to train every answer, split each conversation into one record per answer (the record ending "
                          "at that answer, the earlier turns as its history); to train them as history shows them, use a "
                          "chat template that renders an answer the same wherever it stands")


_UNTRAINED_SOURCES = "torchtune#2429, unsloth#658, unsloth#915"


@check("MM223", "the chat template's special tokens have trained embedding rows in the checkpoint",
       needs=("cfg", "resolved", "processor_info"), fast=True)
def untrained_template_tokens(ctx):
    """Fast (`mmtune train` runs it before starting): a few rows read from the weights files, no model build.
    A base checkpoint whose chat-template tokens were never trained (Llama 3 / 3.1 base: `<|eot_id|>`,
    `<|start_header_id|>`, `<|end_header_id|>` have ~zero rows). models/token_rows.py reads those rows. With
    lm_head frozen (LoRA / QLoRA) the answer's end token keeps a ~zero row, its logit stays near 0 and the model
    does not learn to stop: an error. Full training trains the rows from ~zero: an info."""
    from ...models.token_rows import untrained_rows
    from .model_setup import weights_folder

    resolved = ctx.need("resolved")
    folder = weights_folder(resolved.cfg)
    if folder is None:
        return
    enc = _exact_encoder(ctx)
    tok = enc.tokenizer
    out = enc.encode(probe_record(), check_length=False)
    ids = [int(x) for x in out["input_ids"].reshape(-1).tolist()]
    trained = [int(x) for x in out["labels"].reshape(-1).tolist() if x != -100]
    specials = sorted({i for i in ids if i in enc.special_ids})
    bad = untrained_rows(folder, specials)
    if not bad:
        return
    names = {i: tok.convert_ids_to_tokens(i) for ids_ in bad.values() for i in ids_}
    where_rows = "; ".join(f"{m}: {', '.join(repr(names[i]) for i in ids_)}" for m, ids_ in bad.items())
    stop = trained[-1] if trained else None
    head_rows = bad.get("lm_head", [])
    head_frozen = "lm_head" not in resolved.trainable and resolved.cfg.adapter.method != "full"
    what = (f"{resolved.cfg.model.name} has untrained (near-zero) embedding rows for tokens its chat template writes "
            f"({where_rows}): a base checkpoint whose pretraining never used them")
    fix = ("fine-tune the instruct checkpoint (its template tokens are trained), or use a template whose turns end "
           f"with a token the base model knows (its eos), or adapter.method=full ({_UNTRAINED_SOURCES})")
    if stop in head_rows and head_frozen:
        yield error(what + f"; answers are trained to end with {names[stop]!r}, whose lm_head row is frozen under "
                    f"adapter.method={resolved.cfg.adapter.method}: its logit stays near 0, so the model does not "
                    "learn to stop", where="model.name", fix=fix)
    elif head_frozen:
        yield warning(what + "; the model reads these turn markers as (near) nothing and LoRA cannot change their "
                      "rows", where="model.name", fix=fix)
    else:
        yield info(what + "; full training trains them from near zero", where="model.name", fix=fix)
