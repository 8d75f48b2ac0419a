"""Malformed records of every format, as users' data files really contain them (and a fuzzer's).

`write_cases(folder)` writes the media a record may point at (good and bad) and returns a list of
(format, raw line bytes) -- JSONL lines that are each broken in one way. `fuzz_lines(fmt, n, seed)`
mutates good records at random (types swapped, fields dropped, bytes flipped, nesting deepened).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

GOOD = {
    "messages": {"messages": [{"role": "user", "content": [{"type": "image", "path": "ok.png"},
                                                           {"type": "text", "text": "How many?"}]},
                              {"role": "assistant", "content": "3"}]},
    "vqa": {"image": "ok.png", "question": "How many?", "answer": "3"},
    "chartqa": {"imgname": "ok.png", "query": "What is the max?", "label": "42"},
    "infovqa": {"image": "ok.png", "question": "Which year?", "answers": ["1999", "in 1999"]},
    "ocrvqa": {"image": "ok.png", "questions": ["Title?", "Author?"], "answers": ["A book", "Someone"]},
}


def tiny_processor(name: str):
    """(processor, family) of a tiny model, for Encoder(processor, family, cfg); no weights built."""
    from mmtune.models.families import get_family
    from mmtune.models.tiny import tiny_config_and_processor, tiny_spec

    return tiny_config_and_processor(name)[1], get_family(tiny_spec(name).family)


def write_media(folder: Path) -> None:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32), (10, 200, 30)).save(folder / "ok.png")
    (folder / "text.png").write_text("this is not an image")
    (folder / "empty.png").write_bytes(b"")
    data = (folder / "ok.png").read_bytes()
    (folder / "truncated.png").write_bytes(data[: len(data) // 2])
    # A decompression bomb: a tiny file that declares 14000 x 14000 pixels (PIL refuses > 2 x 89 M).
    Image.new("1", (14000, 14000)).save(folder / "bomb.png")
    (folder / "adir.png").mkdir(exist_ok=True)
    if not (folder / "pipe.png").exists():
        os.mkfifo(folder / "pipe.png")  # opening it for reading would wait forever for a writer
    (folder / "noise.wav").write_bytes(bytes(random.Random(0).randrange(256) for _ in range(2000)))
    (folder / "noise.mp4").write_bytes(bytes(random.Random(1).randrange(256) for _ in range(2000)))


def _msg(user, answer, **extra) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}], **extra}


def _img(path, text="How many?"):
    return [{"type": "image", "path": path}, {"type": "text", "text": text}]


def cases() -> list[tuple[str, bytes, str]]:
    """(format, line, what is wrong): one of each kind of malformed record the issue and users met."""
    def j(o) -> bytes:
        return json.dumps(o).encode()

    m = "messages"
    out = [
        (m, b'{"messages": [{"role": "user", "content": "caf\xe9 \xff"}]}', "invalid UTF-8"),
        (m, b"[" * 50000 + b"]" * 50000, "deeply nested JSON"),
        (m, b'{"messages": ' + b'{"a":' * 30000 + b"1" + b"}" * 30000 + b"}", "deeply nested objects"),
        (m, b'{"messages": [', "truncated line"),
        (m, j({"messages": [{"role": "assistant", "content": "3"}, {"role": "user", "content": "How many?"}]}),
         "assistant before any user turn"),
        (m, j({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "3"}]}),
         "assistant right after system"),
        (m, j(_msg("How many?", [{"type": "text", "text": 5}])), "non-string answer part"),
        (m, j(_msg("How many?", [{"type": "text", "text": {"a": 1}}])), "dict answer part"),
        (m, j(_msg("How many?", [{"type": "text", "text": None}])), "null answer part"),
        (m, j(_msg([{"type": "text", "text": ["x"]}], "3")), "list question part"),
        (m, j(_msg("How many?", 3)), "number as content"),
        (m, j(_msg("How many?", {"text": "3"})), "object as content"),
        (m, j(_msg("How many?", True)), "bool as content"),
        (m, j({"messages": [{"role": 1, "content": "x"}, {"role": "assistant", "content": "3"}]}), "number role"),
        (m, j({"messages": [{"role": ["user"], "content": "x"}, {"role": "assistant", "content": "3"}]}), "list role"),
        (m, j({"messages": [{"role": "wizard", "content": "x"}, {"role": "assistant", "content": "3"}]}), "unknown role"),
        (m, j({"messages": "hello"}), "messages is a string"),
        (m, j({"messages": []}), "empty messages"),
        (m, j({"messages": [None, 3]}), "messages of non-objects"),
        (m, j({"messages": {"role": "user"}}), "messages is an object"),
        (m, j(_msg([{"type": "image", "bytes": "not bytes"}, {"type": "text", "text": "q"}], "3")), "bytes as a string"),
        (m, j(_msg([{"type": "image", "bytes": [1, 2, 3]}, {"type": "text", "text": "q"}], "3")), "bytes as a list"),
        (m, j(_msg([{"type": "image", "image": "no_such_file.png"}, {"type": "text", "text": "q"}], "3")),
         "image key: a string that is not a file"),
        (m, j(_msg([{"type": "image", "image": 12}, {"type": "text", "text": "q"}], "3")), "image key: a number"),
        (m, j(_msg([{"type": "image", "image": {"x": 1}}, {"type": "text", "text": "q"}], "3")), "image key: an object"),
        (m, j(_msg([{"type": "video", "video": 7}, {"type": "text", "text": "q"}], "3")), "video key: a number"),
        (m, j(_msg([{"type": "audio", "audio": "zzz"}, {"type": "text", "text": "q"}], "3")), "audio key: a string"),
        (m, j(_msg([{"type": "image", "path": 5}, {"type": "text", "text": "q"}], "3")), "path is a number"),
        (m, j(_msg([{"type": "image", "path": {"p": 1}}, {"type": "text", "text": "q"}], "3")), "path is an object"),
        (m, j(_msg([{"type": "image", "path": ""}, {"type": "text", "text": "q"}], "3")), "empty path"),
        (m, j(_msg([{"type": "image", "path": "."}, {"type": "text", "text": "q"}], "3")), "path is the folder"),
        (m, j(_msg(_img("text.png"), "3")), "text file named .png"),
        (m, j(_msg(_img("empty.png"), "3")), "zero-byte image"),
        (m, j(_msg(_img("truncated.png"), "3")), "truncated PNG"),
        (m, j(_msg(_img("bomb.png"), "3")), "decompression bomb PNG"),
        (m, j(_msg(_img("pipe.png"), "3")), "named pipe as media"),
        (m, j(_msg(_img("adir.png"), "3")), "folder as image"),
        (m, j(_msg(_img("/dev/zero"), "3")), "device as image"),
        (m, j(_msg([{"type": "video", "path": "noise.mp4"}, {"type": "text", "text": "q"}], "3")), "noise as video"),
        (m, j(_msg([{"type": "video", "path": "pipe.png"}, {"type": "text", "text": "q"}], "3")), "pipe as video"),
        (m, j(_msg([{"type": "audio", "path": "noise.wav"}, {"type": "text", "text": "q"}], "3")), "noise as audio"),
        (m, j(_msg([{"type": "audio", "path": "pipe.png"}, {"type": "text", "text": "q"}], "3")), "pipe as audio"),
        (m, j(_msg("<image> How many?", "3", images=[7])), "top-level image list of numbers"),
        (m, j(_msg("<image> How many?", "3", images=[{"nothing": 1}])), "top-level image without path"),
        (m, j(_msg("<image> <image> How many?", "3", images=["ok.png"])), "placeholder without media"),
        (m, j(_msg("How many?", "3", id={"a": 1})), "object id"),
        (m, j(_msg("How many?", "")), "empty answer"),
        (m, j(_msg("x " * 3000, "3")), "too long"),
        (m, b"NaN", "NaN as a record"),
        (m, b"null", "null record"),
        (m, b'"just a string"', "string record"),
        (m, b"[1, 2, 3]", "list record"),
        ("vqa", j({"image": "ok.png", "question": {"q": 1}, "answer": "3"}), "object question"),
        ("vqa", j({"image": "ok.png", "question": "q", "answer": {"a": 1}}), "object answer"),
        ("vqa", j({"image": "ok.png", "question": "q", "answer": [{"a": 1}]}), "list of objects as answer"),
        ("vqa", j({"image": "ok.png", "question": "q", "answer": True}), "bool answer"),
        ("vqa", j({"image": "ok.png", "question": "q", "answer": None}), "null answer"),
        ("vqa", j({"image": 5, "question": "q", "answer": "3"}), "number image"),
        ("vqa", j({"image": [None], "question": "q", "answer": "3"}), "null in image list"),
        ("vqa", j({"image": {"bytes": "abc"}, "question": "q", "answer": "3"}), "image bytes as a string"),
        ("vqa", j({"image": "pipe.png", "question": "q", "answer": "3"}), "named pipe image"),
        ("vqa", j({"image": "bomb.png", "question": "q", "answer": "3"}), "bomb image"),
        ("chartqa", j({"imgname": "ok.png", "query": None, "label": "1"}), "null query"),
        ("chartqa", j({"imgname": "ok.png", "query": "q", "label": [[1]]}), "nested label"),
        ("infovqa", j({"image": "ok.png", "question": "q", "answers": []}), "no answers"),
        ("infovqa", j({"image": "ok.png", "question": "q", "answers": [{"x": 1}, "ok"]}), "object among answers"),
        ("ocrvqa", j({"image": "ok.png", "questions": ["a", "b"], "answers": ["x"]}), "unpaired questions"),
        ("ocrvqa", j({"image": "ok.png", "questions": "a", "answers": {"x": 3}}), "object answers"),
        ("ocrvqa", j({"image": "ok.png", "questions": [["a"]], "answers": [["b"]]}), "nested lists"),
    ]
    return out


_VALUES = [None, True, 0, -1, 3.5, float("nan"), "", "x", "ok.png", "pipe.png", "bomb.png", "text.png", [], [None],
           {}, {"type": "image"}, {"bytes": "x"}, {"path": 3}, [{"type": "text", "text": 1}], "\ud800", "<image>",
           {"role": "assistant"}, [[["deep"]]], "/dev/zero", "adir.png", "../../etc/passwd"]


def _mutate(obj, rng: random.Random, depth=0):
    """Replace, drop or wrap one value somewhere inside `obj` (a JSON-like tree)."""
    if isinstance(obj, dict) and obj and depth < 6:
        k = rng.choice(list(obj))
        r = rng.random()
        obj = dict(obj)
        if r < 0.15:
            del obj[k]
        elif r < 0.55:
            obj[k] = rng.choice(_VALUES)
        else:
            obj[k] = _mutate(obj[k], rng, depth + 1)
        return obj
    if isinstance(obj, list) and obj and depth < 6:
        obj = list(obj)
        i = rng.randrange(len(obj))
        r = rng.random()
        if r < 0.15:
            del obj[i]
        elif r < 0.3:
            obj.insert(0, obj[i])  # reorders turns: an assistant before the user, two users, ...
        elif r < 0.55:
            obj[i] = rng.choice(_VALUES)
        else:
            obj[i] = _mutate(obj[i], rng, depth + 1)
        return obj
    return rng.choice(_VALUES)


def fuzz_lines(fmt: str, n: int, seed: int = 0) -> list[bytes]:
    """n malformed JSONL lines of format `fmt`: structural mutations of a good record, and byte-level
    damage (flipped bytes, cut lines) of its JSON text."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        rec = GOOD[fmt]
        for _ in range(rng.randint(1, 3)):
            rec = _mutate(rec, rng)
        raw = json.dumps(rec).encode("utf-8", "surrogatepass")
        r = rng.random()
        if r < 0.1 and raw:
            b = bytearray(raw)
            b[rng.randrange(len(b))] = rng.randrange(256)
            raw = bytes(b)
        elif r < 0.15:
            raw = raw[: rng.randrange(len(raw))]
        lines.append(raw.replace(b"\n", b" ") or b"{}")
    return lines
