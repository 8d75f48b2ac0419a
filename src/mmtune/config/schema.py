"""The run configuration: one pydantic schema, sections model / data / adapter / train / eval / logging.

Every section forbids unknown keys, so a typo is an error with a did-you-mean instead of a silently
ignored setting (failure mode 19). Names listed in the issue are stable API: scripts rely on them.
"""

from __future__ import annotations

import typing
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from .value_limits import check_value


def _numeric_only(annotation) -> bool:
    """Whether a field takes numbers but no booleans (int, float, int | None, float | Literal[...] ...)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return False
    if not args:
        return annotation in (int, float)
    if bool in args:
        return False
    return any(_numeric_only(a) for a in args if typing.get_origin(a) not in (list, dict, tuple))


class Section(BaseModel):
    # allow_inf_nan=False: `train.lr=inf` (or a NaN) passes gt=0 but is no number a run can use.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, v, info):
        # pydantic's lax mode reads a YAML boolean as a number: `max_steps: true` would run 1 step, `lr: true`
        # train at 1.0. A boolean where a number is meant is a slip (a key pasted under the wrong name).
        if isinstance(v, bool) and info.field_name in cls.model_fields \
                and _numeric_only(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"{str(v).lower()} is a boolean; this key takes a number")
        check_value(cls.__name__, info.field_name, v)  # past int64, a path no file system holds (value_limits.py)
        return v


class ComposedFrom(Section):
    vision: str = Field(description="the vision encoder, as `mmtune compose --vision` takes it (hub id or folder)")
    lm: str = Field(description="the causal LM, as `mmtune compose --lm` takes it")
    projector: Literal["mlp2x_gelu", "linear"] = "mlp2x_gelu"
    vision_feature_layer: int = -2


class ModelConfig(Section):
    # `class` is a Python keyword: the field is `class_`, read and written as `model.class`.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, validate_by_name=True,
                              validate_by_alias=True, serialize_by_alias=True, allow_inf_nan=False)

    name: str = Field(description="hub id, local folder, or tiny/<family> for a tiny random twin; with model.class / "
                                  "model.factory: what the factory is given (a folder, a size name)")
    class_: str | None = Field(None, alias="class", description="bring your own model: import path of its class, "
                                                               "pkg.module:Class (docs/byo_model.md)")
    factory: str | None = Field(None, description="bring your own model: import path of a function "
                                                  "build(name, *, dtype) -> model (docs/byo_model.md)")
    processor: str | None = Field(None, description="bring your own model: a processor folder / hub id, or the import "
                                                    "path of a function make(name) -> processor; default: model.name's")
    components: dict[str, list[str]] | None = Field(
        None, description="bring your own model: component -> parameter-name prefixes, e.g. {vision: [vision_tower.]}; "
                          "default: the class's (or factory's) `mmtune_components`")
    loss: Literal["logits", "output"] = Field(
        "logits", description="logits: mmtune's cross entropy over the answer tokens from the output's logits; output: "
                              "the model's own loss (forward called with labels; a mean over answer tokens)")
    family: str | None = Field(None, description="family name; inferred from the model's config when unset")
    revision: str | None = None
    weights: Literal["pretrained", "random"] = Field(
        "pretrained", description="random: the architecture from its config (model folder, hub cache or embedded "
                                  "public config) with random weights, nothing downloaded; for measuring a run's "
                                  "memory and speed (benchmarks/gpu): the trained model is not useful, export refuses it")
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = "auto"
    gradient_checkpointing: bool = True
    # Media caps. None keeps the processor's own default (read from the processor actually built).
    max_pixels: int | None = Field(None, gt=0, description="max pixels per image/frame before patching")
    min_pixels: int | None = Field(None, gt=0)
    video_frames: int = Field(8, gt=0, description="frames sampled per video")
    video_fps: float | None = Field(None, gt=0, description="sample by fps instead of a fixed count")
    audio_max_seconds: float = Field(30.0, gt=0)
    trust_remote_code: bool = False
    composed_from: ComposedFrom | None = Field(
        None, description="{vision: ID, lm: ID}: what `mmtune compose` builds model.name's folder from; plan and doctor "
                          "read it while that folder does not exist yet (a later stage's recipe): the parts' configs")
    # Accepted only to refuse it with a clear message (failure mode 7): training never offloads layers;
    # load_model puts the whole model on each process's device.
    device_map: str | None = Field(None, description="not supported for training; leave unset")


class SourceConfig(Section):
    """One source of a mixture (data.train as a list; see docs/data.md "Mixtures")."""

    path: str = Field(description="file, folder or synthetic:NAME, as for a single data.train")
    name: str | None = Field(None, description="label in logs and metrics; default: the format (made unique)")
    format: str | None = Field(None, description="default: data.format")
    columns: dict[str, str] | None = Field(None, description="default: data.columns")
    media_root: str | None = Field(None, description="default: data.media_root")
    parts: list[str] | None = Field(None, description="only files whose name holds one of these words "
                                                      "(ChartQA: human, augmented)")
    weight: float | None = Field(None, gt=0, allow_inf_nan=False, description="share of the mixture (relative to the others)")
    samples: int | None = Field(None, gt=0, description="exactly this many training samples per epoch")
    eval: str | bool = Field(True, description="true: this source's own eval split; a path (PATH::SPLIT); false: none")
    metrics: list[str] | None = Field(None, description="default: by format (chartqa relaxed_accuracy, "
                                                        "infovqa anls, ocrvqa exact_match+vqa_accuracy, fsc147 mae+rmse, "
                                                        "asr wer+cer)")

    def __repr__(self) -> str:  # how a mixture reads in messages: "chartqa=path, infovqa=path"
        return f"{self.name}={self.path}"

    @model_validator(mode="after")
    def _weight_or_samples(self):
        if self.weight is not None and self.samples is not None:
            raise ValueError(f"source {self.name or self.path!r}: give weight or samples, not both")
        return self


class DataConfig(Section):
    train: str | list[SourceConfig] | None = Field(
        None, description="JSONL/JSON/parquet/CSV/Arrow file, dataset folder (save_to_disk, or a dataset repository), "
                          "Hub id ORG/NAME, a data.dataset_info name, synthetic:NAME (any of them ::SPLIT), or a "
                          "list of sources (a mixture)")
    eval: str | list[SourceConfig] | None = Field(
        None, description="default for a mixture: every source's own eval split, scored per source")
    dataset_info: str | None = Field(None, description="LLaMA-Factory's dataset_info.json (or its folder): data.train / "
                                                       "data.eval then name its datasets (several: a list or 'a,b')")
    mixture_size: int | None = Field(None, gt=0, description="samples per epoch shared by weighted sources; "
                                                             "default: their records added up")
    mixture_seed: int = 0
    format: str = Field("messages", description="record format: messages | vqa | chartqa | infovqa | ocrvqa | fsc147 | alpaca | "
                                                     "asr (a clip and its transcript) | preference (pairs: docs/preference.md) | "
                                                     "text (raw text, continued pretraining: docs/data.md)")
    columns: dict[str, str] = Field(default_factory=dict, description="rename record fields: ours -> theirs")
    media_root: str | None = Field(None, description="folder that relative media paths are resolved against")
    max_length: int = Field(2048, gt=8, description="sequence cap in tokens, media tokens included")
    on_bad_record: Literal["error", "skip"] = "error"
    group_by_length: bool = Field(False, description="micro-batches of similar length (by the start-up scan's "
                                                     "lengths) to cut padding; deterministic and resumable")
    packing: bool = Field(False, description="several records per row of up to max_length tokens, each attending "
                                             "only to itself (per-record positions, M-RoPE included); see docs/data.md")
    startup_scan: Literal["auto", "before", "background"] = Field(
        "auto", description="the start-up check of every training record: before step 1, or beside training "
                            "(step 1 does not wait; its report arrives when done); auto: beside past 10,000 records "
                            "where nothing needs every length first; see docs/data.md")
    cache_mb: int = Field(1024, ge=0, description="memory for the encodings the loop keeps (ids, labels, pixels; "
                                                  "each record encoded when first drawn); records past it are encoded each "
                                                  "draw. The run's total: train.num_workers workers keep 1/N each")
    streaming: bool = Field(False, description="read data.train as it is needed, never all in memory (sets too large "
                                               "for the disk or memory); needs train.max_steps; see docs/data.md")
    shuffle_buffer: int = Field(1000, gt=0, description="data.streaming: rows held to shuffle from (seeded; the "
                                                        "position resumes exactly)")
    stream_sample: int = Field(1000, gt=0, description="data.streaming: the first K records the start-up check and "
                                                       "the doctor's data pass read (the whole set is not scanned)")
    system_prompt: str | None = None
    # Counting sets (format fsc147) write their text from templates over {object} and {count}; transcription sets
    # (format asr) ask question_template as it is.
    question_template: str | None = Field(None, description="default: 'How many {object} are there? Answer as COUNT: "
                                                            "<number>.' (fsc147), 'Transcribe the audio.' (asr)")
    answer_template: str | None = Field(None, description="default: 'COUNT: {count}'")
    eval_max_samples: int | None = Field(None, gt=0)
    # Synthetic sets (the demo) take their size and seed here.
    synthetic_train_size: int = Field(600, gt=0)
    synthetic_eval_size: int = Field(100, gt=0)
    synthetic_seed: int = 0

    @model_validator(mode="after")
    def _background_scan_limits(self):
        """What needs every record's length (or the whole set) before step 1 cannot have its check run beside it."""
        if self.startup_scan != "background":
            return self
        for key, why in (("packing", "packing plans rows from every record's length"),
                         ("group_by_length", "grouping sorts windows by every record's length"),
                         ("streaming", "a stream's start-up check reads only its first data.stream_sample records")):
            if getattr(self, key):
                raise ValueError(f"data.startup_scan=background and data.{key}=true: {why}, so the check must "
                                 f"finish before step 1; set data.startup_scan=auto (or before)")
        return self

    @model_validator(mode="after")
    def _streaming_limits(self):
        """What a stream cannot do, refused here: each needs every record's length or the whole set up front."""
        if not self.streaming:
            return self
        for key, why in (("packing", "packing plans rows from every record's length"),
                         ("group_by_length", "grouping sorts windows by every record's length")):
            if getattr(self, key):
                raise ValueError(f"data.streaming=true and data.{key}=true: {why}, unknown for a stream; "
                                 f"set data.{key}=false (or data.streaming=false)")
        if isinstance(self.train, list):
            raise ValueError("data.streaming=true with a mixture (data.train as a list): a mixture draws from "
                             "every source's records; stream one source, or set data.streaming=false")
        if isinstance(self.train, str) and self.train.startswith("synthetic:"):
            raise ValueError(f"data.streaming=true with {self.train}: synthetic sets are made in memory; "
                             "set data.streaming=false")
        return self

    @model_validator(mode="before")
    @classmethod
    def _mixture_sources(cls, v):
        """Name every source (unique), and evaluate a mixture on its sources' own eval splits by default."""
        if isinstance(v, dict) and v.get("dataset_info"):  # LLaMA-Factory's `dataset: a,b`: all of each, once
            v = dict(v)
            for key in ("train", "eval"):
                if isinstance(v.get(key), str) and "," in v[key]:
                    v[key] = [{"path": n.strip(), "name": n.strip(), "eval": False} for n in v[key].split(",") if n.strip()]
        if not isinstance(v, dict) or not isinstance(v.get("train"), list):
            return v
        v = dict(v)
        fmt = v.get("format", "messages")
        srcs = [s.model_dump() if isinstance(s, BaseModel) else dict(s) if isinstance(s, dict) else s
                for s in v["train"]]
        if not srcs:
            raise ValueError("data.train is an empty list; give a path or at least one source")
        if any(not isinstance(s, dict) for s in srcs):
            raise ValueError("data.train: each mixture source is a mapping {path, format, weight | samples, ...}")
        base = [s.get("name") or s.get("format") or fmt for s in srcs]
        for i, s in enumerate(srcs):
            if not s.get("name"):
                s["name"] = base[i] if base.count(base[i]) == 1 else f"{base[i]}_{i}"
        names = [s["name"] for s in srcs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"data.train: source names must be unique (repeated: {', '.join(dup)})")
        v["train"] = srcs
        if v.get("eval") is None:
            keep = ("name", "format", "columns", "media_root", "parts", "weight", "metrics")
            v["eval"] = [{**{k: s.get(k) for k in keep}, "path": s["eval"] if isinstance(s.get("eval"), str) else s["path"]}
                         for s in srcs if s.get("eval", True) is not False] or None
        return v

    @field_validator("question_template", "answer_template")
    @classmethod
    def _template_fields(cls, v: str | None) -> str | None:
        import string

        if v is not None:
            names = {f for _, f, _, _ in string.Formatter().parse(v) if f is not None}
            unknown = names - {"object", "count"}
            if unknown:
                raise ValueError(f"template {v!r} uses {', '.join('{' + n + '}' for n in sorted(unknown))}; "
                                 "the fields are {count} and {object}")
        return v


class AdapterConfig(Section):
    method: Literal["lora", "qlora", "lora8bit", "full"] = Field(
        "lora", description="lora (16-bit base), qlora (4-bit NF4/FP4 decoder base, bitsandbytes), lora8bit (int8 "
                            "LLM.int8() decoder base, bitsandbytes), or full fine-tuning")
    r: int = Field(16, gt=0)
    alpha: int | None = Field(None, gt=0, description="defaults to 2*r")
    dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout; 0 unless set under train.objective=dpo / grpo "
                                                        "(config/format_defaults.py)")
    target_modules: list[str] | str = Field(
        "auto", description="auto, all-linear, decoder linear names (q_proj), component:name (vision:qkv), "
                            "component[-k:]:name (last k blocks: vision[-2:]:q_proj), module paths, or one "
                            "regex string over full module names (peft's convention)")

    @field_validator("target_modules")
    @classmethod
    def _regex_compiles(cls, v):
        import re

        if isinstance(v, str) and v not in ("auto", "all-linear"):
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not 'auto', 'all-linear' or a valid regex ({e})") from None
        return v
    use_dora: bool = False
    # Components (vision / audio / projector / decoder / lm_head) trained in full, and frozen.
    train_components: list[str] = Field(default_factory=list)
    freeze_components: list[str] = Field(default_factory=list)
    # Per-component learning-rate multipliers, e.g. {projector: 10}.
    lr_multipliers: dict[str, float] = Field(default_factory=dict)
    bnb_4bit_quant_type: Literal["nf4", "fp4"] = "nf4"
    bnb_4bit_double_quant: bool = True
    bnb_4bit_quant_storage: Literal["auto", "uint8", "bf16", "fp16", "fp32"] = Field(
        "auto", description="qlora: the dtype the packed 4-bit weights are stored in; auto: the compute dtype under "
                            "train.strategy=fsdp (so FSDP2 shards them like 16-bit weights), uint8 otherwise")
    llm_int8_threshold: float = Field(
        6.0, ge=0, description="lora8bit: input features with an |activation| above this run through a 16-bit "
                               "matmul (LLM.int8()'s outlier decomposition); 0 turns it off")
    kbit_upcast: bool = Field(
        False, description="qlora: upcast every non-quantized floating weight (embeddings, norms, vision tower, lm_head) "
                           "to fp32 as peft's prepare_model_for_kbit_training does (~2 GiB more on a 7-8B model); "
                           "false keeps them in the compute dtype")

    @property
    def lora_alpha(self) -> int:
        return self.alpha if self.alpha is not None else 2 * self.r


class AuxLossConfig(Section):
    """One auxiliary loss (mmtune.aux_losses; docs/aux_losses.md)."""

    name: str = Field(description="a registered auxiliary loss, e.g. heatmap")
    weight: float = Field(gt=0, description="its weight in the total loss")
    start: int = Field(0, ge=0, description="weight 0 before this optimizer step")
    warmup: int = Field(0, ge=0, description="then a linear ramp to `weight` over this many steps")
    options: dict = Field(default_factory=dict, description="the loss's own options, e.g. {grid: 14}")

    @model_validator(mode="after")
    def _known(self):
        from ..aux_losses import check_spec

        check_spec(self.name, self.options)  # did-you-mean for names and options, at load time
        return self


# adapter.method values that train LoRA on a frozen base (peft adapters), and those whose base is k-bit (bitsandbytes).
LORA_METHODS = ("lora", "qlora", "lora8bit")
KBIT_METHODS = ("qlora", "lora8bit")

# The parts of a model every family names (models/families.py), adapters, stages and model.components use.
COMPONENTS = ("vision", "audio", "projector", "decoder", "lm_head")


def check_stage_unit(unit: str) -> None:
    """`projector`, `vision_last_2` (the last 2 blocks), `decoder_lora` (LoRA weights hosted there) or
    `lora` (every LoRA weight); ValueError with did-you-mean otherwise (mmtune/stages.py reads them)."""
    import difflib
    import re

    if unit == "lora" or re.fullmatch(rf"({'|'.join(COMPONENTS)})(_lora|_last_[1-9]\d*)?", unit):
        return
    examples = [*COMPONENTS, *(f"{c}_lora" for c in COMPONENTS), "lora", "vision_last_2"]
    close = difflib.get_close_matches(unit, examples, n=1)
    raise ValueError(f"unknown stage unit {unit!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                     + " (a component: vision, audio, projector, decoder, lm_head; COMPONENT_last_K for its "
                       "last K blocks; COMPONENT_lora or lora for LoRA weights)")


class StageConfig(Section):
    """One stage of staged unfreezing (docs/stages.md)."""

    until: int | None = Field(None, gt=0, description="the stage ends after this many optimizer steps of the run "
                                                      "(null: the last stage, to the end)")
    train: list[str] = Field(description="what this stage updates, e.g. [projector, decoder_lora, vision_last_2]")
    lr_multiplier: float = Field(1.0, gt=0, description="multiplies the scheduled learning rate during the stage")

    @field_validator("train")
    @classmethod
    def _units(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("a stage must train something")
        for unit in v:
            check_stage_unit(unit)
        return v


DEFAULT_MAX_STEPS = 100


class DPOConfig(Section):
    """Direct preference optimisation (train.objective=dpo; docs/preference.md)."""

    beta: float = Field(0.1, gt=0, description="strength of the pull towards the reference model (IPO: its tau)")
    loss: Literal["sigmoid", "ipo"] = Field(
        "sigmoid", description="sigmoid: DPO's -log sigmoid(beta * margin), with label_smoothing (cDPO); ipo: IPO's "
                               "squared loss on the per-token mean log-ratios")
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, description="cDPO: the share of pairs taken to be flipped "
                                                                   "(sigmoid loss only)")


class RewardConfig(Section):
    """One GRPO reward (mmtune.evaluate.rewards; docs/preference.md)."""

    name: str = Field(description="a task metric (exact_match, vqa_accuracy, relaxed_accuracy, anls, f1), count "
                                  "(1 / (1 + |count error|), the MAE's reward), format (the answer matches "
                                  "`pattern`), or pkg.module:function for your own")
    weight: float = Field(1.0, description="its weight in the summed reward")
    pattern: str | None = Field(None, description="format: a regular expression the whole answer must match")

    @model_validator(mode="after")
    def _known(self):
        from ..evaluate.rewards import check_reward

        check_reward(self.name, self.pattern)  # did-you-mean at load time
        return self


class GRPOConfig(Section):
    """Group relative policy optimisation (train.objective=grpo; docs/preference.md)."""

    generations: int = Field(4, ge=2, description="completions sampled per prompt (G); advantages are normalised "
                                                  "within each prompt's group")
    max_completion_length: int = Field(16, gt=0, description="new tokens per sampled completion")
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    epsilon: float = Field(0.2, gt=0, lt=1, description="the clipped objective's range: ratio in [1-eps, 1+eps]")
    beta: float = Field(0.0, ge=0, description="weight of the KL to the reference model (0: no reference forward)")
    rewards: list[RewardConfig] = Field(default_factory=lambda: [RewardConfig(name="exact_match")],
                                        description="rewards summed with their weights")


class TrainConfig(Section):
    max_steps: int | None = Field(None, gt=0, description="optimizer steps (100 when train.epochs is unset too); "
                                                         "give this or train.epochs")
    epochs: float | None = Field(None, gt=0, description="passes over the training set (a mixture: over its drawn "
                                                        "epoch); the resolved run turns it into train.max_steps")
    micro_batch_size: int = Field(1, gt=0)
    grad_accum: int = Field(1, gt=0)
    lr: float = Field(2e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    optimizer: Literal["adamw", "adamw_8bit", "paged_adamw", "paged_adamw_8bit", "sgd"] = Field(
        "adamw", description="paged_*: bitsandbytes' paged AdamW (state in CUDA unified memory, outside PyTorch's "
                             "allocator; paged out to host memory under pressure)")
    fp32_trainable: bool = Field(
        True, description="keep trainable weights in fp32 (master weights); false with bf16: pure-bf16 training, "
                          "weights, gradients and optimizer state in bf16")
    scheduler: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_steps: int | None = Field(None, ge=0, description="linear warmup steps (0 when train.warmup_ratio is "
                                                             "unset too); give this or train.warmup_ratio")
    warmup_ratio: float | None = Field(None, ge=0, le=1, description="warmup as a fraction of the run's optimizer "
                                                                     "steps, rounded (the resolved run's warmup_steps)")
    max_grad_norm: float | None = Field(1.0, gt=0, description="clip the gradient's global norm to this before each update "
                                        "(null: no clipping); the logged grad_norm is before clipping: it can be above")
    precision: Literal["fp32", "bf16", "fp16"] = "bf16"
    loss_impl: Literal["auto", "full", "chunked", "liger"] = Field(
        "full", description="full fp32 logits, or the loss over the hidden states in checkpointed chunks (chunked; "
                            "liger: Liger-Kernel's fused linear cross entropy on CUDA); auto: chunked when a micro-batch's "
                            "fp32 logits would exceed 256 MiB (mmtune.loss)")
    fused_kernels: Literal["auto", "liger", "none"] = Field(
        "auto", description="Liger-Kernel's fused RMSNorm / SwiGLU / RoPE patched into the built model (liger), or "
                            "transformers' own modules (none); auto: liger when the run is on CUDA, liger-kernel is "
                            "installed and can patch the family (models/fused_kernels.py). The fused cross entropy is "
                            "train.loss_impl=liger")
    seed: int = 0
    num_workers: int = Field(0, ge=0)
    prefetch: Literal["auto", "none"] = Field(
        "auto", description="with train.num_workers=0, a background thread encodes the next step's micro-batches while this step "
                            "computes (auto: where the machine has a core to spare and the objective's step does not use the "
                            "processor itself; where a core is left beyond torch's threads but the load says none is spare, only "
                            "during the step's backward, which needs Python's GIL far less than the forward; none: each encoded "
                            "when the loop asks, on the step's critical path); with a CPU run's workers, a thread receives their "
                            "micro-batches (auto) or the loop does (none)")
    save_every: int | None = Field(None, gt=0, description="checkpoint every N steps (and at the end)")
    save_every_minutes: float | None = Field(
        30, gt=0, description="also checkpoint when this many minutes have passed since the last save "
                              "(null: by steps only); a kill loses at most this much work")
    keep_last: int = Field(2, ge=1)
    resume: bool = Field(True, description="continue from the latest checkpoint in output_dir if present")
    accept_changes: bool = Field(
        False, description="resume even though the config changes the run (lr, schedule, batch, data, adapter, "
                           "model, stages, aux_losses); the new values are applied and recorded")
    log_every: int = Field(1, gt=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    ignore_plan: bool = Field(False, description="start even if the planner predicts the run will not fit")
    gpu: str | None = Field(None, description="target GPU id for the pre-start plan, e.g. a100-40gb")
    nan_guard: bool = Field(True, description="stop at a non-finite loss, at a non-finite gradient beside a finite loss, "
                                              "and when fp16's loss scale falls below 1 (every update skipped)")
    strategy: Literal["auto", "ddp", "fsdp", "zero2", "zero3"] = Field(
        "auto", description="how several GPUs share the run: ddp (a full copy per GPU), fsdp (PyTorch FSDP2: "
                            "weights, gradients and optimizer state sharded), zero2 / zero3 (DeepSpeed through "
                            "accelerate); auto picks by model size, GPU count and memory (docs/distributed.md)")
    offload: Literal["none", "optimizer"] = Field(
        "none", description="optimizer: the optimizer's state in host (CPU) memory, stepped on the CPU; with "
                            "train.strategy=fsdp FSDP2's CPUOffloadPolicy (parameter and gradient shards too), with "
                            "zero2 / zero3 DeepSpeed's offload_optimizer; refused on one process and under ddp "
                            "(docs/distributed.md#optimizer-offload)")
    dist_timeout_minutes: Literal["auto"] | float = Field(
        "auto", description="several processes: how long a rank waits at a collective (while rank 0 alone saves a "
                            "checkpoint) before the process group ends the run; auto: the time to write and read back "
                            "one checkpoint at 50 MiB/s, at least 30 (docs/distributed.md#collective-timeout)")
    stages: list[StageConfig] = Field(
        default_factory=list, description="staged unfreezing, e.g. [{until: 100, train: [projector]}, "
                                          "{train: [projector, decoder_lora]}]")
    aux_losses: list[AuxLossConfig] = Field(
        default_factory=list, description="extra losses added to the LM loss, e.g. [{name: heatmap, weight: 0.1}]")
    objective: Literal["sft", "dpo", "grpo"] = Field(
        "sft", description="what the step minimises: sft (cross entropy on the answers), dpo (preference pairs "
                           "against a reference model; train.dpo), grpo (sampled completions scored by rewards; "
                           "train.grpo); docs/preference.md")
    dpo: DPOConfig = Field(default_factory=DPOConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)

    @field_validator("dist_timeout_minutes")
    @classmethod
    def _positive_timeout(cls, v):
        if v != "auto" and not v > 0:
            raise ValueError(f"{v:g} minutes: a timeout must be more than 0 (or auto)")
        return v

    @model_validator(mode="before")
    @classmethod
    def _one_length(cls, v):
        """Exactly one of max_steps / epochs, one of warmup_steps / warmup_ratio; the defaults fill in."""
        if not isinstance(v, dict):
            return v
        v = dict(v)
        for steps, other, default in (("max_steps", "epochs", DEFAULT_MAX_STEPS), ("warmup_steps", "warmup_ratio", 0)):
            if v.get(steps) is not None and v.get(other) is not None:
                raise ValueError(f"train.{steps}={v[steps]} and train.{other}={v[other]} both set: give one "
                                 f"(train.{other} is turned into train.{steps} by the resolved run)")
            if v.get(steps) is None and v.get(other) is None:
                v[steps] = default
        return v

    @field_validator("stages")
    @classmethod
    def _stage_order(cls, v: list) -> list:
        ends = [st.until for st in v]
        if v and ends[-1] is not None:
            raise ValueError("the last stage runs to the end of training: leave out its `until`")
        if any(e is None for e in ends[:-1]):
            raise ValueError("every stage but the last needs `until` (the step it ends after)")
        if any(b <= a for a, b in zip(ends[:-2], ends[1:-1])):
            raise ValueError(f"stage `until` steps must increase: {ends[:-1]}")
        return v


class EvalConfig(Section):
    every: int | None = Field(None, gt=0, description="evaluate every N steps (and at the end)")
    metrics: list[str] = Field(default_factory=lambda: ["exact_match"])

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, v: list[str]) -> list[str]:
        # At load time, not at the first evaluation after hours of training.
        import difflib

        from ..evaluate.metrics import METRICS

        for name in v:
            if name not in METRICS:
                close = difflib.get_close_matches(name, list(METRICS), n=1)
                raise ValueError(f"unknown metric {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                                 + f" (known: {', '.join(sorted(METRICS))})")
        return v

    best_metric: str = Field("eval_loss", description="a reported metric (eval.generate=false: eval_loss only); picks best")
    greater_is_better: bool | None = Field(None, description="unset: inferred from eval.best_metric; a contrary value is refused")
    max_new_tokens: int = Field(16, gt=0, description="tokens evaluation generates at most; unset: 10 % over the "
                                "eval set's longest answer + 1, 16 to 1024 (decided at start, docs/data.md Metrics)")
    batch_size: int = Field(4, gt=0)
    generate: bool = True


class LoggingConfig(Section):
    tensorboard: bool = True
    wandb: bool = False
    mlflow: bool = False
    project: str = "mmtune"
    run_name: str | None = None


class RunConfig(Section):
    output_dir: str = "runs/run"
    model: ModelConfig
    data: DataConfig = Field(default_factory=DataConfig)
    adapter: AdapterConfig = Field(default_factory=AdapterConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    # Where each value a profile or the command line set came from (config/loader.py `layered`): printed
    # with the run's decisions; not a config key, not dumped.
    _sources: dict = PrivateAttr(default_factory=dict)

    def __eq__(self, other) -> bool:
        # Two configs are equal when their settings are: where a value came from is not a setting (pydantic's
        # own __eq__ compares private attributes too, so a reloaded config.resolved.yaml would differ).
        if not isinstance(other, RunConfig):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # as pydantic's: a mutable model is not hashable

    @field_validator("output_dir")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("output_dir must not be empty")
        return v

    @model_validator(mode="after")
    def _consistent(self):
        best = self.eval.best_metric
        names = {"eval_loss", *self.eval.metrics} | ({"unparsable"} if {"mae", "rmse"} & set(self.eval.metrics) else set())
        # A mixture reports <source>/<metric> names: the resolved run checks those (evaluate/per_source.py).
        mixture = isinstance(self.data.train, list) or isinstance(self.data.eval, list)
        if not mixture and best not in names:
            raise ValueError(f"eval.best_metric={best!r} is not computed: it must be eval_loss or one of "
                             f"eval.metrics {self.eval.metrics} (add it there, or eval.best_metric=eval_loss)")
        comps = set(COMPONENTS)
        for c in self.model.components or {}:
            if c not in comps:
                raise ValueError(f"model.components: unknown component {c!r}; one of {sorted(comps)}")
        if self.model.loss == "output" and not (self.model.class_ or self.model.factory):
            raise ValueError("model.loss: output is for a model brought by model.class / model.factory; a "
                             "transformers model's loss is mmtune's (model.loss=logits)")
        for key in ("train_components", "freeze_components"):
            for c in getattr(self.adapter, key):
                if c not in comps:
                    raise ValueError(f"adapter.{key}: unknown component {c!r}; one of {sorted(comps)}")
        for c in self.adapter.lr_multipliers:
            if c not in comps | {"lora"}:
                raise ValueError(f"adapter.lr_multipliers: unknown component {c!r}; one of {sorted(comps | {'lora'})}")
        return self
