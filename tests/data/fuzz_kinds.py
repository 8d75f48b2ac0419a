"""Named mutation kinds of users' data, each with the outcome it must have: the fuzzer's random corpus
(fuzz_records.py) proves nothing escapes as a raw exception; these prove where each kind of bad data ends
up -- kept, counted under which reason, or one error naming the file -- and that the counts add up
(records in = kept + skipped by reason) through load, `data inspect`'s scan, training's start-up check
and the encoder.

A kind is one small file (JSONL unless named otherwise) of `n` records in one layout that real users'
data has: JSON of the right syntax and the wrong shape at every level, broken media of every kind
(image modes, truncated / empty / folder / text files, huge headers, 1x1, animated GIF; audio at other
rates, stereo, empty, NaN; video of 1 or 0 frames, cut), whole-file damage (UTF-16, CRLF, a BOM, a
trailing comma, a half-written last line, a JSON array in a .jsonl, JSONL in a .json), wrong columns in
CSV and parquet, duplicate ids, absurd or blank text, surrogates and control tokens, several QA turns
per image and several images with mismatched placeholders.

    PYTHONPATH=src:. python -m tests.data.fuzz_kinds        # prints each kind's outcome
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

OK = "ok"
FILE = "file error"  # one DataError naming the file: a whole-file problem, no record read


@dataclass
class Kind:
    name: str
    fmt: str
    file: str  # its name under the corpus folder (the suffix picks the reader)
    raw: bytes
    n: int  # records in: what the user would count in the file
    expect: str | tuple  # OK, FILE, or the reasons its bad records may be counted under (all n bad)
    kept: int | None = None  # records kept when some of the n are good (default: n for OK, 0 otherwise)
    says: str = ""  # FILE: what the error must name


def j(o) -> bytes:
    return json.dumps(o, ensure_ascii=False).encode("utf-8", "surrogatepass")


def jl(*recs) -> bytes:
    return b"\n".join(j(r) for r in recs) + b"\n"


def msg(user, answer, **extra) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}], **extra}


def img(path, text="How many?", key="path") -> list:
    return [{"type": "image", key: path}, {"type": "text", "text": text}]


def part(kind, path, text="What is it?") -> list:
    return [{"type": kind, "path": path}, {"type": "text", "text": text}]


# ------------------------------------------------------------------------------------------------ media
def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares width x height (CRC right) with one tiny IDAT: a few hundred bytes."""
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xffffffff)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


def write_kind_media(folder: Path) -> None:
    """Good and broken images, audio and video beside the kinds' files."""
    import numpy as np
    import soundfile as sf
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rgb = Image.new("RGB", (32, 32), (200, 30, 10))
    rgb.save(folder / "ok.png")
    rgb.convert("CMYK").save(folder / "cmyk.jpg")
    Image.new("LA", (32, 32), (90, 128)).save(folder / "la.png")
    rgb.convert("P").save(folder / "p.png")
    Image.fromarray((np.arange(32 * 32, dtype=np.uint16).reshape(32, 32) * 60).astype(np.uint16)).save(folder / "i16.png")
    Image.new("RGBA", (32, 32), (1, 2, 3, 0)).save(folder / "rgba.png")
    Image.new("1", (32, 32), 1).save(folder / "one_bit.png")
    Image.new("RGB", (1, 1), (0, 0, 0)).save(folder / "1x1.png")
    Image.new("RGB", (4000, 4), (9, 9, 9)).save(folder / "sliver.png")  # aspect 1000:1
    frames = [Image.new("P", (32, 32), c) for c in (1, 2, 3)]
    frames[0].save(folder / "anim.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    (folder / "huge_header.png").write_bytes(_png_header_only(200_000, 200_000))
    (folder / "wide_header.png").write_bytes(_png_header_only(60_000, 1))
    rgb.save(folder / "ok.jpg")
    (folder / "cut.jpg").write_bytes((folder / "ok.jpg").read_bytes()[:200])
    (folder / "zero.jpg").write_bytes(b"")
    (folder / "notes.jpg").write_text("caption: a red square\n")
    (folder / "dir.jpg").mkdir(exist_ok=True)
    (folder / "gif_as.png").write_bytes((folder / "anim.gif").read_bytes())  # the wrong suffix, a real image

    t = np.linspace(0, 1, 8000, dtype=np.float32)
    tone = 0.3 * np.sin(2 * np.pi * 440 * t)
    sf.write(folder / "ok.wav", np.tile(tone, 2), 16000)
    sf.write(folder / "rate8k.wav", tone, 8000)
    sf.write(folder / "stereo.wav", np.stack([tone, tone[::-1]], axis=1), 16000)
    sf.write(folder / "zero.wav", np.zeros(0, np.float32), 16000)
    sf.write(folder / "one_sample.wav", np.zeros(1, np.float32), 16000)
    nan = tone.copy()
    nan[100:200] = np.nan
    sf.write(folder / "nan.wav", nan, 16000, subtype="FLOAT")
    inf = tone.copy()
    inf[5] = np.inf
    sf.write(folder / "inf.wav", inf, 16000, subtype="FLOAT")
    (folder / "text.wav").write_text("RIFF? no, a transcript\n")
    _videos(folder)


def _videos(folder: Path) -> None:
    import av
    import numpy as np

    def write(path: Path, n: int) -> None:
        with av.open(str(path), "w") as out:
            s = out.add_stream("mpeg4", rate=8)
            s.width, s.height, s.pix_fmt = 32, 32, "yuv420p"
            out.start_encoding()  # the header is written even when no frame follows
            for i in range(n):
                f = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 30 * i % 255, np.uint8), format="rgb24")
                for p in s.encode(f):
                    out.mux(p)
            for p in s.encode():
                out.mux(p)

    write(folder / "ok.mp4", 16)
    write(folder / "one_frame.mp4", 1)
    write(folder / "zero_frames.mp4", 0)
    raw = (folder / "ok.mp4").read_bytes()
    (folder / "cut.mp4").write_bytes(raw[: len(raw) // 3])
    (folder / "text.mp4").write_text("not a video\n")
    (folder / "frames_empty").mkdir(exist_ok=True)


# ------------------------------------------------------------------------------------------------ kinds
def kinds(folder: Path) -> list[Kind]:
    """Every kind, its file written under `folder` (media written first)."""
    write_kind_media(folder)
    out: list[Kind] = []
    good = msg(img("ok.png"), "3")
    png64 = base64.b64encode((folder / "ok.png").read_bytes()).decode()
    m = "messages"
    B = ("bad type", "missing field")  # the shape reasons

    controls = {m: good, "alpaca": {"instruction": "<image>Describe.", "output": "red", "images": ["ok.png"]},
                "chartqa": {"imgname": "ok.png", "query": "Max?", "label": "42"},
                "vqa": {"image": "ok.png", "question": "q", "answer": "3"},
                "ocrvqa": {"image": "ok.png", "questions": ["Title?"], "answers": ["A"]},
                "infovqa": {"image": "ok.png", "question": "q", "answers": ["A"]},
                "fsc147": {"image": "ok.png", "object": "apples", "count": 3}}

    def add(name, recs, expect, fmt=m, kept=None):
        # A good record first in every file: a file of bad records only is one error for the file
        # ("no usable records"), and each kind must be seen as a counted record beside good ones.
        kept = (kept if kept is not None else (len(recs) if expect == OK else 0)) + 1
        out.append(Kind(name, fmt, f"{name}.jsonl", jl(controls[fmt], *recs), len(recs) + 1, expect, kept))

    # JSON of the wrong shape at every level
    add("messages_dict", [{"messages": {"role": "user", "content": "q"}}], B)
    add("messages_string", [{"messages": "user: q\nassistant: a"}], B)
    add("messages_null", [{"messages": None}], B)
    add("content_number", [msg(3, "a")], B)
    add("content_list_of_numbers", [msg([1, 2, 3], "a")], B)
    add("content_nested_lists", [msg([[{"type": "text", "text": "q"}]], "a")], B)
    add("answer_list_of_numbers", [msg("q", [4, 2])], B)
    add("role_missing", [{"messages": [{"content": "q"}, {"role": "assistant", "content": "a"}]}], B)
    add("role_unknown", [{"messages": [{"role": "narrator", "content": "q"}, {"role": "assistant", "content": "a"}]}],
        ("bad conversation",))
    add("role_null", [{"messages": [{"role": None, "content": "q"}, {"role": "assistant", "content": "a"}]}], B)
    add("turn_is_list", [{"messages": [["user", "q"], ["assistant", "a"]]}], B)
    add("part_unknown_type", [msg([{"type": "image_file", "path": "ok.png"}, {"type": "text", "text": "q"}], "a")], B)
    add("part_without_type", [msg([{"path": "ok.png"}, {"type": "text", "text": "q"}], "a")], B)
    add("part_type_number", [msg([{"type": 1, "text": "q"}], "a")], B)
    add("last_turn_user", [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                                         {"role": "user", "content": "and?"}]}], ("bad conversation",))
    add("system_only", [{"messages": [{"role": "system", "content": "be brief"}]}], ("no answer",))
    # image parts: url / path / bytes / base64 variants, broken
    add("image_url_string", [msg([{"type": "image_url", "image_url": "ok.png"}, {"type": "text", "text": "q"}], "a")], OK)
    add("image_url_null", [msg([{"type": "image_url", "image_url": {"url": None}}, {"type": "text", "text": "q"}], "a")],
        ("bad media",))
    add("image_url_data_uri", [msg([{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png64}"}},
                                    {"type": "text", "text": "q"}], "a")], OK)
    add("image_data_uri_broken", [msg([{"type": "image", "url": "data:image/png;base64,iVBORw0KG!!"},
                                       {"type": "text", "text": "q"}], "a")],
        ("bad media",))  # a data URL where a path goes: invalid base64
    add("image_base64_as_path", [msg(img(png64[:120]), "a")], ("missing media", "bad media"))
    add("image_file_url", [msg(img(f"file://{folder / 'ok.png'}"), "a")], OK)  # a file:// URL is its local path
    add("image_data_uri_in_url", [msg([{"type": "image", "url": f"data:image/png;base64,{png64}"},
                                       {"type": "text", "text": "q"}], "a")], OK)  # decoded, as in an image_url part
    add("image_http_url", [msg(img("https://example.com/cat.png"), "a")], ("missing media", "bad media"))
    add("image_bytes_base64_string", [msg(img(png64, key="bytes"), "a")], ("bad type", "corrupt media"))
    for name, why in (("cut.jpg", ("corrupt media",)), ("zero.jpg", ("corrupt media",)),
                      ("dir.jpg", ("not a regular file",)),
                      ("notes.jpg", ("corrupt media",)), ("huge_header.png", ("image too large",)),
                      ("wide_header.png", ("corrupt media",))):
        add(f"image_{name.replace('.', '_')}", [msg(img(name), "a")], why)
    for name in ("1x1.png", "cmyk.jpg", "la.png", "p.png", "i16.png", "rgba.png", "one_bit.png", "anim.gif",
                 "gif_as.png"):
        add(f"image_{name.replace('.', '_')}", [msg(img(name), "a")], OK)
    add("image_sliver_1000_to_1", [msg(img("sliver.png"), "a")], ("processor error",))
    # ShareGPT / LLaVA / alpaca / query-response / label field variants with wrong types
    add("sharegpt_conversations_dict", [{"conversations": {"from": "human", "value": "q"}}], B)
    add("sharegpt_value_number", [{"conversations": [{"from": "human", "value": 7}, {"from": "gpt", "value": "a"}]}], B)
    add("sharegpt_value_null", [{"conversations": [{"from": "human", "value": None}, {"from": "gpt", "value": "a"}]}], B)
    add("sharegpt_from_unknown", [{"conversations": [{"from": "narrator", "value": "q"}, {"from": "gpt", "value": "a"}]}],
        ("bad conversation",))
    add("sharegpt_images_string", [{"conversations": [{"from": "human", "value": "<image>q"}, {"from": "gpt", "value": "a"}],
                                    "images": "ok.png"}], OK)
    add("sharegpt_two_images_one_tag", [{"conversations": [{"from": "human", "value": "<image>q"},
                                                           {"from": "gpt", "value": "a"}], "images": ["ok.png", "ok.png"]}],
        ("placeholder mismatch",))
    add("sharegpt_one_image_two_tags", [{"conversations": [{"from": "human", "value": "<image><image>q"},
                                                           {"from": "gpt", "value": "a"}], "images": ["ok.png"]}],
        ("placeholder mismatch",))
    add("sharegpt_image_no_tag", [{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}],
                                   "images": ["ok.png"]}], OK)  # placed at the start, as ms-swift does
    add("sharegpt_three_images_three_tags", [{"conversations": [{"from": "human", "value": "<image>a<image>b<image>c"},
                                                                {"from": "gpt", "value": "a"}],
                                              "images": ["ok.png", "p.png", "cmyk.jpg"]}], OK)
    add("multi_qa_one_image", [{"messages": [
        {"role": "user", "content": img("ok.png", "How many?")}, {"role": "assistant", "content": "3"},
        {"role": "user", "content": "What colour?"}, {"role": "assistant", "content": "red"},
        {"role": "user", "content": "Shape?"}, {"role": "assistant", "content": "square"}]}], OK)
    add("multi_qa_tag_in_second_turn", [{"conversations": [
        {"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
        {"from": "human", "value": "<image>What?"}, {"from": "gpt", "value": "red"}], "images": ["ok.png"]}], OK)
    al = {"instruction": "<image>Describe.", "input": "", "output": "red", "images": ["ok.png"]}
    add("alpaca_instruction_number", [{**al, "instruction": 5}], OK, fmt="alpaca")  # numbers are text
    add("alpaca_output_list", [{**al, "output": ["red", "square"]}], ("bad type",), fmt="alpaca")
    add("alpaca_output_whitespace", [{**al, "output": "  \n\t "}], ("no answer",), fmt="alpaca")
    add("alpaca_history_string", [{**al, "history": "hi -> hello"}], B, fmt="alpaca")
    add("alpaca_history_triple", [{**al, "history": [["hi", "hello", "extra"]]}], B, fmt="alpaca")
    qr = {"query": "<image>How many?", "response": "3", "images": ["ok.png"]}
    add("query_response_ok", [qr], OK)
    add("query_number", [{**qr, "query": 7}], OK)  # numbers are text
    add("response_null", [{**qr, "response": None}], ("no answer",))
    add("response_list", [{**qr, "response": ["3"]}], B)
    cq = {"imgname": "ok.png", "query": "Max?", "label": "42"}
    add("chartqa_label_number", [{**cq, "label": 42}], OK, fmt="chartqa")
    add("chartqa_label_list_of_numbers", [{**cq, "label": [42, 43]}], OK, fmt="chartqa")
    add("chartqa_label_dict", [{**cq, "label": {"v": 42}}], ("bad type",), fmt="chartqa")
    add("chartqa_label_blank", [{**cq, "label": " "}], ("no answer",), fmt="chartqa")
    add("vqa_answer_empty", [{"image": "ok.png", "question": "q", "answer": ""}], ("no answer",), fmt="vqa")
    add("vqa_question_empty", [{"image": "ok.png", "question": "", "answer": "3"}], OK, fmt="vqa")
    add("ocrvqa_multi_qa", [{"image": "ok.png", "questions": ["Title?", "Author?", "Year?"],
                             "answers": ["A", "B", "1999"]}], OK, fmt="ocrvqa")
    # text: duplicate ids, absurd / blank strings, surrogates, control tokens
    add("duplicate_ids", [{**good, "id": "a"}, {**good, "id": "a"}, {**good, "id": "a"}], OK)
    add("answer_one_megabyte", [msg(img("ok.png"), "y" * 1_000_000)], ("too long",))
    add("question_whitespace_only", [msg(img("ok.png", "   "), "3")], OK)
    add("answer_empty", [msg(img("ok.png"), "")], ("no answer",))
    add("answer_whitespace_only", [msg(img("ok.png"), " \n\t ")], ("no answer",))
    add("answer_part_whitespace_only", [msg(img("ok.png"), [{"type": "text", "text": "  "}])], ("no answer",))
    add("answer_lone_surrogate", [msg(img("ok.png"), "a\ud800b")], ("bad encoding",))
    add("question_control_token", [msg(img("ok.png", "x<|im_start|>assistant\ny"), "3")], ("special token in text",))
    add("answer_control_token", [msg(img("ok.png"), "3<|im_end|>")], ("special token in text",))
    add("text_nul_and_escape_bytes", [msg(img("ok.png", "a\x00b\x1b[31m"), "3")], OK)
    add("text_vision_token", [msg(img("ok.png", "<|vision_start|>x"), "3")], ("special token in text",))
    # media where no media goes, and more shapes of several media per record
    add("image_in_answer", [msg("q", img("ok.png", "red"))], ("bad conversation",))
    add("image_tag_in_answer", [{"conversations": [{"from": "human", "value": "<image>q"},
                                                   {"from": "gpt", "value": "<image> red"}], "images": ["ok.png", "ok.png"]}],
        ("bad conversation",))
    add("image_in_system", [{"messages": [{"role": "system", "content": img("ok.png", "be brief")},
                                          {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}],
        OK)  # the template writes it there
    add("inline_part_and_top_level_list", [{"messages": [{"role": "user", "content": img("ok.png")},
                                                         {"role": "assistant", "content": "a"}], "images": ["p.png"]}],
        OK)  # an untagged list goes first in the first user turn, as ms-swift places it
    add("consecutive_user_turns", [{"messages": [{"role": "user", "content": img("ok.png")},
                                                 {"role": "user", "content": "and?"}, {"role": "assistant", "content": "a"}]}],
        OK)
    add("system_in_the_middle", [{"messages": [{"role": "user", "content": img("ok.png")}, {"role": "system", "content": "s"},
                                               {"role": "assistant", "content": "a"}]}], OK)
    add("id_float_bool_long", [{**good, "id": 1.5}, {**good, "id": True}, {**good, "id": "i" * 5000}], ("bad type",),
        kept=2)  # a bool is no id
    add("keys_capitalised", [{"Messages": good["messages"]}], ("missing field",))
    add("tag_only_question", [{"conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "a"}],
                               "images": ["ok.png"]}], OK)
    add("input_audio_broken_base64", [msg([{"type": "input_audio", "input_audio": {"data": "UklGR!!", "format": "wav"}},
                                           {"type": "text", "text": "q"}], "a")], ("bad media",))
    add("video_frame_list_one_missing", [msg([{"type": "video", "video": ["ok.png", "missing.png", "ok.png"]},
                                              {"type": "text", "text": "q"}], "a")],
        ("missing media",))  # the frames' files (qwen_vl_utils' layout): one of them is missing
    add("vqa_two_images", [{"image": ["ok.png", "p.png"], "question": "Same?", "answer": "no"}], OK, fmt="vqa")
    add("vqa_image_list_empty", [{"image": [], "question": "q", "answer": "3"}], OK, fmt="vqa")  # noted at load
    add("infovqa_answers_blank", [{"image": "ok.png", "question": "q", "answers": [" ", ""]}], ("no answer",),
        fmt="infovqa")
    add("fsc147_count_fraction", [{"image": "ok.png", "object": "apples", "count": "3.5"}], ("bad count", "bad type"),
        fmt="fsc147")
    add("fsc147_count_negative", [{"image": "ok.png", "object": "apples", "count": -1}], ("bad count",), fmt="fsc147")
    # audio and video parts (read by an omni model, which takes all three)
    for name, why in (("ok.wav", OK), ("rate8k.wav", OK), ("stereo.wav", OK), ("zero.wav", ("corrupt media",)),
                      ("one_sample.wav", ("audio too short",)), ("nan.wav", ("corrupt media",)), ("inf.wav", ("corrupt media",)),
                      ("text.wav", ("corrupt media",))):
        add(f"audio_{name.replace('.', '_')}", [msg(part("audio", name), "a tone")], why)
    for name, why in (("ok.mp4", OK), ("one_frame.mp4", ("video too short",)),
                      ("zero_frames.mp4", ("corrupt media",)),
                      ("cut.mp4", ("corrupt media",)), ("text.mp4", ("corrupt media",)),
                      ("frames_empty", ("corrupt media",))):
        add(f"video_{name.replace('.', '_')}", [msg(part("video", name), "grey")], why)

    # whole-file damage
    two = [good, {**good, "id": "b"}]

    def raw(name, data: bytes, n, expect, kept=None, fmt=m, says=""):
        out.append(Kind(name, fmt, name, data, n, expect, kept, says))

    raw("bom.jsonl", b"\xef\xbb\xbf" + jl(*two), 2, OK)
    raw("upper_suffix.JSONL", jl(*two), 2, OK)
    raw("crlf.jsonl", jl(*two).replace(b"\n", b"\r\n"), 2, OK)
    raw("utf16.jsonl", jl(*two).decode().encode("utf-16"), 2, FILE, says="UTF-16")
    raw("utf16.json", j(two).decode().encode("utf-16"), 2, FILE, says="UTF-16")
    raw("trailing_comma.jsonl", b"\n".join(j(r) + b"," for r in two) + b"\n" + j(good) + b"\n", 3, ("bad json",), kept=1)
    raw("half_written_last.jsonl", jl(*two) + j(good)[:25], 3, ("bad json",), kept=2)
    raw("blank_lines.jsonl", b"\n\n" + j(good) + b"\n  \n\t\n" + j(good) + b"\n\n", 2, OK)
    raw("array_in.jsonl", j(two) + b"\n", 2, FILE, says="one JSON array of 2")
    raw("pretty_array_in.jsonl", json.dumps(two, indent=2).encode() + b"\n", 2, FILE, says="one JSON array of 2")
    raw("jsonl_in.json", jl(*two), 2, FILE, says="rename it to jsonl_in.jsonl")
    raw("json_trailing_comma.json", j(two)[:-1] + b",]", 2, FILE)
    raw("wrong_columns.csv", b"picture,prompt,reply\nok.png,How many?,3\nok.png,What?,red\n", 2, FILE,
        says="fields are: picture, prompt, reply", fmt="vqa")
    raw("csv_semicolons.csv", b"image;question;answer\nok.png;How many?;3\n", 1, FILE, fmt="vqa",
        says="fields are: image;question;answer")
    out += _parquet_kinds(folder)
    for k in out:
        if k.file.endswith(".parquet"):
            continue
        (folder / k.file).write_bytes(k.raw)
    return out


def _parquet_kinds(folder: Path) -> list[Kind]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    t = pa.table({"picture": ["ok.png", "ok.png"], "prompt": ["How many?", "What?"], "reply": ["3", "red"]})
    pq.write_table(t, folder / "wrong_columns.parquet")
    out.append(Kind("wrong_columns.parquet", "vqa", "wrong_columns.parquet", b"", 2, FILE,
                    says="fields are: picture, prompt, reply"))
    t = pa.table({"image": [b"garbage", (folder / "ok.png").read_bytes()], "question": ["q", "q"],
                  "answer": [3, 4]})  # answers as int64, an image column of bytes
    pq.write_table(t, folder / "bytes_and_int_answers.parquet")
    out.append(Kind("bytes_and_int_answers.parquet", "vqa", "bytes_and_int_answers.parquet", b"", 2, ("corrupt media",),
                    kept=1))
    return out


# ------------------------------------------------------------------------------------------------ running
def outcome(env_by_model: dict, k: Kind, folder: Path) -> dict:
    """What mmtune made of one kind under data.on_bad_record=skip, and its raw exceptions under either
    policy: {"kept", "skipped" (by reason), "file_error", "raw" (stage: Type: message lines)}."""
    from mmtune.config import load_config
    from mmtune.data.encode import Encoder
    from mmtune.data.inspect import scan_records
    from mmtune.data.sources import load_records
    from mmtune.data.startup_scan import check
    from mmtune.errors import DataError, MMTuneError

    model = "tiny/qwen2.5-omni" if k.name.startswith(("audio_", "video_")) else "tiny/qwen2-vl"
    env = env_by_model[model]
    spec = str(folder / k.file)
    got = {"kept": 0, "skipped": {}, "file_error": None, "raw": []}

    def raw(stage, e):
        if not isinstance(e, MMTuneError):
            got["raw"].append(f"{stage}: {type(e).__name__}: {str(e)[:200]}")

    for policy in ("skip", "error"):
        cfg = load_config(env.cfg_path, [f"data.format={k.fmt}", f"data.train={spec}", f"data.on_bad_record={policy}"])
        enc = Encoder(*env.processor, cfg)
        try:
            rs = load_records(spec, cfg.data, "train")
        except DataError as e:
            if policy == "skip":
                got["file_error"] = str(e)
            continue
        except Exception as e:  # noqa: BLE001 - what escapes mmtune's errors is what this counts
            raw(f"load[{policy}]", e)
            continue
        try:
            scan = scan_records(rs, enc, policy, encode=True)
            if policy == "skip":
                got["kept"], got["skipped"] = len(scan.records.records), dict(scan.records.skipped)
                got["problems"] = scan.records.problems[:3]
                # training's start-up check measures from headers (no pixels, no samples): it may keep what
                # only decoding refuses (the loop counts that when it draws it), never refuse what decodes
                report = check(rs.records, enc, policy)
                if report.error is not None:
                    got["raw"].append(f"startup_check[skip] stopped: {str(report.error)[:300]}")
                elif len(report.lengths) < got["kept"]:
                    got["raw"].append(f"startup_check kept {len(report.lengths)}, inspect kept {got['kept']}")
                for r in scan.records.records[:2]:
                    enc.encode(r)
                    enc.encode_prompt(r)
        except MMTuneError as e:
            if policy == "skip":  # under skip only a whole-file problem may stop the pass, never a record
                got["raw"].append(f"scan[skip] stopped by a record: {str(e)[:300]}")
        except Exception as e:  # noqa: BLE001
            raw(f"scan[{policy}]", e)
    return got


def verdict(k: Kind, got: dict) -> str:
    """'' when the kind ended as it must, else what differs."""
    if got["raw"]:
        return "; ".join(got["raw"])
    if k.expect == FILE:
        if got["file_error"] and k.says in got["file_error"]:
            return ""
        return f"expected one error naming the file and {k.says!r}, got {got}"
    if got["file_error"]:
        return f"whole file refused: {got['file_error'][:300]}"
    kept = k.kept if k.kept is not None else (k.n if k.expect == OK else 0)
    skipped = sum(got["skipped"].values())
    n_records = kept + (k.n - kept)
    if k.fmt == "ocrvqa" and k.expect == OK:
        n_records = kept = 4  # the control and one row of three QA records
    if got["kept"] != kept or got["kept"] + skipped != n_records:
        return f"kept {got['kept']} and skipped {got['skipped']}, expected {kept} kept of {n_records}: {got.get('problems')}"
    allowed = k.expect + (OK,) if isinstance(k.expect, tuple) else (k.expect,)
    wrong = [r for r in got["skipped"] if r not in allowed]
    return f"counted under {wrong}, expected {k.expect}: {got.get('problems')}" if wrong else ""


def make_envs(folder: Path) -> dict:
    from .fuzz_records import make_env

    return {m: make_env(folder / m.replace("/", "_"), m) for m in ("tiny/qwen2-vl", "tiny/qwen2.5-omni")}


def check_kinds(folder: Path) -> tuple[int, list[str]]:
    """(kinds tried, 'kind NAME: what differs' for each that did not end as it must)."""
    envs = make_envs(folder / "envs")
    ks = kinds(folder / "kinds")
    return len(ks), [f"kind {k.name}: {v[:300]}" for k in ks if (v := verdict(k, outcome(envs, k, folder / "kinds")))]


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        envs = make_envs(Path(d))
        folder = Path(d) / "kinds"
        ks = kinds(folder)
        bad = 0
        for k in ks:
            got = outcome(envs, k, folder)
            v = verdict(k, got)
            bad += bool(v)
            shown = got["file_error"][:120] if got["file_error"] else f"kept {got['kept']} skipped {got['skipped']}"
            print(f"{'FAIL' if v else 'ok  '} {k.name:36s} {shown}" + (f"\n      {v[:600]}" if v else ""))
        print(f"{len(ks)} kinds, {bad} not as expected")


if __name__ == "__main__":
    main()
