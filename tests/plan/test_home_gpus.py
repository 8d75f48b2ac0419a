"""The cards people fine-tune on at home (RTX 30/40/50, 2080 Ti, Kaggle's P100, RTX A4000/A5000): each entry keeps its
sheet's figures and its logged total, their names resolve, and the run's decisions on them follow the card."""

import pytest

from mmtune.errors import ConfigError
from mmtune.gpus import GPUS, HOST_LINK_GBS, GiB, get_gpu


def test_geforce_rows_hold_the_fp32_accumulate_rate_and_pro_cards_the_full_one():
    # GeForce: half the FP16-accumulate figure of the product page / whitepaper (51 -> 25.5, 194.9 -> 97.5, 419 -> 209.5)
    assert [GPUS[g].matmul_tflops("bf16") for g in ("rtx-3060-12gb", "rtx-3080-10gb", "rtx-4080", "rtx-5090")] == \
        [25.5, 59.5, 97.5, 209.5]
    # RTX A4000 / A5000 datasheets: 153.4 / 222.2 with sparsity, full rate -> 76.7 / 111.1
    assert GPUS["rtx-a4000"].matmul_tflops("fp16") == 76.7 and GPUS["rtx-a5000"].matmul_tflops("bf16") == 111.1
    assert GPUS["rtx-4070"].fp32_tflops == 29.1 and GPUS["rtx-4070-ti-super"].bandwidth_gbs == 672
    assert GPUS["rtx-4060-ti-16gb"].bandwidth_gbs == GPUS["rtx-4060-ti-8gb"].bandwidth_gbs == 288


def test_p100_fp16_runs_at_its_fp32_rate_and_has_no_bf16():
    p = GPUS["p100"]
    assert p.compute_capability == (6, 0) and not p.bf16 and not p.fa2
    assert p.matmul_tflops("fp16") == p.matmul_tflops("fp32") == 9.3  # cuBLAS fp32 compute, no tensor cores
    assert p.matmul_tflops("bf16") == 9.3  # a bf16 request is planned as the fp16 + GradScaler run it becomes


def test_turing_and_blackwell_geforce():
    t = GPUS["rtx-2080-ti"]
    assert t.compute_capability == (7, 5) and not t.bf16 and t.bf16_tflops is None and t.interconnect == "pcie3"
    b = GPUS["rtx-5090"]
    assert b.compute_capability == (12, 0) and b.bf16 and b.fa2 and b.interconnect == "pcie5"
    assert HOST_LINK_GBS["rtx-5090"] == 63.0 and b.memory_bytes == 32 * GiB


def test_totals_quoted_from_linux_oom_logs():
    assert {g: round(GPUS[g].total_bytes / GiB, 2) for g in
            ("rtx-3060-12gb", "rtx-3080-10gb", "rtx-2080-ti", "rtx-5090", "rtx-a4000", "p100")} == \
        {"rtx-3060-12gb": 11.76, "rtx-3080-10gb": 9.78, "rtx-2080-ti": 10.76, "rtx-5090": 31.36, "rtx-a4000": 15.61,
         "p100": 15.89}


def test_the_4060_ti_sits_on_pcie_4_x8():
    for g in ("rtx-4060-ti-16gb", "rtx-4060-ti-8gb"):
        assert HOST_LINK_GBS[g] == GPUS[g].link_gbs == 15.75
    assert HOST_LINK_GBS["rtx-4070"] == 31.5


@pytest.mark.parametrize("spelling,gid", [
    ("rtx-3060-12gb", "rtx-3060-12gb"), ("3060-12gb", "rtx-3060-12gb"), ("RTX 3060 8GB", "rtx-3060-8gb"),
    ("4060ti-16gb", "rtx-4060-ti-16gb"), ("RTX 4060 Ti 16GB", "rtx-4060-ti-16gb"), ("4070", "rtx-4070"),
    ("rtx4070", "rtx-4070"), ("4070-ti-super", "rtx-4070-ti-super"), ("RTX 4070 Ti SUPER", "rtx-4070-ti-super"),
    ("4080", "rtx-4080"), ("5090", "rtx-5090"), ("RTX 5090", "rtx-5090"), ("2080ti", "rtx-2080-ti"),
    ("RTX 2080 Ti", "rtx-2080-ti"), ("p100-16gb", "p100"), ("Tesla P100", "p100"), ("tesla_p100_pcie_16gb", "p100"),
    ("a4000", "rtx-a4000"), ("RTX A5000", "rtx-a5000"), ("a5000", "rtx-a5000"), ("3080-10gb", "rtx-3080-10gb"),
])
def test_names_people_type(spelling, gid):
    assert get_gpu(spelling).id == gid


@pytest.mark.parametrize("name,sizes", [
    ("RTX 3060", ("rtx-3060-8gb (8 GB)", "rtx-3060-12gb (12 GB)")), ("3060", ("rtx-3060-8gb", "rtx-3060-12gb")),
    ("rtx3060", ("rtx-3060-8gb", "rtx-3060-12gb")), ("4060ti", ("rtx-4060-ti-8gb (8 GB)", "rtx-4060-ti-16gb (16 GB)")),
    ("4060-ti", ("rtx-4060-ti-8gb", "rtx-4060-ti-16gb")), ("RTX 4060 Ti", ("rtx-4060-ti-8gb", "rtx-4060-ti-16gb")),
    ("3080", ("rtx-3080-10gb (10 GB)", "rtx-3080-12gb (12 GB)")),
])
def test_names_sold_in_two_sizes_are_refused_with_both(name, sizes):
    with pytest.raises(ConfigError) as e:
        get_gpu(name)
    assert all(s in e.value.fix for s in sizes)


def test_this_machines_card_is_found_by_its_longest_name_then_its_memory():
    from mmtune.resolve.target import catalog_match

    assert catalog_match("NVIDIA GeForce RTX 4070 Ti SUPER", 16 * GiB).id == "rtx-4070-ti-super"  # not the 4070
    assert catalog_match("NVIDIA L40S", 48 * GiB).id == "l40s"  # not the L40 (a substring of it)
    assert catalog_match("NVIDIA GeForce RTX 3060", int(11.76 * GiB)).id == "rtx-3060-12gb"
    assert catalog_match("NVIDIA GeForce RTX 3060", int(7.78 * GiB)).id == "rtx-3060-8gb"
    assert catalog_match("Tesla P100-PCIE-16GB", int(15.89 * GiB)).id == "p100"
    assert catalog_match("NVIDIA GeForce GTX 1080", 8 * GiB) is None


@pytest.mark.parametrize("gid", ["p100", "rtx-2080-ti"])
def test_bf16_becomes_fp16_with_a_grad_scaler_and_attention_has_no_flash(gid):
    from mmtune.resolve.decisions import decide_attention, decide_attention_kernels, decide_precision
    from mmtune.resolve.target import gpu_target

    t = gpu_target(gid)
    precision, scaled, d = decide_precision("bf16", t)
    assert (precision, scaled, d.changed) == ("fp16", True, True) and t.sm in d.reason
    attn, _ = decide_attention("auto", t, precision)
    assert attn == "sdpa"
    assert decide_attention_kernels(attn, t, precision).value == "mem_efficient>math"


def test_flash_attention_2_is_kept_and_chosen_on_an_rtx_5090():
    from mmtune.resolve.decisions import decide_attention, decide_attention_kernels
    from mmtune.resolve.target import gpu_target

    t = gpu_target("rtx-5090")
    assert decide_attention("flash_attention_2", t, "bf16")[0] == "flash_attention_2"
    assert decide_attention("auto", t, "bf16")[0] == "flash_attention_2"
    assert decide_attention_kernels("sdpa", t, "bf16").value == "flash>mem_efficient>math"
