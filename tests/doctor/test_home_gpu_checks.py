"""Hardware checks on the home cards: FlashAttention-2 on consumer Blackwell (sm_120), its backward head-size limit
there, bf16 on Turing / Pascal, bitsandbytes on Pascal (4-bit yes, fast int8 no)."""

from __future__ import annotations

from doctor_helpers import TINY_VL, model_folder, run_codes
from test_kbit_checks import _ctx

FA2 = {**TINY_VL, "model": {"name": "tiny/qwen2-vl", "attn_implementation": "flash_attention_2"}}


def test_mm025_flash_attention_on_an_rtx_5090_runs_from_a_sm120_build(doctor):
    rep = doctor(FA2, "MM025", gpu="rtx-5090")
    assert rep.errors == []
    sm120 = [f for f in rep.findings if "sm_120" in f.message]
    assert [f.severity for f in sm120] == ["info"] and "CUDA 12.8" in sm120[0].message
    assert not [f for f in doctor(FA2, "MM025", gpu="rtx-4090").findings if "sm_120" in f.message]
    assert doctor(FA2, "MM025", gpu="rtx-2080-ti").errors[0].fix == "model.attn_implementation=sdpa"  # sm_75
    assert doctor(FA2, "MM025", gpu="p100").errors  # sm_60


def test_mm050_backward_head_size_on_an_rtx_5090_is_the_consumer_limit(doctor, tmp_path):
    """sm_120 has sm_86/89's ~100 KB of shared memory per SM: head_dim 193-256 has no FA2 backward there."""
    mid = model_folder(tmp_path, name="mid", head_dim=224)
    t = {**TINY_VL, "model": {"name": str(mid), "attn_implementation": "flash_attention_2"}}
    rep = doctor(t, "MM050", gpu="rtx-5090")
    assert [f.severity for f in rep.findings] == ["error"] and "backward on RTX 5090 (sm_120)" in rep.findings[0].message
    assert doctor(t, "MM050", gpu="b200").findings == []  # sm_100: datacenter shared memory


def test_mm005_bf16_on_a_2080_ti_and_a_p100_is_fp16_with_a_grad_scaler(doctor):
    for gid, sm in (("rtx-2080-ti", "sm_75"), ("p100", "sm_60")):
        rep = doctor({**TINY_VL, "train": {"precision": "bf16"}}, "MM005", gpu=gid)
        assert rep.errors == [] and "fp16 + GradScaler (bf16 unsupported on" in rep.findings[0].message
        assert sm in rep.findings[0].message
    assert doctor({**TINY_VL, "train": {"precision": "bf16"}}, "MM005", gpu="rtx-3060-12gb").findings == []


def test_mm091_qlora_runs_on_a_p100_and_8bit_is_the_slow_path(tmp_path):
    """bitsandbytes docs (installation, 0.48+): NF4/FP4 and 8-bit optimizers need CC 6.0+ (Pascal, P100), LLM.int8()
    7.5+; so QLoRA on Kaggle's P100 is not refused, 8-bit LoRA is warned about."""
    assert not run_codes(_ctx(tmp_path, "qlora", gpu="p100"), "MM091").findings
    slow = run_codes(_ctx(tmp_path, "lora8bit", gpu="p100"), "MM091")
    assert slow.codes("warning") == {"MM091"} and "sm_60" in slow.findings[0].message
