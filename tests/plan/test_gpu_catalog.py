"""The GPU catalogue: every card's fields agree with each other, every name resolves, and a rented card the
catalogue used to lack (`--gpu l40s`) is planned."""

import json

import pytest

from mmtune.errors import ConfigError
from mmtune.gpus import ALIASES, AMBIGUOUS, GPUS, HOST_LINK_GBS, PCIE_X8, GiB, get_gpu


@pytest.mark.parametrize("gid", sorted(GPUS))
def test_each_card_is_consistent(gid):
    g = GPUS[gid]
    assert g.id == gid and get_gpu(gid.upper()) is g
    assert g.bf16 == (g.compute_capability >= (8, 0)) == (g.bf16_tflops is not None)
    assert g.fa2 == (g.compute_capability >= (8, 0))
    # what the driver reports is a little under the nominal memory (ECC on GDDR6 takes 1/16 of it)
    assert 0.9 * g.memory_bytes < g.usable_bytes < g.memory_bytes
    assert g.context_bytes > 0 and g.workspace_bytes > 0
    assert g.fp32_tflops > 0 and g.bandwidth_gbs > 0 and g.link_gbs > 0
    # tensor cores (sm70+) run fp16 matmuls faster than fp32; without them (P100) PyTorch's fp16 GEMM computes in fp32
    assert g.fp16_tflops > g.fp32_tflops if g.compute_capability >= (7, 0) else g.fp16_tflops == g.fp32_tflops
    lanes = 8 if gid in PCIE_X8 else 16
    assert HOST_LINK_GBS[gid] in (15.75, 31.5, 63.0)
    link = {"pcie3": 15.75, "pcie4": 31.5, "pcie5": 63.0}
    if g.interconnect in link:
        assert g.link_gbs == link[g.interconnect] * lanes / 16 == HOST_LINK_GBS[gid]
    else:
        assert g.interconnect == "nvlink"


def test_aliases_and_ambiguous_names_point_at_cards():
    for alias, gid in ALIASES.items():
        assert gid in GPUS and alias not in GPUS and get_gpu(alias).id == gid
    for name, choices in AMBIGUOUS.items():
        assert name not in GPUS and name not in ALIASES and all(c in GPUS for c in choices)
        assert len({GPUS[c].memory_bytes for c in choices}) == len(choices)  # sold in several sizes


@pytest.mark.parametrize("spelling,gid", [
    ("L40S", "l40s"), ("l40", "l40"), ("A40", "a40"), ("RTX A6000", "rtx-a6000"), ("a6000", "rtx-a6000"),
    ("rtx_a6000", "rtx-a6000"), ("6000-ada", "rtx-6000-ada"), ("RTX 6000 Ada", "rtx-6000-ada"),
    ("H100 PCIe", "h100-pcie"), ("h100-nvl", "h100-nvl"), ("H100 SXM", "h100"), ("b200", "b200"),
    ("A100 80GB PCIe", "a100-pcie-80gb"), ("a100-pcie-40gb", "a100-pcie-40gb"), ("rtx6000", "quadro-rtx-6000"),
])
def test_common_spellings_resolve(spelling, gid):
    assert get_gpu(spelling).id == gid


def test_rtx_6000_with_a_space_names_two_cards():
    with pytest.raises(ConfigError) as e:
        get_gpu("RTX 6000")
    assert "quadro-rtx-6000 (24 GB)" in e.value.fix and "rtx-6000-ada (48 GB)" in e.value.fix


def test_new_cards_keep_their_sheets_figures():
    assert GPUS["l40s"].matmul_tflops("bf16") == 362.05 and GPUS["l40"].matmul_tflops("fp16") == 181.05
    assert GPUS["rtx-a6000"].matmul_tflops("bf16") == 154.8  # full-rate fp32 accumulate, unlike the 3090's 71
    assert GPUS["a100-pcie-80gb"].bandwidth_gbs < GPUS["a100-80gb"].bandwidth_gbs
    assert GPUS["h100-pcie"].interconnect == "pcie5" and GPUS["b200"].interconnect == "nvlink"
    assert GPUS["l40s"].total_bytes == int(44.39 * GiB)


def test_plan_of_a_small_lora_run_on_an_l40s_fits(tmp_path):
    from typer.testing import CliRunner

    from mmtune.cli import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  name: tiny/qwen2\nadapter:\n  method: lora\ndata:\n  max_length: 128\n")
    out = CliRunner().invoke(app, ["plan", str(cfg), "--gpu", "l40s", "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout[out.stdout.index("{"):])
    assert res["fits"] is True
    assert res["margin_bytes"] < GPUS["l40s"].usable_bytes
