"""data.streaming: records read as drawn, an exact resumable position, and what a stream refuses."""

import json
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.train.loop import train


def _losses(out: Path):
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"], r["epoch"]) for r in rows if r["kind"] == "train"]


def _parquet_repo(jsonl: Path, folder: Path) -> Path:
    """The JSONL's rows as a dataset repository folder (data/train-00000-of-00001.parquet), media absolute."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for ln in jsonl.read_text().splitlines():  # LLaMA-Factory's layout: <image> tags and an images column
        user, answer = json.loads(ln)["messages"]
        image = next(p["path"] for p in user["content"] if p["type"] == "image")
        text = next(p["text"] for p in user["content"] if p["type"] == "text")
        rows.append({"messages": [{"role": "user", "content": "<image>" + text}, answer],
                     "images": [str(jsonl.parent / image)]})
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / "train-00000-of-00001.parquet")
    return folder


@pytest.mark.parametrize("kind", ["jsonl", "parquet_folder"])
def test_stream_stopped_and_resumed_equals_straight_run(tiny_vl_config, tmp_path, kind):
    """6 steps x 4 records over 12 records: two epochs, the stop mid-epoch; same losses to 1e-6 (fp32)."""
    def cfg(name):
        path = tiny_vl_config(train={"max_steps": 6, "save_every": 2}, eval={"every": None})
        data = json.loads(json.dumps(__import__("yaml").safe_load(path.read_text())))["data"]["train"]
        if kind == "parquet_folder":
            repo = tmp_path / "repo"
            if not repo.exists():
                _parquet_repo(Path(data), repo)
            data = str(repo)
        return load_config(path, [f"output_dir={tmp_path / name}", "data.streaming=true", "data.shuffle_buffer=5",
                                  f"data.train={data}", "data.eval=null"])

    straight = cfg("straight")
    summary = train(build_run(straight))
    assert summary["train_records"] == 24  # read so far: 6 steps x 2 micro-batches x 2
    broken = cfg("broken")
    assert train(build_run(broken), stop_after=3) is None  # checkpoint-2 is the newest: resume redoes step 3
    assert (tmp_path / "broken" / "checkpoint-2").is_dir()
    train(build_run(broken))
    a, b = _losses(tmp_path / "straight"), _losses(tmp_path / "broken")
    assert [s for s, _, _ in a] == [s for s, _, _ in b] == list(range(1, 7))
    assert {e for _, _, e in a} == {0, 1}  # the stream ran out and began its next epoch
    for (s, x, ex), (_, y, ey) in zip(a, b):
        assert abs(x - y) < 1e-6, (s, x, y)
        assert ex == ey


def test_record_stream_is_shuffled_dealt_by_rank_and_resumes_exactly(tmp_path):
    from mmtune.config.schema import DataConfig
    from mmtune.data.streaming import RecordStream

    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                     {"role": "assistant", "content": str(i)}]}) + "\n"
                           for i in range(23)))
    cfg = DataConfig(train=str(src), streaming=True, shuffle_buffer=4)

    def answers(stream, n):
        return [[r.messages[-1]["content"] if isinstance(r.messages[-1]["content"], str)
                 else r.messages[-1]["content"][0]["text"] for r in stream.next_records()] for _ in range(n)]

    ranks = [RecordStream(str(src), cfg, seed=1, micro_batch_size=2, rank=k, world_size=2) for k in range(2)]
    got = [answers(s, 5) for s in ranks]
    first_epoch = [x for step in zip(*got) for pair in zip(*step) for x in pair]
    assert len(set(first_epoch)) == 20 and set(first_epoch) <= {str(i) for i in range(23)}  # no record twice
    assert first_epoch != [str(i) for i in range(20)]  # shuffled
    assert not set(sum(got[0], [])) & set(sum(got[1], []))  # each rank its own records
    # Resume each rank from a position taken mid-way: the continuation is the same.
    for k in range(2):
        a = RecordStream(str(src), cfg, seed=1, micro_batch_size=2, rank=k, world_size=2)
        answers(a, 3)
        pos = a.position()
        rest = answers(a, 4)  # crosses into epoch 1 (23 records: 5 global batches of 4, 3 dropped)
        b = RecordStream(str(src), cfg, seed=1, micro_batch_size=2, rank=k, world_size=2, position=pos)
        assert answers(b, 4) == rest
        assert b.epoch == a.epoch == 1


def test_bad_records_in_a_stream_are_counted_as_they_come_and_survive_resume(tmp_path):
    from mmtune.config.schema import DataConfig
    from mmtune.data.streaming import RecordStream
    from mmtune.errors import DataError

    src = tmp_path / "t.jsonl"
    lines = [json.dumps({"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": str(i)}]})
             for i in range(10)]
    lines[3] = "{not json"
    src.write_text("\n".join(lines) + "\n")
    skip = DataConfig(train=str(src), streaming=True, shuffle_buffer=1, on_bad_record="skip")
    s = RecordStream(str(src), skip, seed=0, micro_batch_size=3)
    s.next_records()
    s.next_records()
    assert s.skipped.skipped == {"bad json": 1}
    resumed = RecordStream(str(src), skip, seed=0, micro_batch_size=3, position=s.position())
    assert resumed.skipped.skipped == {"bad json": 1}
    with pytest.raises(DataError, match=r"t.jsonl:4"):
        s2 = RecordStream(str(src), DataConfig(train=str(src), streaming=True, shuffle_buffer=1), seed=0,
                          micro_batch_size=3)
        s2.next_records()
        s2.next_records()


def test_streaming_refuses_what_needs_the_whole_set(tiny_vl_config):
    from mmtune.errors import ConfigError
    from mmtune.resolve import resolve_here

    base = tiny_vl_config()
    for extra, words in ((["data.packing=true"], "data.packing"), (["data.group_by_length=true"], "data.group_by_length"),
                         (["data.train=synthetic:counting"], "synthetic")):
        with pytest.raises(Exception, match=words):
            load_config(base, ["data.streaming=true", *extra])
    cfg = load_config(tiny_vl_config(train={"max_steps": None, "epochs": 2}), ["data.streaming=true"])
    with pytest.raises(ConfigError, match="size is not known"):
        resolve_here(cfg)


def test_start_up_check_reads_only_the_first_k_records(tiny_vl_config):
    from mmtune.data.sources import load_records

    cfg = load_config(tiny_vl_config(), ["data.streaming=true", "data.stream_sample=5"])
    rs = load_records(cfg.data.train, cfg.data, "train")
    assert len(rs.records) == 5
    assert any("first 5 records" in n for n in rs.notes)
    run = build_run(cfg)
    assert any("data.streaming: start-up check of the first 5 records" in d for d in run.decisions)
    assert any(d.key == "data.streaming" and "read as they are drawn" in d.reason for d in run.resolved.decisions)


def test_stream_reads_a_parquet_file_and_a_save_to_disk_folder_like_the_loader(tmp_path):
    """Every streamed kind gives the rows the in-memory reader gives, in the same order."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mmtune.data.rows import iter_rows, stream_rows

    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": str(i)}]}
            for i in range(600)]  # more than one parquet batch
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    datasets.Dataset.from_list(rows[:7]).save_to_disk(str(tmp_path / "saved"))
    for spec in (str(tmp_path / "t.parquet"), str(tmp_path / "saved")):
        streamed = [r for _, r in stream_rows(spec, "train")[1]]
        assert streamed == [r for _, r in iter_rows(spec, "train")[1]]
        assert streamed == rows[:len(streamed)] and len(streamed) in (600, 7)
    with pytest.raises(Exception, match="convert it to JSONL"):
        (tmp_path / "t.json").write_text(json.dumps(rows[:2]))
        stream_rows(str(tmp_path / "t.json"), "train")
