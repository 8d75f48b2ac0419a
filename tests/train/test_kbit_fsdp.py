"""QLoRA under FSDP2 on 2 CPU gloo ranks: the 4-bit weights stored in the compute dtype are sharded, the run
matches DDP's QLoRA step for step (fp32 and bf16) and resumes exactly from its sharded checkpoint, the adapter
gathered at save time is a PEFT adapter that loads back onto a freshly quantized base, and the planner's
per-rank peak is within its stated error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_fsdp import FSDP_PLAN_ERROR_PCT, close, two_ranks  # noqa: E402

QLORA = {"method": "qlora"}
MEASURE = ["model.name=tiny/qwen2", "adapter.method=qlora", "data.max_length=512", "train.precision=fp32",
           "train.device=cpu", "train.grad_accum=2", "train.strategy=fsdp", "model.gradient_checkpointing=false"]


@pytest.mark.slow  # ~2.5 min: one 2-rank launch of six short runs and one measured step
@pytest.mark.distributed
def test_fsdp2_qlora_matches_ddp_saves_a_peft_adapter_and_is_planned(tmp_path):
    import torch
    from safetensors.torch import load_file

    jobs = [{"key": f"{s}-{p}", "case": "text-lora", "strategy": s, "tag": f"q-{s}-{p}", "adapter": QLORA,
             "precision": p, "save_every": 5} for p in ("fp32", "bf16") for s in ("fsdp", "ddp")]
    # killed after step 3 and run again: resumed from its sharded checkpoint (4-bit weights included)
    jobs += [{"key": k, "case": "text-lora", "strategy": "fsdp", "tag": "q-killed", "adapter": QLORA, "save_every": 3,
              **extra} for k, extra in (("killed", {"stop_after": 3}), ("resumed", {}))]
    jobs.append({"key": "measure", "measure": MEASURE, "images": []})
    two = two_ranks(jobs, tmp_path)
    assert two["killed"] == two["fsdp-fp32"][:3] and two["resumed"] == two["fsdp-fp32"], two
    assert close(two["fsdp-fp32"], two["ddp-fp32"]), two  # the same 4-bit weights, gathered: the same steps
    assert close(two["fsdp-bf16"], two["ddp-bf16"], tol=2e-2), two  # bf16 gathers / reductions in another order
    for p in ("fp32", "bf16"):
        assert two[f"fsdp-{p}"][-1] < two[f"fsdp-{p}"][0], two  # it learns

    run = tmp_path / "text-lora" / "run-q-fsdp-bf16"
    decisions = json.loads((run / "summary.json").read_text())["decisions"]
    assert "adapter.bnb_4bit_quant_storage: bf16 (auto: train.strategy=fsdp" in "\n".join(decisions), decisions
    assert any(d.startswith("qlora: 14 decoder linear layers -> 4-bit nf4, stored as bfloat16") for d in decisions)
    assert any(d.startswith("FSDP2:") and "bf16 weights" in d for d in decisions), decisions

    # The adapter gathered from the shards is DDP's adapter (fp32 runs: the same steps), in PEFT's format ...
    fsdp_ad = tmp_path / "text-lora" / "run-q-fsdp-fp32" / "checkpoint-5" / "adapter"
    ddp_ad = tmp_path / "text-lora" / "run-q-ddp-fp32" / "checkpoint-5" / "adapter"
    saved, ref = load_file(fsdp_ad / "adapter_model.safetensors"), load_file(ddp_ad / "adapter_model.safetensors")
    assert saved.keys() == ref.keys() and any("lora_B" in k for k in saved)
    for k in saved:
        torch.testing.assert_close(saved[k], ref[k], rtol=1e-5, atol=1e-6)
    assert any(saved[k].abs().sum() > 0 for k in saved if "lora_B" in k)  # trained (lora_B starts at zero)
    # ... that loads back with peft onto the 4-bit base mmtune builds for the run
    from peft import PeftModel

    from mmtune.build import load_model
    from mmtune.config import load_config
    from mmtune.resolve import resolve_here

    cfg = load_config(fsdp_ad.parents[1] / "config.resolved.yaml", ["train.strategy=ddp"])
    base = load_model(resolve_here(cfg)).model
    model = PeftModel.from_pretrained(base, str(fsdp_ad))
    loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
    assert len(loaded) == len(saved)
    for name, tensor in saved.items():
        mine = next(p for n, p in loaded.items() if n.replace(".default", "").endswith(name.split("base_model.")[-1]))
        torch.testing.assert_close(mine.detach().float(), tensor.float())

    # The planner's per-rank peak of the same QLoRA step under FSDP2 (4-bit weights sharded, quant state whole)
    from mmtune.plan.batch import Declared
    from mmtune.plan.planner import predict

    plan = predict(load_config(None, MEASURE), gpus=2, strategy="fsdp", plan_eval=False, declared=Declared())
    one = predict(load_config(None, MEASURE), gpus=1, strategy="fsdp", plan_eval=False, declared=Declared())
    assert plan.breakdown["quant_state"] == one.breakdown["quant_state"] > 0  # not sharded
    assert plan.breakdown["weights"] < one.breakdown["weights"]  # sharded
    for rank, peak in enumerate(two["measure"]):
        error = 100.0 * (plan.peak_allocated_bytes - peak) / peak
        assert abs(error) <= FSDP_PLAN_ERROR_PCT, (rank, plan.peak_allocated_bytes, two["measure"], error)
