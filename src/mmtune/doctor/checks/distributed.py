"""Launch checks: the DeepSpeed setup `accelerate launch` hands to this process (fast; from issue threads).

`accelerate launch` passes its DeepSpeed settings to each process as environment variables
(ACCELERATE_USE_DEEPSPEED, ACCELERATE_DEEPSPEED_ZERO_STAGE, ACCELERATE_DEEPSPEED_CONFIG_FILE, ...), so
these checks see them in `mmtune train`'s pre-start doctor; a plain `mmtune doctor` (no launcher) sees
none and they stay silent. They read the same variables accelerate's own DeepSpeed plugin reads.
Sources per check: docs/doctor.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..findings import error, info, warning
from ..registry import check


@dataclass(frozen=True)
class DeepSpeedLaunch:
    zero_stage: int | None
    config_file: str | None
    config: dict = field(default_factory=dict)  # the DeepSpeed JSON, when a file was given
    grad_accum: str | None = None  # accelerate's gradient_accumulation_steps, when set
    offload_optimizer: str | None = None  # cpu / nvme: ZeRO-Offload of the optimizer
    force_ds_cpu_optimizer: bool = True  # DeepSpeed's zero_force_ds_cpu_optimizer (default true)
    clipping: str | None = None  # DeepSpeed's gradient_clipping: a number, "auto", or None (no clipping)
    problem: str | None = None  # why the DeepSpeed JSON named by the launch cannot be used (MM049 says it)


def deepspeed_launch() -> DeepSpeedLaunch | None:
    """The DeepSpeed setup this process was launched with, or None (not under DeepSpeed: the same test
    build.py makes before handing the run's own DeepSpeed config to accelerate)."""
    from ...launch_config import user_deepspeed_launch

    if not user_deepspeed_launch():
        return None
    env = os.environ
    path = env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    ds: dict = {}
    problem = None
    if path and not Path(path).is_file():
        # accelerate stops: "Expected a string path to an existing deepspeed config, or a dictionary"
        problem = f"does not exist (relative paths are read from {Path.cwd()})"
    elif path:
        try:
            ds = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            problem, ds = f"is not valid JSON ({type(e).__name__}: {e})", {}
        if not isinstance(ds, dict):
            problem, ds = f"holds a JSON {type(ds).__name__}, not an object of DeepSpeed settings", {}
    zero = ds.get("zero_optimization") if isinstance(ds.get("zero_optimization"), dict) else {}
    stage = zero.get("stage", env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"))
    try:
        stage = int(stage) if stage is not None else None
    except (TypeError, ValueError):
        stage = None
    ga = ds.get("gradient_accumulation_steps", env.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"))
    off = zero.get("offload_optimizer")
    offload = (off.get("device") if isinstance(off, dict) else None) if ds else env.get(
        "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE")
    return DeepSpeedLaunch(stage, path, ds, None if ga is None else str(ga),
                           str(offload).lower() if offload not in (None, "none") else None,
                           ds.get("zero_force_ds_cpu_optimizer", True) is not False,
                           _as_str(ds.get("gradient_clipping", env.get("ACCELERATE_GRADIENT_CLIPPING"))), problem)


def _launched(ctx):
    """(the run this process launches, how to name it): the launch's DeepSpeed setup must fit the run that
    executes -- under `train --smoke` the tiny twin's (micro-batch <= 2, accumulation <= 2, fp32), not the
    recipe's full run."""
    run = ctx.need("launched")
    return run, ("the run" if run is ctx.need("resolved") else "the launched --smoke run")


def _as_str(v) -> str | None:
    return None if v is None else str(v).lower()


@check("MM045", "DeepSpeed ZeRO-3: the launch lets mmtune gather the weights at each save", fast=True)
def zero3_checkpoints(ctx):
    """ZeRO-3 partitions every parameter across ranks (each rank holds a size-0 placeholder). mmtune's
    checkpoints gather the weights onto the main rank through accelerate's `get_state_dict`, which DeepSpeed
    allows only with `stage3_gather_16bit_weights_on_model_save` (else accelerate stops the save with
    "Cannot get 16bit model weights"); written from the placeholders instead, the adapter is the few
    hundred bytes of peft#2892, trl#4416, DeepSpeed#7900. `train.strategy=zero3` under torchrun generates
    a config with it on; a user's own file or `accelerate launch` flags must say so."""
    ctx.need("cfg")
    ds = deepspeed_launch()
    if ds is None or ds.zero_stage != 3:
        return
    gather = ((ds.config.get("zero_optimization") or {}).get("stage3_gather_16bit_weights_on_model_save")
              if ds.config else os.environ.get("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"))
    if str(gather).lower() == "true":
        return
    yield error("launched with DeepSpeed ZeRO-3 without stage3_gather_16bit_weights_on_model_save: the partitioned "
                "weights cannot be gathered when mmtune saves a checkpoint, so the first save stops the run "
                "(\"Cannot get 16bit model weights\")", where=ds.config_file or "ACCELERATE_DEEPSPEED_ZERO_STAGE",
                fix='"stage3_gather_16bit_weights_on_model_save": true under zero_optimization in the DeepSpeed '
                    "config (accelerate launch --zero3_save_16bit_model true), or launch with torchrun and "
                    "train.strategy=zero3: mmtune generates the config")


@check("MM046", "QLoRA is not launched under DeepSpeed ZeRO-3", fast=True)
def zero3_qlora(ctx):
    cfg = ctx.need("cfg")
    ds = deepspeed_launch()
    if ds is None or ds.zero_stage != 3 or cfg.adapter.method not in ("qlora", "lora8bit"):
        return
    yield error(f"adapter.method={cfg.adapter.method} under DeepSpeed ZeRO-3: the k-bit decoder is placed whole on each GPU "
                "(device_map) and ZeRO-3 cannot partition integer (4-bit / int8) weights (\"DeepSpeed Zero-3 is not compatible "
                "with ... passing a device_map\"; shape errors, transformers#29266)", where="adapter.method",
                fix="ZeRO-2 or DDP for QLoRA (each GPU holds the 4-bit model), or adapter.method=lora under ZeRO-3")


@check("MM047", "ZeRO-3 with a multimodal model: every rank must run the same encoders each step",
       needs=("cfg", "resolved"), fast=True)
def zero3_modalities(ctx):
    """ZeRO-3 gathers each module's parameters collectively when it runs: a rank whose batch has no
    image skips the vision tower while the others wait in its all-gather (DeepSpeed#7170, ms-swift#3213,
    LLaMA-Factory#5648, Qwen3-VL#126; on 2 CPU gloo ranks: "Received data size doesn't match expected size"
    at the first such step, docs/distributed.md). mmtune's loop prevents it under any ZeRO-3 engine
    (media_balance.py: a masked row of a one-medium record); MM080 says whether the data allows it."""
    ds = deepspeed_launch()
    if ds is None or ds.zero_stage != 3:
        return
    family = ctx.need("resolved").family
    media = [m for m in family.modalities if m != "text"]
    if not media:
        return
    scan = ctx._cache.get("scan")
    kinds = sorted({s for sp in scan.splits for s in sp.signatures}) if scan is not None else []
    if kinds and len(kinds) == 1:
        return  # one batch kind throughout: every rank runs the same modules
    said = f" (batch kinds in the data: {', '.join(kinds)})" if kinds else ""
    yield info(f"DeepSpeed ZeRO-3 with {family.name} ({', '.join(media)} encoders): a step where one rank's "
               f"micro-batch has no {media[0]} and another's has would leave one rank waiting in the encoder's "
               f"parameter gather{said}; the loop adds a masked {media[0]} row to such batches (tower_rows_added "
               "in summary.json); MM080 checks that the data has a record to take it from",
               where=ds.config_file or "ACCELERATE_DEEPSPEED_ZERO_STAGE")


@check("MM048", "under DeepSpeed, gradient accumulation is the run's own", fast=True)
def deepspeed_accumulation(ctx):
    """Under DeepSpeed the loop hands accumulation to the engine: the Accelerator gets
    gradient_accumulation_steps=train.grad_accum and each micro-batch runs inside accelerator.accumulate(),
    so the engine steps on the last one only (train/step.py). Outside accumulate(), accelerate's backward
    runs engine.step() at every call (utils/deepspeed.py DeepSpeedEngineWrapper.backward: each micro-batch
    its own optimizer step), which is what accelerate#2210 reports. What can still disagree is a user's
    DeepSpeed JSON / accelerate config: its accumulation or micro-batch against the launched run's."""
    ctx.need("cfg")
    ds = deepspeed_launch()
    if ds is None:
        return
    run, who = _launched(ctx)
    cfg = run.cfg
    ga = cfg.train.grad_accum
    if ds.grad_accum not in (None, "auto", str(ga)):
        yield error(f"the DeepSpeed config sets gradient_accumulation_steps={ds.grad_accum} and {who} "
                    f"train.grad_accum={ga}: the two disagree on when the optimizer steps",
                    where=ds.config_file or "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
                    fix='"gradient_accumulation_steps": "auto" in the DeepSpeed config (accelerate#2210)')
    mbs = ds.config.get("train_micro_batch_size_per_gpu")
    if mbs not in (None, "auto") and str(mbs) != str(cfg.train.micro_batch_size):
        yield error(f"the DeepSpeed config sets train_micro_batch_size_per_gpu={mbs} and {who} "
                    f"train.micro_batch_size={cfg.train.micro_batch_size}", where=ds.config_file,
                    fix='"train_micro_batch_size_per_gpu": "auto" in the DeepSpeed config')


@check("MM049", "the DeepSpeed config named by the launch exists and reads, and leaves optimizer, scheduler "
       "and precision to the run",
       needs=("cfg", "resolved"), fast=True)
def deepspeed_config_sections(ctx):
    """mmtune builds its own optimizer (param groups per component) and scheduler and passes them to
    accelerate.prepare; a DeepSpeed JSON that defines them as well is refused by accelerate ("You cannot
    specify an optimizer in the config file and in the code at the same time"), and a precision section
    other than the run's trains in another dtype than planned (the launched run's: under `train --smoke` the
    twin's fp32)."""
    ds = deepspeed_launch()
    if ds is not None and ds.problem:
        yield error(f"the DeepSpeed config {ds.config_file} named by the launch (deepspeed_config_file / "
                    f"ACCELERATE_DEEPSPEED_CONFIG_FILE) {ds.problem}: accelerate stops with \"Expected a string path "
                    "to an existing deepspeed config, or a dictionary\"", where=ds.config_file,
                    fix="point deepspeed_config_file in the accelerate config at an existing JSON file (an absolute "
                        "path), or leave DeepSpeed to the run: train.strategy=zero2 / zero3")
        return
    if ds is None or not ds.config:
        return
    for section, what in (("optimizer", "optimizer"), ("scheduler", "LR scheduler")):
        if section in ds.config:
            yield error(f"{ds.config_file} defines a DeepSpeed {section!r} section, and mmtune passes its own {what} "
                        "(train.optimizer / train.scheduler): accelerate refuses both at once", where=ds.config_file,
                        fix=f"remove the {section!r} section; the run's train.* settings apply")
    run, who = _launched(ctx)
    precision = run.precision
    for name in ("fp16", "bf16"):
        enabled = (ds.config.get(name) or {}).get("enabled")
        if enabled is True and precision != name:
            yield error(f"{ds.config_file} enables {name} and {who} is {precision}", where=ds.config_file,
                        fix=f'"{name}": {{"enabled": "auto"}} (accelerate fills it from the run\'s precision)')


@check("MM054", "ZeRO-Offload of the optimizer accepts the run's own optimizer", fast=True)
def zero_offload_client_optimizer(ctx):
    """With the optimizer offloaded to CPU, DeepSpeed refuses any optimizer but its own CPU Adam unless
    `zero_force_ds_cpu_optimizer` is false ("You are using ZeRO-Offload with a client provided
    optimizer"), and mmtune always passes its own (per-component groups; MM049 keeps the config's out)."""
    cfg = ctx.need("cfg")
    ds = deepspeed_launch()
    if ds is None or ds.offload_optimizer is None or not ds.force_ds_cpu_optimizer:
        return
    yield error(f"the DeepSpeed launch offloads the optimizer to {ds.offload_optimizer}, and mmtune passes its own "
                f"optimizer (train.optimizer={cfg.train.optimizer}): DeepSpeed stops with \"You are using ZeRO-Offload "
                "with a client provided optimizer\"",
                where=ds.config_file or "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
                fix="offload_optimizer_device: none in the accelerate config (use adapter.method=qlora or more GPUs to "
                    "fit), or \"zero_force_ds_cpu_optimizer\": false in the DeepSpeed config with train.optimizer=adamw")


@check("MM055", "under DeepSpeed, train.max_grad_norm is the clipping DeepSpeed applies", fast=True)
def deepspeed_clipping(ctx):
    """Under DeepSpeed, accelerator.clip_grad_norm_ only reads the engine's gradient norm back; the
    engine clips by its own `gradient_clipping` (accelerate config or DeepSpeed JSON), so
    train.max_grad_norm silently does nothing when the two differ."""
    cfg = ctx.need("cfg")
    ds = deepspeed_launch()
    if ds is None or ds.clipping == "auto" or ds.problem:  # an unreadable JSON is MM049's: its clipping is unknown
        return
    want = cfg.train.max_grad_norm
    have = None if ds.clipping in (None, "0", "0.0", "none") else float(ds.clipping)
    if (want or None) == have:
        return
    said = f"clips at {have:g}" if have is not None else "does not clip (no gradient_clipping set)"
    yield warning(f"train.max_grad_norm={want} is not applied under DeepSpeed: the engine clips by its own "
                  f"gradient_clipping, and this launch {said}", where="train.max_grad_norm",
                  fix=f"gradient_clipping: {want} in the accelerate config's deepspeed_config (or the DeepSpeed JSON)"
                  if want else "remove gradient_clipping from the DeepSpeed setup, or set train.max_grad_norm to it")


# accelerate launch's FSDP settings (distributed_type: FSDP in the accelerate config), as it exports them.
_FSDP_SETTINGS = (("FSDP_VERSION", "fsdp_version"), ("FSDP_AUTO_WRAP_POLICY", "fsdp_auto_wrap_policy"),
                  ("FSDP_TRANSFORMER_CLS_TO_WRAP", "fsdp_transformer_layer_cls_to_wrap"),
                  ("FSDP_USE_ORIG_PARAMS", "fsdp_use_orig_params"), ("FSDP_STATE_DICT_TYPE", "fsdp_state_dict_type"),
                  ("FSDP_CPU_RAM_EFFICIENT_LOADING", "fsdp_cpu_ram_efficient_loading"),
                  ("FSDP_SYNC_MODULE_STATES", "fsdp_sync_module_states"),
                  # a second checkpoint wrapper around layers model.gradient_checkpointing already checkpoints
                  ("FSDP_ACTIVATION_CHECKPOINTING", "fsdp_activation_checkpointing"))


@check("MM413", "the launch does not hand the model to accelerate's own FSDP (mmtune shards with FSDP2 itself)", fast=True)
def accelerate_fsdp_launch(ctx):
    """`accelerate launch` with an FSDP config exports ACCELERATE_USE_FSDP and its fsdp_* settings, and every
    Accelerator built in the process then wraps what it prepares in accelerate's FSDP (version 1 unless the
    file says 2) with the file's wrap policy: a second sharding beside mmtune's own FSDP2 units
    (`train.strategy=fsdp`, sharding.py), or around a model mmtune prepared for DDP. The settings users tune
    there are decided by the run instead: which classes to wrap (every repeated stack of the towers and the
    decoder, not only the decoder's class), `use_orig_params` (FSDP2 shards per parameter: LoRA and frozen
    weights share a unit, peft#1702), the state-dict type (sharded checkpoints plus the adapter gathered at
    each save, export gathers a full model), and RAM-efficient loading / module-state sync (every rank loads
    the same weights). On CPU ranks accelerate stops at once ("There are currently no available devices
    found"); on GPUs it wraps."""
    ctx.need("cfg")
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() not in ("1", "true", "yes"):
        return
    said = ", ".join(f"{key}={os.environ[var]}" for var, key in _FSDP_SETTINGS if os.environ.get(var))
    yield error("launched by accelerate with an FSDP config (distributed_type: FSDP, ACCELERATE_USE_FSDP=true"
                + (f"; {said}" if said else "") + "): accelerate would wrap the model in its own FSDP with these "
                "settings, beside or instead of mmtune's sharding, which decides them itself under train.strategy=fsdp "
                "(FSDP2: one unit per block of every tower and the decoder, LoRA and frozen weights in one unit, "
                "sharded checkpoints with the adapter gathered at each save, every rank loading the weights)",
                where="ACCELERATE_USE_FSDP",
                fix="launch with torchrun --nproc_per_node N -m mmtune.cli train CONFIG train.strategy=fsdp (or an "
                    "accelerate config with distributed_type: MULTI_GPU and train.strategy=fsdp); docs/distributed.md")
