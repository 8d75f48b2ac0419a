"""A seeded fuzzer of users' data: malformed records and files in every layout mmtune reads, run through
every reader and every check (load, training's start-up measure and its check beside the loop, the
encoder as training and eval draw records, `data inspect`'s scan, the doctor's data pass).

    PYTHONPATH=src:. python -m tests.data.fuzz_records [--seed 0] [--records 1100]

prints how many inputs ended in a raw exception (anything but mmtune's own errors) or a hang, by stage
and exception type, with the seed that replays them. tests/data/test_fuzz_records.py asserts zero.

A *case* is one data source (a file, a folder, a registry name) with the format it is read as. Line-based
files whose pipeline raised are re-run line by line, so a count is a count of bad records, not of files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import fuzz_objectives as objectives
from .fuzz_kinds import check_kinds, write_kind_media
from .fuzz_kinds import kinds as named_kinds
from .malformed import cases as known_cases
from .malformed import write_media

# Per case: a hang (a pipe read, an alias bomb, a quadratic loop) is reported, never waited on.
CASE_SECONDS = 30


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that no `except Exception` on the way swallows it."""


# ------------------------------------------------------------------------------------------------ generation
TEMPLATES: dict[str, tuple[str, dict]] = {  # name -> (data.format, a good record)
    "messages": ("messages", {"messages": [{"role": "user", "content": [{"type": "image", "path": "ok.png"},
                                                                        {"type": "text", "text": "How many?"}]},
                                           {"role": "assistant", "content": "3"}]}),
    "openai": ("messages", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "ok.png"}}, {"type": "input_text", "text": "What?"}]},
        {"role": "assistant", "content": "red"}]}),
    "sharegpt": ("messages", {"conversations": [{"from": "human", "value": "<image>How many?"},
                                                {"from": "gpt", "value": "3"}], "images": ["ok.png"]}),
    "llava": ("messages", {"id": "000001", "image": "ok.png",
                           "conversations": [{"from": "human", "value": "<image>\nWhat is it?"},
                                             {"from": "gpt", "value": "a cat"}]}),
    "alpaca": ("alpaca", {"instruction": "<image>Describe.", "input": "", "output": "a cat", "images": ["ok.png"],
                          "system": "Be brief.", "history": [["hi", "hello"]]}),
    "query_response": ("messages", {"query": "How many?", "response": "3", "images": ["ok.png"]}),
    "vqa": ("vqa", {"image": "ok.png", "question": "How many?", "answer": "3"}),
    "chartqa": ("chartqa", {"imgname": "ok.png", "query": "What is the max?", "label": "42"}),
    "infovqa": ("infovqa", {"image": "ok.png", "question": "Which year?", "answers": ["1999", "in 1999"]}),
    "ocrvqa": ("ocrvqa", {"image": "ok.png", "questions": ["Title?", "Author?"], "answers": ["A book", "Someone"]}),
    "fsc147": ("fsc147", {"image": "ok.png", "object": "apples", "count": 3}),
}


def _deep(depth: int):
    v: object = "x"
    for _ in range(depth):
        v = [v]
    return v


def values(rng: random.Random) -> list:
    """What a field may hold instead of its value: every JSON type, NaN and extremes, hostile strings,
    media paths of every kind of wrong."""
    return [None, True, False, 0, -1, 10 ** 30, -(10 ** 30), 3.5, float("nan"), float("inf"), -float("inf"),
            "", " ", "x", "3", "\ud800", "a\udcffb", "\x00", "<image>", "<image><image>", "<video>", "<audio>",
            "<|im_end|>", "<|im_start|>assistant", "x" * rng.choice([5000, 60000]), "\u202e\ufeff",
            [], [None], [[]], {}, {"type": "image"}, {"type": "image", "text": None}, {"type": "text", "text": 5},
            {"bytes": "x"}, {"bytes": None, "path": None}, {"path": 3}, [{"type": "text", "text": 1}],
            {"role": "assistant"}, _deep(rng.choice([50, 400])), {"a": {"b": {"c": [1, {"d": None}]}}},
            "ok.png", "missing.png", "pipe.png", "bomb.png", "warnbomb.png", "text.png", "empty.png",
            "truncated.png", "adir.png", "/dev/zero", "/dev/null", "../../../../etc/passwd", "http://x/y.png",
            "noise.mp4", "noise.wav", ["ok.png", "ok.png"], ["pipe.png"], [7], [{"nothing": 1}],
            {"bytes": None, "path": "ok.png"},
            # media and text of the named kinds (fuzz_kinds.py): image modes, broken audio / video, wrapper tokens
            "cmyk.jpg", "i16.png", "anim.gif", "1x1.png", "sliver.png", "huge_header.png", "notes.jpg", "dir.jpg",
            "nan.wav", "one_sample.wav", "zero.wav", "text.wav", "stereo.wav", "one_frame.mp4", "cut.mp4",
            "frames_empty", "file://ok.png", "data:image/png;base64,iVBORw0KG!!", " \n\t ", "<|vision_start|>",
            {"type": "image_url", "image_url": None}, {"type": "audio", "path": "nan.wav"},
            {"type": "video", "path": "one_frame.mp4"}, [1, 2, 3], [[{"type": "text", "text": "q"}]]]


def mutate(obj, rng: random.Random, pool: list, depth: int = 0):
    """Replace, drop, duplicate or wrap one value somewhere in a JSON-like tree."""
    if isinstance(obj, dict) and obj and depth < 6:
        obj = dict(obj)
        k = rng.choice(list(obj))
        r = rng.random()
        if r < 0.12:
            del obj[k]
        elif r < 0.5:
            obj[k] = rng.choice(pool)
        elif r < 0.55:
            obj[k + "_"] = obj.pop(k)  # a misspelt key
        else:
            obj[k] = mutate(obj[k], rng, pool, depth + 1)
        return obj
    if isinstance(obj, list) and obj and depth < 6:
        obj = list(obj)
        i = rng.randrange(len(obj))
        r = rng.random()
        if r < 0.12:
            del obj[i]
        elif r < 0.25:
            obj.insert(0, obj[i])
        elif r < 0.5:
            obj[i] = rng.choice(pool)
        elif r < 0.55:
            obj.clear()
        else:
            obj[i] = mutate(obj[i], rng, pool, depth + 1)
        return obj
    return rng.choice(pool)


def fuzzed(name: str, rng: random.Random) -> dict:
    """A template's record (this file's, or fuzz_objectives' for DPO / GRPO / tools / boxes / audio / video)
    mutated one to three times."""
    if name in TEMPLATES:
        pool, rec = values(rng), TEMPLATES[name][1]
    else:
        pool, rec = values(rng) + objectives.values(), objectives.TEMPLATES[name].record
        if rng.random() < 0.5:  # inside a field only: most records of one or two keys then still load and reach
            k = rng.choice(list(rec))  # the encoder, the objective's pairs / prompts, the tools and the boxes
            return {**rec, k: mutate(rec[k], rng, pool, 1)}
    for _ in range(rng.randint(1, 3)):
        rec = mutate(rec, rng, pool)
    return rec


def _dumps(rec) -> bytes:
    try:
        raw = json.dumps(rec).encode("utf-8", "surrogatepass")
    except (RecursionError, ValueError):
        raw = b"{}"
    return raw


def damaged_line(rec, rng: random.Random) -> bytes:
    raw = _dumps(rec)
    r = rng.random()
    if r < 0.07 and raw:
        b = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        raw = bytes(b)
    elif r < 0.11:
        raw = raw[: rng.randrange(len(raw))]
    elif r < 0.13:
        raw = raw.decode("utf-8", "surrogatepass").encode("utf-16")
    return raw.replace(b"\n", b" ").replace(b"\r", b" ")


@dataclass
class Case:
    layout: str
    spec: str  # data.train
    fmt: str
    overrides: list = field(default_factory=list)
    lines: list | None = None  # raw lines of a line-based file (for per-record attribution)
    n_records: int = 1  # how many malformed records (or files) it holds
    model: str = "tiny/qwen2-vl"  # the tiny twin that reads it (audio, tools and boxes need their own)


def _media(folder: Path) -> None:
    from PIL import Image

    write_media(folder)
    write_kind_media(folder)
    objectives.write_media(folder)
    # Past PIL's MAX_IMAGE_PIXELS (89.5 M) but under twice that: PIL only warns when opening it.
    if not (folder / "warnbomb.png").exists():
        Image.new("1", (10000, 10000)).save(folder / "warnbomb.png")


def build(folder: Path, seed: int, n_records: int = 1100) -> list[Case]:
    """The corpus under `folder`: every layout, about `n_records` malformed records in all."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    _media(folder)
    out: list[Case] = []
    share = max(1, n_records // 14)

    # JSONL: each template, mutated and damaged line by line.
    for name, (fmt, _) in TEMPLATES.items():
        lines = [damaged_line(fuzzed(name, rng), rng) for _ in range(share * 8 // len(TEMPLATES) + 1)]
        p = folder / f"{name}.jsonl"
        p.write_bytes(b"\n".join(lines) + b"\n")
        out.append(Case("jsonl", str(p), fmt, lines=lines, n_records=len(lines)))
    # The other data kinds mmtune trains on (fuzz_objectives.py): pairs, GRPO prompts, tools, boxes, audio, video,
    # each read by its own tiny twin under its objective; then mixtures over these files.
    for name, t in objectives.TEMPLATES.items():
        lines = [_dumps(t.record)] + [damaged_line(fuzzed(name, rng), rng)
                                      for _ in range(share * 4 // len(objectives.TEMPLATES))]  # a good one first
        p = folder / f"{name}.jsonl"
        p.write_bytes(b"\n".join(lines) + b"\n")
        out.append(Case("jsonl", str(p), t.fmt, list(t.overrides), lines=lines, n_records=len(lines), model=t.model))
    files = [(c.spec, c.fmt) for c in out if not c.overrides]
    for spec in objectives.mixture_specs(folder, rng, files, values(rng)):
        out.append(Case("mixture", spec, "messages", n_records=1))
    pairs = _compatible([fuzzed("dpo_rlaifv", rng) for _ in range(share // 4)])
    for k, g in enumerate(pairs[:3]):  # preference rows in parquet (RLAIF-V is published so)
        p = folder / f"pairs_{k}.parquet"
        _write_parquet(g, p)
        out.append(Case("parquet", str(p), "preference", list(objectives.DPO), n_records=len(g)))
    # Absurd lengths: a 100,000-character answer, 5,000 turns.
    long = [_dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "y " * 50_000}]}),
            _dumps({"messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": "t"} for i in range(5000)]})]
    p = folder / "long.jsonl"
    p.write_bytes(b"\n".join(long) + b"\n")
    out.append(Case("jsonl", str(p), "messages", lines=long, n_records=len(long)))
    # The hand-written malformed records (tests/data/malformed.py), one file per format.
    by_fmt: dict[str, list[bytes]] = {}
    for fmt, line, _ in known_cases():
        by_fmt.setdefault(fmt, []).append(line)
    for fmt, lines in by_fmt.items():
        p = folder / f"known_{fmt}.jsonl"
        p.write_bytes(b"\n".join(lines) + b"\n")
        out.append(Case("jsonl", str(p), fmt, lines=lines, n_records=len(lines)))

    # JSON: lists of mutated records, and the shapes a JSON file takes that are no list of records.
    for name in ("messages", "sharegpt", "llava", "vqa", "alpaca"):
        recs = [fuzzed(name, rng) for _ in range(share // 2)]
        p = folder / f"{name}.json"
        p.write_bytes(_dumps(recs))
        out.append(Case("json", str(p), TEMPLATES[name][0], n_records=len(recs)))
    for i, raw in enumerate([b"", b"{}", b"[]", b"[null, 1, \"x\"]", b'{"a": [1], "b": [2]}', b'{"k": {"image": 1}}',
                             b"[" * 5000, b"\xff\xfe[", json.dumps({"data": [TEMPLATES["vqa"][1]] * 2}).encode(),
                             b'[{"messages": NaN}]', b"[1e999]"]):
        p = folder / f"shape_{i}.json"
        p.write_bytes(raw)
        out.append(Case("json", str(p), "vqa"))

    # CSV: VQA columns with hostile cells, and messages written as JSON in a cell.
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["image", "question", "answer", "images", "messages"])
    n_csv = share
    def cell(pool):
        return rng.choice([str(rng.choice(pool))[:3000], "ok.png", "[", '["ok.png"]', '{"a":', "", "3"])

    for _ in range(n_csv):
        v = values(rng)
        w.writerow([cell(v), cell(v), cell(v), cell(v), rng.choice([cell(v), _dumps(fuzzed("messages", rng)).decode(
            "utf-8", "replace")])])
    w.writerow(["ok.png", "x" * 200_000, "3", "", ""])  # past the csv module's field limit (128 KiB)
    w.writerow(["ok.png", "a\x00b", "3", "", ""])
    raw = buf.getvalue().encode("utf-8", "replace") + b'ok.png,"never closed,3\n'  # a quote open to the end
    b = bytearray(raw)
    for _ in range(5):
        b.insert(rng.randrange(len(b)), rng.choice([0xff, 0xe9, 0x00, 0x22, 0x0a]))
    p = folder / "vqa.csv"
    p.write_bytes(bytes(b))
    out.append(Case("csv", str(p), "vqa", n_records=n_csv))
    p = folder / "messages.csv"
    p.write_bytes(bytes(b))
    out.append(Case("csv", str(p), "messages", n_records=n_csv))

    # Parquet: records grouped by the schema pyarrow infers, an image column of raw bytes and {bytes, path}.
    out += _parquet_cases(folder, rng, share)
    # datasets.save_to_disk folders, TRL's layout among them.
    out += _saved_cases(folder, rng, share // 3)
    # LLaMA-Factory's dataset_info.json with wrong columns, tags and files.
    out += _registry_cases(folder, rng)
    # Empty files and folders of every suffix, split names that do not exist.
    for suffix in (".jsonl", ".json", ".csv", ".parquet", ".arrow"):
        p = folder / f"empty{suffix}"
        p.write_bytes(b"")
        out.append(Case("empty", str(p), "messages"))
    (folder / "empty_dir").mkdir(exist_ok=True)
    out.append(Case("empty", str(folder / "empty_dir"), "messages"))
    split = folder / "splits"
    split.mkdir(exist_ok=True)
    (split / "train.jsonl").write_bytes(_dumps(TEMPLATES["vqa"][1]) + b"\n")
    (split / "test.jsonl").write_bytes(_dumps(TEMPLATES["vqa"][1]) + b"\n")
    (split / "ok.png").write_bytes((folder / "ok.png").read_bytes())
    out.append(Case("split", f"{split}::validation", "vqa"))
    out.append(Case("split", f"{split}::nonsense", "vqa"))
    out.append(Case("media", str(folder / "pipe.png"), "messages"))
    out.append(Case("media", "/dev/zero", "messages"))
    # The named kinds (fuzz_kinds.py), through every stage here too; their outcomes: fuzz_kinds.check_kinds.
    for k in named_kinds(folder / "kinds"):
        lines = [ln for ln in k.raw.split(b"\n") if ln.strip()] if k.file.endswith(".jsonl") else None
        out.append(Case("kind", str(folder / "kinds" / k.file), k.fmt, lines=lines, n_records=k.n))
    return out


def _parquet_cases(folder: Path, rng: random.Random, n: int) -> list[Case]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    png = (folder / "ok.png").read_bytes()
    imgs = [png, png[: len(png) // 2], b"garbage", b"", {"bytes": png, "path": "x.png"}, {"bytes": None, "path": "ok.png"},
            {"bytes": b"zz", "path": None}, (folder / "bomb.png").read_bytes()]
    rows = []
    for _ in range(n):
        r = fuzzed(rng.choice(["vqa", "messages", "sharegpt"]), rng)
        if rng.random() < 0.4:
            r = {**TEMPLATES["vqa"][1], "image": rng.choice(imgs)}
        rows.append(r)
    groups = _compatible([r for r in rows if isinstance(r, dict)])
    for k, g in enumerate(groups[:12]):
        p = folder / f"fuzz_{k}.parquet"
        pq.write_table(pa.Table.from_pylist(g), p)
        fmt = "vqa" if "image" in g[0] or "question" in g[0] else "messages"
        out.append(Case("parquet", str(p), fmt, n_records=len(g)))
    p = folder / "cut.parquet"
    p.write_bytes((folder / "fuzz_0.parquet").read_bytes()[:-40] if groups else b"PAR1")
    out.append(Case("parquet", str(p), "vqa"))
    return out


def _saved_cases(folder: Path, rng: random.Random, n: int) -> list[Case]:
    import datasets
    from PIL import Image

    out = []
    datasets.disable_progress_bars()
    img = Image.open(folder / "ok.png").convert("RGB")
    # TRL's layout: parts as one Arrow struct ({"type": "image", "text": None}), images a list of Image.
    trl = [{"images": [img], "messages": [
        {"role": "user", "content": [{"type": "image", "text": None}, {"type": "text", "text": f"What is it? {i}"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "green"}]}]} for i in range(3)]
    trl.append({"images": [], "messages": trl[0]["messages"]})  # an empty image list beside an image part
    trl.append({"images": [img, img], "messages": trl[0]["messages"]})
    cases = [("trl", trl, "messages")]
    # The same layout with a corrupt image inside the List(Image) column.
    feats = datasets.Dataset.from_list(trl[:1]).features
    bad = [{"images": [{"bytes": b"garbage", "path": None}], "messages": trl[0]["messages"]},
           {"images": [{"bytes": (folder / "ok.png").read_bytes(), "path": None}], "messages": trl[0]["messages"]}]
    d = folder / "saved_trl_corrupt"
    datasets.Dataset.from_list(bad, features=feats).save_to_disk(str(d))
    out.append(Case("save_to_disk", str(d), "messages", n_records=2))
    for k in range(3):
        rows = [fuzzed(rng.choice(["messages", "vqa"]), rng) for _ in range(n)]
        for g in _compatible(rows):
            cases.append((f"fz{k}_{len(cases)}", g, "vqa" if ("image" in g[0] or "question" in g[0]) else "messages"))
    for name, rows, fmt in cases[:8]:
        d = folder / f"saved_{name}"
        try:
            datasets.Dataset.from_list(rows).save_to_disk(str(d))
        except Exception:  # noqa: BLE001 - rows datasets cannot store are no case of ours
            continue
        out.append(Case("save_to_disk", str(d), fmt, n_records=len(rows)))
    return out


def _write_parquet(rows: list, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def _storable(rows: list) -> bool:
    """Whether parquet can hold these rows as one table (a 10**30, a list of mixed types, an empty struct
    cannot: those are not parquet cases)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.write_table(pa.Table.from_pylist(rows), io.BytesIO())
    except (pa.ArrowException, TypeError, ValueError, OverflowError, AttributeError):
        return False
    return True


def _compatible(rows: list) -> list[list]:
    """Rows grouped so that each group is one parquet table."""
    groups: list[list] = []
    for r in rows:
        if not isinstance(r, dict):
            continue
        for g in groups:
            if _storable(g + [r]):
                g.append(r)
                break
        else:
            if _storable([r]):
                groups.append([r])
    return groups


def _registry_cases(folder: Path, rng: random.Random) -> list[Case]:
    reg = folder / "registry"
    reg.mkdir(exist_ok=True)
    (reg / "ok.png").write_bytes((folder / "ok.png").read_bytes())
    alp = [fuzzed("alpaca", rng) for _ in range(20)] + [TEMPLATES["alpaca"][1]]
    sg = [fuzzed("sharegpt", rng) for _ in range(20)] + [TEMPLATES["sharegpt"][1]]
    (reg / "a.json").write_bytes(_dumps(alp))
    (reg / "s.jsonl").write_bytes(b"\n".join(_dumps(r) for r in sg))
    info = {
        "alp": {"file_name": "a.json", "columns": {"prompt": "instruction", "query": "input", "response": "output",
                                                   "images": "images"}},
        "alp_misspelt_images": {"file_name": "a.json", "columns": {"images": "imgs"}},
        "sg": {"file_name": "s.jsonl", "formatting": "sharegpt", "columns": {"messages": "conversations",
                                                                              "images": "images"}},
        "sg_no_images": {"file_name": "s.jsonl", "formatting": "sharegpt"},
        "sg_bad_tags": {"file_name": "s.jsonl", "formatting": "sharegpt", "tags": {"role_tag": "role"}},
        "sg_tags_list": {"file_name": "s.jsonl", "formatting": "sharegpt", "tags": ["x"]},
        "cols_list": {"file_name": "a.json", "columns": ["prompt"]},
        "missing": {"file_name": "nope.json"},
        "num_file": {"file_name": 5},
        "split_num": {"file_name": "a.json", "split": 3},
    }
    (reg / "dataset_info.json").write_text(json.dumps(info))
    out = [Case("dataset_info", name, "messages", overrides=[f"data.dataset_info={reg / 'dataset_info.json'}"],
                n_records=21 if name in ("alp", "sg", "alp_misspelt_images", "sg_no_images", "sg_bad_tags") else 1)
           for name in info]
    bad = folder / "registry_bad"
    bad.mkdir(exist_ok=True)
    for i, raw in enumerate([b"[1]", b'{"x": 1}', b"\xff", b"{", b""]):
        (bad / f"r{i}.json").write_bytes(raw)
        out.append(Case("dataset_info", "x", "messages", overrides=[f"data.dataset_info={bad / f'r{i}.json'}"]))
    return out


# ------------------------------------------------------------------------------------------------ running
@dataclass
class Env:
    folder: Path
    cfg_path: Path
    processor: object
    resolved: object


def make_env(folder: Path, model: str = "tiny/qwen2-vl") -> Env:
    """`model`: a tiny twin's name, or fuzz_objectives.TOOLS_MODEL (the tiny Qwen2 with a template that renders tools)."""
    import copy

    from mmtune.config import load_config
    from mmtune.resolve import resolve_run, target_for

    from .malformed import tiny_processor

    folder.mkdir(parents=True, exist_ok=True)
    name = "tiny/qwen2" if model == objectives.TOOLS_MODEL else model
    cfg_path = folder / "fuzz.yaml"
    cfg_path.write_text(f"output_dir: {folder / 'out'}\nmodel: {{name: {name}}}\n"
                        f"data: {{train: x, max_length: 2048}}\ntrain: {{device: cpu}}\n")
    cfg = load_config(cfg_path, [])
    resolved = resolve_run(cfg, target_for(cfg, local=False), require_processor=True)
    processor, family = tiny_processor(name)
    if model == objectives.TOOLS_MODEL:  # a copy: the tiny tokenizer may be shared
        processor = copy.deepcopy(processor)
        processor.chat_template = objectives.QWEN25_TEMPLATE.read_text()
        resolved = dataclasses.replace(resolved, processor=processor)
    return Env(folder, cfg_path, (processor, family), resolved)


_ENVS: dict = {}


def env_for(env: Env, model: str) -> Env:
    """The environment of `model` beside `env` (made once per folder and model)."""
    if model == "tiny/qwen2-vl":
        return env
    key = (env.folder, model)
    if key not in _ENVS:
        _ENVS[key] = make_env(env.folder / "models" / model.replace("/", "_").replace("+", "_"), model)
    return _ENVS[key]


def _raw(e: BaseException) -> bool:
    from mmtune.errors import MMTuneError

    return not isinstance(e, MMTuneError)


# Records that loaded and skips counted, over all cases (under skip): proof that the corpus reached the
# checks past loading, not only the loader's refusals.
STATS: Counter = Counter()


def run_case(env: Env, case: Case, spec: str | None = None) -> list[str]:
    """Every reader and check over one case; the raw exceptions met, as 'stage: Type: message' lines."""
    from mmtune.config import load_config
    from mmtune.data.encode import Encoder
    from mmtune.data.inspect import scan_records
    from mmtune.data.preference import train_encoder
    from mmtune.data.sources import load_records
    from mmtune.data.startup_scan import check
    from mmtune.doctor.context import NotAvailable
    from mmtune.doctor.datascan import scan_dataset, scan_split

    spec = spec or case.spec
    env = env_for(env, case.model)
    raws: list[str] = []

    def stage(name, per_record: bool, fn, *args, **kwargs):
        try:
            got = fn(*args, **kwargs)
            hidden = _unforeseen(got)
            if hidden:  # reached the record boundary (formats.isolated): a cause no reader names yet
                raws.append(f"{name}: unforeseen: {hidden[:160]}")
            return got
        except Hang:
            raise Hang(f"{name}: hang (> {CASE_SECONDS} s)") from None  # the case's alarm is spent: stop it
        except NotAvailable:
            return None
        except Exception as e:  # noqa: BLE001 - what is counted here is exactly what escapes mmtune's errors
            if _raw(e):
                raws.append(f"{name}: {type(e).__name__}: {str(e)[:160]}")
            elif per_record:  # under skip, one record's content must not stop the pass over the others
                raws.append(f"{name}: stopped by a record: {str(e)[:160]}")
        return None

    def cfg_for(policy):
        return load_config(env.cfg_path, [f"data.format={case.fmt}", f"data.train={spec}",
                                          f"data.on_bad_record={policy}", *case.overrides])

    for policy in ("skip", "error"):
        cfg = stage("config", False, cfg_for, policy)
        if cfg is None:
            continue
        res = dataclasses.replace(env.resolved, cfg=cfg)
        # the objective's encoder, as training and the doctor take it (pairs for dpo, prompts for grpo)
        encoder = train_encoder(res, Encoder(*env.processor, cfg))
        source = cfg.data.train if case.layout == "mixture" else spec  # a mixture: the list of sources
        rs = stage(f"load[{policy}]", False, load_records, source, cfg.data, "train")
        if rs is not None and policy == "skip" and spec == case.spec:
            STATS["loaded"] += len(rs.records)
            STATS["skipped at load"] += rs.n_skipped
            if case.layout == "mixture" or case.overrides or Path(case.spec).stem in objectives.TEMPLATES:
                STATS["loaded past SFT"] += len(rs.records)  # pairs, prompts, tools, boxes, audio, video, mixtures
        if rs is not None:
            # training's start-up measure, `data inspect`'s scan (it encodes), the check beside the loop
            skip = policy == "skip"
            scan = stage(f"measure[{policy}]", skip, scan_records, rs, encoder, policy, encode=False)
            if scan is not None and skip and spec == case.spec:
                STATS["measured ok"] += len(scan.lengths)
            if skip:
                stage("inspect", True, scan_records, rs, encoder, policy, encode=True)
                stage("startup_check", True, _checked, check, rs.records, encoder, policy)
                for r in rs.records[:3]:  # training draws it; evaluation generates from its prompt
                    stage("encode", False, encoder.encode, r)
                    stage("encode_prompt", False, encoder.encode_prompt, r)
        if policy == "skip" and case.layout == "mixture":
            stage("doctor_scan", False, scan_dataset, res, full=True)
        elif policy == "skip":
            stage("doctor_scan", False, scan_split, "train", spec, res, full=True)  # a DataError: MM098
    return raws


def _unforeseen(result) -> str:
    """The first record counted as "unreadable record" in a stage's result, or ""."""
    from mmtune.data import formats

    UNFORESEEN = getattr(formats, "UNFORESEEN", "unreadable record")  # (the fuzzer also runs against older code)

    if result is None:
        return ""
    if hasattr(result, "records") and hasattr(result.records, "problems"):  # inspect.Scan
        result = result.records
    if hasattr(result, "skipped"):  # RecordSet
        if UNFORESEEN in result.skipped:
            return next((f"{w}: {what}" for w, what in result.problems if "raised" in what), UNFORESEEN)
        return ""
    if hasattr(result, "examples"):  # doctor SplitScan
        ex = result.examples.get(UNFORESEEN)
        return f"{ex[0][0]}: {ex[0][1]}" if ex else ""
    if hasattr(result, "bad") and isinstance(result.bad, dict):  # startup_scan.CheckReport
        return next((f"{v[0]}: {v[2]}" for v in result.bad.values() if v[1] == UNFORESEEN), "")
    return ""


def _checked(check, *args):
    """startup_scan.check's report; its first error (data.on_bad_record=error) raised."""
    report = check(*args)
    if report is not None and report.error is not None:
        raise report.error
    return report


def _with_alarm(fn, *args):
    def on_alarm(signum, frame):
        raise Hang()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(CASE_SECONDS)
    try:
        return fn(*args)
    except Hang as e:
        return [str(e) or "case: hang"]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_all(env: Env, cases: list[Case]) -> tuple[int, Counter, list[str]]:
    """(malformed inputs tried, raw exceptions by stage and type, examples): a line-based case that
    raised is run again line by line so each bad record counts once."""
    tried, found, examples = 0, Counter(), []
    for case in cases:
        tried += case.n_records
        raws = _with_alarm(run_case, env, case)
        if not raws:
            continue
        if case.lines is None:
            found.update({r.split(":")[0] + ": " + r.split(":")[1].strip(): 1 for r in raws})
            examples += [f"{case.layout} {case.spec}: {r}" for r in raws[:2]]
            continue
        one = Path(case.spec).with_name("one_" + Path(case.spec).name)
        for n, line in enumerate(case.lines, start=1):
            one.write_bytes(line + b"\n")
            raws = _with_alarm(run_case, env, case, str(one))
            if raws:
                found.update({r.split(":")[0] + ": " + r.split(":")[1].strip(): 1 for r in set(raws)})
                examples.append(f"{case.spec}:{n} {line[:160]!r}: {raws[0]}")
    return tried, found, examples


# Config files a user (or a file from elsewhere) may hand mmtune: each must be a ConfigError, soon.
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
_HEAD = "output_dir: out\nmodel: {name: tiny/qwen2-vl}\n"
_DATA = "data: {train: synthetic:counting}\n"
CONFIGS = {
    "alias bomb": _HEAD + _DATA + "x:\n  " + BOMB.replace("\n", "\n  ") + "\n",
    "alias bomb in a value": BOMB + _HEAD + "data: {train: *i}\n",
    "alias bomb in options": BOMB + _HEAD + _DATA + "train: {aux_losses: [{name: heatmap, weight: 1, options: {grid: *i}}]}\n",
    "max_steps: true": _HEAD + _DATA + "train: {max_steps: true}\n",
    "lr: true": _HEAD + _DATA + "train: {lr: true}\n",
    "max_length: false": _HEAD + "data: {train: synthetic:counting, max_length: false}\n",
}


def _mmtune(args: list[str], seconds: int = 120) -> tuple[int | None, str, str]:
    """A real `mmtune` command (its console entry point), in a fresh interpreter: (exit code or None
    when it ran past `seconds`, stdout, stderr)."""
    import subprocess
    import sys

    code = "import sys; from mmtune.cli import main; sys.argv = ['mmtune'] + sys.argv[1:]; main()"
    try:
        p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=seconds,
                           env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    except subprocess.TimeoutExpired:
        return None, "", ""
    return p.returncode, p.stdout, p.stderr


_CONFIG_RUNNER = """
import json, sys
from mmtune.config import load_config
from mmtune.config.loader import dump_config
from mmtune.errors import ConfigError
for name, path in json.loads(sys.argv[1]).items():
    try:
        dump_config(load_config(path))
        print(json.dumps([name, "accepted"]), flush=True)
    except ConfigError:
        print(json.dumps([name, "refused"]), flush=True)
    except Exception as e:
        print(json.dumps([name, f"{type(e).__name__}: {str(e)[:160]}"]), flush=True)
"""


def config_problems(folder: Path, seconds: int = 60) -> list[str]:
    """Configs that load without a ConfigError, raise something else, or hang: all in one fresh interpreter
    (a bomb that got through could take all memory), each answer printed as it comes."""
    import subprocess
    import sys

    paths = {}
    for name, text in CONFIGS.items():
        p = folder / f"cfg_{name.replace(' ', '_').replace(':', '')}.yaml"
        p.write_text(text)
        paths[name] = str(p)
    try:
        r = subprocess.run([sys.executable, "-c", _CONFIG_RUNNER, json.dumps(paths)], capture_output=True, text=True,
                           timeout=seconds)
        out = r.stdout
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    answers = dict(json.loads(line) for line in out.splitlines() if line.startswith("["))
    return [f"config {name}: {answers.get(name, f'hang (> {seconds} s, all configs)')}" for name in CONFIGS
            if answers.get(name) != "refused"]


def cli_problems(env: Env, data: Path, reports: dict | None = None) -> list[str]:
    """`mmtune data inspect` and `mmtune doctor` on a file of fuzzed records: an exit with a report (0 or
    1), never a traceback, an internal error (MM099) or a hang. `reports`: filled with each command's
    stdout (JSON) by name."""
    out = []
    base = [str(env.cfg_path), f"data.train={data}", "data.on_bad_record=skip"]
    for args in (["data", "inspect", *base, "--json"], ["doctor", *base, "--json"]):
        rc, stdout, stderr = _mmtune(args)
        text = stdout + stderr
        if reports is not None:
            reports[args[0]] = stdout
        name = " ".join(args[:2]) if args[0] == "data" else "doctor"
        if rc is None:
            out.append(f"cli {name}: hang")
        elif "Traceback" in text or "MM099" in text or rc not in (0, 1):
            tail = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or [""]
            out.append(f"cli {name}: exit {rc}: {tail[0][:160]}")
    return out


def main() -> None:
    import argparse
    import tempfile
    import time

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--records", type=int, default=1100)
    ap.add_argument("--show", type=int, default=30)
    ap.add_argument("--out", help="also write the counts, with the commit of the mmtune tested, to this JSON file")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        env = make_env(Path(d))
        cases = build(Path(d) / "fuzz", a.seed, a.records)
        tried, found, examples = run_all(env, cases)
        extra = config_problems(Path(d)) + cli_problems(env, Path(d) / "fuzz" / "sharegpt.jsonl")
        tried += len(CONFIGS) + 2
        found.update(e.split(":")[0] for e in extra)
        examples += extra
        n_kinds, off = check_kinds(Path(d) / "named")
        STATS["named kinds"], STATS["named kinds not as expected"] = n_kinds, len(off)
        examples += off
    print(f"seed {a.seed}: {tried} malformed records/files in {len(cases)} cases, "
          f"{sum(found.values())} raw exceptions or hangs ({time.perf_counter() - t:.0f} s); {dict(STATS)}")
    for k, n in found.most_common():
        print(f"  {n:4d}  {k}")
    for ex in examples[: a.show]:
        print("   e.g.", ex)
    if a.out:
        _write_results(Path(a.out), a.seed, tried, len(cases), found, examples)


def _write_results(path: Path, seed: int, tried: int, n_cases: int, found: Counter, examples: list[str]) -> None:
    import platform
    import subprocess
    import sys

    import mmtune

    src = Path(mmtune.__file__).resolve().parent

    def git(*args) -> str:
        r = subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    path.write_text(json.dumps({
        "command": f"PYTHONPATH={os.environ.get('PYTHONPATH', '')} python -m tests.data.fuzz_records "
                   + " ".join(sys.argv[1:]),
        "mmtune_tested": {"path": str(src), "commit": git("rev-parse", "HEAD"),
                          "dirty": bool(git("status", "--porcelain", "--", "."))},
        "fuzzer_commit": subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"],
                                        capture_output=True, text=True).stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "python": platform.python_version(),
        "seed": seed, "inputs": tried, "cases": n_cases, "raw_exceptions_or_hangs": sum(found.values()),
        "by_stage": dict(found.most_common()), "stats": dict(STATS), "examples": examples[:40],
    }, indent=1) + "\n")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        raise
