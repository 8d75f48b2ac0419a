"""Issue 28: no malformed record or file, in any layout mmtune reads, ends in a raw exception or a hang in
any reader or check, and configs that would mean something else than written are refused.

The corpus is generated from a seed (tests/data/fuzz_records.py): MMTUNE_FUZZ_SEED=N replays another
one, and a failure names the seed and the command that replays it alone."""

from __future__ import annotations

import json
import os

import pytest

from .fuzz_objectives import DPO, GRPO, TOOLS_MODEL
from .fuzz_records import STATS, build, cli_problems, config_problems, make_env, run_all

SEED = int(os.environ.get("MMTUNE_FUZZ_SEED", "0"))
REPLAY = f"replay: PYTHONPATH=src:. python -m tests.data.fuzz_records --seed {SEED}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    env = make_env(folder)
    return env, build(folder / "data", SEED, 1100)


def test_fuzzed_records_and_files_give_no_raw_exception_and_no_hang(corpus):
    """>= 1,000 malformed records and files (jsonl of every format, json, csv, parquet, save_to_disk in
    TRL's layout and others, dataset_info registries, empty files, missing / huge / truncated / FIFO /
    device media, invalid UTF-8, deep nesting, NaN and absurd lengths; DPO pairs in TRL's / LLaMA-Factory's /
    RLAIF-V's layouts, GRPO prompts, tool calls, grounding boxes, audio, video and mixtures: fuzz_objectives.py)
    through load, training's start-up measure and its check beside the loop (the objective's encoder), the
    encoder (training's draw, eval's prompt), `data inspect`'s scan and the doctor's pass, under skip and
    error. None may escape as anything but mmtune's own error, stop a pass under skip, hang past 30 s, or
    reach the record boundary as an unforeseen exception."""
    env, cases = corpus
    layouts = {c.layout for c in cases}
    assert {"jsonl", "json", "csv", "parquet", "save_to_disk", "dataset_info", "empty", "split", "media", "mixture"} <= layouts
    # past SFT: DPO pairs and GRPO prompts through their objective's encoder, tools, boxes, audio and video by their twins
    assert {o for c in cases for o in c.overrides} >= {*DPO, *GRPO}
    assert {c.model for c in cases} >= {"tiny/qwen2-audio", "tiny/qwen2.5-omni", "tiny/qwen2.5-vl", TOOLS_MODEL}
    tried, found, examples = run_all(env, cases)
    assert tried >= 1000, tried
    # the corpus reaches past the loader: records load, are measured, and others are counted as skipped
    assert STATS["loaded"] >= 100 and STATS["measured ok"] >= 50 and STATS["skipped at load"] >= 500, dict(STATS)
    assert STATS["loaded past SFT"] >= 40, dict(STATS)
    assert not found, f"seed {SEED}: {sum(found.values())} raw exception(s) or hang(s) in {tried} inputs: " \
                      f"{dict(found)}\n" + "\n".join(examples[:10]) + f"\n{REPLAY}"


def test_configs_that_mean_something_else_are_refused(tmp_path):
    """A YAML alias bomb (10^9 values in ten lines) is refused at once, not expanded; a boolean where a
    number is meant (`max_steps: true` would run 1 step, `lr: true` train at 1.0) is an error."""
    assert config_problems(tmp_path) == []


def test_data_inspect_and_doctor_commands_report_fuzzed_files(corpus):
    """The real commands on a file of fuzzed ShareGPT records: each exits with its report (no traceback,
    no MM099, no hang); `data inspect` counts the bad records by reason instead of stopping at the first."""
    env, cases = corpus
    data = next(c for c in cases if c.spec.endswith("sharegpt.jsonl"))
    reports: dict = {}
    assert cli_problems(env, data.spec, reports) == [], REPLAY
    got = json.loads(reports["data"])
    assert got["ok"] >= 1 and len(got["bad"]) >= 3, got["bad"]
    assert sum(got["bad"].values()) + got["ok"] >= data.n_records - 5  # every line counted (blank lines aside)
