"""The cases of benchmarks/malformed_data.py: each a small data folder written at run time (media made with PIL,
soundfile and PyAV; nothing downloaded), the data spec to give `data.train`, how many records the input holds and
how many of them are good (at least that many must be kept), extra overrides, and whether `mmtune train` runs it.

`records=None`: the input is not a set of records (a whole-file refusal is the expected outcome, or the count is
not defined); `good=None`: no lower bound on what is kept."""

from __future__ import annotations

import base64
import io
import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

DIR, FIFO = "<dir>", "<fifo>"


@dataclass
class Case:
    name: str
    angle: str  # file | record | media | audio | video
    files: dict  # relative path -> bytes | str (written UTF-8) | DIR | FIFO | callable(path)
    spec: str  # data.train, relative to the case folder ("=NAME": given as it is)
    records: int | None = 2
    good: int | None = 1
    overrides: list = field(default_factory=list)
    train: bool = False


def write_case(folder: Path, case: Case) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for rel, content in case.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == DIR:
            path.mkdir(exist_ok=True)
        elif content == FIFO:
            os.mkfifo(path)
        elif callable(content):
            content(path)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content.replace(b"__ABS__", str(folder).encode()))
    return case.spec[1:] if case.spec.startswith("=") else str(folder / case.spec)  # "=NAME": a name, not a path


# ------------------------------------------------------------------------------------------------- records
def msg(user, answer="red", **extra) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}], **extra}


def img(path="red.png", text="Colour?") -> list:
    return [{"type": "image", "path": path}, {"type": "text", "text": text}]


def jl(*recs) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in recs)


GOOD = msg(img())
GOOD_LINE = json.dumps(GOOD).encode()


# ------------------------------------------------------------------------------------------------- media
def png(size=(32, 32), mode="RGB", fmt="PNG", **kw):
    def write(path):
        from PIL import Image

        colour = {"RGB": (200, 30, 30), "RGBA": (200, 30, 30, 128), "LA": (100, 50), "CMYK": (0, 200, 200, 0),
                  "P": 3, "I;16": 40000, "1": 1}[mode]
        Image.new(mode, size, colour).save(path, fmt, **kw)
    return write


def png_bytes(**kw) -> bytes:
    buf = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (16, 16), (0, 0, 255)).save(buf, "PNG", **kw)
    return buf.getvalue()


def png_header(width: int, height: int) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def gif_animated(path):
    from PIL import Image

    frames = [Image.new("P", (24, 24), i) for i in range(3)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)


def wav(seconds=1.0, sr=16000, channels=1, subtype=None):
    def write(path):
        import numpy as np
        import soundfile as sf

        t = np.arange(int(seconds * sr)) / sr
        wave = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float64)
        data = np.stack([wave] * channels, axis=1) if channels > 1 else wave
        sf.write(str(path), data, sr, subtype=subtype)
    return write


def mp4(n_frames=6, size=(32, 32)):
    def write(path):
        import av
        import numpy as np

        with av.open(str(path), "w") as out:
            vs = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=5)
            vs.width, vs.height, vs.pix_fmt = size[0], size[1], "yuv420p"
            for i in range(n_frames):
                frame = av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), 20 * i, np.uint8), format="rgb24")
                for packet in vs.encode(frame):
                    out.mux(packet)
            for packet in vs.encode(None):
                out.mux(packet)
    return write


def cut(writer, keep: float):
    def write(path):
        writer(path)
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])
    return write


RED = {"red.png": png()}


def rec_case(name, bad_recs, records=None, good=1, angle="record", files=None, train=False, overrides=(), fmt=None):
    """One JSONL file: GOOD first, then the bad records."""
    recs = [GOOD, *bad_recs]
    return Case(name, angle, {**RED, **(files or {}), "d.jsonl": jl(*recs)}, "d.jsonl",
                len(recs) if records is None else records, good,
                [*overrides, *([f"data.format={fmt}"] if fmt else [])], train)


def media_case(name, files, part, good=1, angle="media", train=False, text="Colour?"):
    """GOOD beside a record whose one media part is `part`: (kind, path) or a raw part dict."""
    if isinstance(part, tuple):
        kind, path = part
        part = {"type": kind, "path": path}
    bad = msg([part, {"type": "text", "text": text}])
    if angle in ("audio", "video"):
        good_part = {"audio": {"type": "audio", "path": "ok.wav"}, "video": {"type": "video", "path": "ok.mp4"}}[angle]
        first = msg([good_part, {"type": "text", "text": text}])
        files = {**files, "ok.wav": wav(), "ok.mp4": mp4()}
    else:
        first = GOOD
    return Case(name, angle, {**RED, **files, "d.jsonl": jl(first, bad)}, "d.jsonl", 2, good, [], train)


def _parquet(rows: dict):
    def write(path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table(rows), path)
    return write


def _cases() -> list[Case]:
    c: list[Case] = []
    two = GOOD_LINE + b"\n" + GOOD_LINE + b"\n"
    # --- file level -----------------------------------------------------------------------------------
    c += [
        Case("bom_jsonl", "file", {**RED, "d.jsonl": b"\xef\xbb\xbf" + two}, "d.jsonl", 2, 2, train=True),
        Case("crlf_jsonl", "file", {**RED, "d.jsonl": two.replace(b"\n", b"\r\n")}, "d.jsonl", 2, 2),
        Case("nul_byte_line", "file", {**RED, "d.jsonl": two + b"\x00\x00\x00\n"}, "d.jsonl", 3, 2, train=True),
        Case("nul_inside_json", "file", {**RED, "d.jsonl": two + GOOD_LINE.replace(b"Colour?", b"Col\x00our?") + b"\n"},
             "d.jsonl", 3, 2),
        Case("nul_escaped_text", "file", {**RED, "d.jsonl": two + GOOD_LINE.replace(b"Colour?", b"Col\\u0000our?")
                                          + b"\n"}, "d.jsonl", 3, 2),
        Case("invalid_utf8_line", "file", {**RED, "d.jsonl": two + GOOD_LINE.replace(b"Colour?", b"Col\xff\xfeour?")
                                           + b"\n"}, "d.jsonl", 3, 2, train=True),
        Case("truncated_last_line", "file", {**RED, "d.jsonl": two + GOOD_LINE[:40]}, "d.jsonl", 3, 2, train=True),
        Case("blank_lines", "file", {**RED, "d.jsonl": b"\n   \n" + GOOD_LINE + b"\n\n\t\n" + GOOD_LINE + b"\n\n"},
             "d.jsonl", 2, 2),
        Case("json_array", "file", {**RED, "d.json": json.dumps([GOOD, GOOD])}, "d.json", 2, 2, train=True),
        Case("json_data_key", "file", {**RED, "d.json": json.dumps({"version": 1, "data": [GOOD, GOOD]})}, "d.json", 2,
             2),
        Case("json_data_key_not_list", "file", {**RED, "d.json": json.dumps({"data": "oops"})}, "d.json", None, None),
        Case("json_other_top_key", "file", {**RED, "d.json": json.dumps({"train": [GOOD, GOOD]})}, "d.json", None,
             None),
        Case("json_trailing_garbage", "file", {**RED, "d.json": json.dumps([GOOD, GOOD]) + "\n]}garbage"}, "d.json",
             None, None),
        Case("json_list_of_strings", "file", {**RED, "d.json": json.dumps([GOOD, "hello", 5, None, [1]])}, "d.json", 5,
             1),
        Case("empty_jsonl", "file", {"d.jsonl": b""}, "d.jsonl", None, None),
        Case("whitespace_only_jsonl", "file", {"d.jsonl": b"\n \n\t\n"}, "d.jsonl", None, None),
        Case("empty_json", "file", {"d.json": b""}, "d.json", None, None),
        Case("empty_csv", "file", {"d.csv": b""}, "d.csv", None, None),
        Case("csv_header_only", "file", {"d.csv": b"question,answer,image\n"}, "d.csv", None, None),
        Case("empty_parquet", "file", {"d.parquet": _parquet({"messages": []})}, "d.parquet", None, None),
        Case("parquet_wrong_columns", "file", {"d.parquet": _parquet({"foo": [1, 2], "bar": ["a", "b"]})}, "d.parquet",
             None, None),
        Case("parquet_messages_as_json_text", "file", {**RED, "d.parquet": _parquet(
            {"messages": [json.dumps(GOOD["messages"])] * 2})}, "d.parquet", 2, None),
        Case("parquet_vqa_int_answers", "file", {**RED, "d.parquet": _parquet(
            {"image": ["red.png", "red.png"], "question": ["How many?", "Year?"], "answer": [3, 1999]})},
             "d.parquet", 2, 2, ["data.format=vqa"], True),
        Case("csv_missing_column", "file", {**RED, "d.csv": "image,question\nred.png,Colour?\n"}, "d.csv", None, None,
             ["data.format=vqa"]),
        Case("csv_wrong_columns", "file", {**RED, "d.csv": "a,b\n1,2\n3,4\n"}, "d.csv", None, None),
        Case("directory_as_data", "file", {"d.jsonl": DIR}, "d.jsonl", None, None),
        Case("empty_directory", "file", {"data/": DIR}, "data", None, None),
        Case("fifo_as_data", "file", {"d.jsonl": FIFO}, "d.jsonl", None, None),
        Case("gzip_jsonl", "file", {"d.jsonl.gz": __import__("gzip").compress(two)}, "d.jsonl.gz", None, None),
        Case("huge_single_line", "file", {**RED, "d.jsonl": jl(GOOD, msg(img(), "x " * 3_000_000))}, "d.jsonl", 2, 1,
             train=True),
        Case("huge_line_not_json", "file", {**RED, "d.jsonl": GOOD_LINE + b"\n" + b"{" * 5_000_000 + b"\n"},
             "d.jsonl", 2, 1),
        Case("duplicate_keys", "file", {**RED, "d.jsonl": GOOD_LINE + b"\n" + b'{"messages": ' +
                                        json.dumps(GOOD["messages"]).encode() + b', "messages": []}\n'},
             "d.jsonl", 2, 1),
        Case("nan_infinity_literals", "file", {**RED, "d.jsonl": GOOD_LINE + b"\n" + json.dumps(
            msg(img(), float("nan"))).encode() + b"\n" + b'{"image": "red.png", "question": "Q?", "answer": Infinity}'
            + b"\n"}, "d.jsonl", 3, 1),
        Case("nan_vqa_answer", "file", {**RED, "d.jsonl": jl({"image": "red.png", "question": "Q?", "answer": "a"})
                                        + b'{"image": "red.png", "question": "Q?", "answer": NaN}\n'
                                        + b'{"image": "red.png", "question": -Infinity, "answer": "b"}\n'},
             "d.jsonl", 3, 1, ["data.format=vqa"], True),
        Case("numbers_for_strings", "file", {**RED, "d.jsonl": jl(GOOD, {"messages": [
            {"role": "user", "content": 42}, {"role": "assistant", "content": 7}]},
            {"messages": [{"role": 1, "content": "hi"}, {"role": "assistant", "content": "x"}]},
            msg(img(path=5)))}, "d.jsonl", 4, 1, train=True),
        Case("deeply_nested_lists", "file", {**RED, "d.jsonl": GOOD_LINE + b"\n" + b'{"messages": ' + b"[" * 100_000
                                             + b"]" * 100_000 + b"}\n"}, "d.jsonl", 2, 1),
        Case("nested_lists_50", "file", {**RED, "d.jsonl": jl(GOOD, {"messages": [[[[[[{"role": "user"}]]]]]]})},
             "d.jsonl", 2, 1),
        Case("csv_multiline_cells", "file", {**RED, "d.csv": 'image,question,answer\nred.png,"Colour\nof it?",red\n'
                                             'red.png,"unterminated,red\n'}, "d.csv", None, 1, ["data.format=vqa"]),
    ]
    # --- the same through data.streaming, a bad eval split and a mixture with a broken source -----------------
    stream = ["data.streaming=true"]
    c += [
        Case("stream_bad_lines", "file", {**RED, "d.jsonl": b"\xef\xbb\xbf" + two + b"\x00\n" + GOOD_LINE.replace(
            b"Colour?", b"\xff") + b"\n\n" + GOOD_LINE[:30]}, "d.jsonl", 5, 2, stream, True),
        Case("stream_fifo", "file", {"d.jsonl": FIFO}, "d.jsonl", None, None, stream, True),
        Case("stream_empty_dir", "file", {"data/": DIR}, "data", None, None, stream, True),
        Case("stream_json_array", "file", {**RED, "d.json": json.dumps([GOOD, GOOD])}, "d.json", None, None, stream),
        Case("eval_split_malformed", "file", {**RED, "d.jsonl": two, "e.jsonl": two + b"{oops\n" + jl(
            msg(img("gone.png")))}, "d.jsonl", 2, 2, ["data.eval=__DIR__/e.jsonl", "eval.every=1"], True),
        Case("mixture_broken_source", "file", {**RED, "d.jsonl": two, "bad.jsonl": b"not json\n"}, "d.jsonl", None,
             None, ["data.train=[{path: __DIR__/d.jsonl}, {path: __DIR__/bad.jsonl}]"], True),
        Case("dataset_info_broken", "file", {**RED, "d.jsonl": two, "dataset_info.json": json.dumps(
            {"mine": {"file_name": "d.jsonl", "formatting": "sharegpt", "columns": {"messages": "conversations"}}})},
             "=mine", None, None, ["data.dataset_info=__DIR__/dataset_info.json"], True),
    ]
    # --- record level ---------------------------------------------------------------------------------
    u = lambda t: {"role": "user", "content": t}  # noqa: E731
    a = lambda t: {"role": "assistant", "content": t}  # noqa: E731
    c += [
        rec_case("messages_wrong_roles", [{"messages": [{"role": "human", "content": img()}, a("x")]},
                                          {"messages": [u(img()), {"role": "bot", "content": "x"}]},
                                          {"messages": [{"role": "", "content": "x"}, a("y")]}], train=True),
        rec_case("messages_empty_turns", [{"messages": [u(""), a("x")]}, {"messages": [u(img()), a("")]},
                                          {"messages": [u([]), a("x")]}, {"messages": []}], good=None),
        rec_case("messages_none_content", [{"messages": [u(None), a("x")]}, {"messages": [u(img()), a(None)]},
                                           {"messages": None}, {"messages": [None, None]}], train=True),
        rec_case("messages_assistant_less", [{"messages": [u(img())]}, {"messages": [u(img()), u("more")]},
                                             {"messages": [{"role": "system", "content": "sys"}]}], train=True),
        rec_case("messages_assistant_first", [{"messages": [a("x"), u(img())]}]),
        rec_case("several_qa_per_image", [{"messages": [u(img()), a("red"), u("And shape?"), a("square"),
                                                        u("Size?"), a("small")]}], good=2, train=True),
        rec_case("sharegpt_from_value", [
            {"conversations": [{"from": "human", "value": "<image>Colour?"}, {"from": "gpt", "value": "red"}],
             "images": ["red.png"]},
            {"conversations": [{"from": "robot", "value": "<image>x"}, {"from": "gpt", "value": "y"}], "images": ["red.png"]},
            {"conversations": [{"from": "human", "value": None}, {"from": "gpt", "value": "y"}]},
            {"conversations": [{"from": "human", "value": "<image>x"}], "images": ["red.png"]},
            {"conversations": [], "images": []},
            {"conversations": [{"from": "human"}, {"from": "gpt", "value": "y"}]}], good=2, train=True),
        rec_case("placeholders_more_tags", [
            {"conversations": [{"from": "human", "value": "<image><image>two?"}, {"from": "gpt", "value": "y"}],
             "images": ["red.png"]},
            {"messages": [u("<image> and <image>"), a("y")], "images": ["red.png"]}], train=True),
        rec_case("placeholders_fewer_tags", [
            {"conversations": [{"from": "human", "value": "<image>two?"}, {"from": "gpt", "value": "y"}],
             "images": ["red.png", "red.png"]},
            {"messages": [u([{"type": "image", "path": "red.png"}, {"type": "text", "text": "<image>?"}]), a("y")]}],
            good=None),
        rec_case("images_list_bad_entries", [
            {"messages": [u("x"), a("y")], "images": [None]},
            {"messages": [u("<image>x"), a("y")], "images": [""]},
            {"messages": [u("<image>x"), a("y")], "images": [{"nope": 1}]},
            {"messages": [u("<image>x"), a("y")], "images": "red.png"}], good=None),
        rec_case("query_response", [
            {"query": "<image>Colour?", "response": "red", "images": ["red.png"]},
            {"query": "Colour?", "response": None, "images": ["red.png"]},
            {"query": "", "response": "red"},
            {"query": "q", "response": "r", "history": [["a"]]},
            {"query": "q", "response": "r", "history": "nope"}], good=2, train=True),
        rec_case("query_label", [{"query": "How many?", "label": "3", "image": "red.png"},
                                 {"query": "How many?", "label": None, "image": "red.png"},
                                 {"query": None, "label": "3", "image": "red.png"}], good=1,
                 fmt="chartqa", files={"png/red.png": png()}),
        rec_case("vqa_answers_shapes", [{"image": "red.png", "question": "Q?", "answers": []},
                                        {"image": "red.png", "question": "Q?", "answers": [None]},
                                        {"image": "red.png", "question": "Q?", "answers": [{"answer": "x"}]},
                                        {"image": ["red.png", "red.png"], "question": "<image>Q?", "answer": "x"}],
                 records=5, good=0, fmt="vqa"),
        rec_case("alpaca_shapes", [{"instruction": "<image>What?", "input": "", "output": "red", "images": ["red.png"]},
                                   {"instruction": None, "input": "x", "output": "y"},
                                   {"instruction": "x", "input": None, "output": "y"},
                                   {"instruction": "x", "output": ""}], good=2),
        Case("dpo_pairs", "record", {**RED, "d.jsonl": jl(
            {"prompt": "<image>Colour?", "chosen": "red", "rejected": "blue", "images": ["red.png"]},
            {"prompt": "<image>Colour?", "chosen": "red", "rejected": "blue", "images": ["red.png"]},
            {"prompt": "<image>Colour?", "chosen": None, "rejected": "blue", "images": ["red.png"]},
            {"prompt": "<image>Colour?", "chosen": "red", "images": ["red.png"]},
            {"prompt": "Colour?", "chosen": [], "rejected": [], "images": ["red.png"]},
            {"prompt": "<image><image>Colour?", "chosen": "red", "rejected": "blue", "images": ["red.png"]},
            {"prompt": "Colour?", "chosen": [u("x")], "rejected": [a("y")]},
            {"prompt": [u("hi")], "chosen": [a("a")], "rejected": "b"},
            {"chosen": "red", "rejected": "blue"})}, "d.jsonl", 9, 2,
             ["data.format=preference", "train.objective=dpo", "adapter.method=lora"], True),
        Case("grpo_prompts", "record", {**RED, "d.jsonl": jl(GOOD, GOOD, {"messages": [u(img())]},
                                                             {"messages": [u(img()), a("")]},
                                                             {"messages": [u(img()), a(None)]},
                                                             {"messages": [u(""), a("red")]})},
             "d.jsonl", 6, 2, ["train.objective=grpo", "train.grpo.generations=2", "train.grpo.max_completion_length=2",
                               "train.grpo.rewards=[{name: exact_match}]", "adapter.method=lora"], True),
    ]
    # --- images ---------------------------------------------------------------------------------------
    c += [
        media_case("image_zero_byte", {"z.png": b""}, ("image", "z.png"), train=True),
        media_case("image_truncated_png", {"t.png": cut(png((64, 64)), 0.5)}, ("image", "t.png"), train=True),
        media_case("image_truncated_jpeg", {"t.jpg": cut(png((64, 64), fmt="JPEG"), 0.5)}, ("image", "t.jpg"),
                   good=None, train=True),
        media_case("image_text_as_png", {"t.png": b"this is not an image\n"}, ("image", "t.png")),
        media_case("image_1x1", {"one.png": png((1, 1))}, ("image", "one.png"), good=None, train=True),
        media_case("image_1x5000", {"sliver.png": png((1, 5000))}, ("image", "sliver.png"), good=None, train=True),
        media_case("image_rgba", {"i.png": png(mode="RGBA")}, ("image", "i.png"), good=2),
        media_case("image_palette", {"i.png": png(mode="P")}, ("image", "i.png"), good=2),
        media_case("image_16bit", {"i.png": png(mode="I;16")}, ("image", "i.png"), good=2),
        media_case("image_cmyk_jpeg", {"i.jpg": png(mode="CMYK", fmt="JPEG")}, ("image", "i.jpg"), good=2),
        media_case("image_la", {"i.png": png(mode="LA")}, ("image", "i.png"), good=2),
        media_case("image_1bit", {"i.png": png(mode="1")}, ("image", "i.png"), good=2),
        media_case("image_bomb_60000", {"b.png": png_header(60000, 60000)}, ("image", "b.png"), train=True),
        media_case("image_animated_gif", {"a.gif": gif_animated}, ("image", "a.gif"), good=2, train=True),
        media_case("image_directory", {"imgdir.png": DIR}, ("image", "imgdir.png")),
        media_case("image_fifo", {"p.png": FIFO}, ("image", "p.png")),
        media_case("image_outside_dataset", {"../outside.png": png()}, ("image", "../outside.png"), good=2),
        media_case("image_outside_missing", {}, ("image", "../../../nonexistent/x.png")),
        media_case("image_file_uri_ok", {}, {"type": "image_url", "image_url": {"url": "file://__ABS__/red.png"}},
                   good=2),
        media_case("image_file_uri_missing", {}, {"type": "image_url", "image_url": {"url": "file:///nope/x.png"}}),
        media_case("image_http_url", {}, {"type": "image_url", "image_url": {"url": "http://10.255.255.1/x.png"}},
                   train=True),
        media_case("image_https_path", {}, ("image", "https://example.invalid/x.png")),
        media_case("image_data_uri_broken_b64", {}, {"type": "image_url", "image_url": {
            "url": "data:image/png;base64,iVBORw0KGgo!!!not base64"}}),
        media_case("image_data_uri_not_image", {}, {"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(b"hello world").decode()}}),
        media_case("image_data_uri_ok", {}, {"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(png_bytes()).decode()}}, good=2),
        media_case("image_data_uri_no_comma", {}, {"type": "image_url", "image_url": {"url": "data:image/png;base64"}}),
        media_case("image_empty_path", {}, ("image", "")),
        media_case("image_path_none", {}, ("image", None)),
    ]
    # --- audio (tiny Qwen2.5-Omni) -------------------------------------------------------------------
    c += [
        media_case("audio_zero_length_wav", {"z.wav": wav(seconds=0.0)}, ("audio", "z.wav"), angle="audio", train=True),
        media_case("audio_zero_byte", {"z.wav": b""}, ("audio", "z.wav"), angle="audio"),
        media_case("audio_corrupt_header", {"c.wav": lambda p: (wav()(p), p.write_bytes(b"RIFX\xff\xff" +
                                                                                         p.read_bytes()[6:]))},
                   ("audio", "c.wav"), angle="audio", train=True),
        media_case("audio_truncated", {"c.wav": cut(wav(), 0.3)}, ("audio", "c.wav"), angle="audio"),
        media_case("audio_stereo", {"s.wav": wav(channels=2)}, ("audio", "s.wav"), angle="audio", good=2, train=True),
        media_case("audio_8khz", {"s.wav": wav(sr=8000)}, ("audio", "s.wav"), angle="audio", good=2),
        media_case("audio_96khz", {"s.wav": wav(sr=96000)}, ("audio", "s.wav"), angle="audio", good=2),
        media_case("audio_float64", {"s.wav": wav(subtype="DOUBLE")}, ("audio", "s.wav"), angle="audio", good=2,
                   train=True),
        media_case("audio_text_as_wav", {"t.wav": b"not audio at all\n"}, ("audio", "t.wav"), angle="audio"),
        media_case("audio_directory", {"d.wav": DIR}, ("audio", "d.wav"), angle="audio"),
        media_case("audio_missing", {}, ("audio", "nope.wav"), angle="audio"),
    ]
    # --- video (tiny Qwen2.5-Omni, model.video_frames=2) --------------------------------------------
    c += [
        media_case("video_corrupt_mp4", {"c.mp4": cut(mp4(), 0.4)}, ("video", "c.mp4"), angle="video", good=None,
                   train=True),
        media_case("video_garbage_mp4", {"g.mp4": b"\x00\x00\x00\x18ftypmp42" + b"\xde\xad" * 500}, ("video", "g.mp4"),
                   angle="video", train=True),
        media_case("video_zero_frames", {"z.mp4": mp4(n_frames=0)}, ("video", "z.mp4"), angle="video"),
        media_case("video_single_frame", {"one.mp4": mp4(n_frames=1)}, ("video", "one.mp4"), angle="video",
                   good=None, train=True),
        media_case("video_text_as_mp4", {"t.mp4": b"hello"}, ("video", "t.mp4"), angle="video"),
        media_case("video_frames_missing", {"f/0.png": png(), "f/1.png": png()},
                   {"type": "video", "video": ["f/0.png", "f/1.png", "f/2.png", "f/3.png"]}, angle="video"),
        media_case("video_frames_empty_list", {}, {"type": "video", "video": []}, angle="video"),
        media_case("video_frames_folder_empty", {"frames/": DIR}, ("video", "frames"), angle="video"),
        media_case("video_frames_folder_mixed", {"fr/0.png": png(), "fr/1.png": b"junk", "fr/notes.txt": b"hi"},
                   ("video", "fr"), angle="video", good=None, train=True),
    ]
    return c


CASES = _cases()
