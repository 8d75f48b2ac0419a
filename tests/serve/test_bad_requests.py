"""Every bad request gets an OpenAI-style error object with a 4xx/5xx status, and the server keeps serving:
each test ends with a good request answered by the same server."""

from __future__ import annotations

import base64
import time

import httpx
import openai
import pytest

from .conftest import client, png_bytes, question

MODEL = "run"


def _post(url, body, **kw):
    return httpx.post(url + "/v1/chat/completions", timeout=120, **({"content": body} if isinstance(body, (str, bytes))
                                                                     else {"json": body}), **kw)


def _error(resp, status):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


def _still_serves(url, trained):
    _, preds, rows, data_dir = trained
    r = client(url).chat.completions.create(model=MODEL, messages=question(rows, data_dir, 0))
    assert r.choices[0].message.content == preds[0]["prediction"]


def _wait_until(predicate, what, limit_s=60):
    """Polls a condition the server reaches on its own (a disconnect noticed, a slot freed); the limit only
    turns a hang into a failure, no timing is asserted."""
    end = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.05)


def _one_image(b: bytes, text="How many circles are there?"):
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                                            + base64.b64encode(b).decode()}},
                                         {"type": "text", "text": text}]}]


@pytest.mark.parametrize("body,status,says", [
    ('{"model": "run", "messages": [', 400, "not valid JSON"),
    (b"\xff\xfe\x00garbage", 400, "not valid JSON"),
    ('["a list"]', 400, "JSON object"),
    ({"messages": [{"role": "user", "content": "hi"}]}, 400, "'model' is required"),
    ({"model": MODEL, "messages": []}, 400, "non-empty list"),
    ({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, 400, "role"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 5}, 400, "temperature"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, 400, "max_tokens"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 3}, 400, "n=1"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "https://example.com/cat.png"}}]}]}, 400, "remote URLs"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64,@@@not-base64@@@"}}]}]}, 400, "does not decode"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {
        "data": "AAAA", "format": "wav"}}]}]}, 400, "does not take audio"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "hologram"}]}]}, 400, "unsupported"),
])
def test_malformed_requests(serve, trained, body, status, says):
    with serve() as (url, _):
        err = _error(_post(url, body), status)
        assert says in err["message"]
        _still_serves(url, trained)


def test_unknown_model_route_and_method(serve, trained):
    with serve() as (url, _):
        with pytest.raises(openai.NotFoundError) as e:
            client(url).chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
        assert e.value.code == "model_not_found"
        _error(httpx.get(url + "/v1/embeddings"), 404)
        _error(httpx.get(url + "/v1/chat/completions"), 405)
        _still_serves(url, trained)


def test_image_that_does_not_decode(serve, trained):
    with serve() as (url, batcher):
        with pytest.raises(openai.BadRequestError, match="cannot be decoded"):
            client(url).chat.completions.create(model=MODEL, messages=_one_image(b"\x89PNG\r\n\x1a\n" + b"\0" * 64))
        with pytest.raises(openai.BadRequestError, match="at most 4"):
            client(url).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
                *_one_image(png_bytes())[0]["content"][:1] * 5, {"type": "text", "text": "?"}]}])
        assert batcher.stats.requests == 0  # refused before anything was queued
        _still_serves(url, trained)


def test_prompt_over_the_context(serve, trained):
    with serve(max_model_len=200) as (url, _):
        c = client(url)
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "count " * 300}])
        assert e.value.code == "context_length_exceeded" and "maximum context length is 200" in str(e.value)
        msgs = question(trained[2], trained[3], 0)
        with pytest.raises(openai.BadRequestError, match="context length"):  # fits, but not with this answer
            c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=199)
        _still_serves(url, trained)


def test_out_of_memory_during_generation(serve, trained, session, monkeypatch):
    """CPU memory cannot be exhausted on cue in CI, so the one real failure is injected where it happens:
    `generate` raising torch's OutOfMemoryError, once, for a batch of two. Each request is then retried on its
    own (the first retry fails too, the second succeeds): one 503 with Retry-After, one answer."""
    import threading

    import torch

    real, calls = session.model.generate, []

    def generate(*a, **kw):
        calls.append(kw["input_ids"].shape[0])
        if len(calls) <= 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(*a, **kw)

    monkeypatch.setattr(session.model, "generate", generate)
    _, preds, rows, data_dir = trained
    results = {}

    def ask(i):
        try:
            results[i] = client(url).chat.completions.create(model=MODEL, messages=question(rows, data_dir, i))
        except openai.APIStatusError as e:
            results[i] = e

    with serve(max_batch=2, window_ms=2000) as (url, _):
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert calls == [2, 1, 1]
        failed = [r for r in results.values() if isinstance(r, openai.APIStatusError)]
        assert len(failed) == 1 and failed[0].status_code == 503 and failed[0].code == "out_of_memory"
        assert failed[0].response.headers["retry-after"] == "1"
        monkeypatch.undo()
        _still_serves(url, trained)


def test_client_that_disconnects_mid_stream(serve, trained):
    _, _, rows, data_dir = trained
    body = {"model": MODEL, "messages": question(rows, data_dir, 0), "stream": True, "max_tokens": 1500,
            "ignore_eos": True}
    with serve() as (url, batcher):
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")  # the role chunk: generation has been queued
            next(lines)
        # closed after two chunks of 1500: the server notices, stops that row and frees its slot
        _wait_until(lambda: batcher.stats.cancelled == 1 and batcher.load()["admitted"] == 0, "the stream cancelled")
        assert batcher.stats.generated_tokens < 1500
        # Not streamed: the client gives up waiting (its read timeout) and closes; the server notices too.
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/v1/chat/completions", json={**body, "stream": False}, timeout=httpx.Timeout(60, read=0.5))
        _wait_until(lambda: batcher.stats.cancelled == 2 and batcher.load()["admitted"] == 0, "the request cancelled")
        assert batcher.stats.generated_tokens < 3000
        _still_serves(url, trained)


def test_over_capacity_is_503_with_retry_after(serve, trained):
    _, _, rows, data_dir = trained
    body = {"model": MODEL, "messages": question(rows, data_dir, 0), "stream": True, "max_tokens": 1500,
            "ignore_eos": True}
    with serve(max_pending=1) as (url, batcher):
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
            lines = r.iter_lines()  # kept: a dropped iterator closes the response, and so the connection
            next(lines)  # admitted: the one slot is taken until this stream ends
            with pytest.raises(openai.APIStatusError) as e:
                client(url).chat.completions.create(model=MODEL, messages=question(rows, data_dir, 1))
            assert e.value.status_code == 503 and e.value.response.headers["retry-after"] == "1"
            assert e.value.code == "over_capacity" and batcher.stats.rejected == 1
        _wait_until(lambda: batcher.load()["admitted"] == 0, "the slot freed")
        _still_serves(url, trained)


def test_body_over_the_cap_is_413(serve, trained):
    with serve(max_body_mb=0.01) as (url, _):  # 10 KiB: an inline image of 64 KiB is over it
        body = {"model": MODEL, "messages": _one_image(png_bytes() + b"\0" * 65536)}
        assert "over" in _error(_post(url, body), 413)["message"]
        _still_serves(url, trained)
