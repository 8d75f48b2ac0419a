"""MM090-MM093: bitsandbytes for k-bit runs, int8 matmul on the target GPU, QLoRA's 4-bit storage under FSDP2,
one trainable dtype per FSDP2 unit."""

from __future__ import annotations

import importlib.util

import yaml
from doctor_helpers import run_codes

TEXT = {"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:arithmetic", "synthetic_train_size": 8},
        "train": {"device": "cpu", "precision": "fp32"}}


def _ctx(tmp_path, method: str, gpu: str | None = None, **adapter_train):
    from mmtune.doctor.runner import make_context

    tree = yaml.safe_load(yaml.safe_dump(TEXT))
    tree["adapter"] = {"method": method, **adapter_train.pop("adapter", {})}
    tree["train"].update(adapter_train.pop("train", {}))
    tree["output_dir"] = str(tmp_path / "run")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tree))
    return make_context(path, gpu=gpu)


def test_mm090_bitsandbytes_missing_is_an_error_here_and_an_info_for_a_gpu_machine(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    here = run_codes(_ctx(tmp_path, "lora8bit"), "MM090")
    assert here.codes("error") == {"MM090"} and "int8 layers" in here.findings[0].message
    there = run_codes(_ctx(tmp_path, "qlora", gpu="t4"), "MM090")
    assert there.codes("info") == {"MM090"} and "the GPU machine needs it" in there.findings[0].message
    assert not run_codes(_ctx(tmp_path, "lora"), "MM090").findings
    monkeypatch.undo()
    assert not run_codes(_ctx(tmp_path, "lora8bit"), "MM090").findings  # installed here


def test_mm091_int8_matmul_slow_before_turing_and_bitsandbytes_version_on_hopper(tmp_path, monkeypatch):
    v100 = run_codes(_ctx(tmp_path, "lora8bit", gpu="v100-32gb"), "MM091")
    assert v100.codes("warning") == {"MM091"} and "sm_70" in v100.findings[0].message
    assert not run_codes(_ctx(tmp_path, "lora8bit", gpu="t4"), "MM091").findings  # sm_75: int8 tensor cores
    assert not run_codes(_ctx(tmp_path, "qlora", gpu="v100-32gb"), "MM091").findings
    assert not run_codes(_ctx(tmp_path, "lora8bit", gpu="h100"), "MM091").findings  # bitsandbytes 0.50 here
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.43.1")
    old = run_codes(_ctx(tmp_path, "lora8bit", gpu="h100"), "MM091")
    assert old.codes("error") == {"MM091"} and "bitsandbytes 0.43.1" in old.findings[0].message


def test_mm092_reports_the_resolved_runs_refusal_of_a_foreign_float_storage(tmp_path):
    bad = _ctx(tmp_path, "qlora", adapter={"bnb_4bit_quant_storage": "fp16"}, train={"strategy": "fsdp"})
    rep = run_codes(bad, "MM092")
    assert rep.codes("error") == {"MM092"}, rep.findings
    f = rep.findings[0]
    assert f.where == "adapter.bnb_4bit_quant_storage" and "reinterprets packed 4-bit data" in f.message
    assert "MM098" not in rep.codes()  # said once, under its own code
    for ok in ({"bnb_4bit_quant_storage": "fp32"}, {"bnb_4bit_quant_storage": "uint8"}, {}):
        assert not run_codes(_ctx(tmp_path, "qlora", adapter=ok, train={"strategy": "fsdp"}), "MM092").findings


def test_mm093_mixed_trainable_dtypes_in_one_fsdp2_unit(tmp_path):
    ctx = _ctx(tmp_path, "lora", train={"strategy": "fsdp"})
    assert not run_codes(ctx, "MM093").findings  # mmtune's own build: every trainable weight fp32
    adapted = ctx.need("adapted")
    import torch

    lora = [p for n, p in adapted.result.model.named_parameters() if "layers.0." in n and "lora_A" in n]
    lora[0].data = lora[0].data.to(torch.bfloat16)  # as a brought model or peft's autocast would leave it
    rep = run_codes(ctx, "MM093")
    assert rep.codes("error") == {"MM093"} and "layers.0" in rep.findings[0].message, rep.findings
