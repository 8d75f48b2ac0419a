"""Broken setups from the forty-ninth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 49:
the Hugging Face Hub: downloads, offline mode, mirrors, gated models and uploads"). Nothing here reaches the Hub:
each setup is rebuilt with env vars, a hand-made hub cache (huggingface_hub's models--ORG--NAME/{refs,snapshots,
blobs} layout), local folders and a Hub endpoint on a closed 127.0.0.1 port, and run through what the user runs:
the doctor's MM024, `mmtune download`, the export's card and its push.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import TINY_VL
from typer.testing import CliRunner

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def no_token(tmp_path, monkeypatch):
    """Online, an empty hub cache, no HF_TOKEN and no saved login (the token file's path under tmp_path)."""
    from huggingface_hub import constants

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf_home" / "token"))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: no request leaves


def _mm024(doctor, name: str, **model):
    rep = doctor({**TINY_VL, "model": {"name": name, **model}}, "MM024")
    return [f for f in rep.findings if f.code == "MM024"]


# ----------------------------------------------------------------------------- gated models without a token
# https://github.com/ariG23498/gemma3-object-detection/issues/5, https://github.com/huggingface/transformers/issues/29177,
# https://github.com/rh-ai-quickstart/ai-virtual-agent/issues/200, https://github.com/city96/ComfyUI_ExtraModels/issues/99:
# "Cannot access gated repo ... Access to model meta-llama/... is restricted. You must have access to it and be
# authenticated", 401 / 403 at the first from_pretrained, on the GPU machine. The doctor said only "not in the local
# cache: `mmtune train` will download it"; now a gated family without any token is an error naming the terms page and
# the login, and with a token the warning says its account must have accepted the terms.
def test_a_gated_model_without_a_token_is_an_error_before_the_download(doctor, no_token, monkeypatch):
    found = _mm024(doctor, "meta-llama/Llama-3.2-11B-Vision-Instruct")
    assert [f.severity for f in found] == ["error"], found
    assert "gated model" in found[0].message and "401" in found[0].message
    assert "https://huggingface.co/meta-llama/Llama-3.2-11B-Vision-Instruct" in found[0].fix
    assert "hf auth login" in found[0].fix
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    found = _mm024(doctor, "meta-llama/Llama-3.2-11B-Vision-Instruct")
    assert [f.severity for f in found] == ["warning"] and "accepted the terms" in found[0].message


def test_an_ungated_model_without_a_token_is_only_the_download_warning(doctor, no_token):
    found = _mm024(doctor, "Qwen/Qwen2-VL-2B-Instruct")
    assert [f.severity for f in found] == ["warning"] and "gated" not in found[0].message


def test_mmtune_download_of_a_gated_model_without_a_token_says_so_before_any_request(no_token):
    """https://github.com/huggingface/transformers/issues/29283, https://github.com/LetheSec/HuggingFace-Download-Accelerator/issues/16:
    before, the download went out and, with no network, said "no network or HF_HUB_OFFLINE is set"."""
    from mmtune.cli import app

    res = CliRunner().invoke(app, ["download", "google/gemma-3-4b-it"])
    assert res.exit_code != 0
    assert "gated model" in res.output and "Gemma terms" in res.output and "no network" not in res.output


# ----------------------------------------------------------------------------- a folder shadowing a Hub id
# https://github.com/huggingface/transformers/issues/27954, https://github.com/EleutherAI/elk/pull/223 (transformers' hint:
# "make sure you don't have a local directory with the same name"): ./Qwen/Qwen2-VL-2B-Instruct left by a stopped
# `git clone` or a `mkdir -p` is read
# instead of the Hub model. Before, MM024 said "model folder ... lacks: config.json ..." with the fix "save the model
# with save_pretrained into this folder", never that the Hub id was meant; now it names the folder that shadows it.
@pytest.mark.parametrize("offline", [False, True])
def test_a_local_folder_named_like_the_hub_id_says_it_shadows_the_hub_model(doctor, tmp_path, monkeypatch, offline):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    (tmp_path / "Qwen" / "Qwen2-VL-2B-Instruct").mkdir(parents=True)
    (tmp_path / "Qwen" / "Qwen2-VL-2B-Instruct" / "config.json").write_text(json.dumps(
        {"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"]}))
    monkeypatch.chdir(tmp_path)
    found = _mm024(doctor, "Qwen/Qwen2-VL-2B-Instruct")
    assert [f.severity for f in found] == ["error"], found
    assert "instead of the Hub model" in found[0].message
    assert "rename or remove the folder" in found[0].fix


# ----------------------------------------------------------------------------- offline and the cache (pinned)
def _snapshot(root: Path, repo: str, *, shards: int, present: int, incomplete: bool = False) -> Path:
    """A hub-cache snapshot as huggingface_hub lays it out, of the tiny Qwen2-VL, whose weights index lists
    `shards` files of which `present` were downloaded; `incomplete`: the next one's blob is a `.incomplete` file
    (a download stopped: network, a full disk)."""
    import torch
    from safetensors.torch import save_file

    from mmtune.models.tiny import tiny_config_and_processor

    base = root / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(COMMIT)
    (base / "blobs").mkdir()
    folder = base / "snapshots" / COMMIT
    folder.mkdir(parents=True)
    config, proc = tiny_config_and_processor("tiny/qwen2-vl")
    config.save_pretrained(folder)
    proc.save_pretrained(folder)
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 16 * shards}, "weight_map": {f"w{i}": n for i, n in enumerate(names)}}))
    for i, n in enumerate(names[:present]):
        save_file({f"w{i}": torch.zeros(2, 2)}, str(folder / n))
    if incomplete:
        (base / "blobs" / ("ab" * 32 + ".incomplete")).write_bytes(b"\0" * 100)
    return folder


def test_an_interrupted_shard_download_offline_names_the_missing_shard(doctor, tmp_path, monkeypatch):
    """https://github.com/huggingface/huggingface_hub/issues/4196, https://github.com/huggingface/hf_transfer/issues/28,
    https://github.com/padeoe/hf-mirror-site/issues/31: a download stopped in a shard (a `.incomplete` blob left, a
    mirror that dropped the connection); on the compute node, offline, MM024 names the shard and the command."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _snapshot(tmp_path / "hub", "someorg/vl-sharded", shards=2, present=1, incomplete=True)
    found = _mm024(doctor, "someorg/vl-sharded")
    assert [f.severity for f in found] == ["error"], found
    assert "model-00002-of-00002.safetensors" in found[0].message and "only partly" in found[0].message
    assert "mmtune download someorg/vl-sharded" in found[0].fix
    _snapshot(tmp_path / "hub", "someorg/vl-whole", shards=2, present=2)
    assert _mm024(doctor, "someorg/vl-whole") == []


def test_transformers_offline_alone_is_offline_and_a_revision_not_cached_is_named(doctor, tmp_path, monkeypatch):
    """https://github.com/huggingface/peft/issues/1452, https://github.com/tdrussell/diffusion-pipe/issues/325: a
    compute node without internet. TRANSFORMERS_OFFLINE=1 alone counts as offline (huggingface_hub reads either),
    and a model.revision the cache does not hold is not read as the cached main."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    found = _mm024(doctor, "someorg/not-downloaded")
    assert [f.severity for f in found] == ["error"] and "HF_HUB_OFFLINE" in found[0].message
    _snapshot(tmp_path / "hub", "someorg/vl-main", shards=1, present=1)
    assert _mm024(doctor, "someorg/vl-main") == []
    found = _mm024(doctor, "someorg/vl-main", revision="v2.0")
    assert [f.severity for f in found] == ["error"] and "not in the local cache" in found[0].message


# ----------------------------------------------------------------------------- uploads
# https://github.com/huggingface/transformers/issues/33922, https://github.com/huggingface/trl/issues/1873,
# https://github.com/huggingface/peft/pull/2124, https://github.com/huggingface/autotrain-advanced/issues/648: the Hub
# validates README.md before an upload and refuses `base_model` that is a local path ("... is not valid. Use a model
# id from https://hf.co/models"). The card left out a path only when Path(name).exists(): `~/models/x` (never
# expanded), and a base folder of another machine or one moved since training, went into base_model.
@pytest.mark.parametrize("name,hub", [("~/models/Meta-Llama-3.1-8B", False), ("/data/models/Qwen2-VL-7B", False),
                                      ("./Qwen2-VL-7B", False), ("runs/stage1/final", False),
                                      ("Qwen/Qwen2-VL-7B-Instruct", True)])
def test_the_card_base_model_is_a_hub_id_never_a_path(tmp_path, name, hub):
    from mmtune.config.schema import RunConfig
    from mmtune.export.card import write_card

    cfg = RunConfig.model_validate({"model": {"name": name}, "data": {"train": "x.jsonl"},
                                    "output_dir": str(tmp_path / "run")})
    card = write_card(tmp_path, kind="adapter", cfg=cfg, run_dir=tmp_path / "run", ckpt=tmp_path / "ckpt",
                      load_path="me/tiny", processor_note=None, vllm_notes=[]).read_text()
    front = card.split("---")[1]
    assert (f"base_model: {name}" in front) == hub, front


# https://github.com/huggingface/deep-rl-class/issues/602, https://github.com/HelloVision/ComfyUI_HelloMeme/issues/28
# ("401 Client Error: Unauthorized for url: https://huggingface.co/api/repos/create"): with no token at all,
# huggingface_hub sends create_repo anyway, and the Hub's 401 read as "the token cannot write there" (or, offline
# of the Hub, "cannot reach"). Now: "no token is set here; nothing was sent".
def test_push_without_any_token_says_so_before_sending(no_token, tmp_path):
    from mmtune.errors import MMTuneError
    from mmtune.export.hub import push

    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "README.md").write_text("card")
    with pytest.raises(MMTuneError) as e:
        push(tmp_path / "export", "me/tiny")
    assert "no token is set here" in e.value.what and "hf auth login" in e.value.fix
    assert f"hf upload me/tiny {tmp_path / 'export'}" in e.value.fix
