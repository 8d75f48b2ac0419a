"""`build_run(cfg)`: the one code path that turns a validated config into a runnable training run.

`train` executes it, `plan` executes the same step on fake tensors, `doctor` inspects the same
objects. Every automatic decision is collected in `run.decisions` with its reason and printed at start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config.schema import RunConfig


@dataclass
class Run:
    cfg: RunConfig
    precision: Any  # PrecisionPlan
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
    decisions: list[str] = field(default_factory=list)

    def unwrapped_model(self):
        return self.accelerator.unwrap_model(self.model)

    def scaler_state(self):
        scaler = getattr(self.accelerator, "scaler", None)
        return scaler.state_dict() if scaler is not None else None

    def load_scaler_state(self, state) -> None:
        scaler = getattr(self.accelerator, "scaler", None)
        if scaler is not None and state is not None:
            scaler.load_state_dict(state)


def make_accelerator(precision):
    from accelerate import Accelerator

    from .compat.accelerate_state import reset_accelerate_state

    # accelerate keeps process-wide singletons; a second run in the same process (tests, eval after
    # train) must start from a clean state or it inherits the first run's mixed precision.
    reset_accelerate_state()
    return Accelerator(mixed_precision=precision.accelerate_mixed_precision, cpu=precision.device == "cpu")


def build_model_and_adapters(cfg: RunConfig, *, device, dtype, meta: bool = False):
    """Model + processor + family with adapters applied and trainable weights in fp32."""
    import torch

    from .adapters import apply_adapters
    from .models.loading import load_model

    loaded = load_model(cfg, device=device, dtype=dtype, meta=meta)
    result = apply_adapters(loaded.model, loaded.family, cfg.adapter, cfg.train)
    model = result.model
    # Trainable weights in fp32: AdamW on 16-bit weights loses small updates, and fp16's GradScaler
    # refuses to unscale fp16 gradients. Frozen weights stay in the compute dtype.
    for p in model.parameters():
        if p.requires_grad and p.dtype != torch.float32 and p.is_floating_point():
            p.data = p.data.float()
    return loaded, result


def build_run(cfg: RunConfig, *, with_data: bool = True, with_optimizer: bool = True) -> Run:
    import torch

    from .data.collate import Collator
    from .data.encode import Encoder
    from .data.inspect import scan_records
    from .data.sources import load_records
    from .optim import make_optimizer
    from .precision import resolve_precision
    from .train.schedule import make_scheduler

    precision = resolve_precision(cfg.train.device, cfg.train.precision)
    accelerator = make_accelerator(precision)
    torch.manual_seed(cfg.train.seed)
    loaded, adapters = build_model_and_adapters(cfg, device=accelerator.device, dtype=precision.compute_dtype)
    decisions = list(precision.reasons) + list(getattr(loaded, "decisions", []) or [])

    trainable = [p for g in adapters.param_groups for p in g["params"] if p.requires_grad]
    run = Run(cfg=cfg, precision=precision, accelerator=accelerator, model=adapters.model,
              processor=loaded.processor, family=loaded.family, adapter_table=adapters.table,
              param_groups=adapters.param_groups, trainable_params=trainable, decisions=decisions)
    if with_data:
        run.encoder = Encoder(loaded.processor, loaded.family, cfg)
        if not cfg.data.train:
            from .errors import ConfigError

            raise ConfigError("no training data", where="data.train",
                              fix="data.train=path/to/train.jsonl (or synthetic:counting for the demo)")
        # Every record is encoded once before training: bad media, placeholder mismatches and records
        # whose media would be cut by the sequence cap are found now (raised, or skipped and counted
        # under data.on_bad_record=skip), never in the middle of a run.
        scan = scan_records(load_records(cfg.data.train, cfg.data, split="train"), run.encoder,
                            cfg.data.on_bad_record)
        run.train_set, run.train_lengths = scan.records, scan.lengths
        if cfg.data.eval:
            run.eval_set = scan_records(load_records(cfg.data.eval, cfg.data, split="eval"), run.encoder,
                                        cfg.data.on_bad_record).records
        if not run.train_set.records:
            from .errors import DataError

            raise DataError(f"no usable training record ({dict(run.train_set.skipped)} skipped)",
                            where=cfg.data.train, fix="see `mmtune data inspect CONFIG` for the reasons")
        pad_id = _pad_token_id(loaded.processor)
        run.collator = Collator(pad_id, precision.compute_dtype)
    if with_optimizer:
        _configure_ddp(run)
        run.optimizer = make_optimizer(adapters.param_groups, cfg.train)
        run.model, run.optimizer = accelerator.prepare(run.model, run.optimizer)
        run.scheduler = make_scheduler(run.optimizer, warmup=cfg.train.warmup_steps,
                                       total=cfg.train.max_steps, kind=cfg.train.scheduler)
    return run


def _configure_ddp(run: Run) -> None:
    """DDP must be told when some trainable parameters may get no gradient in a step: encoders and
    projectors trained in full see no gradient on a text-only batch (failure mode 13). LoRA on the
    decoder alone always gets gradients, so the cheaper default is kept there."""
    if run.accelerator.num_processes == 1:
        return
    from accelerate.utils import DistributedDataParallelKwargs

    from .adapters import component_of

    comps = {component_of(run.family, n) for n, p in run.unwrapped_model().named_parameters()
             if p.requires_grad and "lora_" not in n}
    media = sorted(comps & {"vision", "audio", "projector"})
    if media:
        run.accelerator.ddp_handler = DistributedDataParallelKwargs(find_unused_parameters=True)
        run.decisions.append(f"DDP find_unused_parameters=True: {', '.join(media)} trained in full can get "
                             "no gradient on batches without that modality")


def _pad_token_id(processor) -> int:
    tok = getattr(processor, "tokenizer", processor)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    if pad is None:
        from .errors import ModelLoadError

        raise ModelLoadError("the tokenizer has neither a pad nor an eos token", where="model.name",
                             fix="use a tokenizer with a pad token")
    return pad
