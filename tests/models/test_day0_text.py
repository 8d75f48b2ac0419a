"""Day 0 for text: a causal LM transformers has natively but mmtune's registry does not list (Gemma-2, Phi-3,
Qwen3-MoE) gets a family inferred from a meta build (models/generic_text.py), and then the doctor, a LoRA and a full
two-step run, the plan and a merged export all work on a tiny random folder of it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from day0_text_model import save_text_model  # noqa: E402

# model_type -> (LoRA targets the family must infer, which of them are new beside Llama's names, fused experts)
EXPECTED = {
    "gemma2": (("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), None),
    "phi3": (("o_proj", "qkv_proj", "gate_up_proj", "down_proj"), None),
    "qwen3_moe": (("q_proj", "k_proj", "v_proj", "o_proj"),
                  "layers.*.mlp.experts.gate_up_proj, layers.*.mlp.experts.down_proj"),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("day0text")
    rows = [{"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                          {"role": "assistant", "content": str(2 * i)}]} for i in range(4)]
    (root / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root, {mt: save_text_model(mt, root / mt) for mt in EXPECTED}


def _cfg(root: Path, folder: Path, method: str, name: str, **over) -> Path:
    tree = {"output_dir": str(root / name), "model": {"name": str(folder), **over},
            "data": {"train": str(root / "data.jsonl"), "max_length": 64},
            "adapter": {"method": method, "r": 4, "dropout": 0.0},
            "train": {"max_steps": 2, "micro_batch_size": 2, "lr": 1e-2, "precision": "fp32", "device": "cpu",
                      "scheduler": "constant", "seed": 0},
            "logging": {"tensorboard": False}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _invoke(*args):
    from mmtune.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output[-3000:]
    return res.output


@pytest.mark.parametrize("model_type", sorted(EXPECTED))
def test_inferred_family_targets_every_real_linear(folders, model_type):
    """Phi-3's fused qkv_proj / gate_up_proj get LoRA too (Llama's fixed list would leave them out), and a MoE whose
    experts are 3-D parameters says so instead of pretending LoRA reached them."""
    from transformers import AutoConfig

    from mmtune.models.families import FAMILIES, family_for_config

    assert all(model_type not in f.model_types for f in FAMILIES.values()), "pick a type the registry lacks"
    fam = family_for_config(AutoConfig.from_pretrained(folders[1][model_type]))
    targets, experts = EXPECTED[model_type]
    assert fam.inferred and fam.name == f"generic:{model_type}" and fam.modalities == ("text",)
    assert fam.components == {"decoder": ("model.",), "lm_head": ("lm_head.",)}
    assert fam.lora_targets == targets
    notes = {k: v for k, v, _ in fam.inferred_notes}
    assert notes.get("model.family.experts") == experts


@pytest.mark.parametrize("model_type", sorted(EXPECTED))
def test_doctor_train_plan_export(folders, model_type):
    import torch
    from safetensors.torch import load_file

    root, by_type = folders
    folder = by_type[model_type]
    lora = _cfg(root, folder, "lora", f"{model_type}-lora")
    out = _invoke("doctor", lora)
    assert f"generic:{model_type} is a day-0 family" in out and "0 error(s)" in out
    assert "MM066" not in out.split("day-0 family", 1)[1].split("MM095 fix", 1)[0]  # no video check for a text model

    _invoke("train", lora)
    _invoke("train", _cfg(root, folder, "full", f"{model_type}-full", gradient_checkpointing=False), "train.lr=1e-3")
    for name in ("lora", "full"):
        losses = [json.loads(ln)["loss"] for ln in (root / f"{model_type}-{name}" / "metrics.jsonl").read_text().splitlines()]
        assert len(losses) == 2 and all(x == x and x > 0 for x in losses), losses

    # LoRA landed on real Linear layers only, and on each inferred target
    adapter = load_file(root / f"{model_type}-lora" / "checkpoint-2" / "adapter" / "adapter_model.safetensors")
    leaves = {k.split(".lora_")[0].rsplit(".", 1)[-1] for k in adapter}
    assert leaves == set(EXPECTED[model_type][0]), leaves

    plan = _invoke("plan", lora, "--gpu", "a100-80gb")
    assert f"model.family: generic:{model_type}" in plan and "fits A100 80GB" in plan

    merged = root / f"{model_type}-merged"
    _invoke("export", root / f"{model_type}-lora", "--merge", "--out", merged)
    base, after = load_file(folder / "model.safetensors"), load_file(merged / "model.safetensors")
    changed = [k for k in base if k in after and not torch.equal(base[k], after[k])]
    assert changed and all(k.rsplit(".", 2)[-2] in EXPECTED[model_type][0] for k in changed), changed
    assert json.loads((merged / "config.json").read_text())["model_type"] == model_type


def test_a_model_without_sdpa_gets_eager_attention_with_its_reason(folders, tmp_path):
    """Gemma-2 has no SDPA in transformers 5 (it soft-caps the scores): auto decides eager and says why; asking for
    sdpa is refused before any build, with the fix."""
    from mmtune.config import load_config
    from mmtune.errors import ConfigError
    from mmtune.resolve import local_target, resolve_run

    folder = folders[1]["gemma2"]
    resolved = resolve_run(load_config(_cfg(tmp_path, folder, "lora", "auto"), []), local_target())
    assert resolved.attn_implementation == "eager"
    assert any(ln.startswith("model.attn_implementation: eager") and "Gemma2ForCausalLM does not support SDPA" in ln
               for ln in resolved.summary_lines())
    with pytest.raises(ConfigError, match="sdpa cannot be used") as err:
        resolve_run(load_config(_cfg(tmp_path, folder, "lora", "sdpa", attn_implementation="sdpa"), []), local_target())
    assert "attn_implementation=auto" in err.value.fix


def test_plan_of_fa2_on_a_class_without_sdpa_traces_eager_and_says_so(folders):
    """Gemma-2 on an H100 in bf16 runs FlashAttention-2; the plan cannot build FA2 here and SDPA (its usual stand-in)
    does not exist for this class: it traces eager attention and says that this bounds the activations from above."""
    root, by_type = folders
    out = _invoke("plan", _cfg(root, by_type["gemma2"], "lora", "gemma2-h100"), "--gpu", "h100-80gb", "train.precision=bf16")
    assert "model.attn_implementation: flash_attention_2" in out
    assert "planned attention: eager stands in for FlashAttention-2" in out


def test_an_embedded_day0_text_model_plans_with_the_local_tokenizer_as_stand_in():
    """No download: a real-size text config mmtune embeds (Qwen3-30B-A3B) gets the local tokenizer as its stand-in
    processor, as Llama does under the qwen2 family, though its day-0 family has no tiny twin."""
    from mmtune.models.configs import embedded, hf_config
    from mmtune.models.families import family_for_config
    from mmtune.resolve.processor import stand_in_processor

    spec = embedded("Qwen/Qwen3-30B-A3B")
    fam = family_for_config(hf_config(spec))
    assert fam.name == "generic:qwen3_moe" and fam.tiny is None
    tok = stand_in_processor(fam, dict(spec.get("processor", {})))
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
