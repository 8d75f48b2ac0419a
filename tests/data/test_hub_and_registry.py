"""Data where it lives (issue 15): Hub ids from the local Hub cache (offline), local dataset repositories,
Arrow files, and LLaMA-Factory's dataset_info.json -- all built in the test, no network."""

from __future__ import annotations

import json

import pytest

from mmtune.config import load_config
from mmtune.data.sources import load_records
from mmtune.errors import DataError

from .conftest import write_png


def _qa_rows(n, tag="q"):
    return [{"messages": [{"role": "user", "content": f"{tag}{i}?"}, {"role": "assistant", "content": str(i)}]}
            for i in range(n)]


def _data_cfg(*ov):
    return load_config(None, ["model.name=tiny/qwen2-vl", *ov]).data


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hub cache and datasets cache under tmp_path, the Hub switched off."""
    import datasets
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return tmp_path / "hub"


def _cache_repo(hub, repo_id: str, files: dict[str, str]):
    """A dataset repository as `hf download --repo-type dataset` leaves it in the Hub cache."""
    sha = "1" * 40
    root = hub / f"datasets--{repo_id.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(sha)
    for rel, text in files.items():
        p = root / "snapshots" / sha / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_hub_id_reads_the_hub_cache_offline(hub_cache):
    _cache_repo(hub_cache, "acme/counting", {
        "data/train.jsonl": "".join(json.dumps(r) + "\n" for r in _qa_rows(5)),
        "data/validation.jsonl": "".join(json.dumps(r) + "\n" for r in _qa_rows(2, "v"))})
    d = _data_cfg("data.train=acme/counting", "data.eval=acme/counting")
    train = load_records(d.train, d, "train")
    # each record named by its file:line in the cached snapshot (read by mmtune's own reader, data/repo_files.py)
    assert len(train.records) == 5 and train.records[0].source.endswith("/data/train.jsonl:1")
    ev = load_records(d.eval, d, "eval")  # eval -> the validation split, found under its aliases
    assert [r.messages[0]["content"][0]["text"] for r in ev.records] == ["v0?", "v1?"]
    assert len(load_records("acme/counting::validation", d, "train").records) == 2


def test_hub_id_not_cached_offline_says_how_to_fetch(hub_cache):
    with pytest.raises(DataError) as e:
        load_records("acme/missing", _data_cfg(), "train")
    assert "not in the Hub cache" in e.value.what and "hf download --repo-type dataset acme/missing" in e.value.fix


def test_local_dataset_repository_with_image_bytes(tmp_path, hub_cache):
    """A folder as the Hub lays datasets out: data/{split}-00000-of-00001.parquet, images as Image bytes."""
    import datasets
    from PIL import Image

    img = Image.new("RGB", (40, 30), (10, 200, 30))  # in memory: datasets stores its bytes
    feats = datasets.Features({"image": datasets.Image(), "question": datasets.Value("string"),
                               "answer": datasets.Value("string")})
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    for split, n in (("train", 3), ("test", 2)):
        ds = datasets.Dataset.from_dict({"image": [img] * n, "question": [f"q{i}" for i in range(n)],
                                         "answer": [str(i) for i in range(n)]}, features=feats)
        ds.to_parquet(str(repo / "data" / f"{split}-00000-of-00001.parquet"))
    d = _data_cfg(f"data.train={repo}", "data.format=vqa")
    rs = load_records(str(repo), d, "train")
    assert len(rs.records) == 3
    part = rs.records[0].messages[0]["content"][0]
    assert part["type"] == "image" and part.get("bytes")  # the image travels as its bytes
    # eval never falls back to test (the best checkpoint would be chosen on the test set): an error naming
    # the splits there are; the test split is read when named
    with pytest.raises(DataError, match="no 'eval' split") as e:
        load_records(str(repo), d, "eval")
    assert "train, test" in e.value.fix
    assert len(load_records(f"{repo}::test", d, "eval").records) == 2


def test_readme_configs_declare_the_layout(tmp_path, hub_cache):
    repo = tmp_path / "repo"
    (repo / "files").mkdir(parents=True)
    (repo / "files" / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _qa_rows(4)))
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n"
                                    "  - split: train\n    path: files/mine.jsonl\n---\n# a dataset\n")
    assert len(load_records(str(repo), _data_cfg(), "train").records) == 4


def test_repository_json_files_in_json_lines_are_read_as_datasets_reads_them(tmp_path, hub_cache):
    """A repository's `.json` data file holding one record per line (JSON Lines under a .json name, as many Hub
    sets ship it) is read line by line, as `datasets` reads it: not refused as invalid JSON, and a one-record file
    is that record (not its one list field read as rows)."""
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "train.json").write_text("".join(json.dumps(r) + "\n" for r in _qa_rows(3)))
    (repo / "data" / "validation.json").write_text(json.dumps(_qa_rows(1, "v")[0]) + "\n")
    (repo / "data" / "test.json").write_text(json.dumps(_qa_rows(2, "t")))  # a JSON list: read whole
    d = _data_cfg()
    train = load_records(str(repo), d, "train")
    assert [r.messages[0]["content"][0]["text"] for r in train.records] == ["q0?", "q1?", "q2?"]
    assert train.records[0].source.endswith("/data/train.json:1")
    ev = load_records(str(repo), d, "eval")
    assert [r.messages[0]["content"][0]["text"] for r in ev.records] == ["v0?"]
    assert len(load_records(f"{repo}::test", d, "eval").records) == 2


def test_arrow_file(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list(_qa_rows(3))
    ds.save_to_disk(str(tmp_path / "saved"))
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    assert len(load_records(str(arrow), _data_cfg(), "train").records) == 3
    bad = tmp_path / "bad.arrow"
    bad.write_text("not arrow")
    with pytest.raises(DataError, match="bad.arrow is not an Arrow file"):
        load_records(str(bad), _data_cfg(), "train")


# ------------------------------------------------------------------------------- dataset_info.json
@pytest.fixture
def registry(tmp_path):
    """LLaMA-Factory's data/ folder: its mllm_demo (sharegpt, role/content tags, images) and an alpaca set."""
    d = tmp_path / "lf_data"
    (d / "mllm_demo_data").mkdir(parents=True)
    write_png(d / "mllm_demo_data" / "1.jpg")
    (d / "mllm_demo.json").write_text(json.dumps([
        {"messages": [{"role": "user", "content": "<image>Who are they?"},
                      {"role": "assistant", "content": "They're players."}], "images": ["mllm_demo_data/1.jpg"]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "robot", "content": "x"}]}]))
    (d / "alpaca_zh.json").write_text(json.dumps([
        {"q": "Translate", "ctx": "hello", "a": "ni hao", "sys": "You translate.", "hist": [["hi", "hey"]]},
        {"q": "Count", "ctx": "", "a": "3"}]))
    (d / "sharegpt_plain.jsonl").write_text(json.dumps({"conversations": [
        {"from": "system", "value": "Be brief."}, {"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]}) + "\n")
    (d / "dataset_info.json").write_text(json.dumps({
        "mllm_demo": {"file_name": "mllm_demo.json", "formatting": "sharegpt",
                      "columns": {"messages": "messages", "images": "images"},
                      "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                               "assistant_tag": "assistant"}},
        "alpaca_zh": {"file_name": "alpaca_zh.json",
                      "columns": {"prompt": "q", "query": "ctx", "response": "a", "system": "sys", "history": "hist"}},
        "plain": {"file_name": "sharegpt_plain.jsonl", "formatting": "sharegpt"},
        "pairs": {"file_name": "alpaca_zh.json", "ranking": True},
        "gone": {"file_name": "nope.json"},
        "ms": {"ms_hub_url": "AI-ModelScope/x"},
        "tools": {"file_name": "alpaca_zh.json", "columns": {"tools": "t"}}}))
    return d


def _text(msg):
    return "".join(p.get("text", "") for p in msg["content"])


def test_registry_entries_read_as_llama_factory_reads_them(registry):
    d = _data_cfg(f"data.dataset_info={registry / 'dataset_info.json'}", "data.on_bad_record=skip")
    demo = load_records("mllm_demo", d, "train")
    assert len(demo.records) == 1 and demo.skipped == {"bad conversation": 1}  # role 'robot' is no tag of the entry
    user = demo.records[0].messages[0]["content"]
    assert user[0]["type"] == "image" and user[0]["path"].endswith("mllm_demo_data/1.jpg")  # relative to the registry
    alp = load_records("alpaca_zh", d, "train").records
    roles = [m["role"] for m in alp[0].messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]  # system column, history, then the turn
    assert _text(alp[0].messages[3]) == "Translate\nhello" and _text(alp[0].messages[4]) == "ni hao"
    plain = load_records("plain", d, "train").records[0]  # sharegpt defaults: from/value, human/gpt/system
    assert [m["role"] for m in plain.messages] == ["system", "user", "assistant"]


def test_registry_names_several_as_llama_factory_does(registry):
    cfg = load_config(None, ["model.name=tiny/qwen2-vl", f"data.dataset_info={registry}",  # the folder works too
                             "data.train=mllm_demo, alpaca_zh", "data.on_bad_record=skip"])
    assert [s.name for s in cfg.data.train] == ["mllm_demo", "alpaca_zh"]
    assert len(load_records(cfg.data.train, cfg.data, "train").records) == 3  # all of each, once


@pytest.mark.parametrize("name,where,what", [
    ("gone", "gone.file_name", "does not exist"),
    ("ms", ": ms", "ms_hub_url"), ("tools", "tools.columns", "tools"), ("mllm_dem", "mllm_dem", "did you mean 'mllm_demo'")])
def test_registry_refusals_name_the_entry_and_key(registry, name, where, what):
    with pytest.raises(DataError) as e:
        load_records(name, _data_cfg(f"data.dataset_info={registry / 'dataset_info.json'}"), "train")
    assert str(e.value.where).endswith(where) and "dataset_info.json" in str(e.value.where)
    assert what in e.value.what + str(e.value.fix)


def test_registry_missing_column_names_the_entry_key(registry):
    info = json.loads((registry / "dataset_info.json").read_text())
    info["alpaca_zh"]["columns"]["prompt"] = "instruction"
    (registry / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(DataError) as e:
        load_records("alpaca_zh", _data_cfg(f"data.dataset_info={registry / 'dataset_info.json'}"), "train")
    assert "alpaca_zh: columns.prompt" in e.value.what and "alpaca_zh.json:record 0" in str(e.value.where)


def test_doctor_reads_registry_names_and_hub_ids_as_training_does(registry, hub_cache, tmp_path):
    """MM026 checks the registry entry / the Hub cache instead of calling a name a missing file; the
    data pass reads the same rows training reads (and counts the bad conversation)."""
    import yaml

    from mmtune.doctor.runner import run_doctor

    _cache_repo(hub_cache, "acme/counting", {"data/train.jsonl": "".join(json.dumps(r) + "\n" for r in _qa_rows(3))})
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"name": "tiny/qwen2-vl"}, "data": {
        "dataset_info": str(registry / "dataset_info.json"), "train": "mllm_demo", "eval": "acme/counting::train",
        "on_bad_record": "skip"}}))
    rep = run_doctor(cfg, [], None, only=["MM026", "MM014", "MM016"])
    assert not [f for f in rep.findings if f.severity == "error"], [f.message for f in rep.findings]
    assert any("bad conversation" in f.message for f in rep.findings)  # the robot turn, found by the data pass
    bad = run_doctor(cfg, ["data.train=mllm_dem", "data.eval=acme/missing"], None, only=["MM026"])
    msgs = " ".join(f.message for f in bad.findings if f.severity == "error")
    assert "no dataset 'mllm_dem'" in msgs and "'acme/missing' is not in the Hub cache" in msgs


def test_hub_id_streams_from_the_hub_cache_offline(hub_cache):
    """data.streaming with a Hub id: the cached repository's files read lazily by mmtune's readers, dealt in a
    seeded shuffled order that resumes exactly."""
    from mmtune.data.streaming import RecordStream

    _cache_repo(hub_cache, "acme/big", {"data/train.jsonl": "".join(json.dumps(r) + "\n" for r in _qa_rows(9))})
    d = _data_cfg("data.train=acme/big", "data.streaming=true", "data.shuffle_buffer=3")
    s = RecordStream("acme/big", d, seed=0, micro_batch_size=2)
    first = [r.source for r in s.next_records()]
    assert all("/data/train.jsonl:" in src for src in first)
    pos = s.position()
    rest = [r.source for _ in range(3) for r in s.next_records()]
    again = RecordStream("acme/big", d, seed=0, micro_batch_size=2, position=pos)
    assert [r.source for _ in range(3) for r in again.next_records()] == rest
    assert len(set(first + rest)) == 8  # one epoch of 4 micro-batches, 1 record of tail dropped
