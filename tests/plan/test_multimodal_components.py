"""What a multimodal step keeps, one component per case, planned vs a real CPU step of the tiny twin.

The planner runs the model's own code on fake tensors, so each of these is traced rather than
estimated; each case makes one component dominate the peak so a regression in it shows:
- the vision tower's activations, recomputed under checkpointing (a large image: many patches);
- video: M-RoPE's (3, batch, seq) positions from t/h/w grids and the temporal patches;
- the eager vision attention path (patches^2 scores) in bf16, with the fp32 copies the model code makes
  (softmax in fp32, RMSNorm and rotary upcasts) and the merge of image features into the embeddings.
"""

import pytest

from mmtune.config import load_config
from mmtune.plan.batch import Declared

CASES = [
    ("vision-ckpt", ["model.name=tiny/qwen2-vl", "model.gradient_checkpointing=true", "train.precision=fp32"],
     Declared(images=[(336, 336)])),
    ("video-mrope", ["model.name=tiny/qwen2.5-vl", "model.gradient_checkpointing=true", "train.precision=fp32"],
     Declared(videos=[(4, 168, 168)])),
    ("vision-eager-bf16", ["model.name=tiny/qwen2.5-vl", "model.gradient_checkpointing=false",
                           "model.attn_implementation=eager", "train.precision=bf16"], Declared(images=[(224, 224)])),
]


@pytest.mark.parametrize("name,over,declared", CASES, ids=[c[0] for c in CASES])
def test_multimodal_component_planned_vs_real_step(name, over, declared):
    from mmtune.plan.batch import worst_case_batch
    from mmtune.plan.measure import measure_step
    from mmtune.plan.planner import predict, resolve_for_plan

    cfg = load_config(None, ["data.max_length=1024", "train.grad_accum=2", "adapter.method=lora", *over])
    res = predict(cfg, declared=declared, plan_eval=False)
    batch = worst_case_batch(resolve_for_plan(cfg), declared=declared).micro_batch
    measured = measure_step(cfg, batch).peak_allocated_bytes
    assert abs(res.tensor_peak_bytes - measured) / measured <= 0.02, (res.tensor_peak_bytes, measured)
    assert res.media_tokens["video" if "video" in name else "image"]["max"] > 0
