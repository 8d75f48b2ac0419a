"""The HTTP layer: a thin FastAPI adapter over the Engine (what a request means) and the Batcher (when it is
generated). Routes: POST /v1/chat/completions (plain or server-sent events), GET /v1/models, GET /health.
Every error, ours or the framework's (unknown route, wrong method), is an OpenAI-style error object.
"""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations (`request: Request`) at
# run time, and Request is imported inside create_app (FastAPI is the optional `serve` extra).
import asyncio
import hmac
import json
import time

from .batcher import Batcher, Job
from .engine import Engine
from .protocol import ApiError

RETRY_AFTER_S = "1"


def create_app(engine: Engine, batcher: Batcher):
    from fastapi import FastAPI, Request
    from fastapi.exceptions import StarletteHTTPException as HTTPException
    from fastapi.responses import JSONResponse

    settings = engine.settings
    created = int(time.time())
    app = FastAPI(title="mmtune serve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def api_error(_request, e: ApiError):
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(HTTPException)
    async def http_error(_request, e: HTTPException):
        return JSONResponse(ApiError(e.status_code, str(e.detail)).body(), status_code=e.status_code,
                            headers=getattr(e, "headers", None))

    def authorize(request: Request) -> None:
        if settings.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        # compare_digest: the time taken does not tell how much of a guessed key was right
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), settings.api_key.encode()):
            raise ApiError(401, "Incorrect API key provided (Authorization: Bearer KEY)", code="invalid_api_key")

    @app.get("/health")
    async def health():
        s = batcher.stats
        return {"status": "ok", **batcher.load(),
                "stats": {k: getattr(s, k) for k in ("requests", "batches", "largest_batch", "cancelled", "rejected",
                                                      "errors", "generated_tokens")}}

    @app.get("/v1/models")
    async def models(request: Request):
        authorize(request)
        return {"object": "list", "data": [{"id": settings.served_name, "object": "model", "created": created,
                                            "owned_by": "mmtune", "max_model_len": settings.context}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        authorize(request)
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > settings.max_body_bytes:
            raise ApiError(413, f"the request body is over {settings.max_body_bytes / 2**20:g} MiB (--max-body-mb)")
        raw = bytearray()
        async for piece in request.stream():  # read with the cap: a chunked body never grows past it in memory
            raw += piece
            if len(raw) > settings.max_body_bytes:
                raise ApiError(413, f"the request body is over {settings.max_body_bytes / 2**20:g} MiB (--max-body-mb)")
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the request body is not valid JSON ({e})") from None
        req = engine.parse(payload)
        if not batcher.try_admit():
            raise ApiError(503, f"the server is at capacity ({settings.max_pending} requests in flight); retry shortly",
                           code="over_capacity", headers={"Retry-After": RETRY_AFTER_S})
        try:
            from fastapi.concurrency import run_in_threadpool

            loop = asyncio.get_running_loop()
            events: asyncio.Queue = asyncio.Queue()
            job = Job(inputs={}, sampling=req.sampling, emit=lambda ev: _post(loop, events, ev))
            job.inputs = await run_in_threadpool(engine.encode, req, job.id)  # decoding media off the event loop
            job.sampling = req.sampling  # encode may shorten the default max_tokens to fit the context
        except BaseException:
            batcher.release()
            raise
        batcher.submit(job)
        rid = f"chatcmpl-{job.id}-{int(job.arrived * 1000) % 10**9}"
        head = {"id": rid, "created": int(time.time()), "model": settings.served_name}
        if req.stream:
            return _Stream(_sse(job, events, head, req.include_usage), on_close=lambda: _finish(job, batcher),
                           media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        watcher = asyncio.create_task(_cancel_when_gone(request, job))
        try:
            text, reason, usage = "", None, None
            while reason is None:
                ev = await events.get()
                if ev[0] == "delta":
                    text += ev[1]
                elif ev[0] == "done":
                    reason, usage = ev[1], ev[2]
                else:
                    raise ev[1]
        finally:
            watcher.cancel()
            _finish(job, batcher)
        return {**head, "object": "chat.completion", "usage": usage,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason,
                             "logprobs": None}]}

    return app


def _finish(job: Job, batcher: Batcher) -> None:
    """A response is over (sent, failed, or its client gone): its row stops if still generating, its slot is
    freed, once."""
    job.cancel()
    if not job.released:
        job.released = True
        batcher.release()


def _Stream(body, *, on_close, **kw):
    """A StreamingResponse that calls `on_close` however it ends: finished, or cancelled by a client that hung
    up, even before the body's first chunk (when a generator's own `finally` would never run)."""
    from fastapi.responses import StreamingResponse

    class Stream(StreamingResponse):
        async def __call__(self, scope, receive, send):
            try:
                await super().__call__(scope, receive, send)
            finally:
                on_close()

    return Stream(body, **kw)


def _post(loop, queue, event) -> None:
    try:
        loop.call_soon_threadsafe(queue.put_nowait, event)
    except RuntimeError:  # the event loop closed (server shutting down): nobody is waiting for it
        pass


async def _cancel_when_gone(request, job: Job) -> None:
    """A non-streamed request whose client hung up stops its row (checked twice a second: Starlette cancels
    only streaming responses on a disconnect)."""
    while job.finish is None:
        if await request.is_disconnected():
            job.cancel()
            return
        await asyncio.sleep(0.5)


async def _sse(job: Job, events: asyncio.Queue, head: dict, include_usage: bool):
    """Server-sent events as OpenAI streams them: a role chunk, content chunks, a finish chunk, [DONE].
    A client that disconnects cancels the response (Starlette), whose `on_close` cancels the job's row."""

    def chunk(delta: dict, reason=None, usage=None) -> str:
        body = {**head, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}] if delta is not None
                else []}
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    while True:
        ev = await events.get()
        if ev[0] == "delta":
            yield chunk({"content": ev[1]})
        elif ev[0] == "done":
            yield chunk({}, ev[1])
            if include_usage:
                yield chunk(None, usage=ev[2])
            break
        else:  # an error after the stream began: OpenAI's clients raise it from the stream
            yield f"data: {json.dumps(ev[1].body())}\n\n"
            break
    yield "data: [DONE]\n\n"
