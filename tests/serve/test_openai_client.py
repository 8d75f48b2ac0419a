"""`mmtune serve` as users use it: the official openai client over real HTTP on 127.0.0.1, against a tiny trained
run. Greedy answers are evaluation's predictions and `mmtune chat`'s, alone or batched with others."""

from __future__ import annotations

import threading

import httpx
import pytest

from .conftest import client, question

MODEL = "run"  # the run folder's name: what the server calls the model unless --served-model-name


def test_models_and_health(serve):
    with serve() as (url, _):
        assert [m.id for m in client(url).models.list()] == [MODEL]
        health = httpx.get(url + "/health").json()
        assert health["status"] == "ok" and health["admitted"] == 0


def test_greedy_answers_are_evaluations_and_chats(serve, trained, session):
    _, preds, rows, data_dir = trained
    assert any(p["prediction"] for p in preds)  # something to reproduce
    with serve() as (url, _):
        c = client(url)
        for i, p in enumerate(preds):
            r = c.chat.completions.create(model=MODEL, messages=question(rows, data_dir, i))
            assert r.choices[0].message.content == p["prediction"]
            chat = session.ask(rows[i]["messages"][0]["content"][1]["text"],
                               [session.media_part("image", data_dir / rows[i]["messages"][0]["content"][0]["path"])])
            session.reset()
            assert r.choices[0].message.content == chat
            assert r.usage.prompt_tokens > 0 and r.choices[0].finish_reason in ("stop", "length")


def test_concurrent_requests_share_one_generate_call(serve, trained):
    _, preds, rows, data_dir = trained
    answers = {}

    def ask(i):
        r = client(url).chat.completions.create(model=MODEL, messages=question(rows, data_dir, i))
        answers[i] = r.choices[0].message.content

    # A window long enough that the four requests, sent together, are certainly in one batch.
    with serve(max_batch=4, window_ms=2000) as (url, batcher):
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(preds))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert batcher.stats.largest_batch == len(preds) and batcher.stats.batches == 1
    assert [answers[i] for i in range(len(preds))] == [p["prediction"] for p in preds]


def test_stream_sends_the_answer_in_pieces(serve, trained):
    _, _, rows, data_dir = trained
    with serve() as (url, _):
        c = client(url)
        messages = question(rows, data_dir, 1)
        whole = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=12,
                                          extra_body={"ignore_eos": True})
        chunks = list(c.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, stream=True,
                                                stream_options={"include_usage": True},
                                                extra_body={"ignore_eos": True}))
    deltas = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(deltas) > 1 and "".join(deltas) == whole.choices[0].message.content
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 12 == whole.usage.completion_tokens


def test_local_image_paths_only_under_the_allowed_folder(serve, trained, tmp_path):
    _, _, rows, data_dir = trained
    with serve(allow_local_media=data_dir) as (url, _):
        c = client(url)
        by_path = c.chat.completions.create(model=MODEL, messages=question(rows, data_dir, 0, image_as="path"))
        by_data = c.chat.completions.create(model=MODEL, messages=question(rows, data_dir, 0))
        assert by_path.choices[0].message.content == by_data.choices[0].message.content
        outside = tmp_path / "secret.png"
        outside.write_bytes((data_dir / "img0.png").read_bytes())
        msgs = question(rows, data_dir, 0)
        msgs[0]["content"][0]["image_url"]["url"] = str(data_dir / ".." / outside.name)
        import openai

        with pytest.raises(openai.BadRequestError, match="outside --allow-local-media"):
            c.chat.completions.create(model=MODEL, messages=msgs)
    with serve() as (url, _):  # no --allow-local-media: no path at all
        with pytest.raises(openai.BadRequestError, match="local file paths are refused"):
            client(url).chat.completions.create(model=MODEL, messages=question(rows, data_dir, 0, image_as="path"))


def test_sampling_seed_and_stop(serve, trained):
    _, _, rows, data_dir = trained
    messages = question(rows, data_dir, 2)
    with serve() as (url, _):
        c = client(url)

        def ask(**kw):
            return c.chat.completions.create(model=MODEL, messages=messages, max_tokens=16,
                                             extra_body={"ignore_eos": True}, **kw).choices[0]

        a, b = ask(temperature=1.5, top_p=0.9, seed=7), ask(temperature=1.5, top_p=0.9, seed=7)
        assert a.message.content == b.message.content  # the seed decides the sample
        others = {ask(temperature=1.5, seed=s).message.content for s in range(8)}
        assert len(others) > 1  # and sampling does sample
        full = ask().message.content
        stop = full.strip()[len(full.strip()) // 2]  # a character from the middle of the greedy answer
        cut = ask(stop=[stop])
        assert cut.finish_reason == "stop" and cut.message.content == full[:full.index(stop)].strip()


def test_api_key(serve, trained):
    import openai

    _, _, rows, data_dir = trained
    with serve(api_key="s3cret") as (url, _):
        with pytest.raises(openai.AuthenticationError):
            client(url, api_key="wrong").models.list()
        assert httpx.post(url + "/v1/chat/completions", json={}).status_code == 401
        r = client(url, api_key="s3cret").chat.completions.create(model=MODEL, messages=question(rows, data_dir, 0))
        assert r.choices[0].message.content is not None
        assert httpx.get(url + "/health").status_code == 200  # a load balancer's probe needs no key


def test_audio_as_input_audio_answers_as_chat(tmp_path):
    """A model that hears: `input_audio` (base64 WAV) is the same audio `mmtune chat --audio` reads."""
    import base64

    import numpy as np
    import soundfile as sf

    from mmtune.chat import load_session
    from mmtune.serve import ServeOptions, server_for
    from mmtune.serve.server import Running

    wav = tmp_path / "a.wav"
    sf.write(wav, (0.1 * np.sin(np.arange(16000) / 5)).astype("float32"), 16000)
    session = load_session("tiny/qwen2-audio", max_new_tokens=5)
    _, batcher, app = server_for(session, "tiny/qwen2-audio", ServeOptions(max_new_tokens=5))
    with Running(app, batcher) as url:
        r = client(url).chat.completions.create(model="tiny/qwen2-audio", messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav.read_bytes()).decode(), "format": "wav"}},
            {"type": "text", "text": "What is said?"}]}])
    assert r.choices[0].message.content == session.ask("What is said?", [session.media_part("audio", wav)])


def test_video_frames_from_the_allowed_folder_answer_as_chat(tmp_path):
    """`video_url` with a folder of frames under --allow-local-media: the video `mmtune chat --video` reads."""
    from PIL import Image

    from mmtune.chat import load_session
    from mmtune.serve import ServeOptions, server_for
    from mmtune.serve.server import Running

    frames = tmp_path / "clip"
    frames.mkdir()
    for k in range(8):
        Image.new("RGB", (64, 64), (30 * k, 100, 100)).save(frames / f"{k:02d}.png")
    session = load_session("tiny/qwen3-vl", max_new_tokens=5)
    _, batcher, app = server_for(session, "tiny/qwen3-vl", ServeOptions(max_new_tokens=5, allow_local_media=tmp_path))
    with Running(app, batcher) as url:
        r = client(url).chat.completions.create(model="tiny/qwen3-vl", messages=[{"role": "user", "content": [
            {"type": "video_url", "video_url": {"url": "clip"}},  # relative: under the allowed folder
            {"type": "text", "text": "What happens?"}]}])
    assert r.choices[0].message.content == session.ask("What happens?", [session.media_part("video", frames)])
