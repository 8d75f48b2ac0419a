"""`resolve_run(cfg, target)`: the one place a run's automatic decisions are made.

A `ResolvedRun` is immutable and holds every decision with its reason: device, precision and loss
scaling, attention, quantization, pad id, the processor with its effective media caps, data splits,
trainable components, evaluation metrics. `train`, `plan`, `doctor`, `eval` and `data inspect` all
start from one and re-derive nothing; `config.resolved.yaml` and the start-up summary print it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..config.schema import KBIT_METHODS, RunConfig
from ..data.media_caps import MediaCaps  # noqa: F401 - part of the resolved run's API
from ..errors import MMTuneError
from .data_loading import decide_loader, decide_prefetch
from .decisions import (
    Decision,
    decide_attention,
    decide_attention_kernels,
    decide_best_metric,
    decide_cuda_allocator,
    decide_fused_kernels,
    decide_kbit_upcast,
    decide_loss_impl,
    decide_packing,
    decide_pad_id,
    decide_padding_mask,
    decide_patch_embed,
    decide_precision,
    decide_random_weights,
    decide_strategy,
    decide_trainable_dtype,
    trainable_components,
    trained_set,
)
from .target import Target

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class DataSplit:
    key: str  # data.train / data.eval
    spec: str  # what to read: a path (maybe PATH::SPLIT after alias resolution) or synthetic:NAME
    split: str  # "train" or "eval": which split of a folder / dataset is read


@dataclass(frozen=True)
class ResolvedRun:
    cfg: RunConfig  # the config in force: automatic decisions applied (precision, attention, data specs)
    requested: RunConfig  # the config as written (YAML + profile + overrides)
    target: Target
    family: Any  # models.families.Family
    precision: str  # fp32 | bf16 | fp16
    loss_scaling: bool  # fp16 + GradScaler
    attn_implementation: str
    quantization: str | None
    strategy: str  # ddp | fsdp | zero2 | zero3 (train.strategy, auto decided)
    trainable: tuple[str, ...]
    metrics: tuple[str, ...]
    greater_is_better: bool
    splits: tuple[DataSplit, ...]
    decisions: tuple[Decision, ...]
    # Processor-dependent: None with `processor_error` set when the processor cannot be had here.
    processor: Any = field(default=None, compare=False, repr=False)
    processor_source: str = ""
    exact_text_tokens: bool = True
    pad_token_id: int | None = None
    media: MediaCaps = MediaCaps()
    loader: Any = None  # data.workers.LoaderPlan: the training DataLoader's workers (decide_loader)
    # PyTorch's CUDA caching allocator (decide_cuda_allocator): applied by build, modelled by the plan
    cuda_alloc_conf: str = ""
    offload: str = "none"  # train.offload as done: none | fsdp | zero-cpuadam | zero-torch (resolve/offload.py)
    padding_mask: bool = True  # training batches give the model their attention_mask (decide_padding_mask)
    dist_timeout_minutes: float | None = None  # the process group's timeout; None: one process (dist_timeout.py)
    patch_embed_matmul: bool = False  # the vision patch embedding runs as one matmul (decide_patch_embed)
    processor_error: MMTuneError | None = field(default=None, compare=False)

    @property
    def device(self) -> str:
        return self.target.device

    @property
    def expandable_segments(self) -> bool:
        """The CUDA allocator the run uses has expandable segments (what the plan's allocator model follows)."""
        from .decisions import is_expandable

        return is_expandable(self.cuda_alloc_conf)

    @property
    def compute_dtype(self):
        import torch

        return getattr(torch, _DTYPES[self.precision])

    @property
    def accelerate_mixed_precision(self) -> str:
        return {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[self.precision]

    def need_processor(self):
        """The processor, or the reason it cannot be had here (raised as the original error)."""
        if self.processor is None:
            raise self.processor_error or MMTuneError("no processor was resolved for this run")
        return self.processor

    def decision(self, key: str) -> Decision | None:
        return next((d for d in self.decisions if d.key == key), None)

    def split(self, key: str) -> DataSplit | None:
        return next((s for s in self.splits if s.key == key), None)

    def summary_lines(self) -> list[str]:
        return [d.line() for d in self.decisions]

    def to_dict(self) -> dict:
        """What config.resolved.yaml records under `resolved:`."""
        return {
            "target": self.target.describe(),
            "family": self.family.name,
            "precision": self.precision, "loss_scaling": self.loss_scaling,
            "attn_implementation": self.attn_implementation, "quantization": self.quantization,
            "strategy": self.strategy, "offload": self.offload, "cuda_alloc_conf": self.cuda_alloc_conf,
            "dist_timeout_minutes": self.dist_timeout_minutes,
            "objective": self.cfg.train.objective, "padding_mask": self.padding_mask,
            "patch_embed_matmul": self.patch_embed_matmul,
            "pad_token_id": self.pad_token_id, "processor": self.processor_source,
            "media": {k: v for k, v in vars(self.media).items()},
            "data": {s.key: s.spec for s in self.splits},
            "trainable": list(self.trainable), "metrics": list(self.metrics),
            "greater_is_better": self.greater_is_better,
            "decisions": [d.line() for d in self.decisions],
        }


def resolve_run(cfg: RunConfig, target: Target, *, for_training: bool = False,
                require_processor: bool = False) -> ResolvedRun:
    """Decide everything about `cfg` on `target`, once.

    `for_training`: the run executes here, so the real processor is loaded (downloaded if need be);
    otherwise (plan, doctor, data inspect) a processor on disk or the embedded stand-in is used, and a
    processor that cannot be had is recorded in `processor_error` unless `require_processor`.
    """
    from ..data.splits import resolve_split
    from ..models.load import refuse_device_map
    from ..models.model_config import resolve_family

    refuse_device_map(cfg)
    family = resolve_family(cfg)
    decisions: list[Decision] = [Decision("target", target.describe(), "where the run executes" if target.local
                                          else "the GPU the run is planned for")]
    from .target import package_problem, packages_line

    if packages_line(target):
        decisions.append(Decision("packages", packages_line(target), f"--assume-installed {target.assume_installed}: "
                                  "the plan describes the run on that machine, not this one's packages"))
    decisions += config_source_decisions(cfg)
    from ..optim import BITSANDBYTES

    eight_bit = cfg.train.optimizer in BITSANDBYTES
    kbit = cfg.adapter.method in KBIT_METHODS
    bnb = package_problem(target, "bitsandbytes") if not target.local and (kbit or eight_bit) else None
    if bnb:
        from ..errors import ConfigError

        what = f"adapter.method={cfg.adapter.method}" if cfg.adapter.method in KBIT_METHODS \
            else f"train.optimizer={cfg.train.optimizer}"
        raise ConfigError(f"{what} needs bitsandbytes, and {bnb}", where="--assume-installed",
                          fix="--assume-installed gpu-extra (pip install 'mmtune[gpu]' on the GPU machine), or "
                              "adapter.method=lora / train.optimizer=adamw")
    if family.custom:  # a model brought by import path: what mmtune will treat as its parts, and its loss
        comps = "; ".join(f"{c}={','.join(p)}" for c, p in family.components.items())
        decisions.append(Decision("model.class", f"{cfg.model.factory or cfg.model.class_}: {comps}",
                                  "model.components" if cfg.model.components else "the model's mmtune_components"))
        decisions.append(Decision("model.loss", "the model's own loss from its output x answer tokens"
                                  if cfg.model.loss == "output" else "mmtune's cross entropy from the output's logits",
                                  f"model.loss={cfg.model.loss}"))
    decisions += [Decision(k, v, why) for k, v, why in family.inferred_notes]  # day-0: what was inferred, from what
    if cfg.model.weights == "random":
        decisions.append(decide_random_weights(cfg))
    precision, scaled, d = decide_precision(cfg.train.precision, target)
    from .launch_env import launcher_precision_note

    note = launcher_precision_note(precision) if target.local else None
    decisions.append(replace(d, reason=f"{d.reason}; {note}") if note else d)
    from ..models.construct import model_lacks_fa2, model_lacks_sdpa

    attn, d = decide_attention(cfg.model.attn_implementation, target, precision, model_lacks_fa2(family),
                               model_lacks_sdpa(family))
    decisions.append(d)
    kernels = decide_attention_kernels(attn, target, precision)
    decisions.append(kernels)
    counts = _ModelCounts(cfg, family, precision)  # one meta build, only for the decisions that ask
    strategy, d = decide_strategy(cfg.train.strategy, target, cfg.adapter, cfg.train.stages, counts.params,
                                  cfg.train.optimizer)
    from .quantization import decide_kbit

    quant, kbit_decisions, adapter_updates = decide_kbit(cfg.adapter, strategy, precision)
    decisions += kbit_decisions
    decisions.append(d)
    from .offload import decide_offload

    offload, d = decide_offload(cfg.train.offload, strategy, target, cfg.train.optimizer)
    if d:
        decisions.append(d)
    d = decide_kbit_upcast(cfg.adapter)
    if d:
        decisions.append(d)
    decisions.append(decide_trainable_dtype(cfg.train, precision))
    from .dist_timeout import decide_dist_timeout

    dist_timeout, d = decide_dist_timeout(cfg.train.dist_timeout_minutes, target.processes, strategy,
                                          lambda: counts.checkpoint_bytes(cfg))
    if d:
        decisions.append(d)
    alloc_conf = ""  # the CPU has no caching allocator to set
    if target.gpu is not None:
        import os

        alloc_conf, _, d = decide_cuda_allocator(os.environ)
        decisions.append(d)
    fused, d = decide_fused_kernels(cfg.train.fused_kernels, target, family, cfg.adapter,
                                    _liger_problem(target, family, probe=target.gpu is not None
                                                   and cfg.train.fused_kernels != "none"))
    decisions.append(d)
    d = decide_packing(cfg, family, attn)
    if d:
        decisions.append(d)
    padding_mask, d = decide_padding_mask(cfg, family, attn, kernels.value)
    if d:
        decisions.append(d)
    patch_embed_matmul, d = decide_patch_embed(family)
    if d:
        decisions.append(d)
    from .linear_attention import decide_linear_attention

    d = decide_linear_attention(family, target)
    if d:
        decisions.append(d)
    # ... plus what a stage of train.stages trains (trained_set: the one rule the doctor reads too)
    trainable = trainable_components(cfg.adapter, family) + tuple(
        c for c, how in trained_set(cfg.adapter, family, cfg.train.stages).items() if "train.stages" in how
        and c not in trainable_components(cfg.adapter, family))
    decisions.append(Decision("trainable", ", ".join(trainable), f"adapter.method={cfg.adapter.method}"))
    if cfg.train.stages:
        from ..stages import describe

        decisions.append(Decision("train.stages", describe(cfg.train.stages),
                                  "staged unfreezing: each step updates only its stage's parameters; planned "
                                  "with every stage's parameters trainable"))
    from ..objectives import decide as decide_objective

    objective, problems = decide_objective(cfg, strategy)
    if problems:
        raise MMTuneError(" ".join(problems), where="train.objective",
                          fix="see docs/preference.md for what each objective supports")
    decisions += [Decision(*d) for d in objective]
    from .length import decide_length

    length, length_decisions = decide_length(cfg, target)
    decisions += length_decisions
    if cfg.data.streaming:
        decisions.append(Decision(
            "data.streaming", f"on: shuffle buffer {cfg.data.shuffle_buffer}, start-up check of the first "
                              f"{cfg.data.stream_sample} records",
            "data.streaming=true: training records are read as they are drawn, never all in memory; the position "
            "(rows read) is checkpointed and resumed exactly; no start-up encodings kept (data.cache_mb unused), "
            "records encoded in the training process" + (f" (train.num_workers={cfg.train.num_workers} unused)"
                                                         if cfg.train.num_workers else "")))
    loader, d = decide_loader(cfg, target)
    if d:
        decisions.append(d)
    loader, d = decide_prefetch(cfg, loader, target)
    if d:
        decisions.append(d)
    _check_best_metric(cfg)
    greater, d = decide_best_metric(cfg)
    decisions.append(d)

    splits, data_updates = [], {}
    for key, split in (("data.train", "train"), ("data.eval", "eval")):
        spec = getattr(cfg.data, key.split(".")[1])
        if not spec:
            continue
        if isinstance(spec, list):  # a mixture: each source resolves its own split (data/mixture.py)
            names = ", ".join(getattr(src, "name", str(src)) for src in spec)
            splits.append(DataSplit(key, f"mixture of {len(spec)} sources: {names}", split))
            continue
        chosen, note = resolve_split(spec, split)
        splits.append(DataSplit(key, chosen, split))
        if note:
            decisions.append(Decision(key, chosen, note, changed=chosen != spec))
        if chosen != spec:
            data_updates[key.split(".")[1]] = chosen

    updates = {"train": cfg.train.model_copy(update={"precision": precision, "strategy": strategy,
                                                     "fused_kernels": fused, **length}),
               "model": cfg.model.model_copy(update={"attn_implementation": attn})}
    if adapter_updates:  # adapter.bnb_4bit_quant_storage: auto -> the storage in force
        updates["adapter"] = cfg.adapter.model_copy(update=adapter_updates)
    if data_updates:
        updates["data"] = cfg.data.model_copy(update=data_updates)
    effective = cfg.model_copy(update=updates)
    fields = dict(cfg=effective, requested=cfg, target=target, family=family, precision=precision,
                  loss_scaling=scaled, attn_implementation=attn, quantization=quant, strategy=strategy,
                  offload=offload, trainable=trainable, padding_mask=padding_mask,
                  patch_embed_matmul=patch_embed_matmul, loader=loader,
                  cuda_alloc_conf=alloc_conf, dist_timeout_minutes=dist_timeout,
                  metrics=tuple(cfg.eval.metrics), greater_is_better=greater, splits=tuple(splits))

    from .processor import load_run_processor

    try:
        # Random weights need no weights files, and so no downloaded processor either: the stand-in serves.
        src = load_run_processor(cfg, family, for_training=for_training and cfg.model.weights != "random")
    except MMTuneError as e:
        if require_processor or for_training:
            raise
        decisions.append(Decision("processor", "unavailable", e.what))
        _loss_impl(fields, decisions, target, None)
        return ResolvedRun(decisions=tuple(decisions), processor_error=e, **fields)
    _loss_impl(fields, decisions, target, src.processor)
    media, media_decisions = _media_caps(src.processor, cfg.model)
    pad_id, d = decide_pad_id(src.processor)
    decisions += [Decision("processor", src.description, "the model's own: token counts exact" if src.exact_text
                           else "no download needed: media token counts exact, text approximate"), d,
                  *media_decisions]
    return ResolvedRun(decisions=tuple(decisions), processor=src.processor, processor_source=src.description,
                       exact_text_tokens=src.exact_text, pad_token_id=pad_id, media=media, **fields)


def config_source_decisions(cfg) -> list[Decision]:
    """One line per value a profile or the command line set (config/loader.py's precedence), with what it
    replaced: the start-up summary and config.resolved.yaml say where an overridden value came from."""
    from ..config.loader import config_sources

    out = []
    for key, source in sorted(config_sources(cfg).items()):
        out.append(Decision(f"config {key}", _value_at(cfg, key), source))
    return out


def _value_at(cfg, dotted: str) -> str:
    node = cfg.model_dump(mode="json", by_alias=True)
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return repr(node) if isinstance(node, str) else str(node)


class _ModelCounts:
    """Parameters of the model, in all and by component, counted once on a meta build of its config (no
    weights), and only when a decision asks: `train.strategy=auto` and the timeout of several processes."""

    def __init__(self, cfg, family, precision: str):
        self.cfg, self.family, self.precision, self._counts = cfg, family, precision, None

    def _count(self) -> tuple[int, dict[str, int]]:
        if self._counts is None:
            import torch

            from ..models.construct import build_on_meta
            from ..models.model_config import structure_config

            # eager: every class has it (Gemma-2 has no SDPA), and the attention kernel changes no parameter count
            model = build_on_meta(self.family, structure_config(self.cfg), torch.float32, "eager")
            by: dict[str, int] = {}
            for name, p in model.named_parameters():
                comp = self.family.component_of(name)
                by[comp] = by.get(comp, 0) + p.numel()
            self._counts = sum(by.values()), by
        return self._counts

    def params(self) -> tuple[int, int]:
        """(parameters, bytes per weight)."""
        return self._count()[0], 4 if self.precision == "fp32" else 2

    def checkpoint_bytes(self, cfg) -> tuple[int, str]:
        from .dist_timeout import checkpoint_bytes

        total, by = self._count()
        a = cfg.adapter
        return checkpoint_bytes(a.method, total, by, tuple(a.train_components), tuple(a.freeze_components),
                                self.precision, cfg.train.fp32_trainable)


def _loss_impl(fields: dict, decisions: list, target, processor) -> None:
    """train.loss_impl decided (it needs the vocabulary size for `auto`) and applied to the config in force."""
    cfg = fields["cfg"]
    tok = getattr(processor, "tokenizer", processor)
    vocab = len(tok) if tok is not None and hasattr(tok, "__len__") else None
    import importlib.util

    from ..models.fused_kernels import LIGER_MISSING

    if target.local or target.assume_installed == "here":
        missing = None if importlib.util.find_spec("liger_kernel") is not None else LIGER_MISSING
    else:
        from .target import package_problem

        missing = package_problem(target, "liger_kernel")
    impl, d = decide_loss_impl(cfg.train.loss_impl, target, rows=cfg.train.micro_batch_size * cfg.data.max_length,
                               vocab=vocab, liger_missing=missing)
    if cfg.train.objective != "sft" and impl != "full":  # per-token log-probs come from the logits (objectives/)
        impl, d = "full", Decision("train.loss_impl", "full", f"train.objective={cfg.train.objective}: per-token "
                                   f"log-probabilities from the full logits ({impl} not yet for it)", changed=True)
    decisions.append(d)
    if impl != cfg.train.loss_impl:
        fields["cfg"] = cfg.model_copy(update={"train": cfg.train.model_copy(update={"loss_impl": impl})})


def _liger_problem(target, family, *, probe: bool) -> str | None:
    """Why Liger cannot patch `family` where the run executes: this machine's liger-kernel for a run here; for a
    plan, the target's assumed packages, and where liger-kernel is installed here too, the same import probe
    (a liger-kernel that cannot patch this transformers cannot there either, with the same versions)."""
    import importlib.util

    from ..models.fused_kernels import liger_problem
    from .target import package_problem

    if target.local or target.assume_installed == "here":
        return liger_problem(family, probe=probe)
    missing = package_problem(target, "liger_kernel")
    if missing or importlib.util.find_spec("liger_kernel") is None:
        return missing
    return liger_problem(family, probe=probe)


def _check_best_metric(cfg) -> None:
    """eval.best_metric must be a name the evaluation reports (mixtures: <source>/<metric>, mixture/...)."""
    from ..errors import ConfigError
    from ..evaluate.best_metric import generated_off, not_computed_reason
    from ..evaluate.per_source import check_directions, reported_metrics

    check_directions(cfg)
    known = reported_metrics(cfg)
    if cfg.eval.best_metric not in known:
        raise ConfigError(f"eval.best_metric={cfg.eval.best_metric!r} is not computed (reported: {sorted(known)}"
                          f"{not_computed_reason(cfg)})", where="eval.best_metric",
                          fix="eval.best_metric=eval_loss, or one of the reported names"
                              + (", or eval.generate=true" if generated_off(cfg) else ""))


def resolve_here(run_or_cfg) -> ResolvedRun:
    """A ResolvedRun as is; a RunConfig resolved for running on this machine (train.device)."""
    if isinstance(run_or_cfg, ResolvedRun):
        return run_or_cfg
    from .target import local_target

    return resolve_run(run_or_cfg, local_target(run_or_cfg.train.device), for_training=True)


def _media_caps(processor, model_cfg) -> tuple[MediaCaps, list[Decision]]:
    """Apply the config's pixel caps to the processor (once), then read back what it will do."""
    from .processor import fixed_crop, most_tiles, read_pixel_caps, set_pixel_caps, token_budget

    set_pixel_caps(processor, model_cfg.min_pixels, model_cfg.max_pixels)
    caps = read_pixel_caps(processor)
    decisions = []
    lo = hi = None
    for part, (mn, mx) in caps.items():
        asked = [(k, v, got) for k, v, got in (("model.min_pixels", model_cfg.min_pixels, mn),
                                               ("model.max_pixels", model_cfg.max_pixels, mx)) if v is not None]
        for key, want, got in asked:
            if got != want:
                raise MMTuneError(f"{key}={want} did not take on the {part} (it applies {got})", where=key,
                                  fix="report this processor to mmtune")
        lo, hi = mn, mx
    if caps:
        src = "model.max_pixels" if model_cfg.max_pixels else "the processor's default"
        decisions.append(Decision("model.max_pixels", f"{hi} ({_side(hi)})", src, changed=not model_cfg.max_pixels))
        src = "model.min_pixels" if model_cfg.min_pixels else "the processor's default"
        decisions.append(Decision("model.min_pixels", f"{lo} ({_side(lo)})", src, changed=not model_cfg.min_pixels))
    crop = fixed_crop(processor)
    tiles = most_tiles(processor)
    if crop and tiles:
        decisions.append(Decision("image tiles", f"{crop[1]}x{crop[0]}, up to {tiles} a picture",
                                  "the processor's (each image cut into tiles of this size, by its aspect ratio)"))
    elif crop:
        decisions.append(Decision("image size", f"{crop[1]}x{crop[0]}", "fixed by the processor (every image resized)"))
    budget = token_budget(processor)
    if budget:
        decisions.append(Decision("image tokens", budget, "the processor's (each image at its own aspect ratio)"))
    from ..data.media_tokens import audio_extractor

    fe = audio_extractor(processor)
    rate = int(getattr(fe, "sampling_rate", 16000) or 16000)
    if getattr(processor, "video_processor", None) is not None:
        how = f"{model_cfg.video_fps:g} fps" if model_cfg.video_fps else f"{model_cfg.video_frames} frames uniformly"
        decisions.append(Decision("model.video_frames", how, "model.video_fps" if model_cfg.video_fps else "model.video_frames"))
    if fe is not None:
        decisions.append(Decision("model.audio_max_seconds", f"{model_cfg.audio_max_seconds:g} s at {rate} Hz",
                                  "model.audio_max_seconds; the processor's sampling rate"))
    return MediaCaps(min_pixels=lo, max_pixels=hi, fixed_crop=crop, video_frames=model_cfg.video_frames,
                     video_fps=model_cfg.video_fps, audio_max_seconds=model_cfg.audio_max_seconds,
                     sampling_rate=rate, frame_max_pixels=model_cfg.max_pixels), decisions


def _side(pixels: int | None) -> str:
    if not pixels:
        return "-"
    return f"~{int(pixels ** 0.5)}px square"
