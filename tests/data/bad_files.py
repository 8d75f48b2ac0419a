"""Whole files as users' tools really write them, each wrong (or unusual) in one way.

`write_all(folder)` writes every case and returns {name: Path}. Records are tiny Qwen2-VL `messages`
records pointing at `ok.png` beside them, so a file's good records train. Kept apart from
malformed.py (one broken *record* per line): here the *file* is the problem -- its encoding, its
container, its top level, or a media file whose pixel / sample format is unusual.
"""

from __future__ import annotations

import json
import math
import struct
import wave
from pathlib import Path

GOOD_IMAGE = "ok.png"


def record(i: int, image: str = GOOD_IMAGE, answer: str | None = None, **extra) -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "image", "path": image},
                                                       {"type": "text", "text": f"How many? ({i})"}]},
                         {"role": "assistant", "content": answer if answer is not None else str(i % 5)}], **extra}


def _jsonl(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def _csv(rows: list[list[str]]) -> str:
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


CSV_HEADER = ["image", "question", "answer"]


def write_images(folder: Path) -> dict[str, Path]:
    import numpy as np
    from PIL import Image

    out = {}
    Image.new("RGB", (32, 32), (10, 200, 30)).save(folder / GOOD_IMAGE)
    # 16-bit greyscale (scanners, medical, depth maps): a ramp over the whole 16-bit range.
    ramp = (np.arange(32 * 32, dtype=np.uint32).reshape(32, 32) * 64).astype(np.uint16)
    Image.fromarray(ramp).save(folder / "grey16.png")
    out["grey16.png"] = folder / "grey16.png"
    pal = Image.new("P", (32, 32))
    pal.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    pal.info["transparency"] = 0
    pal.save(folder / "palette.png", transparency=0)
    out["palette.png"] = folder / "palette.png"
    Image.new("CMYK", (32, 32), (0, 255, 255, 0)).save(folder / "cmyk.jpg")
    out["cmyk.jpg"] = folder / "cmyk.jpg"
    Image.new("LA", (32, 32), (128, 0)).save(folder / "grey_alpha.png")
    out["grey_alpha.png"] = folder / "grey_alpha.png"
    (folder / "a_folder.png").mkdir(exist_ok=True)
    out["a_folder.png"] = folder / "a_folder.png"
    return out


def write_audio(folder: Path) -> dict[str, Path]:
    out = {}
    with wave.open(str(folder / "ok.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i / 10))) for i in range(8000)))
    out["ok.wav"] = folder / "ok.wav"
    with wave.open(str(folder / "zero_samples.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(b"")
    out["zero_samples.wav"] = folder / "zero_samples.wav"
    data = (folder / "ok.wav").read_bytes()
    (folder / "truncated.wav").write_bytes(data[:30])  # cut inside the header
    out["truncated.wav"] = folder / "truncated.wav"
    return out


def write_data_files(folder: Path) -> dict[str, Path]:
    """Data files; each holds 3 records unless its name says otherwise."""
    out = {}
    recs = [record(i) for i in range(3)]

    def put(name: str, data: bytes) -> None:
        (folder / name).write_bytes(data)
        out[name] = folder / name

    put("bom.jsonl", b"\xef\xbb\xbf" + _jsonl(recs))  # Windows tools write UTF-8 with a byte-order mark
    put("bom.json", b"\xef\xbb\xbf" + json.dumps(recs).encode())
    rows = [CSV_HEADER] + [[GOOD_IMAGE, f"How many? ({i})", str(i)] for i in range(3)]
    put("bom.csv", b"\xef\xbb\xbf" + _csv(rows).encode())
    # latin-1 (Excel's default on Western Windows): the second data row holds 'é' as byte 0xe9.
    latin = [CSV_HEADER, [GOOD_IMAGE, "How many?", "1"], [GOOD_IMAGE, "Combien de caf\u00e9s ?", "2"],
             [GOOD_IMAGE, "How many?", "3"]]
    put("latin1.csv", _csv(latin).encode("latin-1"))
    put("scalar.json", b"42")
    put("string.json", b'"records.jsonl"')
    put("null.json", b"null")
    good_parquet = folder / "good.parquet"
    _write_parquet(good_parquet, recs)
    blob = good_parquet.read_bytes()
    put("truncated.parquet", blob[: len(blob) // 2])
    put("garbage.parquet", b"PAR1" + bytes(range(256)) * 4)
    put("empty.jsonl", b"")
    put("duplicate_ids.jsonl", _jsonl([record(0, id="a"), record(1, id="b"), record(2, id="a"), record(3, id="b"),
                                       record(4, id="c")]))
    # Counting records (data.format=fsc147): one good, then a NaN, a negative and a fractional count.
    counts = [{"image": GOOD_IMAGE, "object": o, "count": c}
              for o, c in (("apples", 3), ("pears", float("nan")), ("plums", -2), ("figs", 2.5), ("kiwis", "4"))]
    put("counting_bad.jsonl", b"".join(json.dumps(c).encode() + b"\n" for c in counts))  # json writes NaN bare
    return out


def _write_parquet(path: Path, recs: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"messages": [json.dumps(r["messages"]) for r in recs]}), path)


def write_media_records(folder: Path, images: dict[str, Path], audio: dict[str, Path]) -> dict[str, Path]:
    """One JSONL per unusual media file: 2 good records, then one pointing at it."""
    out = {}
    for name in images:
        p = folder / f"image_{name}.jsonl"
        p.write_bytes(_jsonl([record(0), record(1), record(2, image=name)]))
        out[name] = p
    for name in audio:
        p = folder / f"audio_{name}.jsonl"
        p.write_bytes(_jsonl([_audio_record(i, "ok.wav") for i in range(2)] + [_audio_record(2, name)]))
        out[name] = p
    return out


def _audio_record(i: int, path: str) -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "audio", "path": path},
                                                       {"type": "text", "text": f"What is said? ({i})"}]},
                         {"role": "assistant", "content": "hello"}]}


def write_all(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    images, audio = write_images(folder), write_audio(folder)
    out = {**write_data_files(folder)}
    out.update({f"records:{k}": v for k, v in write_media_records(folder, images, audio).items()})
    out.update(images)
    out.update(audio)
    return out


# Config files, each wrong in one way: (name, YAML text, overrides).
BASE_YAML = "output_dir: out\nmodel:\n  name: tiny/qwen2-vl\ndata:\n  train: synthetic:counting\n"
CONFIGS = {
    "duplicate key": (BASE_YAML + "train:\n  lr: 1.0e-4\n  max_steps: 5\n  lr: 3.0e-4\n", []),
    "duplicate section": (BASE_YAML + "train:\n  lr: 1.0e-4\ndata:\n  max_length: 128\n", []),
    "bad override value": (BASE_YAML, ["train.lr=abc"]),
    "bad override int": (BASE_YAML, ["train.max_steps=ten"]),
    "infinite override": (BASE_YAML, ["train.lr=inf"]),
    "override without =": (BASE_YAML, ["train.lr"]),
    "top level is a list": ("- model\n- data\n", []),
    "tab indentation": ("model:\n\tname: tiny/qwen2-vl\n", []),
}
