"""`mmtune serve --backend vllm`: the command line derived from the run (tested flag by flag; vLLM itself is not
installed here), what vLLM's LoRA loader would not load, and the message when vLLM is missing."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from typer.testing import CliRunner

from mmtune.cli import app
from mmtune.errors import MMTuneError
from mmtune.export.vllm import lora_problems, max_lora_rank
from mmtune.models.families import get_family
from mmtune.serve import ServeOptions
from mmtune.serve.vllm import plan_vllm


def _invoke(*args, code=0):
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == code, res.output
    return res.output


@pytest.fixture(scope="module")
def merged(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm") / "export-merged"
    _invoke("export", trained[0], "--merge", "--out", out)
    return out


def test_flags_derived_from_the_run(merged):
    plan = plan_vllm(str(merged), ServeOptions(served_name="counting"), host="127.0.0.1", port=8100)
    assert plan.cmd == ["vllm", "serve", str(merged.resolve()), "--host", "127.0.0.1", "--port", "8100",
                        "--served-model-name", "counting",
                        "--max-model-len", "259",  # data.max_length 256 + eval.max_new_tokens 3
                        "--limit-mm-per-prompt", '{"image":4,"video":4}']  # Qwen2-VL takes images and videos
    assert plan.env == {}
    keyed = plan_vllm(str(merged), ServeOptions(api_key="k", max_model_len=512, media_per_prompt=2),
                      host="0.0.0.0", port=8000)
    assert "k" not in keyed.cmd and keyed.env == {"VLLM_API_KEY": "k"}  # never on the command line (ps shows it)
    assert keyed.cmd[keyed.cmd.index("--max-model-len") + 1] == "512"
    assert keyed.cmd[-1] == '{"image":2,"video":2}'
    with pytest.raises(MMTuneError, match="exceeds the model's context"):
        plan_vllm(str(merged), ServeOptions(max_model_len=10**6), host="127.0.0.1", port=8000)


def test_adapter_run_on_a_tiny_twin_is_refused_with_the_way_through(trained):
    with pytest.raises(MMTuneError, match="tiny random twin") as e:
        plan_vllm(str(trained[0]), ServeOptions(), host="127.0.0.1", port=8000)
    assert "--merge" in e.value.fix


@pytest.mark.parametrize("r,rank", [(1, 1), (4, 8), (16, 16), (17, 32), (300, 320), (512, 512)])
def test_max_lora_rank_is_one_vllm_accepts(r, rank):
    assert max_lora_rank(r) == rank


def test_rank_above_vllm_limit():
    with pytest.raises(MMTuneError, match="largest --max-lora-rank"):
        max_lora_rank(513)


def test_what_vllm_lora_loader_will_not_load(trained, tmp_path):
    """The decoder-only adapter loads as trained; LoRA on the vision tower plus a projector trained in full
    (modules_to_save) do not, and export says so."""
    assert lora_problems(trained[0] / "best" / "adapter", get_family("qwen2_vl")) == []
    run_dir = trained[0]
    cfg = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    cfg["output_dir"] = str(tmp_path / "run")
    cfg["adapter"].update(target_modules=["q_proj", "v_proj", "vision:qkv"], train_components=["projector"])
    cfg["train"]["max_steps"] = 1
    cfg["eval"]["every"] = None
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    _invoke("train", tmp_path / "cfg.yaml", "--skip-checks")
    problems = lora_problems(tmp_path / "run" / "best" / "adapter", get_family("qwen2_vl"))
    assert len(problems) == 2
    assert "modules_to_save" in problems[0] and "of the vision" in problems[1]
    _invoke("export", tmp_path / "run", "--out", tmp_path / "e")
    notes = json.loads((tmp_path / "e" / ".mmtune-export.json").read_text())["notes"]
    assert sum(n.startswith("vLLM:") for n in notes) == 2
    assert "vLLM:" in (tmp_path / "e" / "README.md").read_text()


@pytest.mark.skipif(shutil.which("vllm") is not None, reason="vLLM is installed here")
def test_not_installed_says_how_and_prints_the_command(merged):
    out = _invoke("serve", merged, "--backend", "vllm", code=2)
    assert "vLLM is not installed here" in out and "pip install vllm" in out and "vllm serve" in out
    dry = _invoke("serve", merged, "--backend", "vllm", "--dry-run")
    assert "vllm serve" in dry and "--max-model-len 259" in dry


def test_unknown_backend():
    assert "unknown --backend" in _invoke("serve", "tiny/qwen2", "--backend", "sglang", code=2)
