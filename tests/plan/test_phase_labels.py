"""Phase labels of the breakdown: a later micro-batch's forward activations are activations, not logits."""

from mmtune.config import load_config


def _forward_labels(grad_accum: int) -> tuple[int, int]:
    from mmtune.plan.planner import resolve_for_plan, trace_config

    cfg = load_config(None, ["model.name=tiny/qwen2", "data.max_length=64", "train.precision=fp32",
                             f"train.grad_accum={grad_accum}", "model.gradient_checkpointing=false"])
    _, _, ex, _ = trace_config(resolve_for_plan(cfg))
    fwd = [s for s in ex.tracker.trace.storages.values() if s.phase == "forward"]
    return sum(1 for s in fwd if s.tag == "logits"), len(fwd)


def test_second_micro_batch_forward_is_not_filed_under_logits():
    # grad_accum=1 traces 2 forwards (1 + 1 micro-batch), grad_accum=2 traces 3 (1 + 2): the head's
    # outputs are the only "logits" storages of a forward, so the count per forward is the same.
    tagged1, all1 = _forward_labels(1)
    tagged2, all2 = _forward_labels(2)
    assert tagged1 / 2 == tagged2 / 3
    assert tagged2 < all2 / 10  # before the fix every op of micro-batch 2's forward carried the tag
