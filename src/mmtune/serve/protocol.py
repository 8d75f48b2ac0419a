"""The OpenAI chat-completions request, read into mmtune's own record format, and OpenAI-style errors.

A request's messages become a `Record` like a line of training data (media parts first-class: an image as
bytes or a permitted local path), so the run's Encoder renders it with the chat template, system prompt
and media caps it was trained with. Every way a request can be wrong is an `ApiError` carrying the HTTP
status and the OpenAI error object, raised before anything is queued.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from pathlib import Path

MAX_STOP = 4  # OpenAI's own limit on `stop` sequences


class ApiError(Exception):
    """An error answered as OpenAI answers it: `{"error": {"message", "type", "param", "code"}}`."""

    TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
             405: "invalid_request_error", 413: "invalid_request_error", 503: "server_error", 500: "server_error"}

    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Sampling:
    """How one request decodes. Requests batch together only when these agree (one `generate` call takes one
    setting); a seeded sampled request runs alone so its seed alone decides its tokens."""

    max_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False  # vLLM's extension: the answer runs to max_tokens (load tests: fixed lengths)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def batch_key(self, job_id: int) -> tuple:
        if self.greedy:
            return ("greedy", self.ignore_eos)
        return ("sample", self.temperature, self.top_p, self.ignore_eos, job_id if self.seed is not None else None)


@dataclass
class ChatRequest:
    model: str
    messages: list[dict]  # mmtune's format: role + content parts
    sampling: Sampling
    max_tokens_given: bool
    stream: bool = False
    include_usage: bool = False
    media_count: dict = field(default_factory=dict)


def parse_request(payload, *, default_max_tokens: int, allow_local_media: Path | None) -> ChatRequest:
    """A decoded JSON body -> ChatRequest, or an ApiError(400) naming the field that is wrong."""
    if not isinstance(payload, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required (a string: GET /v1/models lists it)", param="model")
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    if payload.get("n", 1) != 1:
        raise ApiError(400, "only n=1 is served", param="n")
    counts: dict[str, int] = {}
    out = [_message(m, i, allow_local_media, counts) for i, m in enumerate(messages)]
    if out[-1]["role"] != "user":
        raise ApiError(400, "the last message must be the user's (the model answers it)", param="messages")
    max_tokens = payload.get("max_completion_tokens", payload.get("max_tokens"))
    given = max_tokens is not None
    max_tokens = _number(max_tokens, "max_tokens", int, 1, None) if given else default_max_tokens
    temperature = _number(payload.get("temperature", 0), "temperature", float, 0, 2)
    top_p = _number(payload.get("top_p", 1), "top_p", float, 0, 1)
    if top_p == 0:
        raise ApiError(400, "'top_p' must be above 0", param="top_p")
    seed = payload.get("seed")
    if seed is not None:
        seed = _number(seed, "seed", int, 0, 2**63 - 1)
    stop = payload.get("stop")
    stop = [stop] if isinstance(stop, str) else (stop or [])
    if not isinstance(stop, list) or len(stop) > MAX_STOP or not all(isinstance(s, str) and s for s in stop):
        raise ApiError(400, f"'stop' must be a string or a list of up to {MAX_STOP} non-empty strings", param="stop")
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    ignore_eos = payload.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise ApiError(400, "'ignore_eos' must be true or false", param="ignore_eos")
    options = payload.get("stream_options") or {}
    include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
    return ChatRequest(model=model, messages=out, stream=stream, include_usage=include_usage, media_count=counts,
                       max_tokens_given=given,
                       sampling=Sampling(max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                         stop=tuple(stop), seed=seed, ignore_eos=ignore_eos))


def _number(value, name: str, kind, lo, hi):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        raise ApiError(400, f"'{name}' must be a{'n integer' if kind is int else ' number'}", param=name)
    if value < lo or (hi is not None and value > hi):
        raise ApiError(400, f"'{name}' must be between {lo} and {hi}" if hi is not None else f"'{name}' must be >= {lo}",
                       param=name)
    return kind(value)


def _message(m, i: int, allow_local_media: Path | None, counts: dict) -> dict:
    param = f"messages[{i}]"
    if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
        raise ApiError(400, f"{param} must be an object with role system, user or assistant", param=param)
    content = m.get("content")
    if isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = [_part(p, f"{param}.content[{j}]", allow_local_media, counts) for j, p in enumerate(content)]
    else:
        raise ApiError(400, f"{param}.content must be a string or a list of content parts", param=param)
    if m["role"] != "user" and any(p["type"] != "text" for p in parts):
        raise ApiError(400, f"{param}: only user messages may hold media", param=param)
    return {"role": m["role"], "content": parts}


def _part(p, param: str, allow_local_media: Path | None, counts: dict) -> dict:
    kind = p.get("type") if isinstance(p, dict) else None
    if kind == "text" and isinstance(p.get("text"), str):
        return {"type": "text", "text": p["text"]}
    if kind in ("image_url", "video_url"):
        ref = p.get(kind)
        url = ref.get("url") if isinstance(ref, dict) else ref
        if not isinstance(url, str) or not url:
            raise ApiError(400, f"{param}.{kind}.url must be a string", param=param)
        media = kind.removesuffix("_url")
        counts[media] = counts.get(media, 0) + 1
        if url.startswith("data:"):
            if media == "video":
                raise ApiError(400, f"{param}: a video is given as a local path (under --allow-local-media)", param=param)
            return {"type": media, "bytes": _data_url(url, param)}
        if url.startswith(("http://", "https://")):
            raise ApiError(400, f"{param}: the server does not fetch remote URLs; send the image as a data URL "
                                "(data:image/png;base64,...)", param=param)
        return {"type": media, "path": str(_local_path(url, param, allow_local_media))}
    if kind == "input_audio":
        ref = p.get("input_audio")
        data = ref.get("data") if isinstance(ref, dict) else None
        if not isinstance(data, str):
            raise ApiError(400, f"{param}.input_audio.data must be base64 audio", param=param)
        counts["audio"] = counts.get("audio", 0) + 1
        return {"type": "audio", "bytes": _b64(data, param)}
    raise ApiError(400, f"{param}: unsupported content part {kind!r} (text, image_url, input_audio, video_url)",
                   param=param)


def _data_url(url: str, param: str) -> bytes:
    head, sep, data = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise ApiError(400, f"{param}: a data URL must be base64 (data:image/png;base64,...)", param=param)
    return _b64(data, param)


def _b64(data: str, param: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, f"{param}: the base64 data does not decode", param=param) from None


def _local_path(url: str, param: str, allow: Path | None) -> Path:
    """A local file is read only from under --allow-local-media: a server reachable by others must not read
    whatever path a request names (the key files of the account it runs under, for one)."""
    if allow is None:
        raise ApiError(400, f"{param}: local file paths are refused; send a data URL, or start the server with "
                            "--allow-local-media DIR to allow files under DIR", param=param)
    raw = url.removeprefix("file://")
    path = Path(raw).expanduser()
    path = (path if path.is_absolute() else allow / path).resolve()  # symlinks resolved: no escape through one
    if not path.is_relative_to(allow):
        raise ApiError(400, f"{param}: {raw} is outside --allow-local-media {allow}", param=param)
    if not path.exists():
        raise ApiError(400, f"{param}: {raw} does not exist under --allow-local-media {allow}", param=param)
    return path
