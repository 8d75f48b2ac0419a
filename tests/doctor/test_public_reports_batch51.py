"""Public bug reports, batch 51: many images per record: multi-image, interleaved, multi-page documents and image
order (docs/doctor.md, the section of that name).

Each broken setup of a public thread rebuilt on the tiny Qwen2-VL: records of 6 page images of different sizes
trained two steps and served (the vLLM command line planned, vLLM itself is not installed here), a 6-page record
past data.max_length, an image in an assistant turn, and a 12-image record beside a text-only one in one
micro-batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

NAME = "tiny/qwen2-vl"


def _pages(folder: Path, n: int) -> list[dict]:
    """n page images of different widths (each its own token count), as message parts."""
    from PIL import Image

    parts = []
    for i in range(n):
        path = folder / f"page{i}.png"
        Image.new("RGB", (64 + 8 * i, 64), (20 * i, 100, 50)).save(path)
        parts.append({"type": "image", "path": str(path)})
    return parts


def _record(parts: list[dict], question: str = "Summarise the pages.", answer="a summary") -> dict:
    return {"messages": [{"role": "user", "content": [*parts, {"type": "text", "text": question}]},
                         {"role": "assistant", "content": answer}]}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _invoke(*args):
    from mmtune.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.output


# ----------------------------------------------------------------------------- serving what 6-page records trained
# https://github.com/vllm-project/vllm/issues/13513 ("At most 1 image(s) may be provided in one request" from a
# Qwen2.5-VL fine-tune served with the default limit), https://github.com/hiyouga/LlamaFactory/issues/7886 ("You set
# or defaulted to image=4 in --limit-mm-per-prompt, but passed 10 image items in the same prompt"),
# https://github.com/xorbitsai/inference/issues/3054, https://github.com/bytedance/UI-TARS/pull/18. mmtune serve
# decided 4 media per request whatever the run trained on: a model trained on 6-page records was refused its own
# kind of request, by the native server's 400 and by vLLM's --limit-mm-per-prompt. Now the run's summary.json keeps
# the most media one trained record held, and serving admits that many.

def test_serving_admits_as_many_images_as_one_trained_record_held(tmp_path):
    from mmtune.serve import ServeOptions
    from mmtune.serve.vllm import plan_vllm

    data = _write(tmp_path / "six.jsonl", [_record(_pages(tmp_path, 6)) for _ in range(4)])
    cfg = {"output_dir": str(tmp_path / "run"), "model": {"name": NAME, "gradient_checkpointing": False},
           "data": {"train": str(data), "max_length": 256},
           "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
           "train": {"max_steps": 2, "micro_batch_size": 2, "precision": "fp32", "device": "cpu", "seed": 0},
           "logging": {"tensorboard": False}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    _invoke("train", tmp_path / "c.yaml", "--skip-checks")
    run = tmp_path / "run"
    assert json.loads((run / "summary.json").read_text())["media_per_record"] == {"image": 6}
    merged = tmp_path / "export-merged"
    _invoke("export", run, "--merge", "--out", merged)

    plan = plan_vllm(str(merged), ServeOptions(), host="127.0.0.1", port=8000)
    assert plan.cmd[plan.cmd.index("--limit-mm-per-prompt") + 1] == '{"image":6,"video":4}'
    media = dict((what, (value, why)) for what, value, why in plan.settings.decisions)["media per prompt"]
    assert "6 images" in media[1] and "summary.json" in media[1]
    # the run folder itself (the native server's target) decides the same; an explicit limit still wins
    from mmtune.serve.engine import media_per_prompt

    assert media_per_prompt(str(run), {"text", "image", "video"}, None)[0] == {"image": 6, "video": 4}
    assert media_per_prompt(str(run), {"text", "image", "video"}, 2)[0] == {"image": 2, "video": 2}


# ----------------------------------------------------------------------------- many pages past the token budget
# https://github.com/hiyouga/LlamaFactory/issues/5375 (records of 20+ images: "`len(images)` is less than the number
# of <image> tokens"), https://github.com/OpenGVLab/InternVL/issues/419 (4-5 images fit an 8192 context with tiles),
# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/51 (OOM past 4 images of 768x768). Each image's tokens are
# counted with the processor at its own size, summed over the record; a record past data.max_length is refused with
# the length that fits, never cut mid-image.

def test_a_six_page_record_is_counted_per_image_and_refused_past_max_length(tmp_path):
    from mmtune.config.schema import RunConfig
    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record
    from mmtune.errors import DataError
    from mmtune.models.tiny import tiny_config_and_processor

    _, proc = tiny_config_and_processor(NAME)
    row = _record(_pages(tmp_path, 6))
    record = Record("r0", "six.jsonl:1", row["messages"])
    ok = Encoder(proc, None, RunConfig.model_validate({"model": {"name": NAME}, "data": {"max_length": 512}}))
    counts = ok.measure(record)
    item = ok.encode(record)
    pad = proc.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((item["input_ids"] == pad).sum()) == counts["image"]
    # each page's own grid: the widths differ, so do the token counts; all six are there
    grid = item["image_grid_thw"]
    assert grid.shape[0] == 6 and counts["image"] == int(grid.prod(-1).sum()) // 4
    assert len({int(g.prod()) for g in grid}) > 1
    short = Encoder(proc, None, RunConfig.model_validate({"model": {"name": NAME}, "data": {"max_length": 60}}))
    with pytest.raises(DataError, match="with 6 image.*not truncated") as e:
        short.encode(record)
    assert f"at least {counts['total']}" in e.value.fix


# ----------------------------------------------------------------------------- an image in the assistant turn
# https://github.com/hiyouga/LlamaFactory/issues/8440 (an <image> in the answer counted as a placeholder), and
# interleaved multi-turn data whose answer turns carry images: the models read images, they do not write them.

def test_an_image_in_an_assistant_turn_is_a_bad_record_with_the_fix(tmp_path):
    from mmtune.config import load_config
    from mmtune.data.sources import load_records
    from mmtune.errors import DataError

    page = _pages(tmp_path, 2)
    row = {"messages": [{"role": "user", "content": [page[0], {"type": "text", "text": "Which is bigger?"}]},
                        {"role": "assistant", "content": [page[1], {"type": "text", "text": "this one"}]}]}
    data = _write(tmp_path / "asst.jsonl", [row])
    cfg = load_config(None, [f"model.name={NAME}", f"data.train={data}", "data.on_bad_record=error"])
    with pytest.raises(DataError, match="assistant turn holds a image") as e:
        load_records(cfg.data.train, cfg.data)
    assert "asst.jsonl:1" in str(e.value) and "user turn" in e.value.fix


# ----------------------------------------------------------------------------- 0 and 12 images in one micro-batch
# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/51, https://github.com/zjysteven/lmms-finetune/issues/66
# (multi-image records OOM), https://github.com/QwenLM/Qwen3-VL/issues/170 (several images per record fail to
# train). A 12-image record beside a text-only one trains in one micro-batch: every image keeps its grid.

def test_twelve_images_beside_a_text_only_record_in_one_micro_batch(tmp_path):
    import torch

    from mmtune.config.schema import RunConfig
    from mmtune.data.collate import Collator
    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record
    from mmtune.models.tiny import build_tiny, tiny_config_and_processor

    _, proc = tiny_config_and_processor(NAME)
    enc = Encoder(proc, None, RunConfig.model_validate({"model": {"name": NAME}}))
    rows = [_record(_pages(tmp_path, 12), "Read."),
            {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}]
    items = [enc.encode(Record(f"r{i}", f"mix.jsonl:{i + 1}", r["messages"])) for i, r in enumerate(rows)]
    batch = Collator(proc.tokenizer.pad_token_id)(items)
    assert batch["image_grid_thw"].shape[0] == 12
    model, _ = build_tiny(NAME)
    out = model(**batch)
    assert torch.isfinite(out.loss)
    out.loss.backward()
