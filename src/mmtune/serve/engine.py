"""What a server serves, decided once: the loaded run (through `mmtune chat`'s loader), its name, context,
default answer length, media limits and batching, each with its reason; and a request turned into a job.

The model, processor, chat template, media caps and pad id are the run's resolved ones (`load_session`),
so what is served is what was trained and evaluated, and a greedy answer here is `mmtune chat`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .protocol import ApiError, ChatRequest, parse_request

DEFAULT_WINDOW_MS = 10.0
DEFAULT_MAX_PENDING = 64
DEFAULT_MEDIA_PER_PROMPT = 4


@dataclass(frozen=True)
class ServeOptions:
    """What the command line asked for; None = decided from the run (see `decide`)."""

    served_name: str | None = None
    max_model_len: int | None = None
    max_new_tokens: int | None = None
    max_batch: int | None = None
    window_ms: float = DEFAULT_WINDOW_MS
    max_pending: int = DEFAULT_MAX_PENDING
    media_per_prompt: int | None = None  # None: decided (media_per_prompt below)
    allow_local_media: Path | None = None
    api_key: str | None = None
    max_body_mb: float = 64.0


@dataclass(frozen=True)
class ServeSettings:
    served_name: str
    context: int | None  # prompt + answer tokens a request may use; None: the model states no limit
    default_max_tokens: int
    max_batch: int
    window_s: float
    max_pending: int
    media_per_prompt: dict  # kind -> most items of that kind in one request
    allow_local_media: Path | None
    api_key: str | None
    max_body_bytes: int
    decisions: tuple = field(default=())  # (what, value, why) lines, printed at start-up


def served_name_of(target: str) -> str:
    """`runs/demo` -> `demo`; `runs/demo/checkpoint-40` -> `demo/checkpoint-40`; an export inside a run
    (`runs/demo/checkpoint-40/export-merged`) -> `demo`; another folder -> its name; a model id stays itself."""
    p = Path(target).expanduser()
    if not p.exists():
        return target
    p = p.resolve()
    if p.name.startswith("export") and p.parent.name.startswith("checkpoint-"):
        return p.parent.parent.name
    return f"{p.parent.name}/{p.name}" if p.name.startswith("checkpoint-") else p.name


def model_context(config) -> int | None:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "max_position_embeddings", None)


def decide(target: str, cfg, model_config, modalities, options: ServeOptions) -> ServeSettings:
    """Every serving decision, made once from the run's config and the model's own config; the native server
    and the vLLM command line both read these."""
    decisions = []
    name = options.served_name or served_name_of(target)
    decisions.append(("model name", name, "--served-model-name" if options.served_name else "the target's name"))
    limit = model_context(model_config) if model_config is not None else None
    if options.max_model_len is not None:
        if limit and options.max_model_len > limit:
            from ..errors import MMTuneError

            raise MMTuneError(f"--max-model-len {options.max_model_len} exceeds the model's context "
                              f"(max_position_embeddings={limit})", where="--max-model-len",
                              fix=f"--max-model-len {limit} or less")
        context, why = options.max_model_len, "--max-model-len"
    else:
        context, why = limit, "the model's max_position_embeddings" if limit else "the model states no limit"
    decisions.append(("context", context, why))
    default_max = options.max_new_tokens or cfg.eval.max_new_tokens
    decisions.append(("default max_tokens", default_max, "--max-new-tokens" if options.max_new_tokens
                      else "the run's eval.max_new_tokens: the answers evaluation scored"))
    decisions.append(("temperature default", 0, "greedy, as evaluation decodes; a request's temperature > 0 samples"))
    max_batch = options.max_batch or cfg.eval.batch_size
    decisions.append(("max batch", max_batch, "--max-batch" if options.max_batch
                      else "the run's eval.batch_size: evaluation generated batches this large"))
    media, why = media_per_prompt(target, modalities, options.media_per_prompt)
    if media:
        decisions.append(("media per prompt", media, why))
    allow = Path(options.allow_local_media).expanduser().resolve() if options.allow_local_media else None
    decisions.append(("local media", str(allow) if allow else "refused",
                      "--allow-local-media" if allow else "only data URLs unless --allow-local-media DIR"))
    return ServeSettings(served_name=name, context=context, default_max_tokens=default_max, max_batch=max_batch,
                         window_s=options.window_ms / 1000, max_pending=options.max_pending, media_per_prompt=media,
                         allow_local_media=allow, api_key=options.api_key,
                         max_body_bytes=int(options.max_body_mb * 2**20), decisions=tuple(decisions))


def media_per_prompt(target: str, modalities, asked: int | None) -> tuple[dict, str]:
    """(kind -> most items of that kind in one request, why). Asked: that many of each kind. Otherwise the
    default, raised to the most items one trained record held (the run's summary.json): a model trained on
    6-page documents is served 6-page documents, not refused at the default's 4 (vLLM: "At most 4 image(s) may
    be provided in one request")."""
    kinds = [k for k in sorted(modalities) if k != "text"]
    if asked is not None:
        return {k: asked for k in kinds}, "--max-media-per-prompt: bounds one request's media tokens"
    from .trained_media import trained_media_per_record

    trained = trained_media_per_record(target)
    media = {k: DEFAULT_MEDIA_PER_PROMPT for k in kinds}
    if trained is None:
        return media, (f"default {DEFAULT_MEDIA_PER_PROMPT} (no trained run's summary.json beside the target to read "
                       "the most media one record held); --max-media-per-prompt to change it")
    most, where = trained
    raised = {k: most[k] for k in kinds if most.get(k, 0) > DEFAULT_MEDIA_PER_PROMPT}
    media.update(raised)
    if not raised:
        return media, (f"default {DEFAULT_MEDIA_PER_PROMPT}: no trained record held more ({where}); "
                       "--max-media-per-prompt to change it")
    held = ", ".join(f"{n} {k}s" for k, n in raised.items())
    return media, (f"the most one trained record held ({held}; {where}), so requests like the training records "
                   f"are admitted; the default is {DEFAULT_MEDIA_PER_PROMPT}; --max-media-per-prompt to change it")


class Engine:
    """A loaded session + its settings: checks a request and encodes it as training would."""

    def __init__(self, session, settings: ServeSettings):
        import threading

        self.session, self.settings = session, settings
        # Requests are encoded on a thread pool; one at a time, because a fast tokenizer whose padding or
        # truncation setting changes between calls mutates shared state ("Already borrowed" when concurrent).
        self._encode_lock = threading.Lock()

    def parse(self, payload) -> ChatRequest:
        req = parse_request(payload, default_max_tokens=self.settings.default_max_tokens,
                            allow_local_media=self.settings.allow_local_media)
        if req.model != self.settings.served_name:
            raise ApiError(404, f"The model '{req.model}' does not exist; this server serves "
                                f"'{self.settings.served_name}'", code="model_not_found", param="model")
        for kind, n in req.media_count.items():
            if kind not in self.session.encoder.modalities:
                raise ApiError(400, f"this model does not take {kind} (it takes "
                                    f"{', '.join(sorted(self.session.encoder.modalities))})", param="messages")
            if n > self.settings.media_per_prompt.get(kind, 0):
                raise ApiError(400, f"{n} {kind} items in one request; at most {self.settings.media_per_prompt[kind]} "
                                    "(--max-media-per-prompt)", param="messages")
        return req

    def encode(self, req: ChatRequest, job_id: int) -> dict:
        """The prompt encoded by the run's Encoder (media decoded here: a bad image is this request's 400),
        checked against the context."""
        from ..data.records import Record
        from ..errors import MMTuneError

        record = Record(id=f"request-{job_id}", source="request", messages=req.messages)
        try:
            with self._encode_lock:
                inputs = self.session.encoder.encode_prompt(record)
        except MMTuneError as e:  # DataError / BadRecord: an image that does not decode, a missing placeholder...
            raise ApiError(400, e.what + (f" ({e.fix})" if e.fix else ""), param="messages") from None
        n = int(inputs["input_ids"].shape[-1])
        ctx = self.settings.context
        if ctx is not None:
            want = n + req.sampling.max_tokens
            if n >= ctx or (req.max_tokens_given and want > ctx):
                raise ApiError(400, f"This model's maximum context length is {ctx} tokens. However, you requested "
                                    f"{want} tokens ({n} in the messages, {req.sampling.max_tokens} in the completion). "
                                    "Please reduce the length of the messages or completion.",
                               code="context_length_exceeded", param="messages")
            if want > ctx:  # the default answer length is shortened to fit, not refused
                from dataclasses import replace

                req.sampling = replace(req.sampling, max_tokens=ctx - n)
        return inputs
