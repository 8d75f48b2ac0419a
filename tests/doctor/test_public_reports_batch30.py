"""Broken setups from the thirtieth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 30:
DataLoader workers, shared memory, containers and file handles"): more workers than the container's cores, host
memory growing in every worker, datasets' cache on a read-only or full disk, file handles. Each is rebuilt on a
tiny twin (a config, a dataset folder, a cgroup file, an environment variable) and run through what the user runs.
"""

from __future__ import annotations

import json
import os

import pytest
from doctor_helpers import TINY_VL


def _repo(tmp_path, n=4):
    """A dataset repository as the Hub lays one out: a README declaring its files."""
    repo = tmp_path / "repo"
    (repo / "files").mkdir(parents=True)
    rows = [{"messages": [{"role": "user", "content": f"q{i}?"}, {"role": "assistant", "content": str(i)}]}
            for i in range(n)]
    (repo / "files" / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n"
                                    "  - split: train\n    path: files/mine.jsonl\n---\n# a dataset\n")
    return repo


def _unwritable(tmp_path):
    """A datasets cache that cannot be made, even by root: a path through a regular file."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    return blocker / "datasets"


# ----------------------------------------------------------------------------- datasets' cache cannot be written
# https://github.com/huggingface/datasets/issues/7029, https://github.com/huggingface/huggingface_hub/issues/2797,
# https://github.com/pytorch/pytorch/pull/188880, https://github.com/tenstorrent/tt-metal/pull/42890: HF_HOME on a
# read-only shared mount (or a full disk): "OSError: [Errno 30] Read-only file system" from inside datasets, even
# for a local dataset and offline.
def test_a_local_repository_is_read_whatever_datasets_cache_is(tmp_path, monkeypatch):
    """The layout of a local repository is read with a throw-away cache: the unwritable one is never touched."""
    import datasets

    from mmtune.config import load_config
    from mmtune.data.sources import load_records

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", _unwritable(tmp_path))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    data = load_config(None, ["model.name=tiny/qwen2"]).data
    assert [r.id for r in load_records(str(_repo(tmp_path)), data, "train").records] != []
    assert len(load_records(str(_repo(tmp_path / "again")), data, "train").records) == 4


def test_datasets_own_reading_with_an_unwritable_cache_names_the_folder_and_the_variable(tmp_path, monkeypatch):
    """An image folder is read by datasets itself, which needs its cache: the error names the folder and
    HF_DATASETS_CACHE, not a traceback from inside datasets."""
    import datasets
    from PIL import Image

    from mmtune.config import load_config
    from mmtune.data.sources import load_records
    from mmtune.errors import DataError

    cache = _unwritable(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    folder = tmp_path / "imgs" / "data" / "train"
    folder.mkdir(parents=True)
    Image.new("RGB", (56, 56), "red").save(folder / "a.png")
    (folder / "metadata.jsonl").write_text(json.dumps({"file_name": "a.png", "messages": [
        {"role": "user", "content": "<image>What color?"}, {"role": "assistant", "content": "red"}]}) + "\n")
    with pytest.raises(DataError) as e:
        load_records(str(tmp_path / "imgs"), load_config(None, ["model.name=tiny/qwen2-vl"]).data, "train")
    assert str(cache) in str(e.value) and "HF_DATASETS_CACHE=" in e.value.fix


def test_a_full_or_read_only_disk_is_said_as_such(tmp_path):
    import errno

    from mmtune.data.datasets_cache import unwritable_cache

    full = unwritable_cache(OSError(errno.ENOSPC, "No space left on device", "/data/hf/datasets/x.arrow"), "ORG/NAME")
    ro = unwritable_cache(OSError(errno.EROFS, "Read-only file system", "/mnt/hf/datasets"), "ORG/NAME")
    assert "/data/hf/datasets/x.arrow is on a full disk" in str(full) and "read-only" in str(ro)
    assert unwritable_cache(OSError(errno.ENOENT, "No such file or directory", "x"), "ORG/NAME") is None


# ----------------------------------------------------------------------------- host memory grows in every worker
# https://github.com/pytorch/pytorch/issues/13246 (via https://github.com/pytorch/pytorch/issues/20433),
# https://github.com/pytorch/pytorch/issues/5902, https://github.com/pytorch/pytorch/issues/63301,
# https://github.com/open-mmlab/mmrotate/issues/501, https://github.com/hpcaitech/Open-Sora/issues/600: memory grows
# with every worker over the epoch until "DataLoader worker (pid ...) is killed by signal: Killed".
@pytest.mark.parametrize("workers", [0, 2])
def test_data_cache_mb_is_the_runs_budget_shared_by_its_workers(tmp_path, workers):
    """Each worker fills its own copy of the encode cache (the dataset is pickled into it): the copies together
    keep data.cache_mb, as the key says, not data.cache_mb each."""
    import pickle

    from mmtune.build import build_run
    from mmtune.config import load_config
    from mmtune.train.feed import EncodedDataset

    cfg = load_config(None, ["model.name=tiny/qwen2-vl", "data.train=synthetic:counting", "data.synthetic_train_size=8",
                             "train.max_steps=20", "data.cache_mb=64", f"train.num_workers={workers}",
                             f"output_dir={tmp_path / 'run'}"])
    run = build_run(cfg, with_optimizer=False)
    copies = max(1, workers)
    in_a_worker = pickle.loads(pickle.dumps(EncodedDataset(run.train_set.records, run.train_encoder, run.encode_cache)))
    assert in_a_worker.cache.budget * copies == 64 * 2**20
    line = next(d for d in run.decisions if d.startswith("data:") and "cache_mb" in d)
    assert ("32 MiB in each of the 2 DataLoader workers" in line) == (workers == 2), line


# ----------------------------------------------------------------------------- more workers than cores
# https://github.com/embeddings-benchmark/mteb/issues/1331, https://github.com/AILab-CVC/YOLO-World/issues/413,
# https://github.com/MIC-DKFZ/ParticleSeg3D/pull/2: "This DataLoader will create 104 worker processes in total. Our
# suggested max number of worker in current system is 23 ... might get DataLoader running slow or even freeze".
def test_mm263_more_workers_than_cores_is_a_warning(doctor, monkeypatch):
    from mmtune.cores import usable_cores

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    cores = usable_cores()[0]
    rep = doctor({**TINY_VL, "train": {"num_workers": cores}}, "MM263")
    [f] = [f for f in rep.findings if f.code == "MM263"]
    assert f.severity == "warning" and f.fix.startswith(f"train.num_workers={cores - 1}"), f
    if cores > 1:
        assert [f for f in doctor({**TINY_VL, "train": {"num_workers": cores - 1}}, "MM263").findings
                if f.code == "MM263"] == []
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores))  # one training process per core: no room for a worker
    [f] = [f for f in doctor({**TINY_VL, "train": {"num_workers": 1}}, "MM263").findings if f.code == "MM263"]
    assert f"in each of {cores} processes" in f.message and f.fix.startswith("train.num_workers=0")


def test_mm263_is_silent_without_workers_and_for_another_machine(doctor):
    assert [f for f in doctor(TINY_VL, "MM263").findings if f.code == "MM263"] == []
    rep = doctor({**TINY_VL, "train": {"num_workers": 64}}, "MM263", gpu="a100-80gb")
    assert [f for f in rep.findings if f.code == "MM263"] == []


# https://github.com/Unity-Technologies/ml-agents/pull/4471, https://github.com/onyx-dot-app/onyx/pull/12351: in a
# container limited with `--cpus` every core of the host is visible (cpu_count, affinity, torch): the quota is not.
@pytest.mark.parametrize("files, quota", [
    ({"cpu.max": "150000 100000\n"}, 1.5),  # cgroup v2, docker run --cpus=1.5
    ({"cpu.max": "max 100000\n"}, None),  # v2, no limit
    ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4.0),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no limit
    ({}, None),  # no cgroup files (macOS, Windows)
])
def test_a_containers_cpu_quota_is_read(tmp_path, files, quota):
    from mmtune.cores import cpu_quota, usable_cores

    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert cpu_quota(str(tmp_path)) == quota
    visible = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores, how = usable_cores(str(tmp_path))
    assert cores == (max(1, int(quota)) if quota is not None and quota < visible else visible)
    assert ("CPU quota" in how) == (quota is not None and quota < visible)


# ----------------------------------------------------------------------------- file handles
# https://github.com/pytorch/pytorch/issues/973, https://github.com/pytorch/pytorch/issues/11201,
# https://github.com/pytorch/pytorch/issues/165532, https://github.com/pytorch/pytorch/issues/14768: "Too many open
# files" / "received 0 items of ancdata" with many workers or many images per sample.
def test_decoded_images_leave_no_file_open(tmp_path):
    """A record's image is decoded and its file closed at once: a worker never holds a descriptor per image."""
    from PIL import Image

    from mmtune.data.media import load_image

    paths = []
    for i in range(3):
        paths.append(tmp_path / f"im{i}.png")
        Image.new("RGB", (40, 30), "red").save(paths[-1])
    images = [load_image({"type": "image", "path": str(p)}) for p in paths]
    assert all(im.size == (40, 30) for im in images)
    fd_dir = "/proc/self/fd"
    if not os.path.isdir(fd_dir):
        pytest.skip("no /proc here")
    held = set()
    for fd in os.listdir(fd_dir):
        try:
            held.add(os.readlink(os.path.join(fd_dir, fd)))
        except OSError:
            continue
    assert not held & {str(p) for p in paths}
