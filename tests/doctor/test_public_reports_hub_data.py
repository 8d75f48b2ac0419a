"""Public bug reports, batch 15 (docs/doctor.md): data brought through Hugging Face `datasets` and the Hub --
dataset repositories whose columns change type between records or shards, compressed JSONL, sharded parquet,
save_to_disk folders with train / test splits. Each test rebuilds the report's files and reads them as
`mmtune train`, `mmtune doctor` and `mmtune data inspect` read them (data.sources.load_records, or the streaming
reader under data.streaming), beside the same records given as one plain file.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pytest

from mmtune.config.schema import DataConfig
from mmtune.data.sources import load_records
from mmtune.errors import DataError


def _chat(q, a, user_parts=False, **marks):
    content = [{"type": "text", "text": q}] if user_parts else q
    return {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": a, **marks}]}


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _load(spec, **kw):
    return load_records(str(spec), DataConfig(on_bad_record="skip", **kw))


def _answers(rs):
    """Each record's last answer, as the text (a number or boolean read back from JSON is kept as it is)."""
    out = []
    for r in rs.records:
        content = r.messages[-1]["content"]
        out.append(content if isinstance(content, str) else content[0]["text"])
    return out


# ----------------------------------------------------------------------------- a column whose type varies
# https://github.com/hiyouga/LlamaFactory/issues/6298 ("JSON parse error: Column(/messages/[]/content) changed from
# string to array": OpenAI-style messages, content a string in one message and a list of parts in another),
# https://github.com/modelscope/ms-swift/issues/2634, https://github.com/hiyouga/LlamaFactory/issues/4376,
# https://github.com/tloen/alpaca-lora/issues/239. Given as a JSONL file mmtune always read each record on its
# own; the same file in a dataset repository folder (data/train-00000-of-00001.jsonl, as the Hub lays it out) went
# through datasets' table, which (datasets 5) stores such a column as JSON text and parses every string back:
# the answers "2" and "true" came back as a number and a boolean, and every record was refused as `bad type`.

MIXED = [_chat("What is 1+1?", "2"), _chat("Is 3 odd?", "true", user_parts=True), _chat("Name a cheese.", "Danbo"),
         _chat("What is 2+2?", "4", user_parts=True)]


@pytest.mark.parametrize("streaming", [False, True])
def test_repo_folder_whose_content_changes_type_reads_as_its_file(tmp_path, streaming):
    plain = _load(_jsonl(tmp_path / "plain.jsonl", MIXED))  # the clean twin: the same records as one file
    assert plain.skipped == {} and len(plain) == 4
    repo = tmp_path / "repo"
    _jsonl(repo / "data" / "train-00000-of-00001.jsonl", MIXED)
    rs = _load(repo, streaming=streaming, stream_sample=10)
    assert rs.skipped == {}, rs.problems
    assert _answers(rs) == ["2", "true", "Danbo", "4"] == _answers(plain)
    assert all(isinstance(r.messages[-1]["content"][0]["text"], str) for r in rs.records)


# https://github.com/OpenManus/OpenManus-RL/issues/8 ("Couldn't cast array of type struct<role, content, type> to
# {role, content, loss}": the keys of the messages are not the same in every file), https://github.com/huggingface/datasets/issues/5596,
# https://github.com/huggingface/datasets/issues/6845. A repository whose two shards disagree stopped with
# datasets' DatasetGenerationError, a traceback from inside its table cast.

def test_shards_whose_columns_differ_are_read_file_by_file(tmp_path):
    repo = tmp_path / "repo"
    _jsonl(repo / "data" / "train-00000-of-00002.jsonl", [_chat("Q1", "A1"), _chat("Q2", "A2")])
    second = [dict(_chat("Q3", "A3", loss=True), id="x3", source="web"), _chat("Q4", "A4", loss=False)]
    _jsonl(repo / "data" / "train-00001-of-00002.jsonl", second)
    rs = _load(repo)
    assert _answers(rs) == ["A1", "A2", "A3"]
    assert rs.skipped == {"no answer": 1}  # the turn marked "loss": false (batch 7), counted at its file:line
    assert rs.problems[0][0].endswith("train-00001-of-00002.jsonl:2")


def test_a_repo_of_sharded_parquet_and_a_readme_config_reads_every_shard(tmp_path):
    """Pinned (a): the Hub's layout, data/train-0000X-of-0000N.parquet with the README's configs, two splits."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    for i in range(2):
        pq.write_table(pa.Table.from_pylist([_chat(f"Q{i}{j}", f"A{i}{j}") for j in range(3)]),
                       repo / "data" / f"train-0000{i}-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist([_chat("Qt", "At")]), repo / "data" / "test-00000-of-00001.parquet")
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                                    "    path: data/train-*\n  - split: test\n    path: data/test-*\n---\n")
    assert _answers(_load(repo)) == ["A00", "A01", "A02", "A10", "A11", "A12"]
    assert _answers(_load(f"{repo}::test")) == ["At"]
    with pytest.raises(DataError, match="no 'eval' split"):  # test is never taken for the validation split
        load_records(str(repo), DataConfig(), split="eval")


# ----------------------------------------------------------------------------- compressed files
# https://github.com/datajuicer/data-juicer/pull/919, https://github.com/mlfoundations/open_lm/pull/285,
# https://github.com/rom1504/img2dataset/pull/325 (json[l].gz / .zst as the Hub and datasets keep them):
# mmtune refused `train.jsonl.gz` as "unknown file type '.gz'".

@pytest.mark.parametrize("name,pack", [("d.jsonl.gz", gzip.compress), ("d.json.bz2", bz2.compress),
                                       ("d.csv.xz", lzma.compress), ("D.JSONL.GZ", gzip.compress)])
def test_compressed_files_are_read_as_the_file_inside(tmp_path, name, pack):
    rows = [_chat(f"What is {i}+1?", str(i + 1)) for i in range(3)]
    inner = name.lower().split(".")[1]
    if inner == "jsonl":
        raw = "".join(json.dumps(r) + "\n" for r in rows)
    elif inner == "json":
        raw = json.dumps(rows)
    else:
        raw = "messages\n" + "".join('"' + json.dumps(r["messages"]).replace('"', '""') + '"\n' for r in rows)
    f = tmp_path / name
    f.write_bytes(pack(raw.encode()))
    rs = _load(f)
    assert rs.skipped == {} and _answers(rs) == ["1", "2", "3"]
    if inner == "jsonl":  # and as a stream, decompressed as it is drawn
        assert _answers(_load(f, streaming=True, stream_sample=10)) == ["1", "2", "3"]


def test_a_cut_or_unreadable_compressed_file_is_one_error_naming_it(tmp_path):
    import random

    rng = random.Random(0)
    rows = "".join(json.dumps(_chat(f"Q {rng.random()}", str(i))) + "\n" for i in range(300))
    packed = gzip.compress(rows.encode())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(DataError, match=r"cut.jsonl.gz is not a readable .gz file") as e:
        _load(cut)
    assert "download or compress it again" in e.value.fix
    packed_parquet = tmp_path / "d.parquet.gz"
    packed_parquet.write_bytes(gzip.compress(b"PAR1"))
    with pytest.raises(DataError, match=r"unknown file type '.parquet.gz'"):
        _load(packed_parquet)


def test_zstd_without_zstandard_says_what_to_install(tmp_path):
    try:
        import zstandard  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("zstandard is installed here: the file is read")
    f = tmp_path / "d.jsonl.zst"
    f.write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(DataError, match="zstd-compressed and the zstandard package is not installed") as e:
        _load(f)
    assert "pip install zstandard" in e.value.fix and "zstd -d d.jsonl.zst" in e.value.fix


# ----------------------------------------------------------------------------- save_to_disk vs load_dataset
# https://github.com/huggingface/datasets/pull/3705, https://github.com/huggingface/datasets/issues/6642 (a
# save_to_disk folder given to load_dataset: an error, or one row read from its state.json),
# https://github.com/huggingface/alignment-handbook/pull/53, https://github.com/huggingface/datasets/issues/7503.
# Pinned (a): mmtune tells a save_to_disk folder by its files and reads it with load_from_disk, splits included.

def test_save_to_disk_dataset_dict_reads_its_splits_never_test_for_eval(tmp_path):
    import datasets

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list([_chat("Q1", "A1"), _chat("Q2", "A2")]),
                               "test": datasets.Dataset.from_list([_chat("Qt", "At")])})
    dd.save_to_disk(str(tmp_path / "saved"))
    assert _answers(_load(tmp_path / "saved")) == ["A1", "A2"]
    assert _answers(_load(f"{tmp_path / 'saved'}::test")) == ["At"]
    with pytest.raises(DataError, match="no 'eval' split"):
        load_records(str(tmp_path / "saved"), DataConfig(), split="eval")
