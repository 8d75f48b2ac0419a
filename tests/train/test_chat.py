"""`mmtune chat`: answers with the run's own template, media caps and generation settings, streamed."""

import io
import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from mmtune.chat import load_session
from mmtune.cli import app


def _invoke(*args, input=None):
    res = CliRunner().invoke(app, [str(a) for a in args], input=input)
    assert res.exit_code == 0, res.output
    return res.output


@pytest.fixture
def trained(tiny_vl_config, tmp_path, request):
    """A 4-step run (LoRA unless asked) with an eval at its end: its predictions are what chat must
    reproduce."""
    method = getattr(request, "param", "lora")
    # Full training at LoRA's rate makes 4 steps collapse to end-of-text answers: nothing to compare.
    _invoke("train", tiny_vl_config(adapter={"method": method}, train={"lr": 1e-3 if method == "lora" else 1e-5}),
            "--skip-checks")
    run = tmp_path / "run"
    preds = [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]
    rows = [json.loads(x) for x in (tmp_path / "data" / "data.jsonl").read_text().splitlines()]
    return run, preds, rows


@pytest.mark.parametrize("trained", ["lora", "full"], indirect=True)
def test_one_shot_chat_says_what_evaluation_predicted(trained, tmp_path):
    run, preds, rows = trained
    assert any(p["prediction"] for p in preds)  # something to reproduce
    for i, p in enumerate(preds):  # eval records are the data file's first rows (eval_max_samples=4)
        user = rows[i]["messages"][0]["content"]
        image = tmp_path / "data" / user[0]["path"]
        out = _invoke("chat", run, user[1]["text"], "--image", image)
        assert out.strip() == p["prediction"], (out, p)


def test_interactive_chat_keeps_the_conversation(trained, tmp_path):
    run, _, rows = trained
    image = tmp_path / "data" / rows[0]["messages"][0]["content"][0]["path"]
    out = _invoke("chat", run, "--max-new-tokens", 5,
                  input=f"/image {image}\nHow many circles are there?\nAnd now?\n/reset\nAnd now?\n")
    answers = out.strip().splitlines()[-3:]
    # The same turns through the session API, without streaming: the conversation is the context.
    s = load_session(str(run), max_new_tokens=5)
    first = s.ask("How many circles are there?", [s.media_part("image", image)])
    second = s.ask("And now?")
    s.reset()
    third = s.ask("And now?")
    assert [a.strip() for a in answers] == [first, second, third]


@pytest.mark.parametrize("name,media", [
    ("tiny/qwen2", []), ("tiny/qwen2-vl", ["image"]), ("tiny/qwen2.5-vl", ["image"]), ("tiny/qwen3-vl", ["video"]),
    ("tiny/qwen2-audio", ["audio"]), ("tiny/qwen2.5-omni", ["image", "audio"]), ("tiny/llava", ["image"]),
    ("tiny/llava-next", ["image"]),
])
def test_any_model_streams_the_answer_it_returns(name, media, tmp_path):
    import soundfile as sf

    files = {"image": tmp_path / "a.png", "audio": tmp_path / "a.wav", "video": tmp_path / "frames"}
    Image.new("RGB", (80, 64), (200, 30, 30)).save(files["image"])
    sf.write(files["audio"], (0.1 * np.sin(np.arange(16000) / 5)).astype("float32"), 16000)
    files["video"].mkdir()
    for k in range(8):
        Image.new("RGB", (64, 64), (30 * k, 100, 100)).save(files["video"] / f"{k:02d}.png")
    s = load_session(name, max_new_tokens=6)
    buf = io.StringIO()
    answer = s.ask("What is this?", [s.media_part(kind, files[kind]) for kind in media], streamer=s.streamer(buf))
    assert buf.getvalue().strip() == answer
    # The prompt holds the media's own tokens: the model saw them.
    prompt = s.encoder.encode_prompt(_last_prompt(s))["input_ids"]
    for kind in media:
        assert int((prompt == s.encoder.media_token_id[kind]).sum()) > 0


def _last_prompt(session):
    from mmtune.data.records import Record

    return Record("p", "test", session.history[:-1])


def test_media_the_model_does_not_take_is_refused(tmp_path):
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"RIFF")
    res = CliRunner().invoke(app, ["chat", "tiny/qwen2-vl", "hi", "--audio", str(wav)])
    assert res.exit_code == 2 and "does not take audio" in res.output and "image" in res.output


def test_a_folder_that_is_no_model_is_named(tmp_path):
    res = CliRunner().invoke(app, ["chat", str(tmp_path), "hi"])
    assert res.exit_code == 2 and "neither a run folder" in res.output


def test_chat_with_a_merged_export_answers_like_the_run(trained, tmp_path):
    run, _, rows = trained
    merged = tmp_path / "merged"
    _invoke("export", run, "--merge", "--out", merged)
    image = tmp_path / "data" / rows[0]["messages"][0]["content"][0]["path"]
    a = load_session(str(run)).ask("How many circles are there?", [{"type": "image", "path": str(image)}])
    b = load_session(str(merged)).ask("How many circles are there?", [{"type": "image", "path": str(image)}])
    assert a == b


def test_one_shot_chat_prints_only_the_answer_on_stdout(trained, tmp_path):
    """In a fresh process (where DeepSpeed, installed, is imported by accelerate's unwrap_model and announces
    its CPU fallback on stdout), `mmtune chat RUN "q"` writes the answer and nothing else to stdout: a script
    can read it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    run, preds, rows = trained
    user = rows[0]["messages"][0]["content"]
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-m", "mmtune.cli", "chat", str(run), user[1]["text"], "--image",
                          str(tmp_path / "data" / user[0]["path"])], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout == preds[0]["prediction"] + "\n", res.stdout
