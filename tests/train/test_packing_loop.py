"""data.packing in the loop: a packed run trains on rows of up to data.max_length tokens, resumes
identically mid-epoch, gives the same losses whether records come from the start-up cache or are encoded
when drawn, in the main process or a worker, and is refused, saying why, where it would not be exact."""

from __future__ import annotations

import json

import pytest

from mmtune.build import build_run
from mmtune.config import load_config
from mmtune.errors import ConfigError
from mmtune.resolve import resolve_here
from mmtune.train.loop import train


def _rows(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"train"' in x]


def test_packed_run_resumes_identically_and_cache_does_not_matter(tiny_vl_config, tmp_path):
    n = 2

    def cfg(name, *extra):
        return load_config(tiny_vl_config(train={"max_steps": 2 * n, "save_every": n, "micro_batch_size": 1},
                                          adapter={"dropout": 0.1}),
                           ["data.eval=null", "data.packing=true", "data.max_length=160", f"output_dir={tmp_path / name}",
                            *extra])

    run = build_run(cfg("straight", "train.num_workers=1"))  # rows packed in a spawned worker
    assert any(line.startswith("data.packing: rows of up to 160 tokens") for line in run.decisions)
    summary = train(run)
    assert summary["padding_fraction"] < 0.35  # rows of 2-3 records of ~50-60 tokens in 160
    assert train(build_run(cfg("broken", "data.cache_mb=0")), stop_after=n) is None
    train(build_run(cfg("broken", "data.cache_mb=0")))
    a, b = _rows(tmp_path / "straight"), _rows(tmp_path / "broken")
    assert [r["step"] for r in b] == list(range(1, 2 * n + 1))
    for x, y in zip(a, b):
        assert abs(x["loss"] - y["loss"]) < 1e-6, (x, y)
        assert x["answer_tokens"] == y["answer_tokens"]
    # 2 micro-batches (grad_accum) of one row each: several records' answers per step.
    assert all(r["answer_tokens"] > 2 * 4 for r in a)


@pytest.mark.parametrize("extra, what", [
    (["model.name=tiny/qwen2-audio"], "qwen2_audio is not verified exact"),
    (["data.group_by_length=true"], "packing already fills rows"),
    (["train.aux_losses=[{name: heatmap, weight: 0.5, options: {grid: 4}}]"], "auxiliary losses read their targets"),
])
def test_packing_is_refused_where_it_is_not_exact(tiny_vl_config, extra, what):
    cfg = load_config(tiny_vl_config(), ["data.packing=true", *extra])
    with pytest.raises(ConfigError) as e:
        resolve_here(cfg)
    assert what in str(e.value) and e.value.where == "data.packing" and "data.packing=false" in e.value.fix


def test_changing_packing_on_resume_is_refused(tiny_vl_config, tmp_path):
    base = ["data.eval=null", f"output_dir={tmp_path / 'r'}"]
    c = tiny_vl_config(train={"max_steps": 2, "save_every": 1})
    assert train(build_run(load_config(c, base)), stop_after=1) is None
    with pytest.raises(ConfigError) as e:
        train(build_run(load_config(c, [*base, "data.packing=true"])))
    assert "data.packing" in str(e.value)
