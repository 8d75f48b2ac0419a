"""Resuming executes nothing it reads: checkpoints hold no pickle (state and RNG as JSON + safetensors);
checkpoints of the earlier format (torch.save pickles) still resume, bit-identical, through a converter
that refuses anything but tensors and plain values -- a planted `__reduce__` never runs; a missing or
rewritten manifest is a verified fallback to the checkpoint before, or a clear error, never a traceback."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.errors import MMTuneError
from mmtune.train import checkpoint as C
from mmtune.train.durable import MANIFEST, verify_manifest, write_manifest
from mmtune.train.loop import train

SRC = Path(__file__).resolve().parents[2] / "src"


def _config(root: Path, out: Path, **train_kw) -> Path:
    import yaml

    cfg = {"output_dir": str(out), "model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": False},
           "data": {"train": str(root / "data" / "data.jsonl"), "max_length": 256},
           "adapter": {"method": "lora", "r": 4, "dropout": 0.1},  # dropout: the RNG state matters for exactness
           "train": {"max_steps": 4, "save_every": 2, "micro_batch_size": 2, "grad_accum": 1, "precision": "fp32",
                     "device": "cpu", "warmup_steps": 1, "seed": 0, **train_kw},
           "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(root, straight run folder: checkpoints 2 and 4; a run stopped after step 2, as a kill would)."""
    from tests.train.conftest import make_dataset

    root = tmp_path_factory.mktemp("safety")
    make_dataset(root / "data", 8)
    train(build_run(load_config(_config(root, root / "straight"), [])))
    assert train(build_run(load_config(_config(root, root / "stopped"), [])), stop_after=2) is None
    return root, root / "straight", root / "stopped"


def _copy(runs, name: str, tmp_path) -> tuple[Path, Path]:
    """A copy of run `name` and a config writing into it."""
    root, *_ = runs
    dst = tmp_path / name
    shutil.copytree(root / name, dst, symlinks=True)
    return dst, _config(root, dst)


def _final_weights(out: Path) -> bytes:
    return (out / "checkpoint-4" / "trainable.safetensors").read_bytes()


def test_no_pickle_is_written_and_none_is_read_unguarded(runs):
    _, straight, _ = runs
    from safetensors import safe_open

    files = [f for f in straight.glob("checkpoint-*/**/*") if f.is_file()]
    assert len(files) > 10
    for f in files:  # every file is safetensors or text: a pickle (and torch.save's zip of one) is neither
        if f.suffix == ".safetensors":
            with safe_open(str(f), "pt") as st:
                assert list(st.keys()) is not None
        else:
            f.read_text(encoding="utf-8")
    offenders = [f"{p}:{i}" for p in SRC.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"weights_only\s*=\s*False", line)]
    assert offenders == []


def test_resume_is_bit_identical_from_the_new_format(runs, tmp_path):
    _, straight, _ = runs
    out, cfg = _copy(runs, "stopped", tmp_path)
    train(build_run(load_config(cfg, [])))
    assert _final_weights(out) == _final_weights(straight)


def _to_earlier_format(ckpt: Path, manifest: bool = True) -> None:
    """Rewrite a checkpoint the way mmtune wrote it before (what its _write_checkpoint did): state.pt and
    rng/rank-0.pt as torch.save pickles, numpy's RNG key as an ndarray; with or without a manifest."""
    import torch

    from mmtune.train.state_files import read_state

    state = C.read_checkpoint_state(ckpt)
    rng = read_state(ckpt / "rng", "rank-0")
    for f in ("state.json", "state.safetensors", "rng/rank-0.json", "rng/rank-0.safetensors", MANIFEST):
        (ckpt / f).unlink()
    torch.save(state, ckpt / "state.pt")
    torch.save(rng, ckpt / "rng" / "rank-0.pt")
    if manifest:
        write_manifest(ckpt)


@pytest.mark.parametrize("manifest", [True, False], ids=["with-manifest", "before-manifests"])
def test_a_checkpoint_of_the_earlier_format_resumes_bit_identical(runs, tmp_path, manifest, capsys):
    _, straight, _ = runs
    out, cfg = _copy(runs, "stopped", tmp_path)
    _to_earlier_format(out / "checkpoint-2", manifest=manifest)
    train(build_run(load_config(cfg, [])))
    assert "resumed" in capsys.readouterr().out
    assert _final_weights(out) == _final_weights(straight)
    assert (out / "checkpoint-4" / "state.json").is_file() and not (out / "checkpoint-4" / "state.pt").exists()


class _Planted:
    """What an attacker's file holds: unpickling it calls open(marker, "w"), creating the marker."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("where", ["state.pt", "rng/rank-0.pt"])
def test_a_planted_pickle_is_refused_and_never_runs(runs, tmp_path, where):
    """The attacker rewrites the manifest too (it is no signature): the file still never executes."""
    import torch

    from mmtune.train.legacy_state import read_legacy_state

    out, cfg = _copy(runs, "stopped", tmp_path)
    ckpt = out / "checkpoint-2"
    _to_earlier_format(ckpt, manifest=False)
    marker = tmp_path / "PLANTED-RAN"
    legit = read_legacy_state(ckpt / where) if where == "state.pt" else None
    payload = {**legit, "train_state": _Planted(marker)} if legit else {"rank": 0, "python": _Planted(marker)}
    torch.save(payload, ckpt / where)
    write_manifest(ckpt)
    assert verify_manifest(ckpt) is None  # the manifest vouches for it: no help here
    with pytest.raises(MMTuneError) as e:
        train(build_run(load_config(cfg, [])))
    assert not marker.exists()
    assert "refused, not run" in e.value.what and "open" in e.value.what and where.split("/")[-1] in e.value.what
    assert "train.resume=false" in e.value.fix


def test_what_mmtune_adds_to_a_checkpoint_later_is_not_damage(runs, tmp_path):
    """mmtune eval's eval.json and mmtune export's folders (and a killed export's staging folder) live in
    the checkpoint after its save: the manifest check passes them; anything else unlisted fails it."""
    out, _ = _copy(runs, "straight", tmp_path)
    ckpt = out / "checkpoint-4"
    (ckpt / "eval.json").write_text("{}")
    for d in ("export", "export-merged", ".export.partial-abc123"):
        (ckpt / d).mkdir()
        (ckpt / d / "adapter_model.safetensors").write_bytes(b"x")
    assert verify_manifest(ckpt) is None
    (ckpt / "adapter" / "extra.json").write_text("{}")
    assert verify_manifest(ckpt) == "adapter/extra.json is not in manifest.json: added after the save"


def test_a_planted_file_the_manifest_does_not_list_fails_the_check(runs, tmp_path, capsys):
    """A new-format checkpoint with an extra file dropped in: passed over for the one before (which the
    straight run's checkpoint-2 is), and the run continues from there exactly."""
    out, cfg = _copy(runs, "straight", tmp_path)
    (out / "summary.json").unlink()
    (out / "checkpoint-4" / "rng" / "rank-0.pt").write_bytes(b"\x80\x04planted")
    train(build_run(load_config(cfg, [])))
    said = " ".join(capsys.readouterr().out.split())
    assert "checkpoint-4: rng/rank-0.pt is not in manifest.json" in said and "resuming from checkpoint-2" in said
    assert _final_weights(out) == _final_weights(runs[1])


def _deep(n=100_000):
    return "[" * n + "]" * n


# (how the manifest of the newest checkpoint is rewritten, what the pass-over line says)
MANIFESTS = [
    ("missing", None, "manifest.json is missing"),
    ("empty", "", "unreadable"),
    ("not-json", "{'files': ", "unreadable"),
    ("a-list", "[]", "is a JSON list, not an object"),
    ("no-version", lambda m: {"files": m["files"]}, "has version None"),
    ("files-a-list", lambda m: {**m, "files": list(m["files"])}, "'files' is a list"),
    ("size-a-string", lambda m: {**m, "files": {k: {**v, "size": str(v["size"])} for k, v in m["files"].items()}},
     "not a byte count"),
    ("entry-not-a-dict", lambda m: {**m, "files": {k: 1 for k in m["files"]}}, "is a int, not {size, sha256}"),
    ("wrong-hash", lambda m: {**m, "files": {k: {**v, "sha256": "0" * 64} for k, v in m["files"].items()}},
     "does not match its checksum"),
    ("extra-entry", lambda m: {**m, "files": {**m["files"], "adapter/extra.bin": m["files"]["meta.json"]}},
     "adapter/extra.bin is missing"),
    ("missing-entry", lambda m: {**m, "files": {k: v for k, v in m["files"].items() if k != "state.json"}},
     "state.json is not in manifest.json"),
    ("path-outside", lambda m: {**m, "files": {**m["files"], "../../etc/passwd": m["files"]["meta.json"]}},
     "not a path inside the checkpoint"),
    ("deeply-nested", _deep(), "unreadable"),
]


@pytest.mark.parametrize("name, rewrite, said", MANIFESTS, ids=[m[0] for m in MANIFESTS])
def test_a_missing_or_rewritten_manifest_falls_back_to_the_checkpoint_before(runs, tmp_path, name, rewrite, said):
    out, _ = _copy(runs, "straight", tmp_path)
    path = out / "checkpoint-4" / MANIFEST
    if rewrite is None:
        path.unlink()
    elif callable(rewrite):
        path.write_text(json.dumps(rewrite(json.loads(path.read_text()))))
    else:
        path.write_text(rewrite)
    ckpt, passed = C.newest_valid_checkpoint(out)
    assert ckpt == out / "checkpoint-2"
    assert len(passed) == 1 and passed[0].startswith("checkpoint-4: ") and said in passed[0], passed
    # eval / export / chat read the same verdict: an error naming the intact one, not a traceback
    with pytest.raises(MMTuneError, match="is damaged") as e:
        C.resolve_checkpoint(out / "checkpoint-4")
    assert "checkpoint-2" in e.value.fix


@pytest.mark.parametrize("name", ["missing", "a-list", "missing-entry"])
def test_with_no_checkpoint_left_that_verifies_resume_is_a_clear_error(runs, tmp_path, name):
    out, cfg = _copy(runs, "stopped", tmp_path)
    rewrite, said = next((r, s) for n, r, s in MANIFESTS if n == name)
    path = out / "checkpoint-2" / MANIFEST
    if rewrite is None:
        path.unlink()
    elif callable(rewrite):
        path.write_text(json.dumps(rewrite(json.loads(path.read_text()))))
    else:
        path.write_text(rewrite)
    with pytest.raises(MMTuneError, match="no checkpoint in .* verifies") as e:
        train(build_run(load_config(cfg, [])))
    assert said in e.value.what and "train.resume=false" in e.value.fix


@pytest.mark.parametrize("edit, said", [
    (lambda d: d.update(tree={"__tensor__": "nope"}), "names tensor 'nope'"),
    (lambda d: d.update(version=7), "format version 7"),
    (lambda d: d.update(tree=[1, 2]), "lacks the train state"),
    (lambda d: d["tree"].update(scheduler={"__tuple__": 5}), "__tuple__ holds int"),
    (lambda d: d["tree"]["train_state"].update(position="x"), "train state's position is 'x'"),
    (lambda d: d["tree"].update(scheduler=[]), "does not fit this run"),
])
def test_a_state_file_edited_by_hand_is_a_clear_error(runs, tmp_path, edit, said):
    """Whoever edits state.json (and rewrites the manifest) gets an error naming the checkpoint, never a
    traceback (and never code run: the file is JSON)."""
    out, cfg = _copy(runs, "stopped", tmp_path)
    ckpt = out / "checkpoint-2"
    doc = json.loads((ckpt / "state.json").read_text())
    edit(doc)
    (ckpt / "state.json").write_text(json.dumps(doc))
    (ckpt / MANIFEST).unlink()
    write_manifest(ckpt)
    with pytest.raises(MMTuneError, match="cannot resume from checkpoint-2") as e:
        train(build_run(load_config(cfg, [])))
    assert said in e.value.what


def test_state_round_trip_keeps_every_type_exactly(tmp_path):
    import random

    import numpy as np
    import torch

    from mmtune.train.state_files import read_state, write_state

    tree = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "opt": {0: {"step": torch.tensor(3.0), "m": torch.randn(2, 3)}, 1: {}}, "nan": float("nan"),
            "tiny": 1e-300, "none": None, "flag": True, "__tensor__": "a key that looks like a tag"}
    write_state(tmp_path, "s", tree)
    back = read_state(tmp_path, "s")
    assert back["python"] == tree["python"]
    random.setstate(back["python"])  # the types Python's RNG insists on (tuples)
    assert back["numpy"][0] == "MT19937" and back["numpy"][1].dtype == np.uint32
    assert np.array_equal(back["numpy"][1], tree["numpy"][1]) and back["numpy"][2:] == tree["numpy"][2:]
    np.random.set_state(back["numpy"])
    assert torch.equal(back["torch"], tree["torch"]) and set(back["opt"]) == {0, 1}
    assert torch.equal(back["opt"][0]["m"], tree["opt"][0]["m"]) and back["opt"][0]["step"].shape == ()
    assert back["nan"] != back["nan"] and back["tiny"] == 1e-300 and back["__tensor__"] == tree["__tensor__"]
    with pytest.raises(TypeError, match="plain values and tensors only"):
        write_state(tmp_path, "t", {"x": object()})


def test_library_pickles_are_gated_before_the_library_opens_them(tmp_path):
    """torch.distributed.checkpoint's .metadata (pickle.load) and DeepSpeed's .pt files (torch.load with
    weights_only off, inside DeepSpeed) are read as opcodes first: a real DCP checkpoint passes, a planted
    one is refused naming what it would call, and its code never runs."""
    import pickle

    import torch
    import torch.distributed.checkpoint as dcp

    from mmtune.train.pickle_gate import DEEPSPEED_GLOBALS, guard_folder
    from mmtune.train.sharded_checkpoint import SHARDED_DIR, load_sharded_weights

    ckpt = tmp_path / "checkpoint-3"
    model = torch.nn.Linear(3, 2)
    dcp.save({"model": {k: v.detach().clone() for k, v in model.state_dict().items()}},
             checkpoint_id=str(ckpt / SHARDED_DIR))
    with torch.no_grad():
        model.weight.zero_()
    load_sharded_weights(model, ckpt)  # the real metadata passes the gate, and the weights come back
    assert model.weight.abs().sum() > 0
    marker = tmp_path / "PLANTED-RAN"
    (ckpt / SHARDED_DIR / ".metadata").write_bytes(pickle.dumps(_Planted(marker)))
    with pytest.raises(MMTuneError, match=r"\.metadata would call io.open.*refused, not run"):
        load_sharded_weights(model, ckpt)
    ds = ckpt / "deepspeed" / "state"
    ds.mkdir(parents=True)
    torch.save({"module": {"w": torch.ones(2, dtype=torch.bfloat16)}, "ds_version": "0.18"},
               ds / "mp_rank_00_model_states.pt")
    guard_folder(ckpt / "deepspeed", "*.pt", DEEPSPEED_GLOBALS, ckpt)  # tensors and plain values: fine
    torch.save({"optimizer_state_dict": _Planted(marker)}, ds / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with pytest.raises(MMTuneError, match="optim_states.pt:.* would call io.open"):
        guard_folder(ckpt / "deepspeed", "*.pt", DEEPSPEED_GLOBALS, ckpt)
    assert not marker.exists()


def test_the_converter_reads_numpy_1_pickles_of_the_rng_state(tmp_path):
    """numpy 1 pickled its array rebuild function as numpy.core.multiarray._reconstruct (numpy 2:
    numpy._core): a checkpoint written under numpy 1 converts too. The file is rewritten the way numpy 1
    would have named it (torch.save's pickle protocol 2 names globals as text lines)."""
    import zipfile

    import numpy as np
    import torch

    from mmtune.train.legacy_state import read_legacy_state

    state = np.random.get_state()
    torch.save({"numpy": state}, tmp_path / "np2.pt")
    with zipfile.ZipFile(tmp_path / "np2.pt") as src, zipfile.ZipFile(tmp_path / "np1.pt", "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                assert b"cnumpy._core.multiarray\n" in data
                data = data.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
            dst.writestr(info, data)
    back = read_legacy_state(tmp_path / "np1.pt")["numpy"]
    assert back[0] == "MT19937" and np.array_equal(back[1], state[1]) and back[2:] == state[2:]
