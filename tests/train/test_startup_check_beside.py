"""data.startup_scan=background: the start-up check of the training records runs beside the loop.

Step 1 does not wait for it (the check is held until step 1's metrics row exists: a loop that waited for the
check would never write it), its report still reaches summary.json and the log with the right counts, a bad
record late in the set is still counted (once, whether the check or a draw found it first), under
data.on_bad_record=error its first bad record stops the run, and resume is exact."""

import json
import threading
import time
from pathlib import Path

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.data.batches import epoch_order
from mmtune.data.inspect import scan_records
from mmtune.data.records import RecordSet
from mmtune.data.sources import load_records
from mmtune.data.startup_scan import BackgroundScan, check
from mmtune.errors import DataError
from mmtune.resolve.data_loading import BACKGROUND_SCAN_FROM, decide_startup_scan
from mmtune.train.loop import train

N, BAD = 12, (5, 11)  # tiny_vl_config's 12 records; two whose image is not an image: one in the middle, one last


def _data(tmp_path: Path) -> Path:
    """tiny_vl_config's dataset (tmp_path/data), with records BAD made bad."""
    for i in BAD:
        (tmp_path / "data" / f"img{i}.png").write_bytes(b"this is not an image")  # the header check fails
    return tmp_path / "data" / "data.jsonl"


def _rows(out: Path, kind: str = "train") -> list[dict]:
    if not (out / "metrics.jsonl").exists():
        return []
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def _config(tiny_vl_config, tmp_path, **train):
    cfg_path = tiny_vl_config(train={"max_steps": 4, **train})
    return load_config(cfg_path, [f"data.train={_data(tmp_path)}", "data.eval=null", "data.startup_scan=background",
                        "data.on_bad_record=skip"])


def _hold_until_first_step(run, out: Path):
    """Replace the run's check by one that starts only once step 1's metrics row is written."""
    run.startup_check.cancel()  # the one build_run started
    hold, state = threading.Event(), {"gave_up": False}

    def release():
        deadline = time.monotonic() + 600  # only reached if the loop waits for the check before step 1
        while not _rows(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        state["gave_up"] = not _rows(out)
        hold.set()

    threading.Thread(target=release, daemon=True).start()
    run.startup_check = BackgroundScan(run.train_set.records, run.encoder, run.cfg.data.on_bad_record, 0,
                                       hold=hold).start()
    return state


def test_first_step_does_not_wait_for_the_check_and_its_report_arrives(tiny_vl_config, tmp_path):
    cfg = _config(tiny_vl_config, tmp_path)
    run = build_run(cfg)
    assert len(run.train_set.records) == N and run.train_lengths == []  # every record loaded, none checked yet
    assert any("data.startup_scan: beside training (requested:" in d for d in run.decisions)
    state = _hold_until_first_step(run, Path(cfg.output_dir))
    summary = train(run)
    assert not state["gave_up"], "step 1 waited for the start-up check"
    report = summary["startup_check"]
    assert report["finished"] and report["records"] == N and report["ok"] == N - len(BAD)
    assert report["skipped"] == {"corrupt media": 2}
    # Each bad record counted once, though the loop drew (and dropped) some of them as well: 16 draws of 14.
    assert summary["skipped_records"] == {"corrupt media": 2}
    assert summary["train_records"] == N - len(BAD)  # each record counted once: trained or skipped
    assert len(run.train_lengths) == N - len(BAD) and summary["scale"]["tokens_per_step"] > 0
    assert report["tokens"]["total"]["max"] == max(x["total"] for x in run.train_lengths)
    assert summary["startup"]["train_records_measured"] == N - len(BAD)
    logged = _rows(Path(cfg.output_dir), "startup_check")
    assert len(logged) == 1 and logged[0]["skipped"] == {"corrupt media": 2}
    assert [r["step"] for r in _rows(Path(cfg.output_dir))] == [1, 2, 3, 4]


def test_a_late_bad_record_stops_the_run_under_error(tiny_vl_config, tmp_path):
    """The last record is bad and is not among step 1's draws: the check (not a draw) finds it and the run
    stops with its file and line at the next step boundary (before step 1 if it was that quick)."""
    cfg_path = tiny_vl_config(train={"max_steps": 1})
    data = _data(tmp_path)
    (tmp_path / "data" / "img5.png").write_bytes((tmp_path / "data" / "img4.png").read_bytes())  # only the last bad
    cfg = load_config(cfg_path, [f"data.train={data}", "data.eval=null", "data.startup_scan=background"])
    assert 11 not in epoch_order(N, cfg.train.seed, 0)[:4]  # step 1 draws 2 x 2 records, not this one
    run = build_run(cfg)
    with pytest.raises(DataError) as e:
        train(run)
    assert "data.jsonl:12" in e.value.where and "start-up check running beside training" in e.value.what
    assert len(_rows(Path(cfg.output_dir))) <= 1  # stopped at the first step boundary after the check found it


def test_resume_is_exact_with_the_check_beside_training(tiny_vl_config, tmp_path):
    """4 steps straight == 2 steps, a kill, 2 more: the batches hold the records loaded, bad ones dropped
    when drawn, whatever the check has reached."""
    runs = {}
    for name in ("straight", "broken"):
        runs[name] = load_config(tiny_vl_config(train={"max_steps": 4, "save_every": 2}),
                                 [f"data.train={_data(tmp_path)}", "data.eval=null", "data.startup_scan=background",
                                  "data.on_bad_record=skip", f"output_dir={tmp_path / name}"])
    train(build_run(runs["straight"]))
    assert train(build_run(runs["broken"]), stop_after=2) is None
    summary = train(build_run(runs["broken"]))
    assert summary["skipped_records"] == {"corrupt media": 2}
    a, b = _rows(tmp_path / "straight"), _rows(tmp_path / "broken")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    assert [r["loss"] for r in a] == [r["loss"] for r in b]  # bit-identical


def test_the_check_beside_training_finds_what_the_check_before_finds(tiny_vl_config, tmp_path):
    """Same lengths, skip counts and first error as `scan_records(encode=False)`, measured in the thread and
    in a spawned process; a mixture's repeated record is measured once and counted per copy, as before."""
    from mmtune.data.encode import Encoder
    from mmtune.resolve import resolve_here

    cfg = load_config(tiny_vl_config(), [f"data.train={_data(tmp_path)}"])
    encoder = Encoder.for_run(resolve_here(cfg))
    records = load_records(cfg.data.train, cfg.data).records
    records = records + records[:6]  # repeated (mixture) copies, bad record 5 among them
    before = scan_records(RecordSet(records=list(records)), encoder, "skip", encode=False)
    for processes in (0, 1):
        got = check(records, encoder, "skip", processes)
        assert got.kept_lengths() == before.lengths
        assert sorted(r for _s, r, _w, _f in got.bad.values()) == ["corrupt media"] * 3
        assert {records[i].source for i in got.bad} == {records[i].source for i in BAD}
    with pytest.raises(DataError) as one:
        scan_records(RecordSet(records=list(records)), encoder, "error", encode=False)
    two = check(records, encoder, "error").error
    assert (two.what, two.where, two.fix) == (one.value.what, one.value.where, one.value.fix)


def test_when_the_check_runs_beside_training():
    cfg = load_config(None, ["model.name=tiny/qwen2-vl"]).data
    many = BACKGROUND_SCAN_FROM
    assert decide_startup_scan(cfg, many, 1)[0] == "background"
    assert decide_startup_scan(cfg, many - 1, 1)[0] == "before"  # seconds to check: not worth a process
    assert decide_startup_scan(cfg, many, 2)[0] == "before"  # ranks must stop at the same step
    for key in ("packing", "group_by_length"):  # batches built from every length: step 1 needs the check
        when, d = decide_startup_scan(cfg.model_copy(update={key: True}), many, 1)
        assert when == "before" and f"data.{key}" in d.reason
    assert decide_startup_scan(cfg.model_copy(update={"startup_scan": "background"}), 10, 1)[0] == "background"
    assert decide_startup_scan(cfg.model_copy(update={"startup_scan": "before"}), many, 1)[0] == "before"
    with pytest.raises(Exception, match="data.startup_scan=background and data.packing=true"):
        load_config(None, ["model.name=tiny/qwen2-vl", "data.startup_scan=background", "data.packing=true"])
