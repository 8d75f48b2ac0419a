"""Auxiliary losses (mmtune.aux_losses): config checks, the heatmap loss's targets, its gradients on the
tiny Qwen3-VL twin, the step's arithmetic (accumulation, loss scaling), logs and the planner."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mmtune.config import load_config
from mmtune.errors import ConfigError

FSC147 = Path(__file__).resolve().parents[2] / "recipes" / "data" / "published" / "fsc147"
AUX = 'train.aux_losses=[{name: heatmap, weight: 0.5, options: {grid: 4}}]'


def _cfg(tmp_path, *over):
    return load_config(None, [
        "model.name=tiny/qwen3-vl", "model.gradient_checkpointing=false", f"data.train={FSC147}",
        "data.format=fsc147", "data.max_length=512", "adapter.method=lora", "adapter.r=4", "adapter.dropout=0",
        "train.precision=fp32", "train.device=cpu", "train.micro_batch_size=2", "train.grad_accum=2",
        "train.max_steps=2", "train.lr=1e-3", "logging.tensorboard=false", f"output_dir={tmp_path / 'run'}",
        AUX, *over])


def test_unknown_loss_and_option_are_config_errors_with_did_you_mean():
    with pytest.raises(ConfigError, match="did you mean 'heatmap'"):
        load_config(None, ["model.name=tiny/qwen3-vl", "train.aux_losses=[{name: heatmp, weight: 0.1}]"])
    with pytest.raises(ConfigError, match="did you mean 'grid'"):
        load_config(None, ["model.name=tiny/qwen3-vl",
                           "train.aux_losses=[{name: heatmap, weight: 0.1, options: {gird: 7}}]"])
    with pytest.raises(ConfigError, match="distance"):
        load_config(None, ["model.name=tiny/qwen3-vl",
                           "train.aux_losses=[{name: heatmap, weight: 0.1, options: {distance: l1}}]"])


def test_weight_schedule():
    from mmtune.aux_losses import AuxContext, AuxTerm
    from mmtune.aux_losses.heatmap import HeatmapLoss

    t = AuxTerm(HeatmapLoss(AuxContext(None)), weight=0.4, start=10, warmup=4)
    assert [t.weight_at(s) for s in (0, 9, 10, 11, 13, 14, 100)] == pytest.approx([0, 0, 0.1, 0.2, 0.4, 0.4, 0.4])


def test_density_from_points_and_from_the_published_map():
    from mmtune.aux_losses.heatmap import _block_sums, density_of

    d = density_of({"points": [[1, 0], [3, 3], [3, 3]], "size": [4, 4]})
    assert d.shape == (4, 4) and d[0, 1] == 1 and d[3, 3] == 2 and d.sum() == 3
    assert _block_sums(d, 2, 2).tolist() == [[1, 0], [0, 2]]
    npy = sorted((FSC147 / "gt_density_map_adaptive_384_VarV2").glob("*.npy"))[0]
    assert np.allclose(density_of({"density": str(npy), "points": [[0, 0]]}), np.load(npy))
    assert density_of({}) is None


def test_record_inputs_target_cells_and_records_without_target(tmp_path):
    from mmtune.aux_losses import AuxContext
    from mmtune.aux_losses.heatmap import HeatmapLoss
    from mmtune.build import build_run

    run = build_run(_cfg(tmp_path), with_optimizer=False)
    rec = run.train_set.records[0]
    assert rec.targets.get("density") or rec.targets.get("points")
    loss = HeatmapLoss(AuxContext.of(run.unwrapped_model().config, run.processor), grid=4)
    enc = run.encoder.encode(rec)
    got = loss.record_inputs(rec, enc)
    n_img = int((enc["input_ids"] == loss.ctx.image_token_id).sum())
    assert int((got["aux_heatmap_cell"] > 0).sum()) == n_img > 0
    assert got["aux_heatmap_cell"].max() <= 16 and got["aux_heatmap_target"].shape == (1, 16)
    assert got["aux_heatmap_target"].sum().item() == pytest.approx(1.0) and got["aux_heatmap_has"].item() == 1
    rec.targets = {}
    none = loss.record_inputs(rec, enc)
    assert none["aux_heatmap_has"].item() == 0 and none["aux_heatmap_target"].sum() == 0


def _micro_batches(run, aux, k=2):
    from mmtune.train.feed import EncodedDataset

    ds = EncodedDataset(run.train_set.records, run.encoder, aux_losses=[t.loss for t in aux])
    n = run.cfg.train.micro_batch_size
    return [run.collator([ds[i] for i in range(j * n, (j + 1) * n)]) for j in range(k)]


class _ScalingAccelerator:
    """fp16 loss scaling as GradScaler does it: backward on loss * S, gradients divided by S before
    clipping and the update, with a fixed S so the gradients can be compared exactly (the real scaler on
    a real fp16 run: test_seed003_fp16_heatmap_and_a_stage_change below)."""

    device = torch.device("cpu")
    num_processes = 1
    S = 2.0 ** 16

    def __init__(self, params):
        self.params = params

    def no_sync(self, model):
        from contextlib import nullcontext
        return nullcontext()

    def autocast(self):
        from contextlib import nullcontext
        return nullcontext()

    def backward(self, loss):
        (loss * self.S).backward()

    def clip_grad_norm_(self, params, max_norm):
        for p in self.params:
            if p.grad is not None:
                p.grad /= self.S
        return torch.nn.utils.clip_grad_norm_(params, max_norm)


def test_step_adds_the_weighted_aux_mean_with_gradients_and_unscaled_logs(tmp_path):
    """Two micro-batches, loss scaling 2**16: the logged lm_loss / aux/heatmap are the step's means,
    `loss` = lm + w * aux, and the gradients equal those of that objective computed here directly."""
    from mmtune.build import build_run
    from mmtune.loss import loss_sum_and_output
    from mmtune.train.prepare import aux_terms
    from mmtune.train.step import optimizer_step

    run = build_run(_cfg(tmp_path), with_optimizer=False)
    model, params = run.unwrapped_model(), run.trainable_params
    aux = aux_terms(run)
    mbs = _micro_batches(run, aux)
    # Reference: the objective by hand, one backward.
    lm, tokens, heat, recs = 0.0, 0, 0.0, 0
    for mb in mbs:
        total, n, out = loss_sum_and_output(model, mb, output_hidden_states=True)
        lm, tokens = lm + total, tokens + int(n)
        heat, recs = heat + aux[0].loss(mb, out), recs + int(mb["aux_heatmap_has"].sum())
    heat_only = torch.autograd.grad(heat, params, allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in heat_only), "no gradient from the aux loss"
    lm, tokens, heat, recs = 0.0, 0, 0.0, 0
    for mb in mbs:
        total, n, out = loss_sum_and_output(model, mb, output_hidden_states=True)
        lm, tokens = lm + total, tokens + int(n)
        heat, recs = heat + aux[0].loss(mb, out), recs + int(mb["aux_heatmap_has"].sum())
    objective = lm / tokens + 0.5 * heat / recs
    ref = torch.autograd.grad(objective, params, allow_unused=True)

    opt = torch.optim.SGD(params, lr=0.0)
    seen = {}
    opt.register_step_pre_hook(lambda o, a, k: seen.update(grads=[p.grad.clone() if p.grad is not None else None
                                                                   for p in params]))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    res = optimizer_step(model, opt, sched, mbs, accelerator=_ScalingAccelerator(params), max_grad_norm=1e9,
                         trainable_params=params, aux=aux, step=0)
    assert res.parts["lm_loss"] == pytest.approx(float(lm / tokens), rel=1e-6)
    assert res.parts["aux/heatmap"] == pytest.approx(float(heat / recs), rel=1e-6)
    assert res.loss == pytest.approx(float(objective), rel=1e-6)
    assert res.parts["aux/heatmap"] > 0 and res.loss < 1e3  # neither zero nor scaled
    for g, r in zip(seen["grads"], ref):
        if r is None:
            assert g is None or g.abs().sum() == 0
        else:
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_run_logs_lm_aux_and_total(tmp_path, precision):
    from mmtune.build import build_run
    from mmtune.train.loop import train

    cfg = _cfg(tmp_path, f"train.precision={precision}")
    summary = train(build_run(cfg))
    rows = [json.loads(ln) for ln in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["kind"] == "train"]
    assert len(rows) == 2
    for r in rows:
        assert np.isfinite(r["aux/heatmap"]) and r["aux/heatmap"] > 0 and r["lm_loss"] > 0.1
        assert r["loss"] == pytest.approx(r["lm_loss"] + 0.5 * r["aux/heatmap"], rel=1e-6)
    assert set(summary["train_losses"]) >= {"loss", "lm_loss", "aux/heatmap"}


def test_plan_includes_the_aux_loss(tmp_path):
    """The planner runs the step with the heatmap loss on fake tensors (traceable), and holds more."""
    from mmtune.plan.batch import Declared
    from mmtune.plan.planner import predict

    base = ["model.name=tiny/qwen3-vl", "data.max_length=256", "train.precision=fp32"]
    without = predict(load_config(None, base), declared=Declared(images=[(224, 224)]))
    with_aux = predict(load_config(None, base + [AUX.replace("0.5", "0.1")]), declared=Declared(images=[(224, 224)]))
    assert with_aux.tensor_peak_bytes > without.tensor_peak_bytes


def test_aux_loss_with_a_stage_change_resumes_exactly(tmp_path):
    """The seed-003 combination in fp32 on the CPU (exact to 1e-6; fp16 is run below): the
    heatmap loss ramping in, the projector alone then decoder LoRA; killed after the stage boundary and
    resumed, every logged part equals the uninterrupted run's."""
    from mmtune.build import build_run
    from mmtune.train.loop import train

    over = ["train.max_steps=4", "train.save_every=2", "train.grad_accum=1", "train.scheduler=constant",
            "train.stages=[{until: 2, train: [projector]}, {train: [projector, decoder_lora], lr_multiplier: 0.5}]",
            "train.aux_losses=[{name: heatmap, weight: 0.5, warmup: 2, options: {grid: 4}}]"]
    logs = {}
    for name in ("straight", "broken"):
        cfg = _cfg(tmp_path, *over, f"output_dir={tmp_path / name}")
        if name == "broken":
            assert train(build_run(cfg), stop_after=3) is None
        train(build_run(cfg))
        rows = [json.loads(ln) for ln in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        logs[name] = [r for r in rows if r["kind"] == "train"]
    assert [r["stage"] for r in logs["broken"]] == [0, 0, 1, 1]
    for x, y in zip(logs["straight"], logs["broken"], strict=True):
        for key in ("loss", "lm_loss", "aux/heatmap"):
            assert abs(x[key] - y[key]) < 1e-6, (key, x, y)
        assert x["aux_weight/heatmap"] == y["aux_weight/heatmap"]


def test_seed003_fp16_heatmap_and_a_stage_change(tmp_path):
    """Seed 003's run as its T4 would do it, on the CPU: fp16 autocast with a real GradScaler (torch's CPU
    fp16 path), the heatmap loss, the projector alone then decoder LoRA; every loss finite, the arithmetic
    fp16's (close to, not equal to, fp32's), and summary.json holding mae, lm_loss and aux/heatmap."""
    from mmtune.build import build_run
    from mmtune.train.loop import train

    over = ["train.max_steps=4", "train.scheduler=constant", "train.save_every=2",
            "train.stages=[{until: 2, train: [projector]}, {train: [projector, decoder_lora], lr_multiplier: 0.5}]",
            "train.aux_losses=[{name: heatmap, weight: 0.5, warmup: 1, options: {grid: 4}}]",
            f"data.eval={FSC147}", "data.eval_max_samples=2", "eval.metrics=[mae]", "eval.best_metric=mae",
            "eval.max_new_tokens=4", "eval.batch_size=2"]
    logs, dtypes = {}, set()
    for precision in ("fp16", "fp32"):
        cfg = _cfg(tmp_path, *over, f"train.precision={precision}", f"output_dir={tmp_path / precision}")
        run = build_run(cfg)
        if precision == "fp16":
            assert run.resolved.loss_scaling and isinstance(run.accelerator.scaler, torch.amp.GradScaler)
            layer = run.unwrapped_model().base_model.model.model.language_model.layers[0].mlp.down_proj
            layer.register_forward_hook(lambda m, i, o: dtypes.add(o.dtype))
        summary = train(run)
        rows = [json.loads(ln) for ln in (tmp_path / precision / "metrics.jsonl").read_text().splitlines()]
        logs[precision] = [r for r in rows if r["kind"] == "train"]
        if precision == "fp16":
            assert dtypes == {torch.float16}  # autocast: the decoder computes in fp16
            assert run.accelerator.scaler.get_scale() > 1  # a live loss scale, not 1
            assert json.loads((tmp_path / "fp16" / "summary.json").read_text()) == json.loads(json.dumps(summary,
                                                                                                         default=str))
            assert {"mae", "unparsable", "eval_loss"} <= set(summary["eval"])
            assert {"loss", "lm_loss", "aux/heatmap"} <= set(summary["train_losses"])
            from mmtune.train.checkpoint import read_checkpoint_state

            state = read_checkpoint_state(tmp_path / "fp16" / "checkpoint-2")
            assert state["scaler"]["scale"] > 1  # the checkpoint carries the loss scale for an exact resume
    assert [r["stage"] for r in logs["fp16"]] == [0, 0, 1, 1]
    for a, b in zip(logs["fp16"], logs["fp32"], strict=True):
        for key in ("loss", "lm_loss", "aux/heatmap"):
            assert np.isfinite(a[key]) and a[key] > 0
            assert a[key] == pytest.approx(b[key], rel=5e-2)  # fp16 arithmetic: close to fp32's
        assert not a["skipped_update"]
    assert any(a["lm_loss"] != b["lm_loss"] for a, b in zip(logs["fp16"], logs["fp32"]))  # and not fp32 itself
