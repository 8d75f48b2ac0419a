"""`predict(cfg) -> PlanResult`: the peak memory and step time of the exact run, without a GPU.

1. build the run's model on meta through the training build pieces (plan/model.py), every weight a
   fake tensor (4-bit layers at packed storage);
2. take the batch of the dataset's worst-case record (or declared media) through the real Encoder;
3. run the loop's own `optimizer_step` twice on fake tensors, tracking every storage (plan/execute.py);
4. replay the allocation events through the CUDA caching allocator model (allocated/reserved), add
   the CUDA context, cuBLAS workspace and (distributed) NCCL buffers for the process total;
5. step time from the traced ops' FLOPs and bytes on the GPU's roofline.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from ..errors import ConfigError, MMTuneError


@dataclass
class PlanResult:
    model: str
    method: str
    gpu_id: str
    gpu_name: str
    gpus: int
    strategy: str
    precision: str
    peak_allocated_bytes: int  # torch.cuda.max_memory_allocated (per GPU)
    peak_reserved_bytes: int  # torch.cuda.max_memory_reserved (per GPU)
    process_total_bytes: int  # what nvidia-smi shows for the process (reserved + context + workspaces + NCCL)
    tensor_peak_bytes: int  # live tensor bytes at the peak, unrounded (the CPU figure)
    gpu_total_bytes: int
    fits: bool
    margin_bytes: int  # gpu total - process total: the free memory (negative: over the GPU's memory)
    margin_pct: float  # margin_bytes in % of the GPU's memory
    required_margin_pct: float  # the margin rule's percentage (of the planned process total; plan/margin.py)
    peak_phase: str
    breakdown: dict
    media_tokens: dict
    batch: dict
    step_time_s: float
    tokens_per_s: float
    flops_per_step: float
    trainable_params: int
    total_params: int
    decisions: list = field(default_factory=list)
    plan_seconds: float = 0.0
    required_margin_bytes: int = 0  # the headroom the margin rule asks of this plan (plan/margin.py)
    train_tensor_peak_bytes: int = 0  # the train steps' live tensor peak (the eval phase excluded)
    eval: dict = field(default_factory=dict)  # planned eval: batch_size, prompt_tokens, max_new_tokens,
    # kv_cache_bytes, tensor_peak_bytes (empty when the run does not evaluate)
    step_time_parts: dict = field(default_factory=dict)  # forward_backward_s_per_micro_batch, optimizer_s,
    # dequant_s (per step), comm_exposed_s, matmul_tflops and bandwidth_gbs used (timing.py)
    comm: dict = field(default_factory=dict)  # --gpus > 1: all_reduce/all_gather/reduce_scatter bytes per rank
    # per step, comm_time_s (the whole volume), exposed_s, link_gbs, interconnect (timing.py)
    generation: dict = field(default_factory=dict)  # grpo: the generation phase (plan/grpo.py); empty otherwise
    offload: dict = field(default_factory=dict)  # train.offload=optimizer: plan/offload.OffloadPlan (host memory,
    # PCIe bytes and time, CPU optimizer step); empty when nothing is offloaded

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _gathered_units(model, family, strategy: str, compute_elem: int | None):
    """What FSDP / ZeRO-3 gather: under fsdp the units mmtune's FSDP2 wraps (sharding.shard_units) and the
    root; under zero3 the largest child of any ModuleList (decoder layer / encoder block) as stored."""
    from torch import nn

    from .distributed import Units, fsdp_units

    if strategy == "fsdp":
        return fsdp_units(model, family, compute_elem)
    best = 0
    for m in model.modules():
        if isinstance(m, nn.ModuleList):
            for child in m:
                best = max(best, sum(p.numel() * p.element_size() for p in child.parameters()))
    return Units(largest=best)


def _eval_batch(resolved, declared):
    """`eval.batch_size` copies of the worst-case eval record (the train set's when there is no eval file)."""
    from pathlib import Path

    from .batch import worst_case_batch

    cfg = resolved.cfg
    spec = cfg.data.eval if cfg.data.eval and Path(str(cfg.data.eval).partition("::")[0]).expanduser().exists() \
        and not str(cfg.data.eval).startswith("synthetic:") else None
    return worst_case_batch(resolved, declared=declared, spec=spec if declared is None else None,
                            micro_batch_size=cfg.eval.batch_size)


def trace_config(resolved, *, declared=None, steps: int = 2, plan_eval: bool = False, fast: bool = True,
                 attention_kernels: tuple[str, ...] | None = None, dedup: bool = True, step_batches=None):
    """Build and run the plan's fake step; returns (planned model, batch, execution, compute dtype).

    `fast=False` turns off the dispatch shortcuts (fake.py's `ValueFakeMode(fast=)`) that give the
    same trace faster; `dedup=False` traces every layer instead of four per stack of identical layers
    (layer_dedup.py; it falls back to the full trace by itself when a layer does not repeat exactly);
    tests compare both. `attention_kernels` overrides the resolved run's `attention.kernels` (tests and
    benchmarks: e.g. ("math",) to compare with a real CPU step run under `sdpa_kernel(SDPBackend.MATH)`).
    `step_batches`: one micro-batch per step instead of the worst case every step (a run of varying
    lengths through the allocator models: benchmarks/allocator_varying_lengths.py)."""
    from .layer_dedup import DedupMismatch

    if dedup and resolved.cfg.train.objective in ("dpo", "grpo"):
        # The reference forward (grpo: also the generation's prompt forward and G training forwards) runs the
        # stack again in each micro-batch: the four-layer trace assumes one pass per layer, so the whole stack is
        # traced (slower to plan, the same answer).
        out = _trace(resolved, declared, steps, plan_eval, fast, False, attention_kernels, step_batches)
        why = "the reference forward runs each layer a second time" if resolved.cfg.train.objective == "dpo" else \
            "the generation's prompt forward and G training forwards run each layer again"
        out[0].decisions.append(f"plan: every layer traced ({resolved.cfg.train.objective}: {why} per micro-batch)")
        return out
    if dedup:
        try:
            return _trace(resolved, declared, steps, plan_eval, fast, True, attention_kernels, step_batches)
        except (DedupMismatch, MMTuneError) as e:
            # A layer did not repeat exactly, or the model needs its whole stack (e.g. it captures every
            # layer's hidden state by hooks): the full trace answers, or raises its own error.
            out = _trace(resolved, declared, steps, plan_eval, fast, False, attention_kernels, step_batches)
            why = str(e).splitlines()[0][:160]
            out[0].decisions.append(f"plan: every layer traced (the four-layer trace did not apply: {why})")
            return out
    return _trace(resolved, declared, steps, plan_eval, fast, False, attention_kernels, step_batches)


def _trace(resolved, declared, steps, plan_eval, fast, dedup, attention_kernels=None, step_batches=None):
    from ..train.schedule import make_scheduler
    from .attention import TargetAttentionMode, kernels_of
    from .batch import worst_case_batch
    from .execute import run_steps
    from .fake import NoValueError, ValueFakeMode
    from .layer_dedup import DedupMismatch, find_groups
    from .model import build_planned_model, materialize_fake

    cfg = resolved.cfg
    target_cuda = resolved.target.gpu is not None
    dtype = resolved.compute_dtype
    pm = build_planned_model(resolved)
    pb = worst_case_batch(resolved, declared=declared)
    mode = ValueFakeMode(fast=fast)
    reference = _planned_reference(pm, resolved)  # dpo under full fine-tuning: its frozen copy (meta, then fake)
    groups = materialize_fake(pm.model, mode, pm.param_groups)
    if reference is not None:
        materialize_fake(reference, mode, [])
    from ..objectives import make_objective

    if cfg.train.objective == "grpo":  # the run's step with a traced generation phase (plan/grpo.py)
        from .grpo import planned_objective

        objective = planned_objective(resolved, pm, mode, reference)
    else:
        objective = make_objective(cfg, pm.model, reference_model=reference)
    pm.objective = objective
    optimizer = _plan_optimizer(groups, cfg, target_cuda, pm)
    scheduler = make_scheduler(optimizer, warmup=cfg.train.warmup_steps, total=cfg.train.max_steps,
                               kind=cfg.train.scheduler)
    trainable = [p for g in groups for p in g["params"] if p.requires_grad]
    aux, batch = with_aux(cfg, pm.model, pm.processor, pb.micro_batch)
    loss_impl = cfg.train.loss_impl  # decided in the resolved run
    if loss_impl == "liger":  # a Triton kernel cannot run on fake tensors: its chunked torch twin is traced
        loss_impl = "chunked"
        pm.decisions.append("loss: Liger's fused linear cross entropy planned as mmtune's chunked loss (same chunks)")
    kernels = attention_kernels or kernels_of(resolved)
    attention = TargetAttentionMode(kernels) if kernels else None
    if attention is not None and cfg.model.gradient_checkpointing:
        import contextlib

        from ..models.checkpointing import apply_checkpointing

        # The recomputation in backward routes each SDPA call as its forward did: torch keeps no function
        # mode there (2.13 re-entered only the forward's DeviceContext, 2.14.1 a fresh one), so the routing
        # mode is checkpointing's recomputation context (its public context_fn), set as the build set it.
        base = pm.model.get_base_model() if hasattr(pm.model, "get_base_model") else pm.model
        apply_checkpointing(base, pm.family, context_fn=lambda: (contextlib.nullcontext(), attention))
    try:
        ex = run_steps(pm.model, optimizer, scheduler, batch, mode=mode, grad_accum=cfg.train.grad_accum,
                       compute_dtype=dtype, max_grad_norm=cfg.train.max_grad_norm, trainable_params=trainable,
                       steps=steps, cpu_kernels=not target_cuda, aux=aux,
                       loss_impl=loss_impl, attention=attention, step_batches=step_batches, objective=objective,
                       dedup_groups=find_groups(pm.model, pm.hf_config) if dedup else None)
        ex.train_peak_bytes = ex.tracker.trace.peak_bytes
        ex.paged_bytes = int(getattr(optimizer, "paged_bytes", 0))
        if plan_eval:
            from .execute import run_eval

            eb = _eval_batch(resolved, declared)
            if eb.generation is not None:  # eval.max_new_tokens unset: what training will decide from these answers
                pm.decisions.append(eb.generation.line())
            ex.eval_info = run_eval(ex, pm.model, eb.micro_batch, mode=mode, compute_dtype=dtype,
                                    max_new_tokens=int(eb.generation.value) if eb.generation is not None
                                    else cfg.eval.max_new_tokens, generate=cfg.eval.generate,
                                    attention=attention, loss_impl=loss_impl)
        if attention is not None and attention.calls:
            pm.decisions.append("attention: SDPA calls traced per target kernel: " + ", ".join(
                f"{n} x {k}" for k, n in sorted(attention.calls.items())) + " (plan/attention.py)")
    except NoValueError as e:
        raise _untraceable(e, cfg) from None
    except DedupMismatch:
        raise
    except (RuntimeError, NotImplementedError, TypeError, AttributeError) as e:
        # TypeError / AttributeError: also a vision tower's hidden state selected by layer index (LLaVA's
        # vision_feature_layer=-2, Mistral 3's -1) that the four-layer trace never reaches comes back None
        raise _untraceable(e, cfg) from None
    if ex.copied_layers:
        pm.decisions.append("plan: four layers of each stack of identical layers traced, the others' allocations "
                            "copied from the interior one (" + ", ".join(f"{n}: {c} copied" for n, c in
                                                                         ex.copied_layers.items()) + ")")
    return pm, pb, ex, dtype


def _planned_reference(pm, resolved):
    """DPO's frozen reference copy of a full fine-tune, as build makes it (the starting weights, frozen, in the
    compute dtype), copied from the meta model before it turns fake; None where the run has none."""
    from ..objectives import needs_frozen_copy

    if not needs_frozen_copy(resolved.cfg):
        return None
    import copy

    ref = copy.deepcopy(pm.model)
    ref.requires_grad_(False)
    ref.to(resolved.compute_dtype)
    pm.decisions.append("dpo: the frozen reference copy planned as weights held beside the model, its forward "
                        "under no_grad")
    return ref


def with_aux(cfg, model, processor, batch: dict):
    """train.aux_losses and the worst-case batch with their inputs (every record with a target); shared by the
    plan and `plan --verify`, so both run the same step. `model.config` is read only when there are terms (a
    brought model may have none)."""
    if not cfg.train.aux_losses:
        return [], batch
    from ..aux_losses import AuxContext, build_terms

    aux = build_terms(cfg.train.aux_losses, AuxContext.of(model.config, processor))
    for t in aux:
        batch = {**batch, **t.loss.placeholder_inputs(batch)}
    return aux, batch


def _run_growth(resolved, pb, declared, decisions: list, skip: bool = False):
    """The fixed-segment allocator over the run's varying lengths (plan/run_growth.py), where it applies: the
    records' lengths vary and, for a model with media, the media are declared (a text-only stand-in of a record
    would skip its encoder). `skip`: applies, but one step already fills the GPU (said in the decisions)."""
    from .run_growth import replay_run, varies

    media = any(m != "text" for m in resolved.family.modalities)
    if not varies(resolved, pb.lengths) or (media and (declared is None or declared.describe() == "text only")):
        return None
    if skip:
        decisions.append("allocator: fixed segments over varying lengths not replayed (plan/run_growth.py): one step "
                         "already fills the GPU, and the run can only reserve more")
        return None
    return replay_run(resolved, pb.lengths, declared)


def _plan_optimizer(groups, cfg, target_cuda: bool, pm):
    from ..optim import make_optimizer

    if cfg.train.optimizer in ("adamw_8bit", "paged_adamw_8bit", "paged_adamw"):
        from .optim8bit import PlannedAdamW8bit

        bits = 32 if cfg.train.optimizer == "paged_adamw" else 8
        paged = cfg.train.optimizer.startswith("paged_")
        pm.decisions.append(f"optimizer: {cfg.train.optimizer} planned with bitsandbytes' state layout" + (
            " (uint8 moments + per-256 fp32 absmax; tensors under 4096 elements keep fp32 state)" if bits == 8
            else " (two fp32 moments)") + ("; paged: state in CUDA unified memory, outside PyTorch's allocator (not "
                                           "in peak allocated/reserved), counted in the process total" if paged else ""))
        return PlannedAdamW8bit(groups, lr=cfg.train.lr, bits=bits, paged=paged)
    opt = make_optimizer(groups, cfg.train)
    if target_cuda and cfg.train.optimizer == "adamw":
        # On CUDA torch's AdamW runs its multi-tensor (foreach) implementation by default, whose
        # temporaries span all parameters at once; the plan runs the same implementation.
        for g in opt.param_groups:
            g["foreach"] = True
    return opt


def _phase_peaks(tr, phases) -> list[int]:
    """Live tensor bytes at each allocation made in one of `phases`."""
    live, out = 0, []
    for ev in tr.events:
        live += ev.nbytes
        if ev.nbytes > 0 and ev.phase in phases:
            out.append(live)
    return out


def _untraceable(e: Exception, cfg) -> MMTuneError:
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/torch/" not in f.filename
              and "/mmtune/plan/" not in f.filename]
    where = f"{frames[-1].filename}:{frames[-1].lineno} ({frames[-1].name})" if frames else "model code"
    op = getattr(e, "op", "") or str(e).splitlines()[0][:200]
    return MMTuneError(f"the step of {cfg.model.name} cannot be traced on fake tensors: {op}", where=where,
                       fix="this module reads a value computed from weights or activations; plan with "
                           "model.attn_implementation=sdpa, or plan a tiny twin (model.name=tiny/...) with the same "
                           "settings and report the module to mmtune")


def resolve_for_plan(cfg, gpu=None, assume_installed: str = "gpu-extra", gpus: int | None = None):
    """The resolved run a plan is made for: the named GPU (or train.gpu), else this machine; a named GPU's
    packages as `assume_installed` says (resolve/target.py); `gpus` > 1: that many processes (else as launched)."""
    from ..resolve import ResolvedRun, resolve_run, target_for

    if isinstance(cfg, ResolvedRun):
        return cfg
    return resolve_run(cfg, target_for(cfg, gpu, local=False, assume_installed=assume_installed,
                                       gpus=gpus if gpus and gpus > 1 else None), require_processor=True)


def predict(cfg, *, gpu=None, gpus: int = 1, strategy: str | None = None, declared=None,
            margin_pct: float | None = None, plan_eval: bool | None = None, dedup: bool = True, nodes: int | None = None,
            node_link_gbs: float | None = None, assume_installed: str = "gpu-extra") -> PlanResult:
    """Plan the run. `cfg` is a ResolvedRun, or a RunConfig resolved here for `gpu` (else train.gpu,
    else this machine). `plan_eval` (default: when the run evaluates, i.e. data.eval is set) adds the
    eval phases (eval loss, generation) after the train steps; they count in the peak and in `fits`.
    `dedup=False` traces every layer (the same result, slower; layer_dedup.py). `gpus` counts all GPUs;
    `nodes` (default: the resolved target's, when `gpus` is its process count) splits them into nodes
    joined by `node_link_gbs` GB/s per node (default gpus.NODE_LINK_GBS): step time only, per-GPU memory
    does not depend on it (timing.py). `margin_pct`: the margin rule's percentage (plan/margin.py; default
    MARGIN_PCT)."""
    from . import margin as margin_rule
    from .allocator import replay
    from .distributed import shard
    from .execute import breakdown_at_peak
    from .timing import comm_volumes, step_time

    t0 = time.perf_counter()
    resolved = resolve_for_plan(cfg, gpu, assume_installed, gpus=gpus)
    resolved.need_processor()  # the plan encodes the worst-case record: the processor's absence is the error
    cfg = resolved.cfg
    strategy = strategy or resolved.strategy  # the run's own decision (train.strategy) unless asked otherwise
    spec = resolved.target.gpu
    decisions: list[str] = resolved.summary_lines()
    prec = resolved.precision
    if gpus < 1:
        raise ConfigError(f"--gpus must be >= 1 (got {gpus})", where="--gpus")
    if nodes is None:  # the resolved target's nodes when planning its GPUs (a launch's WORLD_SIZE), else one node
        nodes = resolved.target.nodes if gpus == resolved.target.processes else 1
    nodes = max(1, nodes)
    if gpus % nodes:
        raise ConfigError(f"{gpus} GPUs do not split evenly over {nodes} nodes", where="--nodes",
                          fix="--gpus counts GPUs per node: total = --gpus x --nodes")
    from ..gpus import NODE_LINK_GBS, NODE_LINK_NAME

    if node_link_gbs is not None and node_link_gbs <= 0:
        raise ConfigError(f"--node-link must be a positive GB/s figure (got {node_link_gbs})", where="--node-link")
    node_link, node_link_name = (NODE_LINK_GBS, NODE_LINK_NAME) if node_link_gbs is None else \
        (float(node_link_gbs), f"{node_link_gbs:g} GB/s per node (--node-link)")
    if plan_eval is None:
        plan_eval = bool(cfg.data.eval)
    pm, pb, ex, _ = trace_config(resolved, declared=declared, plan_eval=plan_eval, dedup=dedup)
    full_ex = ex
    if resolved.offload != "none":  # the optimizer steps on the CPU: the GPU's trace without it (plan/offload.py)
        from .offload import gpu_side

        ex = gpu_side(ex)
    tr = ex.tracker.trace
    breakdown = breakdown_at_peak(ex)
    trainable_numel = sum(p.numel() for p in pm.model.parameters() if p.requires_grad)
    total_numel = sum(p.numel() for p in pm.model.parameters())
    if spec is not None:
        # the allocator the run will use (PYTORCH_CUDA_ALLOC_CONF, decided in the resolved run)
        alloc = replay(tr.events, capacity=spec.total_bytes, expandable=resolved.expandable_segments)
        peak_alloc, peak_res = alloc.peak_allocated, alloc.peak_reserved
    else:
        peak_alloc = peak_res = tr.peak_bytes
    # one step that already fills the GPU is not replayed: the run can only need more (a replay costs a step per batch)
    full = spec is not None and peak_res + spec.context_bytes >= spec.total_bytes
    step_res, growth = peak_res, _run_growth(resolved, pb, declared, decisions, skip=full)
    if growth is not None:  # fixed segments over varying lengths: the run's reserved climbs past one step
        peak_res = max(peak_res, growth.peak_reserved)
        decisions.append(growth.describe(step_res))
    # FSDP / ZeRO-3 gather parameters in the compute dtype (mixed precision's param_dtype): fp32 trainable
    # weights travel as 16-bit in fp16 / bf16 runs; 4-bit packed weights as stored.
    gather_elem = {"fp16": 2, "bf16": 2}.get(prec)
    sh = shard(breakdown, peak_alloc, strategy=strategy, n=gpus, trainable_numel=trainable_numel,
               units=_gathered_units(pm.model, pm.family, strategy, gather_elem), grad_accum=cfg.train.grad_accum)
    rounding = max(0, peak_alloc - tr.peak_bytes)  # the allocator's rounding of the traced (single-GPU) peak
    if gpus > 1:
        ratio, step_ratio = peak_res / max(1, peak_alloc), step_res / max(1, peak_alloc)
        peak_alloc = sh.peak_allocated
        peak_res, step_res = int(peak_alloc * ratio), int(peak_alloc * step_ratio)  # the step's too: growth stays growth
        breakdown = sh.breakdown  # per GPU: sharded classes at 1/N, the strategy's buffers added
        decisions.append(f"distributed: {strategy} on {gpus} GPUs; sharded classes scaled 1/{gpus} from the "
                         "single-GPU trace (plan/distributed.py); the breakdown is per GPU")
    offload = None
    if resolved.offload != "none":
        from ..gpus import host_link_gbs
        from .offload import describe, plan_offload, state_bytes

        ratio, step_ratio = peak_res / max(1, peak_alloc), step_res / max(1, peak_alloc)
        breakdown, offload = plan_offload(
            resolved.offload, breakdown, strategy=strategy, n=gpus, gpus_per_node=gpus // nodes, trainable_numel=trainable_numel,
            param_bytes=sum(p.numel() * p.element_size() for p in pm.model.parameters()),
            state_bytes=state_bytes(full_ex), grad_accum=cfg.train.grad_accum, precision=prec,
            host_link_gbs=host_link_gbs(spec) if spec is not None else 0.0)  # a CPU run: nothing crosses PCIe
        peak_alloc = max(0, peak_alloc - offload.gpu_saved_bytes)
        peak_res, step_res = int(peak_alloc * ratio), int(peak_alloc * step_ratio)
        decisions.append(describe(offload))
    overhead = (spec.context_bytes + spec.workspace_bytes + sh.nccl_bytes) if spec is not None else 0
    paged = ex.paged_bytes
    if paged:  # paged optimizer state: unified memory outside the caching allocator (plan/optim8bit.py)
        breakdown["optimizer_state_paged"] = paged
        overhead += paged
    breakdown["allocator_rounding"] = rounding
    breakdown["reserved_unused"] = min(step_res, peak_res) - peak_alloc
    breakdown["reserved_run_growth"] = peak_res - min(step_res, peak_res)
    breakdown["overhead"] = overhead
    process_total = peak_res + overhead
    if spec is not None:
        total_mem = spec.total_bytes
        tflops, bw, gid, gname = spec.matmul_tflops(prec), spec.bandwidth_gbs, spec.id, spec.name
        link = spec.link_gbs
    else:
        import os

        total_mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        tflops, bw, gid, gname, link = 1.0, 20.0, "cpu", "CPU (this machine)", 0.0
    margin_pct = margin_rule.MARGIN_PCT if margin_pct is None else float(margin_pct)
    if not 0 <= margin_pct < float("inf"):  # a NaN fails both comparisons
        raise ConfigError(f"--margin must be a number >= 0 (got {margin_pct:g})", where="--margin")
    margin_bytes = total_mem - process_total
    fits = margin_rule.fits(process_total, total_mem, margin_pct)
    eval_info = dict(ex.eval_info)
    if eval_info:
        eval_info["loss_peak_bytes"] = max([0] + _phase_peaks(tr, ("eval_loss",)))
        eval_info["generation_peak_bytes"] = max([0] + _phase_peaks(tr, ("eval_generation",)))
        eval_info["tensor_peak_bytes"] = max(eval_info["loss_peak_bytes"], eval_info["generation_peak_bytes"])
        decisions.append(f"eval: {eval_info['batch_size']} x {eval_info['prompt_tokens']}-token prompts (whole worst-case "
                         f"record, an upper bound), eval loss then greedy generation of {eval_info['max_new_tokens']} "
                         "tokens (prompt forward + one decode step traced, KV cache growth added analytically)")
    tokens_step = pb.tokens * cfg.train.micro_batch_size * cfg.train.grad_accum
    volumes = comm_volumes(strategy, gpus, grad_accum=cfg.train.grad_accum,
                           trainable_bytes=trainable_numel * 4,  # fp32 gradients
                           param_bytes=sum(p.numel() * (gather_elem if gather_elem and p.is_floating_point()
                                                        else p.element_size()) for p in pm.model.parameters()))
    st = step_time(tr.costs, steps=1, traced_micro_batches=min(cfg.train.grad_accum, 2),
                   grad_accum=cfg.train.grad_accum, tokens_per_step=tokens_step, tflops=tflops,
                   bandwidth_gbs=bw, world=gpus, comm=volumes if gpus > 1 else None, link_gbs=link,
                   gathers_params=strategy in ("fsdp", "zero3"), nodes=nodes, node_link_gbs=node_link)
    if offload is not None:  # the GPU's optimizer step replaced by the CPU's, plus the copies over PCIe
        from dataclasses import replace as _replace

        t = st.step_time_s - st.optimizer_s + offload.cpu_optimizer_s + offload.pcie_s
        st = _replace(st, step_time_s=t, tokens_per_s=st.tokens_per_s * st.step_time_s / t if t else 0.0,
                      optimizer_s=offload.cpu_optimizer_s)
    parts = {"forward_backward_s_per_micro_batch": st.forward_backward_s, "optimizer_s": st.optimizer_s,
             "dequant_s": st.dequant_s, "comm_exposed_s": st.comm_s, "matmul_tflops": tflops,
             "bandwidth_gbs": bw}
    peak_phase, step_s, tokens_s, generation = tr.peak_phase, st.step_time_s, st.tokens_per_s, {}
    if cfg.train.objective == "grpo":  # the generation phase: its time added, the peak's phase named
        from .grpo import grpo_plan_parts

        generation, step_s, peak_phase, lines = grpo_plan_parts(pm.objective, tr, pm, cfg, tflops=tflops,
                                                                bandwidth_gbs=bw, step_time_s=st.step_time_s)
        tokens_s = tokens_step * gpus / step_s if step_s else 0.0
        parts["generation_s"] = generation["generation_s_per_step"]
        decisions += lines
    comm = dict(st.comm, strategy=strategy, gpus=gpus, interconnect=spec.interconnect) if st.comm and spec else {}
    if comm and nodes > 1:
        comm["node_link"] = node_link_name
        decisions.append(f"distributed: {nodes} nodes x {gpus // nodes} GPUs; collectives hierarchical (within the "
                         f"node over {spec.interconnect}, between nodes over {node_link_name}, {node_link:g} GB/s "
                         "per node; plan/timing.py)")
    return PlanResult(
        model=cfg.model.name, method=cfg.adapter.method, gpu_id=gid, gpu_name=gname, gpus=gpus,
        strategy=strategy if gpus > 1 else "single", precision=prec,
        peak_allocated_bytes=int(peak_alloc), peak_reserved_bytes=int(peak_res),
        process_total_bytes=int(process_total), tensor_peak_bytes=int(tr.peak_bytes), gpu_total_bytes=int(total_mem),
        fits=bool(fits), margin_bytes=int(margin_bytes), margin_pct=100.0 * margin_bytes / total_mem,
        required_margin_pct=margin_pct, peak_phase=peak_phase, breakdown=breakdown,
        media_tokens=pb.media_tokens,
        batch={"source": pb.source, "tokens_per_record": pb.tokens, "micro_batch_size": cfg.train.micro_batch_size,
               "grad_accum": cfg.train.grad_accum, "records_scanned": pb.records_seen, "skipped": pb.skipped},
        step_time_s=step_s, tokens_per_s=tokens_s, flops_per_step=st.flops_per_step,
        trainable_params=int(trainable_numel), total_params=int(total_numel),
        decisions=decisions + pm.decisions, plan_seconds=time.perf_counter() - t0,
        required_margin_bytes=margin_rule.required_headroom(process_total, margin_pct),
        train_tensor_peak_bytes=int(ex.train_peak_bytes), eval=eval_info, step_time_parts=parts, comm=comm,
        generation=generation, offload=offload.to_dict() if offload is not None else {})
