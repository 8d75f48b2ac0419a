"""Dynamic batching: requests that arrive within a short window share one `generate` call.

One worker thread owns the model. It takes the oldest waiting request, waits up to `window_s` from that
request's arrival for others that decode the same way (`Sampling.batch_key`), and generates them as one
left-padded batch through evaluation's `generate_batch`. Each row stops on its own (end of text, its own
max_tokens, its stop strings, or its client gone) through one stopping criterion that also turns each new
token into text for that request's stream. Admission is bounded: at most `max_pending` requests are
admitted and unfinished at once (queued, generating or still streaming out); one more is refused (503)
instead of growing a queue without limit.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

from .protocol import ApiError, Sampling


@dataclass(eq=False)  # a job is itself (compared by identity), never equal to another with equal fields
class Job:
    """One admitted request: its encoded prompt, how it decodes, and what it has produced so far."""

    inputs: dict
    sampling: Sampling
    emit: object  # callable(event) from the worker thread: ("delta", text) | ("done", reason, usage) | ("error", ApiError)
    id: int = field(default_factory=itertools.count().__next__)
    arrived: float = field(default_factory=time.monotonic)
    cancelled: threading.Event = field(default_factory=threading.Event)
    tokens: list = field(default_factory=list)
    text: str = ""
    sent: int = 0
    finish: str | None = None
    eos_seen: int = 0
    released: bool = False  # its admission slot given back (once, by the HTTP layer)

    @property
    def prompt_tokens(self) -> int:
        return int(self.inputs["input_ids"].shape[-1])

    @property
    def key(self) -> tuple:
        from ..data.audio_in_video import video_kind

        # a video with its audio track and a plain video need opposite forward flags: never one batch
        return (*self.sampling.batch_key(self.id), video_kind(self.inputs))

    def cancel(self) -> None:
        self.cancelled.set()

    def step(self, token: int, tok, eos_ids) -> None:
        """One generated token: extend the text, decide whether this row is done, send what is final.
        `eos_ids`: the ids generation stops at (evaluate/stops.py)."""
        if self.cancelled.is_set():
            self._end("cancelled")
            return
        if token in eos_ids and not self.sampling.ignore_eos:
            self.eos_seen = 1
            self._end("stop")
            return
        self.tokens.append(token)
        # The whole answer is decoded each time (not token by token): a character split over two tokens,
        # and tokenizers that merge spaces, come out as `batch_decode` would write the full answer.
        text = tok.decode(self.tokens, skip_special_tokens=True).lstrip()
        cut = min((i for i in (text.find(s) for s in self.sampling.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.text = text[:cut]
            self._end("stop")
        elif len(self.tokens) >= self.sampling.max_tokens:
            self.text = text
            self._end("length")
        else:
            self.text = text
            self._send(self._safe_end())

    def _safe_end(self) -> int:
        """How much of the text cannot change any more: not a trailing partial character, not trailing
        whitespace (the final answer is stripped, as evaluation strips it), not the start of a stop string."""
        text = self.text.rstrip().removesuffix("\ufffd")
        hold = max((k for s in self.sampling.stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        return len(text) - hold

    def _send(self, end: int) -> None:
        if end > self.sent:
            self.emit(("delta", self.text[self.sent:end]))
            self.sent = end

    def _end(self, reason: str) -> None:
        self.finish = reason
        self.text = self.text.rstrip()
        if reason != "cancelled":
            self._send(len(self.text))
        completion = len(self.tokens) + self.eos_seen  # the end-of-text token was generated too
        self.emit(("done", reason, {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                                    "total_tokens": self.prompt_tokens + completion}))

    def fail(self, error: ApiError) -> None:
        self.finish = "error"
        self.emit(("error", error))


@dataclass
class Stats:
    requests: int = 0
    batches: int = 0
    largest_batch: int = 0
    cancelled: int = 0
    rejected: int = 0
    errors: int = 0
    generated_tokens: int = 0


class Batcher:
    def __init__(self, session, *, max_batch: int, window_s: float, max_pending: int):
        self.session = session
        self.max_batch, self.window_s, self.max_pending = max_batch, window_s, max_pending
        self.stats = Stats()
        self._waiting: list[Job] = []
        self._admitted = 0
        self._cond = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None
        from ..evaluate.stops import model_stop_ids

        tok = session.encoder.tokenizer
        self._tok, self._eos = tok, model_stop_ids(session.model, tok)  # evaluation's stop set (evaluate/stops.py)

    # ------------------------------------------------------------------ admission (called from the event loop)
    def try_admit(self) -> bool:
        with self._cond:
            if self._admitted >= self.max_pending:
                self.stats.rejected += 1
                return False
            self._admitted += 1
            return True

    def release(self) -> None:
        with self._cond:
            self._admitted -= 1

    def submit(self, job: Job) -> None:
        with self._cond:
            job.arrived = time.monotonic()  # the batching window starts now, after its media were decoded
            self._waiting.append(job)
            self.stats.requests += 1
            self._cond.notify()

    def load(self) -> dict:
        with self._cond:
            return {"admitted": self._admitted, "waiting": len(self._waiting), "max_pending": self.max_pending}

    # ------------------------------------------------------------------ the worker
    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="mmtune-serve-generate", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _next_batch(self) -> list[Job]:
        with self._cond:
            while self._running and not self._waiting:
                self._cond.wait()
            if not self._running:
                return []
            deadline = self._waiting[0].arrived + self.window_s
            while True:
                key = self._waiting[0].key
                same = [j for j in self._waiting if j.key == key][:self.max_batch]
                left = deadline - time.monotonic()
                if len(same) >= self.max_batch or left <= 0 or not self._running:
                    break
                self._cond.wait(left)
            for j in same:
                self._waiting.remove(j)
        live = []
        for j in same:  # a client gone before its turn costs no generation
            if j.cancelled.is_set():
                self.stats.cancelled += 1
                j.finish = "cancelled"
            else:
                live.append(j)
        return live

    def _loop(self) -> None:
        while self._running:
            jobs = self._next_batch()
            if jobs:
                self._generate(jobs)

    def _generate(self, jobs: list[Job]) -> None:
        try:
            self._run(jobs)
        except (RuntimeError, MemoryError) as e:  # torch's OutOfMemoryError is a RuntimeError
            if not _is_oom(e):
                self._fail(jobs, e)
                return
            _free_cached_memory()
            if len(jobs) > 1:
                # A batch too large for memory: each request that has sent nothing yet is tried on its own,
                # so one long prompt does not fail the short ones batched with it.
                for j in jobs:
                    if j.sent == 0:
                        self._generate([j])
                    else:
                        self.stats.errors += 1
                        j.fail(_oom_error(e))
                return
            self.stats.errors += 1
            jobs[0].fail(_oom_error(e))
        except Exception as e:  # noqa: BLE001 - the worker is the server's boundary: one request fails, serving goes on
            self._fail(jobs, e)

    def _fail(self, jobs: list[Job], e: BaseException) -> None:
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)  # for the operator, not the client
        for j in jobs:
            self.stats.errors += 1
            j.fail(ApiError(500, f"generation failed: {type(e).__name__}: {e}", code="generation_failed"))

    def _run(self, jobs: list[Job]) -> None:
        import torch

        from ..data.collate import Collator
        from ..evaluate.run_eval import generate_batch

        s = self.session
        for j in jobs:  # a retried job starts clean
            j.tokens, j.text, j.sent, j.finish, j.eos_seen = [], "", 0, None, 0
        batch = Collator(s.pad_id, s.dtype, padding_side="left")([j.inputs for j in jobs])
        sampling = jobs[0].sampling
        kwargs = {"do_sample": False}
        if not sampling.greedy:
            kwargs = {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)  # this worker is the only thread that generates
        self.stats.batches += 1
        self.stats.largest_batch = max(self.stats.largest_batch, len(jobs))
        eos = None if sampling.ignore_eos else self._eos  # one batch, one setting (ignore_eos is in the batch key)
        generate_batch(s.model, batch, device=s.device, autocast=s.autocast, pad_id=s.pad_id, eos_token_id=eos,
                       max_new_tokens=max(j.sampling.max_tokens for j in jobs),
                       stopping_criteria=_criteria(jobs, self._tok, self._eos), **kwargs)
        for j in jobs:
            if j.finish is None:  # generate stopped before this row decided (cannot happen with max_new_tokens above)
                j._end("length")
            if j.finish == "cancelled":
                self.stats.cancelled += 1
            self.stats.generated_tokens += len(j.tokens)


def _criteria(jobs: list[Job], tok, eos_ids):
    """transformers' per-row stopping criterion: called after each step with the sequences so far, it feeds
    each unfinished row its new token and answers which rows are done."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class PerRequest(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            last = input_ids[:, -1].tolist()
            for j, t in zip(jobs, last):
                if j.finish is None:
                    j.step(t, tok, eos_ids)
            return torch.tensor([j.finish is not None for j in jobs] + [True] * (len(last) - len(jobs)),
                                dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([PerRequest()])


def _is_oom(e: BaseException) -> bool:
    msg = str(e).lower()
    return isinstance(e, MemoryError) or "out of memory" in msg or "can't allocate memory" in msg


def _oom_error(e: BaseException) -> ApiError:
    return ApiError(503, f"the request does not fit in memory ({type(e).__name__}); retry with a shorter prompt, "
                         "fewer images or a smaller max_tokens", code="out_of_memory", headers={"Retry-After": "1"})


def _free_cached_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
