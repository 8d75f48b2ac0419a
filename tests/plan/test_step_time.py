"""The step-time model: GPU ranking, 4-bit dequantisation, per-GPU breakdowns and communication."""

import pytest

from mmtune.config import load_config
from mmtune.gpus import GPUS

TEXT = ["model.name=tiny/qwen2", "data.max_length=256", "train.grad_accum=2", "train.precision=fp16"]


def _plan(*over, gpu="a100-40gb", **kw):
    from mmtune.plan.planner import predict

    return predict(load_config(None, TEXT + list(over)), gpu=gpu, **kw)


def test_catalogue_has_every_figure_of_each_card():
    for g in GPUS.values():
        assert g.fp16_tflops >= g.fp32_tflops > 0 and g.bandwidth_gbs > 0 and g.link_gbs > 0, g.id  # P100: equal
        assert g.interconnect in ("nvlink", "pcie3", "pcie4", "pcie5"), g.id
        assert (g.bf16_tflops is not None) == g.bf16, g.id
        assert g.matmul_tflops("fp32") == g.fp32_tflops
    # GeForce cards: the table holds the fp32-accumulate rate itself (no second halving)
    assert GPUS["rtx-3090"].matmul_tflops("fp16") == 71 and GPUS["rtx-4090"].matmul_tflops("bf16") == 165.2


def test_a_t4_ranks_slower_than_an_rtx_3090_and_the_order_follows_the_cards():
    t = {g: _plan("adapter.method=lora", gpu=g).step_time_s for g in ("t4", "rtx-3090", "a100-40gb", "h100")}
    assert t["t4"] > t["rtx-3090"] > t["a100-40gb"] > t["h100"], t


def test_fp32_runs_are_priced_at_the_fp32_rate():
    a = _plan("adapter.method=full", "train.precision=fp32", gpu="a100-40gb")
    assert a.step_time_parts["matmul_tflops"] == GPUS["a100-40gb"].fp32_tflops
    b = _plan("adapter.method=full", gpu="a100-40gb")
    assert b.step_time_parts["matmul_tflops"] == 312  # (a tiny model is launch-bound: no time comparison)


def test_qlora_pays_for_dequantising_its_weights():
    from mmtune.models.packed4bit import packed_4bit_bytes
    from mmtune.plan.dequant_cost import dequant_bytes

    lora = _plan("adapter.method=lora", "model.gradient_checkpointing=true")
    qlora = _plan("adapter.method=qlora", "model.gradient_checkpointing=true")
    assert lora.step_time_parts["dequant_s"] == 0
    assert qlora.step_time_parts["dequant_s"] > 0
    assert qlora.step_time_s > lora.step_time_s
    # one dequantize reads at least the stored 4-bit weight and writes the 16-bit one
    n = 4096 * 4096
    assert dequant_bytes(n, 2) > packed_4bit_bytes(n) - 4 * 256 + 2 * n - 4096


def test_dequantisations_counted_per_pass():
    """Forward, checkpointed recomputation and backward each dequantize every 4-bit linear once."""
    from mmtune.plan.planner import resolve_for_plan, trace_config

    def count(ckpt):
        cfg = load_config(None, TEXT + ["adapter.method=qlora", f"model.gradient_checkpointing={ckpt}"])
        pm, _, ex, _ = trace_config(resolve_for_plan(cfg, "a100-40gb"))
        return pm.quantized_layers, sum(1 for c in ex.tracker.trace.costs if c[2] == "dequant")

    layers, with_ckpt = count("true")
    _, without = count("false")
    traced_micro_batches = 2  # the cost-recording step runs min(grad_accum, 2) micro-batches
    # checkpointed: forward, recomputation and backward for every linear (PEFT makes the embeddings' output
    # require grad under checkpointing, so every input has a gradient)
    assert with_ckpt == 3 * layers * traced_micro_batches
    # not checkpointed: forward for all; backward for all but layer 0's q, k, v (their input, the frozen
    # embeddings' norm, needs no gradient, so bnb's backward never runs for them)
    assert without == (2 * layers - 3) * traced_micro_batches


@pytest.mark.parametrize("strategy", ["ddp", "zero2", "fsdp", "zero3"])
def test_per_gpu_breakdown_and_communication(strategy):
    one = _plan("adapter.method=full", "model.gradient_checkpointing=false")
    r = _plan("adapter.method=full", "model.gradient_checkpointing=false", gpus=4, strategy=strategy)
    b, b1 = r.breakdown, one.breakdown
    sharded = {"ddp": (), "zero2": ("gradients", "optimizer_state"),
               # FSDP2 under accumulation (2 here) keeps the gradients unsharded until the last micro-batch
               "fsdp": ("weights", "trainable_parameters", "optimizer_state")}.get(
        strategy, ("weights", "trainable_parameters", "gradients", "optimizer_state"))
    for k in ("weights", "trainable_parameters", "gradients", "optimizer_state", "activations"):
        assert b[k] == (b1[k] - b1[k] * 3 // 4 if k in sharded else b1[k]), (k, b[k], b1[k])
    classes = sum(v for k, v in b.items() if k not in ("reserved_unused", "overhead"))
    assert classes == r.peak_allocated_bytes  # the per-GPU parts add up to the per-GPU peak
    c = r.comm
    assert c["strategy"] == strategy and c["interconnect"] == "nvlink" and c["link_gbs"] == 300
    moved = {k: c[k] > 0 for k in ("all_reduce_bytes", "all_gather_bytes", "reduce_scatter_bytes")}
    assert moved == {"ddp": dict(all_reduce_bytes=True, all_gather_bytes=False, reduce_scatter_bytes=False),
                     "zero2": dict(all_reduce_bytes=False, all_gather_bytes=True, reduce_scatter_bytes=True)}.get(
        strategy, dict(all_reduce_bytes=False, all_gather_bytes=True, reduce_scatter_bytes=True))
    assert c["comm_time_s"] > 0 and 0 <= c["exposed_s"] <= c["comm_time_s"]
    assert r.step_time_s == pytest.approx(one.step_time_s + c["exposed_s"])


def test_ring_volumes_and_link_time():
    from mmtune.plan.timing import COMM_EFFICIENCY, comm_time, comm_volumes

    v = comm_volumes("ddp", 4, grad_accum=8, trainable_bytes=1000, param_bytes=10_000)
    assert v == {"all_reduce_bytes": 1500, "all_gather_bytes": 0, "reduce_scatter_bytes": 0}
    v = comm_volumes("zero3", 4, grad_accum=2, trainable_bytes=1000, param_bytes=10_000)
    assert v == {"all_reduce_bytes": 0, "all_gather_bytes": 30_000, "reduce_scatter_bytes": 1500}
    v = comm_volumes("fsdp", 4, grad_accum=2, trainable_bytes=1000, param_bytes=10_000)  # reduced once per step
    assert v == {"all_reduce_bytes": 0, "all_gather_bytes": 30_000, "reduce_scatter_bytes": 750}
    assert comm_volumes("ddp", 1, grad_accum=1, trainable_bytes=1000, param_bytes=1) == \
        {"all_reduce_bytes": 0, "all_gather_bytes": 0, "reduce_scatter_bytes": 0}
    assert comm_time({"all_reduce_bytes": 7e9}, 10) == pytest.approx(7e9 / (10e9 * COMM_EFFICIENCY))
    # the same DDP run over PCIe Gen3 costs more time than over NVLink
    slow = _plan("adapter.method=full", gpu="quadro-rtx-6000", gpus=2)
    fast = _plan("adapter.method=full", gpu="a100-40gb", gpus=2)
    assert slow.comm["comm_time_s"] > fast.comm["comm_time_s"]


def test_cli_prints_step_parts_and_traffic(tmp_path):
    from typer.testing import CliRunner

    from mmtune.cli import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  name: tiny/qwen2\n")
    out = CliRunner().invoke(app, ["plan", str(cfg), *TEXT, "adapter.method=qlora", "--gpu", "a100-40gb", "--gpus", "2",
                                   "--strategy", "zero2"], env={"COLUMNS": "300"})  # (QLoRA + fsdp is refused)
    assert "4-bit dequantisation" in out.output and "all-gather" in out.output, out.output
    out = CliRunner().invoke(app, ["plan", str(cfg), *TEXT, "adapter.method=qlora", "--gpu", "a100-40gb", "--gpus", "2",
                                   "--nodes", "2", "--node-link", "50", "--strategy", "ddp"], env={"COLUMNS": "300"})
    assert "all-reduce" in out.output, out.output
    assert "across 2 nodes (hierarchical)" in out.output and "50 GB/s per node (--node-link)" in out.output, out.output
    js = CliRunner().invoke(app, ["plan", str(cfg), *TEXT, "--gpu", "a100-40gb", "--gpus", "2", "--nodes", "2",
                                  "--strategy", "ddp", "--json"])
    import json

    comm = json.loads(js.output)["comm"]
    assert comm["nodes"] == 2 and comm["inter_node_bytes"] > 0 and comm["inter_node_s"] > 0, comm


def test_two_nodes_of_eight_are_slower_than_one_node_of_sixteen_and_use_the_same_memory():
    """Collectives crossing nodes run at the node link (hierarchical: NVLink in the node, then InfiniBand)."""
    from mmtune.gpus import NODE_LINK_GBS
    from mmtune.models.model_config import DECODER_LAYERS
    from mmtune.plan.planner import predict
    from mmtune.plan.timing import COMM_EFFICIENCY

    # Qwen2.5-7B's real widths, cut to 2 decoder layers, full fine-tuning under FSDP: 1.3 B parameters
    # gathered per micro-batch against little compute, so the traffic is not hidden.
    cfg = load_config("recipes/seed001_qwen2.5-7b_lora.yaml", ["adapter.method=full", "data.max_length=128",
                                                               "train.micro_batch_size=1", "train.grad_accum=2"])
    token = DECODER_LAYERS.set(2)
    try:
        one, two, fast = (predict(cfg, gpu="h100", gpus=16, strategy="fsdp", nodes=n, node_link_gbs=link)
                          for n, link in ((1, None), (2, None), (2, 400)))
    finally:
        DECODER_LAYERS.reset(token)
    assert one.comm["nodes"] == 1 and "inter_node_bytes" not in one.comm
    c = two.comm
    assert c["nodes"] == 2 and c["node_link_gbs"] == NODE_LINK_GBS and "InfiniBand" in c["node_link"]
    # the tiny model's compute hides little: the slower inter-node phase shows in the step time
    assert two.step_time_parts["comm_exposed_s"] > one.step_time_parts["comm_exposed_s"] > 0
    assert two.step_time_s > one.step_time_s and two.tokens_per_s < one.tokens_per_s
    # the volumes: the buffers once per node over the node link, (8-1)/8 of them per GPU inside the node
    buffers = sum(one.comm[k] for k in ("all_reduce_bytes", "all_gather_bytes", "reduce_scatter_bytes")) * 16 / 15
    assert c["inter_node_bytes"] == pytest.approx(buffers / 2, rel=1e-6)
    assert c["intra_node_bytes"] == pytest.approx(buffers * 7 / 8, rel=1e-6)
    assert c["inter_node_s"] == pytest.approx(c["inter_node_bytes"] / (NODE_LINK_GBS * 1e9 * COMM_EFFICIENCY))
    assert c["comm_time_s"] == pytest.approx(c["intra_node_s"] + c["inter_node_s"])
    # per-GPU memory does not depend on how the GPUs are spread over nodes
    assert two.process_total_bytes == one.process_total_bytes and two.breakdown == one.breakdown
    # a faster fabric narrows the gap; one node is the flat ring exactly
    assert one.step_time_s < fast.step_time_s < two.step_time_s


def test_nodes_must_split_the_gpus_evenly():
    from mmtune.errors import ConfigError

    with pytest.raises(ConfigError, match="split evenly"):
        _plan(gpu="h100", gpus=12, strategy="ddp", nodes=5)


def test_search_over_several_nodes_plans_each_strategy_with_the_node_link():
    """--search with --gpus > 1 turns the strategy (predict's argument, not a config key) and passes the
    nodes on: every candidate's step time has the inter-node phase."""
    from mmtune.plan.search import search

    res = search(load_config(None, TEXT + ["adapter.method=lora"]), gpu="a100-40gb", gpus=4, nodes=2,
                 node_link_gbs=50, methods=["lora"], optimizers=["adamw"], checkpointing=[False], micro_batches=(1,))
    assert [c.overrides.get("--strategy") for c in res.tried] == ["ddp", "zero2", "zero3"], [c.error for c in res.tried]
    for c in res.tried:
        assert c.result.comm["nodes"] == 2 and c.result.comm["node_link_gbs"] == 50 and c.result.comm["inter_node_s"] > 0


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_fsdp_per_rank_holds_the_root_whole_two_units_and_gradients_whole_under_accumulation(grad_accum):
    """What FSDP2 keeps per rank beyond its shards (plan/distributed.py), in the units mmtune wraps
    (sharding.shard_units): the root whole, two blocks gathered, a block's fp32 gradients as the
    reduce-scatter buffer; gradients 1/N only when every micro-batch reduces (accumulation 1)."""
    from mmtune.plan.model import build_planned_model
    from mmtune.plan.planner import resolve_for_plan
    from mmtune.sharding import shard_units

    over = ("adapter.method=full", "model.gradient_checkpointing=false", "train.precision=fp32",
            f"train.grad_accum={grad_accum}")
    one = _plan(*over)
    r = _plan(*over, gpus=4, strategy="fsdp")
    pm = build_planned_model(resolve_for_plan(load_config(None, TEXT + list(over)), "a100-40gb"))
    units = shard_units(pm.model, pm.family)
    inside = {id(p) for _, u in units for p in u.parameters()}
    root = sum(p.numel() * p.element_size() for p in pm.model.parameters() if id(p) not in inside)
    largest = max(sum(p.numel() * p.element_size() for p in u.parameters()) for _, u in units)
    b, b1 = r.breakdown, one.breakdown
    assert root > 0 and b["unsharded_root"] == root and b["gathered_units"] == 2 * largest
    assert b["reduce_scatter_buffer"] == largest  # full fine-tuning in fp32: every weight trainable, fp32 gradients
    assert b["gradients"] == (b1["gradients"] if grad_accum > 1 else b1["gradients"] - b1["gradients"] * 3 // 4)
    assert b["weights"] + b["trainable_parameters"] < b1["weights"] + b1["trainable_parameters"]
