"""One tiny trained run for the whole session, and servers over it on free 127.0.0.1 ports (real uvicorn, real HTTP)."""

from __future__ import annotations

import base64
import io
import json
from contextlib import contextmanager

import pytest
import yaml
from PIL import Image
from typer.testing import CliRunner

from tests.train.conftest import make_dataset


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A 4-step LoRA run of tiny Qwen2-VL with an eval at its end: (run folder, eval predictions, data rows, data dir)."""
    from mmtune.cli import app

    root = tmp_path_factory.mktemp("serve")
    data = make_dataset(root / "data", 12)
    cfg = {
        "output_dir": str(root / "run"),
        "model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": False},
        "data": {"train": str(data), "eval": str(data), "max_length": 256, "eval_max_samples": 4},
        "adapter": {"method": "lora", "r": 4, "dropout": 0.0},
        "train": {"max_steps": 4, "micro_batch_size": 2, "grad_accum": 2, "lr": 1e-3, "precision": "fp32",
                  "device": "cpu", "warmup_steps": 1, "seed": 0},
        "eval": {"every": None, "metrics": ["exact_match"], "max_new_tokens": 3, "batch_size": 2},
        "logging": {"tensorboard": False},
    }
    (root / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["train", str(root / "cfg.yaml"), "--skip-checks"])
    assert res.exit_code == 0, res.output
    run = root / "run"
    preds = [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]
    rows = [json.loads(x) for x in data.read_text().splitlines()]
    return run, preds, rows, root / "data"


@pytest.fixture(scope="session")
def session(trained):
    from mmtune.chat import load_session

    return load_session(str(trained[0]))


@pytest.fixture(scope="session")
def serve(session, trained):
    """`with serve(**ServeOptions fields) as (url, batcher):` a server over the trained run."""
    from mmtune.serve import ServeOptions, server_for
    from mmtune.serve.server import Running

    @contextmanager
    def start(**options):
        _engine, batcher, app = server_for(session, str(trained[0]), ServeOptions(**options))
        with Running(app, batcher) as url:
            yield url, batcher

    return start


def data_url(path) -> str:
    return "data:image/png;base64," + base64.b64encode(open(path, "rb").read()).decode()


def png_bytes(size=(64, 64), color=(10, 200, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def question(rows, data_dir, i, *, image_as="data"):
    """Eval record i as OpenAI messages: its image (data URL or local path) and its question."""
    user = rows[i]["messages"][0]["content"]
    img = data_dir / user[0]["path"]
    url = data_url(img) if image_as == "data" else str(img)
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": user[1]["text"]}]}]


def client(url, **kw):
    from openai import OpenAI

    return OpenAI(base_url=url + "/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, timeout=120, **kw)
