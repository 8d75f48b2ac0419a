"""Broken setups from the fortieth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 40: large
datasets on disk: sharded files, embedded image bytes, millions of records"): LLaVA-Pretrain's json beside its
`images/` folder, images still in `images.zip`, WebDataset `.tar` shards, shard folders that each keep their own
`images/0.png`, parquet shards of embedded image bytes given as a glob. The misses are fixed (a missing relative path
now names the folder or archive that holds it, or says no one folder does; an archive given as data says what it is),
the rest pinned.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from doctor_helpers import context_for, run_codes  # noqa: E402

from mmtune.config.schema import DataConfig  # noqa: E402
from mmtune.data.sources import load_records  # noqa: E402
from mmtune.errors import DataError  # noqa: E402


def _png(path: Path, colour=(200, 0, 0)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (28, 28), colour).save(buf, format="PNG")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buf.getvalue())
    return buf.getvalue()


def _llava_rows(n=3, name="{i:09d}.jpg"):
    """LLaVA-Pretrain's blip_laion_cc_sbu_558k.json rows: `image` relative to its image_folder, ShareGPT turns."""
    return [{"id": f"{i:09d}", "image": "00000/" + name.format(i=i),
             "conversations": [{"from": "human", "value": "<image>\nDescribe the picture."},
                               {"from": "gpt", "value": f"a red square {i}"}]} for i in range(n)]


def _first_fix(spec, **cfg) -> str:
    """The fix `mmtune train` stops with at the first record (data.on_bad_record=error)."""
    with pytest.raises(DataError) as e:
        load_records(str(spec), DataConfig(**cfg))
    return e.value.fix


# ----------------------------------------------------------------------------- the image folder elsewhere
# https://github.com/haotian-liu/LLaVA/issues/342 ("where should I extract them"), https://github.com/OpenGVLab/InternVL/issues/369
# (LLaVA-Pretrain images "missing": "my file layout was wrong"), https://github.com/InternLM/InternLM-XComposer/issues/102:
# the json names 00000/000000001.jpg, relative to LLaVA's --image_folder (images/ beside it). mmtune resolved it
# against the json's folder and said "Set data.media_root" without saying to what.
def _llava_pretrain(tmp_path):
    """LLaVA-Pretrain's layout: the json beside an images/ folder its relative paths are under."""
    root = tmp_path / "LLaVA-Pretrain"
    for i in range(3):
        _png(root / "images" / "00000" / f"{i:09d}.jpg")
    data = root / "blip_laion_cc_sbu_558k.json"
    data.write_text(json.dumps(_llava_rows()))
    return root, data


def test_llava_pretrain_json_beside_its_images_folder_names_the_media_root(tmp_path):
    root, data = _llava_pretrain(tmp_path)
    fix = _first_fix(data)
    assert f"data.media_root={root / 'images'}" in fix
    assert len(load_records(str(data), DataConfig(media_root=str(root / "images")))) == 3  # the fix, followed
    # a media_root set to the wrong folder (the json's) is answered the same way
    assert f"data.media_root={root / 'images'} (" in _first_fix(data, media_root=str(root))


def test_the_doctor_says_it_at_mm018(tmp_path):
    root, data = _llava_pretrain(tmp_path)
    tree = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": str(data), "max_length": 256}}
    report = run_codes(context_for(tmp_path, tree), "MM018")
    (finding,) = [x for x in report.findings if x.code == "MM018"]
    assert f"data.media_root={root / 'images'}" in finding.fix


# ----------------------------------------------------------------------------- images still zipped
# https://github.com/haotian-liu/LLaVA/issues/1421, https://github.com/axolotl-ai-cloud/axolotl/pull/781,
# https://github.com/PKU-YuanGroup/LLaVA-CoT/issues/26: the images ship as images.zip (no top folder) beside the json.
def test_images_still_in_their_zip_name_the_archive_and_where_to_extract_it(tmp_path):
    root = tmp_path / "LLaVA-Pretrain"
    root.mkdir()
    with zipfile.ZipFile(root / "images.zip", "w") as z:
        for i in range(3):
            z.writestr(f"00000/{i:09d}.jpg", _png(None))
    data = root / "blip_laion_cc_sbu_558k.json"
    data.write_text(json.dumps(_llava_rows()))
    fix = _first_fix(data)
    assert f"is a member of {root / 'images.zip'}" in fix
    assert f"unzip {root / 'images.zip'} -d {root / 'images'} and set data.media_root={root / 'images'}" in fix
    with zipfile.ZipFile(root / "images.zip") as z:  # the fix, followed
        z.extractall(root / "images")
    assert len(load_records(str(data), DataConfig(media_root=str(root / "images")))) == 3


# ----------------------------------------------------------------------------- the same file names in each shard folder
# https://github.com/rom1504/clip-retrieval/issues/321 (files of the same name in different folders collide),
# https://github.com/NRCan/geo-deep-learning/issues/516, https://github.com/neuroinformatics-unit/ethology/pull/45
# (duplicate file names across image folders: which image is meant is unclear). Shard folders that each keep
# images/0.png behind a pattern shards/*/train.jsonl: no one media_root reads them, and naming the first folder found
# would give shard b's records shard a's pictures.
def test_the_same_names_in_several_shard_folders_name_no_one_folder(tmp_path):
    for shard, colour in (("a", (255, 0, 0)), ("b", (0, 0, 255))):
        for i in range(2):
            _png(tmp_path / "shards" / shard / "images" / f"{i}.png", colour)
        rows = [{"messages": [{"role": "user", "content": [{"type": "image", "path": f"images/{i}.png"},
                                                            {"type": "text", "text": "Which colour?"}]},
                              {"role": "assistant", "content": "red" if shard == "a" else "blue"}]} for i in range(2)]
        (tmp_path / "shards" / shard / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as e:
        load_records(str(tmp_path / "shards" / "*" / "train.jsonl"), DataConfig())
    assert "is in 2 folders" in e.value.fix and "data.media_root=" not in e.value.fix
    # the fix, followed: one source per folder, each file's paths read against its own folder
    paths = [r.media_parts()[0]["path"] for s in "ab"
             for r in load_records(str(tmp_path / "shards" / s / "train.jsonl"), DataConfig()).records]
    assert sorted(paths) == sorted(str(tmp_path / "shards" / s / "images" / f"{i}.png") for s in "ab" for i in range(2))


# ----------------------------------------------------------------------------- WebDataset shards
# https://github.com/hiyouga/LlamaFactory/issues/7386, https://github.com/kohya-ss/sd-scripts/issues/1478,
# https://github.com/huggingface/finetrainers/issues/283: .tar shards of image + .json/.txt per key given as the data.
def test_webdataset_shards_say_they_are_archives_and_what_to_write(tmp_path):
    shards = tmp_path / "wds"
    shards.mkdir()
    with tarfile.open(shards / "00000.tar", "w") as t:
        for i in range(2):
            for name, payload in ((f"{i:09d}.jpg", _png(None)), (f"{i:09d}.txt", b"a red square")):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                t.addfile(info, io.BytesIO(payload))
    for spec in (shards / "00000.tar", shards, shards / "*.tar"):
        with pytest.raises(DataError) as e:
            load_records(str(spec), DataConfig())
        assert "archive of files (a WebDataset shard" in e.value.fix and ".jsonl" in e.value.fix, spec
    assert "archives found: 00000.tar" in _first_fix(shards)


# ----------------------------------------------------------------------------- parquet shards of image bytes (pin)
# https://github.com/Roblox/FAI-RL/pull/81 (embedded-image parquet rows "silently dropped"), https://github.com/OpenBMB/VisRAG/issues/32,
# https://github.com/hiyouga/LlamaFactory/issues/7386 ("try streaming data"): the Hub's Image feature stores
# {'bytes', 'path'} in parquet shards, given as data/train-*.parquet; in memory and under data.streaming.
@pytest.mark.parametrize("streaming", [False, True])
def test_parquet_shards_of_image_bytes_read_through_a_glob(tmp_path, streaming):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    for s in range(2):
        rows = [{"images": [{"bytes": _png(None, (i * 60, 0, 0)), "path": None}],
                 "messages": [{"role": "user", "content": "<image>Which colour?"},
                              {"role": "assistant", "content": f"red {i}"}]} for i in range(s * 2, s * 2 + 2)]
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / f"train-{s:05d}-of-00002.parquet")
    spec = str(tmp_path / "data" / "train-*.parquet")
    if streaming:
        from mmtune.data.one_source import open_source

        src = open_source(spec, DataConfig(streaming=True))
        records = [r for i, (w, row) in enumerate(src.rows) for r in src.records(w, row, i)]
    else:
        records = load_records(spec, DataConfig()).records
    assert [r.answer_text() for r in records] == [f"red {i}" for i in range(4)]
    assert records[2].source.endswith("train-00001-of-00002.parquet:row 0")
    (part,) = records[3].media_parts()
    assert "path" not in part or not Path(str(part.get("path"))).exists()  # the bytes, never a file written


# ----------------------------------------------------------------------------- no Arrow cache for local shards (pin)
# https://github.com/huggingface/datasets/issues/2591 (the datasets cache filled a 500 GB disk),
# https://github.com/Qihoo360/360-LLaMA-Factory/issues/9, https://github.com/huggingface/datasets/issues/4897: load_dataset
# and map write Arrow copies of the data into HF_DATASETS_CACHE. mmtune reads local shards, and a repository folder
# laid out as the Hub's, with its own readers: nothing is written to datasets' cache.
def test_local_shards_and_a_repository_folder_write_nothing_to_the_datasets_cache(tmp_path, monkeypatch):
    import datasets

    cache = tmp_path / "hf_datasets_cache"
    cache.mkdir()
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    row = {"messages": [{"role": "user", "content": "What is 1+1?"}, {"role": "assistant", "content": "2"}]}
    for s in range(2):
        (repo / "data" / f"train-{s:05d}-of-00002.jsonl").write_text(json.dumps(row) + "\n")
    assert len(load_records(str(repo), DataConfig())) == 2
    assert len(load_records(str(repo / "data" / "train-*.jsonl"), DataConfig())) == 2
    assert [p for p in cache.rglob("*") if p.is_file()] == []
