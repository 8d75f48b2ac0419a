"""A mixture evaluates each source on its own eval split by default; a source that is one training file has
none, and "its eval split" used to be its training records (every metric measured memorisation, silently).
Now such a source is not evaluated, said in the run's decisions; folders with a validation file and eval
paths the config names keep theirs."""

from __future__ import annotations

import json
from pathlib import Path

from mmtune.config import load_config
from mmtune.data.sources import load_records


def _rows(path: Path, n: int, tag: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"{tag} q{i}"},
                                                     {"role": "assistant", "content": f"{tag} a{i}"}]}) + "\n"
                            for i in range(n)))
    return path


def _cfg(tmp_path, sources: str, *extra):
    return load_config(None, ["model.name=tiny/qwen2", f"data.train={sources}", f"output_dir={tmp_path / 'out'}",
                              "train.device=cpu", "logging.tensorboard=false", *extra])


def test_a_training_file_is_not_its_own_eval_split(tmp_path):
    a, b = _rows(tmp_path / "a.jsonl", 10, "a"), _rows(tmp_path / "b.jsonl", 4, "b")
    folder = tmp_path / "c"
    _rows(folder / "train.jsonl", 6, "c"), _rows(folder / "validation.jsonl", 3, "cval")
    held = _rows(tmp_path / "b_held.jsonl", 2, "bheld")
    cfg = _cfg(tmp_path, f"[{{path: {a}}}, {{path: {b}, eval: {held}}}, {{path: {folder}}}]")
    ev = load_records(cfg.data.eval, cfg.data, "eval")
    texts = sorted(r.messages[0]["content"][0]["text"].split()[0] for r in ev.records)
    assert texts == ["bheld"] * 2 + ["cval"] * 3  # a.jsonl's training records are not among them
    assert any(n.startswith("messages_0: not evaluated") and str(a) in n for n in ev.notes)


def test_a_mixture_of_training_files_trains_without_evaluation_and_says_so(tmp_path):
    from mmtune.build import build_run
    from mmtune.train.loop import train

    a, b = _rows(tmp_path / "a.jsonl", 8, "a"), _rows(tmp_path / "b.jsonl", 4, "b")
    cfg = _cfg(tmp_path, f"[{{path: {a}}}, {{path: {b}}}]", "train.max_steps=2", "eval.every=1",
               "train.micro_batch_size=2")
    run = build_run(cfg)
    assert run.eval_set is None
    assert any(d.startswith("data.eval: no eval record, so this run evaluates nothing") for d in run.decisions)
    train(run)  # (was: IndexError in evaluate on the empty eval set)
    assert json.loads((Path(cfg.output_dir) / "summary.json").read_text())["eval"] == {}


def test_the_doctor_reads_the_eval_sources_as_training_does(tmp_path):
    from mmtune.doctor.datascan import scan_dataset
    from mmtune.resolve import resolve_run, target_for

    a, b = _rows(tmp_path / "a.jsonl", 8, "a"), _rows(tmp_path / "b.jsonl", 4, "b")
    cfg = _cfg(tmp_path, f"[{{path: {a}}}, {{path: {b}}}]")
    scan = scan_dataset(resolve_run(cfg, target_for(cfg, local=False)))
    assert [s.split for s in scan.splits] == ["train", "train"]  # no eval split scanned, so no MM061 copies
