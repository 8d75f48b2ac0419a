"""Every config key set to values no one meant (empty, negative, huge, NaN, a list, a mapping, text where a number
goes, a 300-byte name, unicode) through the loader and the resolved run: each is one ConfigError (or another mmtune
error) naming what is wrong, never a raw exception from deep inside a library. Found this way: a 300-byte
`data.train` / `model.name` raised OSError "File name too long" from Path.is_dir (Python 3.11), and an integer past
int64 overflowed in the planner (config/value_limits.py)."""

from __future__ import annotations

import traceback

from mmtune.config import load_config
from mmtune.config.reference import _rows
from mmtune.config.schema import RunConfig
from mmtune.errors import MMTuneError
from mmtune.resolve.run import resolve_run
from mmtune.resolve.target import local_target

VALUES = ["", "-1", "0", "1e400", "nan", "inf", "-inf", "[1, 2]", "{a: 1}", "null", "99999999999999999999999",
          "\u00e9\u2603", "true", "3.5", "'../../etc'", "[]", "{}", "-0.0", "1e-320", "x" * 300]


def test_every_key_with_odd_values_is_an_mmtune_error_or_a_run(tmp_path):
    base = tmp_path / "cfg.yaml"
    base.write_text(f"output_dir: {tmp_path / 'run'}\nmodel: {{name: tiny/qwen2-vl}}\n"
                    "data: {train: 'synthetic:counting', max_length: 256}\ntrain: {max_steps: 2}\n")
    keys = [row.split("`")[1] for row in _rows(RunConfig)]
    assert len(keys) > 100
    raw, ran = [], 0
    for key in keys:
        for value in VALUES:
            try:
                resolve_run(load_config(base, [f"{key}={value}"]), local_target("cpu"))
                ran += 1
            except MMTuneError:
                pass
            except Exception as e:  # noqa: BLE001 -- the point: anything else is a finding
                last = traceback.extract_tb(e.__traceback__)[-1]
                raw.append(f"{key}={value[:20]!r}: {type(e).__name__} at {last.filename}:{last.lineno}: {str(e)[:120]}")
    assert not raw, "\n".join(raw)
    assert ran > 100  # the values that are fine resolve to a run
