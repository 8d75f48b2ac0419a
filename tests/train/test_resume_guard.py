"""Resume is exact or refused: meaning-changing config edits are errors unless accepted (then applied
for real and recorded); logs are cut back to the checkpoint; a finished run keeps its summary; a run
folder can be moved."""

import json
import shutil
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.train.loop import train
from mmtune.train.schedule import lr_factor


def _rows(out: Path, kind="train", name="metrics.jsonl"):
    rows = [json.loads(line) for line in (out / name).read_text().splitlines()]
    return [r for r in rows if r.get("kind", "train") == kind] if name == "metrics.jsonl" else rows


BASE = {"max_steps": 4, "save_every": 2, "grad_accum": 1, "warmup_steps": 1, "lr": 1e-3}


def test_changed_lr_is_refused_then_applied_when_accepted(tiny_vl_config):
    cfg = load_config(tiny_vl_config(train=BASE), [])
    out = Path(cfg.output_dir)
    assert train(build_run(cfg), stop_after=2) is None
    changed = tiny_vl_config(train={**BASE, "lr": 5e-3, "max_steps": 6})
    with pytest.raises(ConfigError) as e:
        train(build_run(load_config(changed, [])))
    assert "train.lr: 0.001 -> 0.005" in e.value.what and "train.max_steps: 4 -> 6" in e.value.what
    assert "train.accept_changes=true" in e.value.fix
    assert "lr: 0.001" in (out / "config.resolved.yaml").read_text()  # the config in force is still the old one
    summary = train(build_run(load_config(changed, ["train.accept_changes=true"])))
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    for r in rows[2:]:  # the new base lr on the new schedule (the lr logged at step s is the one its update used)
        assert r["lr"] == pytest.approx(5e-3 * lr_factor(r["step"] - 1, warmup=1, total=6, kind="cosine"))
    recorded = _rows(out, "resume")
    assert recorded[0]["step"] == 2 and recorded[0]["accepted_changes"]["train.lr"] == [0.001, 0.005]
    assert summary["accepted_changes"][0]["changes"]["train.max_steps"] == [4, 6]
    assert "lr: 0.005" in (out / "config.resolved.yaml").read_text()


def test_logs_are_cut_back_to_the_checkpoint_so_no_row_appears_twice(tiny_vl_config):
    """A save killed at step 4 (after its eval rows and predictions were written): the resume from
    checkpoint-2 writes steps 3-4 and their eval once, not twice."""
    cfg = load_config(tiny_vl_config(train=BASE, eval={"every": 2, "generate": True}), [])
    out = Path(cfg.output_dir)
    train(build_run(cfg))
    before = (_rows(out), _rows(out, "eval"), _rows(out, name="predictions.jsonl"))
    shutil.rmtree(out / "checkpoint-4")
    (out / "summary.json").unlink()
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "st')  # and a line cut off by the kill
    train(build_run(load_config(tiny_vl_config(train=BASE, eval={"every": 2, "generate": True}), [])))
    after = (_rows(out), _rows(out, "eval"), _rows(out, name="predictions.jsonl"))
    assert [r["step"] for r in after[0]] == [1, 2, 3, 4]
    assert [r["step"] for r in after[1]] == [2, 4]
    assert [r["step"] for r in after[2]] == [r["step"] for r in before[2]]
    for a, b in zip(before[0], after[0]):
        assert a["loss"] == b["loss"]


def test_rerunning_a_finished_run_keeps_its_summary(tiny_vl_config, capsys):
    cfg = load_config(tiny_vl_config(train=BASE, eval={"every": 2}), [])
    out = Path(cfg.output_dir)
    first = train(build_run(cfg))
    written = (out / "summary.json").read_bytes()
    again = train(build_run(load_config(tiny_vl_config(train=BASE, eval={"every": 2}), [])))
    assert (out / "summary.json").read_bytes() == written
    assert again["eval"] == first["eval"] and again["steps"] == 4
    assert "already finished at step 4" in capsys.readouterr().out


def test_a_moved_run_folder_keeps_its_best_checkpoint(tiny_vl_config, tmp_path):
    """best is kept by a path relative to the run folder: after a move, pruning still spares it."""
    # exact_match of the random tiny model stays at its first value, and only a strictly better value replaces the
    # best: step 2 stays best (a greater_is_better contradicting eval_loss, the old way to get an early best, is refused)
    ev = {"every": 2, "best_metric": "exact_match"}
    cfg = load_config(tiny_vl_config(train={**BASE, "keep_last": 1}, eval=ev), [])
    summary = train(build_run(cfg))
    assert summary["best"]["path"] == "checkpoint-2"
    moved = tmp_path / "moved"
    shutil.move(cfg.output_dir, moved)
    assert (moved / "best").resolve() == (moved / "checkpoint-2").resolve()
    more = load_config(tiny_vl_config(train={**BASE, "keep_last": 1, "max_steps": 6}, eval=ev),
                       [f"output_dir={moved}", "train.accept_changes=true"])
    summary = train(build_run(more))
    assert summary["best"]["path"] == "checkpoint-2"
    assert sorted(p.name for p in moved.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-6"]
    assert (moved / "best").resolve() == (moved / "checkpoint-2").resolve()


STAGED = {**BASE, "scheduler": "constant",
          "stages": [{"until": 2, "train": ["projector"]}, {"train": ["projector", "decoder_lora"]}]}


def test_changed_stages_or_aux_losses_are_refused_then_applied_when_accepted(tiny_vl_config):
    """train.stages decides which parameters each step updates and train.aux_losses what it minimises:
    changing either on resume is a run change like the LR (refused unless accepted, then applied)."""
    cfg = load_config(tiny_vl_config(train=STAGED), [])
    out = Path(cfg.output_dir)
    assert train(build_run(cfg), stop_after=2) is None
    later = {**STAGED, "stages": [{"until": 3, "train": ["projector"]}, {"train": ["projector", "decoder_lora"]}]}
    with pytest.raises(ConfigError) as e:
        train(build_run(load_config(tiny_vl_config(train=later), [])))
    assert "train.stages:" in e.value.what and "'until': 2" in e.value.what and "'until': 3" in e.value.what
    aux = {**STAGED, "aux_losses": [{"name": "heatmap", "weight": 0.1}]}
    with pytest.raises(ConfigError) as e:
        train(build_run(load_config(tiny_vl_config(train=aux), [])))
    assert "train.aux_losses: [] -> [{'name': 'heatmap'" in e.value.what
    summary = train(build_run(load_config(tiny_vl_config(train=later), ["train.accept_changes=true"])))
    assert [r["stage"] for r in _rows(out)] == [0, 0, 0, 1]  # the new boundary applies from step 3 on
    assert "train.stages" in summary["accepted_changes"][0]["changes"]


def test_a_checkpoint_from_before_stages_and_aux_losses_compares_as_none_of_either():
    from mmtune.train.resume_guard import differences

    now = {"train": {"lr": 1e-3, "stages": [], "aux_losses": []}}
    assert differences({"train": {"lr": 1e-3}}, now) == {}
    staged = {"train": {"lr": 1e-3, "stages": [{"until": None, "train": ["projector"], "lr_multiplier": 1.0}],
                        "aux_losses": []}}
    assert set(differences({"train": {"lr": 1e-3}}, staged)) == {"train.stages"}


def test_a_data_file_edited_in_place_is_refused_then_applied_when_accepted(tiny_vl_config):
    """Same path, same size, one answer changed in the middle: the config is unchanged, the data is not.
    The same bytes written again (a preparation script run twice) are the same data: resumed silently."""
    import os

    cfg = load_config(tiny_vl_config(train=BASE), [])
    out, data = Path(cfg.output_dir), Path(cfg.data.train)
    assert train(build_run(cfg), stop_after=2) is None
    data.write_bytes(data.read_bytes())
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert train(build_run(cfg), stop_after=3) is None
    text = data.read_text()
    i = text.index('"content": "', len(text) // 2) + len('"content": "')
    data.write_text(text[:i] + ("9" if text[i] != "9" else "8") + text[i + 1:])
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
    with pytest.raises(ConfigError) as e:
        train(build_run(load_config(tiny_vl_config(train=BASE), [])))
    assert f"data file {data.resolve()}" in e.value.what and "its first records differ" in e.value.what
    assert "config or data that changes the run" in e.value.what and "train.accept_changes=true" in e.value.fix
    summary = train(build_run(load_config(tiny_vl_config(train=BASE), ["train.accept_changes=true"])))
    assert f"data file {data.resolve()}" in summary["accepted_changes"][0]["changes"]
    # The checkpoints written after the accepted change carry the data as it is now: a restart is silent.
    assert json.loads((out / "checkpoint-4" / "meta.json").read_text())["data"]["files"][str(data.resolve())]["mtime_ns"] \
        == data.stat().st_mtime_ns


def test_a_changed_media_root_is_refused(tiny_vl_config, tmp_path):
    cfg = load_config(tiny_vl_config(train=BASE), [])
    assert train(build_run(cfg), stop_after=2) is None
    media = tmp_path / "media-copy"
    shutil.copytree(Path(cfg.data.train).parent, media)  # the same images, another folder
    with pytest.raises(ConfigError) as e:
        train(build_run(load_config(tiny_vl_config(train=BASE, data={"media_root": str(media)}), [])))
    assert f"data.media_root: None -> '{media}'" in e.value.what
    assert f"data.train media root: 'none' -> '{media.resolve()}'" in e.value.what


def test_an_adapter_rank_change_is_refused_even_when_accepted_naming_why(tiny_vl_config):
    cfg = load_config(tiny_vl_config(train=BASE), [])
    assert train(build_run(cfg), stop_after=2) is None
    for change in ({"r": 8}, {"target_modules": ["q_proj"]}, {"method": "full"}):
        with pytest.raises(ConfigError) as e:
            train(build_run(load_config(tiny_vl_config(train=BASE, adapter=change), ["train.accept_changes=true"])))
        key = f"adapter.{next(iter(change))}"
        assert "not even with train.accept_changes=true" in e.value.what and key in e.value.what
        assert f"restore {key}" in e.value.fix
    assert "the rank is the adapter matrices' size" in str(_refusal(tiny_vl_config, {"r": 8}))
    # The unchanged config still resumes.
    assert train(build_run(load_config(tiny_vl_config(train=BASE), [])))["steps"] == 4


def _refusal(tiny_vl_config, adapter):
    with pytest.raises(ConfigError) as e:
        train(build_run(load_config(tiny_vl_config(train=BASE, adapter=adapter), ["train.accept_changes=true"])))
    return e.value.what


def test_a_checkpoint_of_other_shapes_is_an_error_not_a_runtime_error(tiny_vl_config):
    """Past the guard (a config.json removed, say), load_trainable still names the mismatch."""
    from mmtune.errors import MMTuneError
    from mmtune.train.checkpoint import load_trainable

    cfg = load_config(tiny_vl_config(train=BASE), [])
    assert train(build_run(cfg), stop_after=2) is None
    other = build_run(load_config(tiny_vl_config(train=BASE, adapter={"r": 8}), ["train.resume=false"]))
    with pytest.raises(MMTuneError, match="tensors of other shapes") as e:
        load_trainable(other.unwrapped_model(), Path(cfg.output_dir) / "checkpoint-2")
    assert "saved (4, " in e.value.what


def test_fingerprint_of_large_files_middle_edits_and_the_hashing_budget(tmp_path, monkeypatch):
    """Unit level: an edit between the first and last 64 KiB of a file is found by the whole-file hash;
    past the hashing budget the modification time decides; a media root is compared by where it points."""
    import os
    from types import SimpleNamespace

    from mmtune.train import data_fingerprint as F

    data = tmp_path / "big.jsonl"
    lines = [json.dumps({"id": i, "answer": "x" * 50}) for i in range(5000)]  # ~350 KiB
    data.write_text("\n".join(lines) + "\n")
    cfg = SimpleNamespace(data=SimpleNamespace(train=str(data), media_root=str(tmp_path), dataset_info=None))
    before = F.fingerprint(cfg)
    text = data.read_text()
    mid = text.index('"id": 2500')
    data.write_text(text[:mid] + text[mid:].replace('"answer": "x', '"answer": "y', 1))
    assert F.changes(before, F.fingerprint(cfg)) == {
        f"data file {data.resolve()}": ("as read", "records between its first and last differ (same size)")}
    monkeypatch.setattr(F, "FULL_BUDGET", 0)
    before = F.fingerprint(cfg)
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    (what,) = F.changes(before, F.fingerprint(cfg)).values()
    assert what[1].startswith("modified ") and "too large to hash whole" in what[1]
    moved = SimpleNamespace(data=SimpleNamespace(train=str(data), media_root=str(tmp_path / "gone"), dataset_info=None))
    assert F.changes(before, F.fingerprint(moved))["data.train media root"] == (
        str(tmp_path.resolve()), f"{(tmp_path / 'gone').resolve()} (missing)")
