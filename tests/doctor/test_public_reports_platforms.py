"""Broken setups from the eleventh batch of public bug reports (docs/doctor.md, "Public bug reports, batch 11: home
hardware and platforms"): data files written on Windows, several GPUs under a torch without NCCL, a container's small
/dev/shm under DataLoader workers, a Mac's Apple GPU. The misses are fixed here and their clean twins left alone.
This machine is a Linux CPU: where a platform's answer matters (NCCL, CUDA, MPS), torch's answer is patched, as the
CUDA_VISIBLE_DEVICES tests of batches 4 and 9 do; the rest is the code `mmtune train` and `mmtune doctor` run.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from doctor_helpers import context_for, run_codes


def _image_set(tmp_path, paths: list[str]) -> str:
    from PIL import Image

    (tmp_path / "images").mkdir()
    Image.new("RGB", (56, 56), (200, 10, 10)).save(tmp_path / "images" / "cat.jpg")
    rows = [{"messages": [{"role": "user", "content": "<image>What color?"}, {"role": "assistant", "content": "red"}],
             "images": [p]} for p in paths]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(tmp_path / "d.jsonl")


@pytest.fixture
def tiny_cfg(tmp_path):
    """tiny_cfg(**sections) -> the loaded RunConfig of the tiny Qwen2-VL on the synthetic set, sections merged in."""
    import yaml

    from mmtune.config import load_config

    def load(**sections):
        tree = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 8},
                "output_dir": str(tmp_path / "run")}
        for k, v in sections.items():
            tree[k] = {**tree.get(k, {}), **v}
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(tree))
        return load_config(tmp_path / "c.yaml", [])

    return load


def _tree(data: str) -> dict:
    return {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": data, "max_length": 256},
            "adapter": {"method": "lora", "r": 4}, "train": {"precision": "fp32", "device": "cpu"}}


# https://github.com/AILab-CVC/YOLO-World/issues/535, https://github.com/layumi/University1652-Baseline/issues/56,
# https://github.com/balabooooo/AED/issues/6, https://github.com/wkentaro/labelme/pull/1784: a data file written on
# Windows names `images\cat.jpg`; on Linux that is one file name with a backslash in it: "No such file or directory".
# mmtune said "media file not found: .../images\cat.jpg" with the fix "check the path" for every record.

def test_media_paths_written_on_windows_are_read_as_meant(tmp_path):
    data = _image_set(tmp_path, ["images\\cat.jpg"] * 4 + ["images/cat.jpg"] * 4)
    rep = run_codes(context_for(tmp_path, _tree(data)), "MM018", "MM031")
    assert rep.errors == [] and not rep.codes("warning")
    from mmtune.data.one_source import make_resolver

    resolve = make_resolver(tmp_path, None)
    assert resolve("images\\cat.jpg", "d.jsonl:1") == str(tmp_path / "images" / "cat.jpg")


def test_a_windows_drive_path_is_refused_as_such(tmp_path):
    from mmtune.data.formats import BadRecord
    from mmtune.data.one_source import make_resolver

    data = _image_set(tmp_path, ["C:\\Users\\me\\data\\images\\cat.jpg"] * 8)
    rep = run_codes(context_for(tmp_path, _tree(data)), "MM018")
    assert rep.codes("error") == {"MM018"}
    assert "is a Windows path (drive C:)" in rep.errors[0].message and "d.jsonl:1" in rep.errors[0].where
    resolve = make_resolver(tmp_path, None)
    with pytest.raises(BadRecord) as e:
        resolve("\\\\server\\share\\cat.jpg", "d.jsonl:2")
    assert "drive UNC" in e.value.what and "relative to the data file's folder" in e.value.fix
    # clean twins: a missing POSIX path keeps its own message; a backslash name that exists as written is that file
    with pytest.raises(BadRecord) as e:
        resolve("images/dog.jpg", "d.jsonl:3")
    assert "media file not found" in e.value.what
    (tmp_path / "odd\\name.jpg").write_bytes((tmp_path / "images" / "cat.jpg").read_bytes())
    assert resolve("odd\\name.jpg", "d.jsonl:4") == str(tmp_path / "odd\\name.jpg")


# https://github.com/hiyouga/LlamaFactory/issues/4359, https://github.com/kohya-ss/sd-scripts/issues/317,
# https://github.com/OFA-Sys/Chinese-CLIP/issues/279, https://github.com/tczhangzhi/pytorch-distributed/issues/15:
# two GPUs on Windows under torchrun: every rank stops with "Distributed package doesn't have NCCL built in"
# (accelerate starts NCCL for CUDA devices). Now refused when the run is resolved, naming the platform.

def test_several_gpu_processes_without_nccl_are_refused_at_start(monkeypatch):
    import torch
    import torch.distributed as dist

    from mmtune.errors import ConfigError
    from mmtune.resolve import local_target
    from mmtune.resolve.launch_env import no_nccl

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ConfigError) as e:
        local_target("auto")
    assert "has no NCCL" in str(e.value) and "Distributed package doesn't have NCCL built in" in str(e.value)
    assert e.value.where.startswith("WORLD_SIZE") and "one GPU" in e.value.fix and "WSL2" in e.value.fix
    assert no_nccl(1) is None  # one process needs no process group
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    assert no_nccl(2) is None  # a Linux CUDA build


# https://github.com/pytorch/pytorch/issues/5040, https://github.com/bytedance/Protenix/issues/2,
# https://github.com/nianticlabs/simplerecon/issues/3, https://github.com/mosaicml/streaming/issues/493: in a Docker
# container (64 MB /dev/shm) DataLoader workers die: "DataLoader worker (pid ...) is killed by signal: Bus error ...
# out of shared memory". A CUDA run's workers handed over through torch's shared memory whatever /dev/shm held.

def test_a_small_dev_shm_sends_a_cuda_runs_micro_batches_by_value(tiny_cfg):
    from mmtune.resolve.data_loading import decide_loader
    from mmtune.resolve.shm import shm_needed
    from mmtune.resolve.target import gpu_target

    cfg = tiny_cfg(train={"num_workers": 4})
    here = dataclasses.replace(gpu_target("rtx-3060-12gb"), local=True)  # this machine, as a CUDA one
    plan, d = decide_loader(cfg, here, shm_free=64 << 20)  # Docker's default
    assert not plan.pin_memory and plan.by_value and plan.by_value_limit is None
    assert d.changed and "/dev/shm has 64 MiB free" in d.reason and "--shm-size" in d.reason
    assert "by value (no /dev/shm)" in d.value
    roomy, d = decide_loader(cfg, here, shm_free=shm_needed(4, 2))  # enough: torch's pinned hand-over
    assert roomy.pin_memory and not roomy.by_value and not d.changed
    planned, _ = decide_loader(cfg, gpu_target("rtx-3060-12gb"))  # another machine's run: this /dev/shm is no measure
    assert planned.pin_memory
    cpu, _ = decide_loader(cfg, dataclasses.replace(here, device="cpu", gpu=None), shm_free=0)
    assert not cpu.pin_memory and cpu.by_value_limit is not None  # a CPU run was already by value


def test_by_value_without_a_limit_carries_a_large_micro_batch():
    import pickle

    import torch

    from mmtune.data.workers import BY_VALUE_BYTES, ByValue, Carried, received

    big = {"pixel_values": torch.zeros(BY_VALUE_BYTES // 4 + 1)}
    assert isinstance(ByValue(lambda items: dict(big))([None])["pixel_values"], torch.Tensor)  # torch's way
    sent = ByValue(lambda items: dict(big), limit=None)([None])
    assert isinstance(sent["pixel_values"], Carried)
    assert torch.equal(received(pickle.loads(pickle.dumps(sent)))["pixel_values"], big["pixel_values"])


# https://github.com/hiyouga/LlamaFactory/issues/2090, https://github.com/QwenLM/Qwen/issues/497,
# https://github.com/meta-pytorch/torchtune/issues/1942, https://github.com/tloen/alpaca-lora/issues/444: training on
# a Mac's MPS: "BFloat16 is not supported on MPS", "Only float and half are supported", results unlike CUDA's.
# mmtune never puts a run on MPS (CPU target: Accelerator(cpu=True)); the target now says the Apple GPU is not used.

def test_a_macs_apple_gpu_is_named_as_not_used(monkeypatch, tiny_cfg):
    import torch

    from mmtune.errors import ConfigError
    from mmtune.resolve import local_target

    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    t = local_target("auto")
    assert t.device == "cpu" and "Apple GPU (MPS) is not used" in t.origin
    assert "MPS" not in local_target("cpu").origin  # asked for the CPU: nothing to explain
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert "MPS" not in local_target("auto").origin
    with pytest.raises(ConfigError) as e:  # train.device=mps: refused with the choices (MM019)
        tiny_cfg(train={"device": "mps"})
    assert "'auto', 'cpu' or 'cuda'" in str(e.value)
