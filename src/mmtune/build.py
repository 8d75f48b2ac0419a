"""`build_run(resolved)`: the one code path that turns a resolved run into a runnable training run.

`train` executes it, `plan` executes the same step on fake tensors, `doctor` inspects the same
objects. Every automatic decision was made by `mmtune.resolve.resolve_run`; this module only builds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .config.schema import RunConfig
from .resolve import ResolvedRun


@dataclass
class Run:
    cfg: RunConfig
    resolved: ResolvedRun
    accelerator: Any
    model: Any  # prepared (possibly DDP-wrapped) model
    processor: Any
    family: Any
    adapter_table: Any
    param_groups: list
    trainable_params: list
    optimizer: Any = None
    scheduler: Any = None
    encoder: Any = None
    train_set: Any = None  # RecordSet
    eval_set: Any = None  # RecordSet or None
    collator: Any = None
    train_lengths: list = field(default_factory=list)  # per-record token counts by modality
    encode_cache: Any = None  # encodings the loop keeps as it draws records (data/encode_cache.py)
    startup: dict = field(default_factory=dict)  # seconds of the start-up phases (summary.json `startup`)
    # data.startup_scan=background: the check of the training records running beside the loop
    # (data/startup_scan.py); train_set then holds every record loaded and train_lengths fills in when it is done.
    startup_check: Any = None
    train_ok: list | None = None  # the records the check found good (set when it finishes beside training)
    decisions: list[str] = field(default_factory=list)
    base_weights: dict | None = None  # models/base_fingerprint.py: what the base's weight files held at start
    # What the step minimises (mmtune.objectives) and what its training micro-batches hold: the run's encoder
    # and collator for sft, both sides of a pair for dpo (data/preference.py).
    objective: Any = None
    train_encoder: Any = None
    train_collator: Any = None
    # The modalities the loss is split by (data/modality.py), () when the set has one or the split is off.
    loss_groups: tuple = ()
    eval_loss_groups: tuple = ()

    def unwrapped_model(self):
        from .compat.accelerate_state import unwrapped

        return unwrapped(self.accelerator, self.model)

    def scaler_state(self):
        scaler = getattr(self.accelerator, "scaler", None)
        return scaler.state_dict() if scaler is not None else None

    def load_scaler_state(self, state) -> None:
        scaler = getattr(self.accelerator, "scaler", None)
        if scaler is not None and state is not None:
            scaler.load_state_dict(state)


def make_accelerator(resolved: ResolvedRun):
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    from .compat.accelerate_state import reset_accelerate_state

    # accelerate keeps process-wide singletons; a second run in the same process (tests, eval after
    # train) must start from a clean state or it inherits the first run's mixed precision.
    reset_accelerate_state()
    from .sharding import start_offload_process_group

    timeout = _group_timeout(resolved)  # train.dist_timeout_minutes (resolve/dist_timeout.py); None: one process
    start_offload_process_group(resolved, timeout)  # FSDP2 CPU offload on GPUs: gloo beside NCCL for the CPU shards
    cpu = resolved.device == "cpu"
    # accelerate passes it to init_process_group, or to deepspeed.init_distributed under ZeRO
    handlers = [InitProcessGroupKwargs(timeout=timeout)] if timeout is not None else None
    if resolved.strategy in ("zero2", "zero3") and resolved.target.processes > 1:
        from .compat.accelerate_state import deepspeed_accelerator

        # Not Accelerator(cpu=True, ...): accelerate would drop DeepSpeed there and run DDP (compat docstring).
        accelerator = deepspeed_accelerator(cpu, timeout=timeout, kwargs_handlers=handlers,
                                            mixed_precision=resolved.accelerate_mixed_precision,
                                            **_deepspeed_kwargs(resolved))
    else:
        accelerator = Accelerator(mixed_precision=resolved.accelerate_mixed_precision, cpu=cpu, kwargs_handlers=handlers)
    if resolved.loss_scaling:  # fp16 on the CPU: accelerate's fp16 path, which it only enables on GPUs
        from .compat.accelerate_state import enable_cpu_fp16

        enable_cpu_fp16(accelerator)
    return accelerator


def _user_deepspeed_autos(accelerator, resolved: ResolvedRun) -> str | None:
    """A user's own DeepSpeed config (accelerate launch): its "auto" keys get the run's values before prepare
    (launch_config.fill_user_autos says why accelerate alone stops on them). mmtune's generated config has none."""
    from .launch_config import fill_user_autos, user_deepspeed_launch

    plugin = getattr(getattr(accelerator, "state", None), "deepspeed_plugin", None)
    return fill_user_autos(plugin, resolved) if plugin is not None and user_deepspeed_launch() else None


def _group_timeout(resolved: ResolvedRun):
    from datetime import timedelta

    minutes = resolved.dist_timeout_minutes
    return timedelta(minutes=minutes) if minutes is not None else None


def _deepspeed_kwargs(resolved: ResolvedRun) -> dict:
    """ZeRO through accelerate: the DeepSpeed config generated from the run (launch_config.py), unless the
    user launched with their own (`accelerate launch --config_file`). DeepSpeed missing: a clear refusal
    before anything is built. Accumulation is DeepSpeed's (its engine steps on the last micro-batch)."""
    import importlib.util

    from .errors import ConfigError
    from .launch_config import deepspeed_config, user_deepspeed_launch

    if importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(f"train.strategy={resolved.strategy} needs DeepSpeed, which is not installed here",
                          where="train.strategy", fix="pip install 'mmtune[deepspeed]' after torch (docs/distributed.md), or "
                          "train.strategy=fsdp: PyTorch's own sharding, nothing to install")
    from deepspeed.accelerator import get_accelerator

    picked = get_accelerator().device_name()  # DeepSpeed picks its device itself (DS_ACCELERATOR, else detected)
    if picked != resolved.device:
        raise ConfigError(f"train.strategy={resolved.strategy}: the run trains on {resolved.device} but DeepSpeed "
                          f"picked its {picked!r} accelerator", where="train.device",
                          fix=f"DS_ACCELERATOR={resolved.device} in the launch environment, or "
                              f"train.device={picked}")
    kwargs = {"gradient_accumulation_steps": resolved.cfg.train.grad_accum}
    if not user_deepspeed_launch():
        from accelerate.utils import DeepSpeedPlugin

        # zero3_init_flag off, as in the generated accelerate_config.yaml: the model is built whole (the tiny
        # twins from the seed, the same weights as under ddp; load_model's dtype casts need whole tensors)
        # and partitioned at prepare. accelerate's default for stage 3 (on) would build it under
        # deepspeed.zero.Init, with other random weights and partitioned tensors from the start.
        kwargs["deepspeed_plugin"] = DeepSpeedPlugin(hf_ds_config=deepspeed_config(resolved), zero3_init_flag=False)
    return kwargs


class _built_whole:
    """The model built whole on every rank, also under DeepSpeed ZeRO-3 (partitioned later, at prepare).

    accelerate's ZeRO-3 plugin registers its config with transformers, which then builds every model
    under `deepspeed.zero.Init`, whatever zero3_init_flag says: a tiny twin would get other random weights
    than under ddp, and load_model's dtype casts would meet partitioned tensors. The registration is lifted
    for the build and put back after it (`generate` reads it to run in step on every rank)."""

    def __init__(self, accelerator):
        state = getattr(accelerator, "state", None)
        self.plugin = getattr(state, "deepspeed_plugin", None) if state is not None else None

    def __enter__(self):
        if self.plugin is not None:
            from transformers.integrations import unset_hf_deepspeed_config

            unset_hf_deepspeed_config()

    def __exit__(self, *exc):
        if self.plugin is not None:
            self.plugin.set_deepspeed_weakref()


def load_model(run, *, device="cpu", dtype=None, meta: bool = False, random_weights: bool = False):
    """The model a run names, ready for adapters (`mmtune.models.load.load_model`, the one builder): a bare
    RunConfig (tests, export, compose) is resolved for this machine first; structure only (`meta`) needs no
    real processor."""
    from .models.load import load_model as build_model
    from .resolve import local_target, resolve_here, resolve_run

    if meta and not isinstance(run, ResolvedRun):  # structure only: no real processor needed
        run = resolve_run(run, local_target(run.train.device))
    run = resolve_here(run)
    return build_model(run, device=device, dtype=dtype, meta=meta, random_weights=random_weights)


def build_model_and_adapters(resolved: ResolvedRun, *, device="cpu", dtype=None, meta: bool = False,
                             random_weights: bool = False):
    """Model + processor + family with adapters applied and trainable weights in fp32 (every command's
    model: train real, doctor real or meta, plan meta then fake)."""
    import torch

    from .adapters import apply_adapters
    if not meta and torch.device(device).type == "cuda":
        from .compat.cuda_allocator import apply_cuda_allocator

        # before the weights land on the GPU: the allocator the plan modelled (resolved.cuda_alloc_conf)
        apply_cuda_allocator(resolved.cuda_alloc_conf)
    loaded = load_model(resolved, device=device, dtype=dtype, meta=meta, random_weights=random_weights)
    cfg = resolved.cfg
    if meta:  # new LoRA weights on meta too: nothing allocated, no init computed
        with torch.device("meta"):
            result = apply_adapters(loaded.model, loaded.family, cfg.adapter, cfg.train)
    else:
        result = apply_adapters(loaded.model, loaded.family, cfg.adapter, cfg.train)
    model = result.model
    if cfg.train.stages:  # staged unfreezing: every stage's parameters trainable (and fp32) from the start
        from .stages import make_trainable

        result.param_groups = make_trainable(model, loaded.family, cfg.train.stages, result.param_groups,
                                             cfg.train, cfg.adapter.lr_multipliers)
    from .frozen_eval import keep_frozen_in_eval

    # after stages: a component a later stage trains is not frozen; the lines only where train mode changed something
    loaded.decisions.extend(keep_frozen_in_eval(model, loaded.family))
    # Trainable weights in fp32: AdamW on 16-bit weights loses small updates, and fp16's GradScaler
    # refuses to unscale fp16 gradients. Frozen weights stay in the compute dtype. train.fp32_trainable
    # = false (bf16 only, checked in resolve) keeps them in bf16: pure-bf16 training.
    if cfg.train.fp32_trainable:
        for p in model.parameters():
            if p.requires_grad and p.dtype != torch.float32 and p.is_floating_point():
                p.data = p.data.float()
    elif cfg.train.precision == "bf16":
        # Pure bf16 also for new adapters: peft >= 0.12 creates LoRA weights in fp32 over a 16-bit base
        # (autocast_adapter_dtype), and on `meta` it casts nothing at all (tuners_utils
        # _move_adapter_to_device_of_base_layer skips meta adapters), so without this the trained run and
        # its plan would both hold fp32 adapters, gradients and AdamW state against the decision.
        for p in model.parameters():
            if p.requires_grad and p.dtype != torch.bfloat16 and p.is_floating_point():
                p.data = p.data.to(torch.bfloat16)
    if cfg.train.fused_kernels == "liger":  # decided in the resolved run (CUDA, liger-kernel able to patch)
        if not meta and torch.device(device).type == "cuda":
            # After adapters and quantization, on peft's base model (models/fused_kernels.py); the planner
            # patches its meta model with torch twins of the same kernels (plan/fused_kernels.py).
            from .models.fused_kernels import apply_liger

            loaded.decisions.extend(apply_liger(model, loaded.family))
        elif not meta:  # the doctor's tiny CPU run of a GPU plan: Triton kernels cannot run here
            loaded.decisions.append(f"fused kernels: Liger not applied on {torch.device(device).type} "
                                    "(planned for the CUDA target)")
    return loaded, result


def build_run(resolved: ResolvedRun | RunConfig, *, with_data: bool = True, with_optimizer: bool = True) -> Run:
    """A RunConfig is resolved for this machine first (tests, benchmarks); commands pass a ResolvedRun."""
    import torch

    from .data.audio_in_video import check_records
    from .data.collate import Collator
    from .data.encode import Encoder
    from .data.inspect import scan_records
    from .data.sources import load_records
    from .optim import make_optimizer
    from .resolve import resolve_here
    from .train.schedule import make_scheduler

    resolved = resolve_here(resolved)
    cfg = resolved.cfg
    if with_data and resolved.loader is not None and resolved.loader.num_workers:
        from .data.workers import start_server

        # Workers' imports overlap the model build and the start-up scan (data/workers.py).
        start_server(resolved.loader, resolved.processor)
    t_model = time.perf_counter()
    accelerator = make_accelerator(resolved)
    auto_line = _user_deepspeed_autos(accelerator, resolved)
    if with_data and with_optimizer:  # a training run on several ranks: one output_dir, one config, one set of versions
        from .rank_agreement import check_ranks_agree

        check_ranks_agree(accelerator, resolved)  # seconds, before minutes of loading the model
    torch.manual_seed(cfg.train.seed)
    with _built_whole(accelerator):
        loaded, adapters = build_model_and_adapters(resolved, device=accelerator.device,
                                                    random_weights=cfg.model.weights == "random")
    model_s = round(time.perf_counter() - t_model, 2)
    decisions = resolved.summary_lines() + list(getattr(loaded, "decisions", []) or [])
    decisions.extend([auto_line] if auto_line else [])

    trainable = [p for g in adapters.param_groups for p in g["params"] if p.requires_grad]
    objective = run_objective(cfg, adapters.model, resolved)
    run = Run(cfg=cfg, resolved=resolved, accelerator=accelerator, model=adapters.model,
              processor=loaded.processor, family=loaded.family, adapter_table=adapters.table,
              param_groups=adapters.param_groups, trainable_params=trainable, decisions=decisions,
              objective=objective)
    run.startup["model_s"] = model_s
    if cfg.model.weights != "random":
        from .models.base_fingerprint import fingerprint

        run.base_weights = fingerprint(cfg.model.name, cfg.model.revision)
    if with_data:
        from .data.preference import train_collator, train_encoder

        run.encoder = Encoder.for_run(resolved)
        run.train_encoder = train_encoder(resolved, run.encoder)
        if not cfg.data.train:
            from .errors import ConfigError

            raise ConfigError("no training data", where="data.train",
                              fix="data.train=path/to/train.jsonl (or synthetic:counting for the demo)")
        # Every record is checked before training: bad media headers, placeholder mismatches and records
        # whose media would be cut by the sequence cap are found now (raised, or skipped and counted under
        # data.on_bad_record=skip). The check measures (`Encoder.measure`: headers and token arithmetic, no
        # pixels); the loop encodes each record when it first draws it and keeps the encoding in the cache
        # while data.cache_mb lasts (data/encode_cache.py): encoded once, and none before step 1.
        from .data.encode_cache import EncodeCache
        from .data.parallel_measure import RECORDS_PER_PROCESS, processes_for
        from .data.text_windows import windowed

        t_scan = time.perf_counter()
        # A stream is read once per epoch, each record encoded as it is drawn: no encodings kept.
        # data.cache_mb is the run's: DataLoader workers each fill their own copy of the cache (the dataset is
        # pickled into each), so each keeps its share; a full budget each grew host memory N-fold as the first epoch
        # went on, until the kernel killed a worker ("DataLoader worker ... is killed by signal: Killed").
        workers = resolved.loader.num_workers if resolved.loader is not None else 0
        run.encode_cache = EncodeCache(0 if cfg.data.streaming else cfg.data.cache_mb * 2**20 // max(1, workers),
                                       resolved.compute_dtype)
        records = load_records(cfg.data.train, cfg.data, split="train")
        records = windowed(records, run.encoder, cfg.data.on_bad_record)  # raw text cut to data.max_length
        if any(r.document for r in records.records):  # train.epochs counts the windows, not the documents
            from .resolve.length import recount_over_windows

            cfg = recount_over_windows(run, len(records.records))
        check_records(records.records, cfg.train.micro_batch_size, "train.micro_batch_size", "train")
        decisions.extend(f"data.train: {n}" for n in records.notes)  # e.g. repeated ids, entries of another split
        run.startup["train_load_s"] = round(time.perf_counter() - t_scan, 2)
        from .resolve.data_loading import decide_startup_scan

        when, d = decide_startup_scan(cfg.data, len(records.records), accelerator.num_processes)
        decisions.append(d.line())
        if when == "background":
            _start_background_check(run, records, decisions)
        else:
            procs = 1 if cfg.data.streaming else processes_for(len(records.records))
            if procs > 1:
                decisions.append(f"data: the start-up check measures {len(records.records)} records in {procs} "
                                 f"processes (spawned; one per {RECORDS_PER_PROCESS:,} records, at most one per CPU)")
            scan = scan_records(records, run.train_encoder, cfg.data.on_bad_record, encode=False, processes=procs,
                                progress="check train data")
            run.train_set, run.train_lengths = scan.records, scan.lengths
            run.startup["train_records_measured"] = len(scan.lengths)
            run.startup["train_scan_processes"] = procs
        if cfg.data.streaming:  # the check read a sample; the stream counts its own bad records as it meets them
            decisions.append(f"data.streaming: start-up check of the first {len(scan.records.records)} records "
                             f"(data.stream_sample={cfg.data.stream_sample}): {scan.records.summary()}")
            run.train_set = type(scan.records)(records=scan.records.records, notes=scan.records.notes)
        run.startup["train_scan_s"] = round(time.perf_counter() - t_scan, 2)  # loading included
        from .data.modality import decide_for_run

        run.loss_groups, line = decide_for_run(cfg, run.train_set.records, "data.train")
        decisions.extend([line] if line else [])
        if cfg.data.eval:
            attach_eval_data(run)
            _without_empty_eval(run)
        if not run.train_set.records:
            from .errors import DataError

            raise DataError(f"no usable training record ({dict(run.train_set.skipped)} skipped)",
                            where=cfg.data.train, fix="see `mmtune data inspect CONFIG` for the reasons")
        run.collator = Collator.for_run(resolved, resolved.compute_dtype)
        run.train_collator = train_collator(resolved, run.collator)
        checked = "being checked beside training" if run.startup_check is not None else "checked at start-up"
        draws = ((cfg.train.max_steps or 0) * cfg.train.micro_batch_size * cfg.train.grad_accum
                 * accelerator.num_processes)
        if not cfg.data.packing and 0 < draws <= len(run.train_set.records) and run.encode_cache.budget:
            # Less than one epoch: no record is drawn twice, so a kept encoding would never be read again; it
            # would only hold memory (a 112-px demo image's pixels: ~0.3 MB a record) and a copy per record.
            run.encode_cache = EncodeCache(0, resolved.compute_dtype)
            decisions.append(f"data: {len(run.train_set.records)} training records {checked} by header; each is "
                             f"encoded when drawn and not kept: this run draws {draws:,} records, under one epoch, "
                             f"so none is drawn twice (data.cache_mb={cfg.data.cache_mb} MiB unused)")
        else:
            decisions.append(f"data: {len(run.train_set.records)} training records {checked} by header; each is "
                             f"encoded when first drawn and kept up to data.cache_mb={cfg.data.cache_mb} MiB "
                             + (f"in all, {run.encode_cache.budget / 2**20:.0f} MiB in each of the {workers} DataLoader "
                                "workers (each keeps its own copy) " if workers else "")
                             + "(encoded once; records past the budget are encoded each time they are drawn)")
    if with_optimizer:
        if resolved.strategy == "fsdp" and accelerator.num_processes > 1:
            _shard_fsdp(run, loaded.family, resolved)
            run.optimizer = make_optimizer(run.param_groups, cfg.train)
            # The model is already sharded: accelerate wraps only the optimizer (no DDP around FSDP).
            run.optimizer = accelerator.prepare_optimizer(run.optimizer)
        else:
            _configure_ddp(run)
            run.optimizer = make_optimizer(adapters.param_groups, cfg.train, cpu_adam=resolved.offload == "zero-cpuadam")
            run.model, run.optimizer = accelerator.prepare(run.model, run.optimizer)
            from .compat.accelerate_state import bare_optimizer

            run.optimizer = bare_optimizer(accelerator, run.optimizer)  # one process, no scaler: torch's own
            if accelerator.distributed_type == "DEEPSPEED":  # what ran, for the summary (not what was asked)
                import torch.distributed as dist

                run.decisions.append(f"DeepSpeed ZeRO-{run.model.zero_optimization_stage()} engine: "
                                     f"{accelerator.num_processes} ranks over {dist.get_backend()}, optimizer "
                                     f"{type(run.model.optimizer).__name__} around "
                                     f"{type(getattr(run.model, 'basic_optimizer', None)).__name__} ({cfg.train.optimizer})"
                                     + ("; optimizer offloaded to the CPU" if run.model.zero_cpu_offload() else ""))
        from .stages import lr_scale

        run.scheduler = make_scheduler(run.optimizer, warmup=cfg.train.warmup_steps,
                                       total=cfg.train.max_steps, kind=cfg.train.scheduler,
                                       scale=lr_scale(cfg.train.stages))
    return run


def run_objective(cfg, model, resolved: ResolvedRun):
    """The run's objective (mmtune.objectives); dpo under full fine-tuning gets its frozen reference copy here,
    from the starting weights (before any resume loads trained ones), in the compute dtype."""
    from .objectives import make_objective, needs_frozen_copy

    proc = resolved.processor
    tok = getattr(proc, "tokenizer", proc)  # grpo decodes its sampled completions
    if not needs_frozen_copy(cfg):
        return make_objective(cfg, model, tokenizer=tok, processor=proc)
    import copy

    ref = copy.deepcopy(model)
    ref.requires_grad_(False)
    ref.to(resolved.compute_dtype)
    return make_objective(cfg, model, reference_model=ref, tokenizer=tok, processor=proc)


def attach_eval_data(run: Run) -> None:
    """The eval split, checked as training's is (bad records raised, or skipped and counted in
    run.eval_set.skipped under data.on_bad_record=skip), with the encoder and collator it needs. `mmtune eval`
    calls only this: evaluating a checkpoint never reads the training set."""
    from .data.audio_in_video import check_records
    from .data.collate import Collator
    from .data.encode import Encoder
    from .data.inspect import scan_records
    from .data.sources import load_records

    cfg = run.cfg
    if run.encoder is None:
        run.encoder = Encoder.for_run(run.resolved)
    if run.collator is None:
        run.collator = Collator.for_run(run.resolved, run.resolved.compute_dtype)
    t_scan = time.perf_counter()
    from .data.text_windows import windowed

    records = windowed(load_records(cfg.data.eval, cfg.data, split="eval"), run.encoder, cfg.data.on_bad_record)
    run.eval_set = scan_records(records, run.encoder, cfg.data.on_bad_record, progress="check eval data").records
    check_records(run.eval_set.records, cfg.eval.batch_size, "eval.batch_size", "eval")
    run.decisions.extend(f"data.eval: {n}" for n in run.eval_set.notes)
    from .resolve import generation_budget

    generation_budget.apply(run)  # eval.max_new_tokens unset: enough for the longest reference answer
    from .data.modality import decide_for_run

    run.eval_loss_groups, line = decide_for_run(cfg, run.eval_set.records, "data.eval")
    run.decisions.extend([line] if line else [])
    run.startup["eval_scan_s"] = round(time.perf_counter() - t_scan, 2)


def _without_empty_eval(run: Run) -> None:
    """An eval set with no record: training evaluates nothing (said), unless its records were all refused --
    then the data is wrong and the run stops before step 1, as for the training set."""
    rs = run.eval_set
    if rs is None or rs.records:
        return
    if rs.skipped:
        from .errors import DataError

        raise DataError(f"no usable eval record ({dict(rs.skipped)} skipped)", where=str(run.cfg.data.eval),
                        fix="see `mmtune data inspect CONFIG --split eval` for the reasons, or remove data.eval")
    run.decisions.append("data.eval: no eval record, so this run evaluates nothing"
                         + (" (every mixture source is one training file: see the notes above)" if rs.notes else ""))
    run.eval_set = None


def _start_background_check(run: Run, records, decisions: list[str]) -> None:
    """The check of every training record, started beside training (data/startup_scan.py): the loop trains
    on the records loaded meanwhile and merges the check's report when it is done."""
    from .data.parallel_measure import background_processes
    from .data.startup_scan import BackgroundScan

    n = len(records.records)
    run.train_set = records  # every record loaded: the batches' indices; load-time skips already counted
    run.startup_check = BackgroundScan(records.records, run.train_encoder, run.cfg.data.on_bad_record,
                                       background_processes(n)).start()
    procs = run.startup_check.processes
    decisions.append(f"data: the start-up check of {n:,} records runs beside training "
                     + (f"in {procs} spawned process(es)" if procs else "in a thread"))
    run.startup["train_scan_processes"] = procs


def _shard_fsdp(run: Run, family, resolved: ResolvedRun) -> None:
    """FSDP2 over every rank (mmtune/sharding.py); the optimizer groups follow the sharded parameters."""
    from .sharding import apply_fsdp, names_of, remap

    old = names_of(run.model)
    from .resolve.offload import offloads

    note = apply_fsdp(run.model, family, resolved.precision, run.accelerator.device, offload=offloads(resolved))
    run.param_groups = remap(run.param_groups, old, run.model)
    run.trainable_params = [p for g in run.param_groups for p in g["params"] if p.requires_grad]
    run.decisions.append(note)


DDP_MAY_BE_UNUSED = ("vision", "audio", "projector")


def ddp_unused_components(family, model) -> list[str]:
    """Components whose trainable weights may get no gradient in a step; for these the run sets DDP's
    find_unused_parameters (the doctor's MM011 / MM013 read the same rule). A tower's or projector's weights,
    trained in full or LoRA placed on its layers (`vision:qkv`), see no gradient on a text-only batch: DDP
    then stops at the next step ("Expected to have finished reduction in the prior iteration"; run on 2 gloo
    ranks with LoRA on the tiny Qwen2-VL's vision blocks and mixed image / text records)."""
    from .adapters import host_component_of

    comps = {host_component_of(family, n) for n, p in model.named_parameters() if p.requires_grad}
    return sorted(comps & set(DDP_MAY_BE_UNUSED))


def _configure_ddp(run: Run) -> None:
    """DDP must be told when some trainable parameters may get no gradient in a step: encoders and
    projectors (trained in full, or carrying LoRA) see no gradient on a text-only batch (failure mode 13).
    LoRA on the decoder alone always gets gradients, so the cheaper default is kept there."""
    if run.accelerator.num_processes == 1:
        return
    from accelerate.utils import DistributedDataParallelKwargs

    media = ddp_unused_components(run.family, run.unwrapped_model())
    if run.cfg.train.stages:  # a stage leaves the other stages' parameters without gradients
        media = media or ["parameters of later stages"]
    if media:
        run.accelerator.ddp_handler = DistributedDataParallelKwargs(find_unused_parameters=True)
        run.decisions.append(f"DDP find_unused_parameters=True: {', '.join(media)} (trained in full or through "
                             "LoRA) can get no gradient on batches without that modality")
