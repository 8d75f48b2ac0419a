"""Each automatic decision of a run, as a pure function of (config, target, processor).

One rule per decision, used by every command through `resolve_run`: precision and loss scaling,
attention kernel, quantization, pad id, media caps, data splits, evaluation metrics, trainable
components. Each returns its value and a `Decision` saying why, for the start-up summary and
`config.resolved.yaml`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError, ModelLoadError


@dataclass(frozen=True)
class Decision:
    key: str  # the config key it settles, e.g. train.precision
    value: str  # what was chosen
    reason: str  # why ("requested", "bf16 unsupported on T4 (sm_75) -> fp16 + GradScaler", ...)
    changed: bool = False  # the value differs from what the config asked for

    def line(self) -> str:
        return f"{self.key}: {self.value} ({self.reason})"


# --------------------------------------------------------------------------- weights

def decide_random_weights(cfg) -> Decision:
    """model.weights=random: said once, where every command prints its decisions (the start-up summary,
    config.resolved.yaml, plan), so no reader of a run mistakes it for a fine-tune of the pretrained model."""
    return Decision("model.weights", "random",
                    f"model.weights=random: {cfg.model.name} built from its config with random weights (nothing "
                    "downloaded; processor: the model's own if on disk, else the stand-in); measures memory and "
                    "speed, the trained model is not useful and `mmtune export` refuses it")


# --------------------------------------------------------------------------- CUDA allocator

ALLOC_ENV = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"


def is_expandable(conf: str) -> bool:
    """Whether allocator settings select expandable segments (the last `expandable_segments:` wins)."""
    import re

    found = re.findall(r"expandable_segments\s*:\s*(\w+)", conf or "", flags=re.IGNORECASE)
    return bool(found) and found[-1].lower() == "true"


def decide_cuda_allocator(env) -> tuple[str, bool, Decision]:
    """(settings, expandable segments?, decision) for PyTorch's CUDA caching allocator.

    Default: expandable segments. With the default fixed segments, batches of varying lengths leave cached
    segments of one step's sizes that the next step's tensors do not fit, so a run's reserved memory grows
    past any one step's (published runs of variable-length data measured 4-47 % above a one-step plan,
    docs/plan.md); expandable segments map pages at the end of one growing segment per pool, so the run
    stays near the planned step. A setting in the environment (PYTORCH_CUDA_ALLOC_CONF, or torch's
    newer PYTORCH_ALLOC_CONF) is the user's and is kept; the plan models the segment kind it selects."""
    for name in (ALLOC_ENV, "PYTORCH_ALLOC_CONF"):
        user = (env.get(name) or "").strip()
        if user:
            expandable = is_expandable(user)
            kind = "expandable segments" if expandable else "fixed segments (torch's default)"
            return user, expandable, Decision(ALLOC_ENV, user, f"{name} set in the environment: kept; planned "
                                              f"with {kind}, its other settings are not modelled by the plan")
    return EXPANDABLE, True, Decision(
        ALLOC_ENV, EXPANDABLE, "mmtune's default on CUDA: varying batch lengths fragment torch's default fixed "
        "segments (reserved grows past one step's peak over a run); expandable segments keep the run near the "
        "planned step. Set PYTORCH_CUDA_ALLOC_CONF to choose otherwise")


# --------------------------------------------------------------------------- precision

def decide_precision(requested: str, target) -> tuple[str, bool, Decision]:
    """(precision, loss scaling, decision). bf16 where the GPU lacks it becomes fp16 + GradScaler
    (failure mode 5); fp16 on the CPU is fp16 too: torch's CPU autocast and GradScaler("cpu") through
    accelerate's fp16 path (compat.accelerate_state.enable_cpu_fp16) -- slow, but the same arithmetic as
    a T4's, so a GPU recipe's fp16 path is tested on a CPU."""
    gpu = target.gpu
    if gpu is not None and requested == "bf16" and not gpu.bf16:
        return "fp16", True, Decision("train.precision", "fp16 + GradScaler",
                                      f"bf16 unsupported on {gpu.name} ({target.sm})", changed=True)
    if gpu is None and requested == "fp16":
        return "fp16", True, Decision("train.precision", "fp16 + GradScaler",
                                      f"requested, on {target.describe()}: torch's CPU fp16 autocast and "
                                      "GradScaler('cpu') (slow; bf16 or fp32 are the CPU's fast paths)")
    scaled = requested == "fp16"
    return requested, scaled, Decision("train.precision", requested + (" + GradScaler" if scaled else ""),
                                       f"requested, on {target.describe()}")


# --------------------------------------------------------------------------- attention

def decide_attention(requested: str, target, precision: str, model_lacks_fa2: str | None = None,
                     model_lacks_sdpa: str | None = None) -> tuple[str, Decision]:
    """'sdpa' unless FlashAttention-2 is asked for, or 'auto' and usable (flash_attn here, sm80+, 16-bit, and
    a model class that has it: `model_lacks_fa2` says why not, e.g. Gemma 3 / Mllama in transformers 5.24);
    'eager' where SDPA would be chosen but the model class has none (`model_lacks_sdpa`: Gemma-2)."""
    attn, d = _decide_attention(requested, target, precision, model_lacks_fa2)
    if attn != "sdpa" or not model_lacks_sdpa:
        return attn, d
    if requested == "sdpa":
        raise ConfigError(f"model.attn_implementation=sdpa cannot be used: {model_lacks_sdpa}",
                          where="model.attn_implementation", fix="model.attn_implementation=auto (eager for this model)")
    # eager materialises the (seq x seq) scores per head: the plan traces that, so its memory is the real one
    return "eager", Decision(d.key, "eager", f"{d.reason}; {model_lacks_sdpa}", changed=True)


def _decide_attention(requested: str, target, precision: str, model_lacks_fa2: str | None) -> tuple[str, Decision]:
    from .target import package_problem

    # flash_attn where the run executes: this machine's for a run here, the target's assumed packages for a
    # plan (an A100 planned from a laptop runs FlashAttention-2 once `mmtune[gpu]` is installed there)
    why_not = package_problem(target, "flash_attn")
    if why_not is None and target.gpu is None:
        why_not = "FlashAttention-2 needs a CUDA GPU"
    elif why_not is None and not target.gpu.fa2:
        why_not = f"{target.gpu.name} is {target.sm}, FlashAttention-2 needs sm80+ (failure mode 5)"
    elif why_not is None and precision == "fp32":
        why_not = "FlashAttention-2 needs fp16/bf16 and the run is fp32"
    key = "model.attn_implementation"
    if requested == "flash_attention_2":
        if why_not and target.local:
            raise ConfigError(f"model.attn_implementation=flash_attention_2 cannot be used: {why_not}",
                              where=key, fix="model.attn_implementation=sdpa (or auto)")
        if why_not:  # planned for another machine: the doctor's MM025 says whether that machine can
            return "flash_attention_2", Decision(key, "flash_attention_2", f"requested; here: {why_not}")
        # the model's own lack is the same on every machine: kept as asked and reported by the doctor (MM071),
        # which `mmtune train`'s pre-start check runs, so the load never meets transformers' ValueError
        return "flash_attention_2", Decision(key, "flash_attention_2", "requested" + (f"; {model_lacks_fa2}"
                                                                                      if model_lacks_fa2 else ""))
    if requested == "auto":
        if why_not is None and model_lacks_fa2:
            return "sdpa", Decision(key, "sdpa", f"auto: {model_lacks_fa2}", changed=True)
        if why_not is None:
            where = "installed" if target.local or target.assume_installed == "here" else \
                f"assumed on the target (--assume-installed {target.assume_installed})"
            return "flash_attention_2", Decision(key, "flash_attention_2", f"auto: flash_attn {where}, "
                                                 f"{target.sm}, {precision}", changed=True)
        return "sdpa", Decision(key, "sdpa", f"auto: {why_not}", changed=True)
    return requested, Decision(key, requested, "requested")


def decide_attention_kernels(attn: str, target, precision: str) -> Decision:
    """Which attention kernels the run's attention implementation reaches on the target, in PyTorch's
    order of preference (value: names joined by '>'). The planner reads this to trace each SDPA call
    with the kernel the target would run (plan/attention.py); memory differs by kernel: flash and
    memory-efficient keep O(seq) (output + fp32 log-sum-exp), math materialises the (heads x seq x seq)
    scores and softmax in fp32."""
    key = "attention.kernels"
    if attn == "eager":
        return Decision(key, "eager", "the model's own matmul + softmax: O(seq^2) scores in the compute dtype and "
                        "softmax in fp32, per layer")
    if attn == "flash_attention_2":
        return Decision(key, "flash_attention_2", "FlashAttention-2: O(seq) (planned as SDPA's flash kernel)")
    if target.gpu is None:
        return Decision(key, "cpu", "SDPA on this CPU: torch picks its CPU kernel per call (traced as it runs)")
    if target.gpu.compute_capability >= (8, 0) and precision in ("bf16", "fp16"):
        return Decision(key, "flash>mem_efficient>math", f"SDPA on {target.sm}, {precision}: flash where the call "
                        "allows it (no explicit mask, head dim <= 256), else memory-efficient (no GQA), else math")
    return Decision(key, "mem_efficient>math", f"SDPA on {target.sm}, {precision}: no flash kernel (needs sm80+ and "
                    "16-bit); memory-efficient where the call allows it (no GQA with enable_gqa, aligned head dim), "
                    "else math (O(seq^2) fp32 scores)")


# --------------------------------------------------------------------------- loss path

AUTO_CHUNK_BYTES = 256 << 20  # auto: chunked once a micro-batch's fp32 logits would pass this


def decide_loss_impl(requested: str, target, *, rows: int, vocab: int | None,
                     liger_missing: str | None) -> tuple[str, Decision]:
    """train.loss_impl: full fp32 logits, or the chunked loss (mmtune.loss), with Liger's fused kernel
    where the run is on CUDA and liger_kernel is installed here. `rows`: tokens of one micro-batch;
    `vocab`: the tokenizer's size (None when no processor could be had); `liger_missing`: why liger_kernel
    cannot be imported here (models.fused_kernels.LIGER_MISSING), None when it can.

    `liger` is treated as train.fused_kernels=liger and model.attn_implementation=flash_attention_2 are:
    refused for a run on this machine where it cannot run (no CUDA, liger_kernel missing), kept for a plan
    for another GPU (planned as its chunked torch twin; the doctor's MM081 says what that machine needs).
    `auto` only picks it where it runs."""
    key = "train.loss_impl"
    if requested == "full":
        return "full", Decision(key, "full", "requested: the model's logits in fp32, then cross entropy")
    why_not = (f"Liger's fused linear cross entropy is Triton, CUDA only, and the run is on the {target.describe()}"
               if target.gpu is None else liger_missing)
    if requested == "liger":
        if why_not and (target.gpu is None or target.local):
            raise ConfigError(f"train.loss_impl=liger cannot be used: {why_not}", where=key,
                              fix="train.loss_impl=chunked (the same memory saving in torch) or auto (Liger where "
                                  "it can run); on a CUDA machine: pip install 'mmtune[gpu]' (liger-kernel)")
        how = "Liger-Kernel's fused linear cross entropy on CUDA (planned as the chunked torch path)"
        if why_not:  # planned for another machine: modelled as asked; MM081 checks that machine
            return "liger", Decision(key, "liger", f"requested; here: {why_not}; {how}")
        return "liger", Decision(key, "liger", f"requested; {how}")
    if requested == "auto":
        if vocab is not None and rows * vocab * 4 <= AUTO_CHUNK_BYTES:
            return "full", Decision(key, "full", f"auto: fp32 logits of {rows} tokens x {vocab} words are "
                                    f"{rows * vocab * 4 / 2**20:.0f} MiB (<= 256 MiB)", changed=True)
        why = (f"auto: fp32 logits of {rows} tokens x {vocab} words would be {rows * vocab * 4 / 2**20:.0f} MiB"
               if vocab is not None else "auto: vocabulary unknown here")
        if why_not is None:
            return "liger", Decision(key, "liger", f"{why}; Liger-Kernel's fused linear cross entropy on CUDA "
                                     "(planned as the chunked torch path)", changed=True)
        why = f"{why}; no Liger: {why_not}"
    else:
        why = "requested"
    return "chunked", Decision(key, "chunked", f"{why}; answer-token hidden states in checkpointed chunks, "
                               "one chunk's fp32 logits at a time, in training and in evaluation's loss",
                               changed=requested != "chunked")


# --------------------------------------------------------------------------- fused kernels

def decide_fused_kernels(requested: str, target, family, adapter, liger_problem: str | None) -> tuple[str, Decision]:
    """train.fused_kernels: Liger-Kernel's RMSNorm / SwiGLU / RoPE patched into the model (liger) or not (none).

    `liger_problem`: why liger-kernel cannot patch `family` here (not installed, or its patch does not import
    with this transformers: models.fused_kernels.liger_problem), None when it can. `liger` where it cannot
    run is refused for a run on this machine; a plan for another machine keeps it (like FlashAttention-2),
    and the doctor's MM081 says what that machine needs."""
    from ..models.fused_kernels import describe_patch, liger_family

    key = "train.fused_kernels"
    if requested == "none":
        return "none", Decision(key, "none", "requested: transformers' own RMSNorm, MLP and RoPE")
    patch = liger_family(family)
    if patch is None:
        from ..models.families import FAMILIES

        patched = ", ".join(f.name for f in FAMILIES.values() if f.liger is not None)
        why_not = f"Liger-Kernel has no patch for {family.name} (mmtune applies it to: {patched})"
    elif target.gpu is None:
        why_not = f"Liger's kernels are Triton, CUDA only, and the run is on the {target.describe()}"
    else:
        why_not = liger_problem
    # QLoRA: Liger replaces the norms and the SiLU x up product around the 4-bit projections, which stay
    # bitsandbytes' (LoRA's and bitsandbytes' layers are called by the patched MLP as before).
    qlora = "; QLoRA: the 4-bit projections stay bitsandbytes', Liger fuses the norms and SiLU x up around them" \
        if adapter.method == "qlora" else ""
    if requested == "liger":
        if why_not and (patch is None or target.gpu is None or target.local):
            raise ConfigError(f"train.fused_kernels=liger cannot be used: {why_not}", where=key,
                              fix="train.fused_kernels=none (or auto: Liger where it can run); on a CUDA machine: "
                                  "pip install 'mmtune[gpu]' (liger-kernel)")
        what = describe_patch(patch)
        if why_not:  # planned for another machine: modelled as asked; MM081 checks that machine
            return "liger", Decision(key, f"liger: {what}", f"requested; here: {why_not}{qlora}")
        return "liger", Decision(key, f"liger: {what}", f"requested{qlora}")
    if why_not:
        return "none", Decision(key, "none", f"auto: {why_not}", changed=True)
    return "liger", Decision(key, f"liger: {describe_patch(patch)}", f"auto: CUDA ({target.sm}), liger_kernel "
                             f"installed and able to patch {family.name}{qlora}", changed=True)


# --------------------------------------------------------------------------- quantization

# decided in resolve/quantization.py (decide_kbit): 4-bit / int8 base and the 4-bit storage dtype

def decide_kbit_upcast(adapter) -> Decision | None:
    if adapter.method not in ("qlora", "lora8bit"):
        return None
    if adapter.kbit_upcast:
        return Decision("adapter.kbit_upcast", "true", "requested: non-quantized weights upcast to fp32, as peft's "
                        "prepare_model_for_kbit_training (about 2 GiB more on a 7-8B model)")
    return Decision("adapter.kbit_upcast", "false", "non-quantized weights stay in the compute dtype "
                    "(adapter.kbit_upcast=true: fp32, as peft's prepare_model_for_kbit_training)")


def decide_trainable_dtype(train, precision: str) -> Decision:
    """train.fp32_trainable: fp32 master weights (default) or pure-bf16 training."""
    key = "train.fp32_trainable"
    if train.fp32_trainable:
        return Decision(key, "true", "trainable weights, gradients and optimizer state in fp32")
    if precision == "fp16":
        raise ConfigError("train.fp32_trainable=false needs bf16: fp16's GradScaler refuses to unscale fp16 "
                          "gradients", where=key, fix="train.precision=bf16 on a GPU with bf16, or train.fp32_trainable=true")
    if precision == "fp32":
        return Decision(key, "false", "the run is fp32: trainable weights are fp32 anyway")
    return Decision(key, "false", "requested: pure-bf16 training, trainable weights, gradients and optimizer state "
                    "in bf16 (no fp32 master weights)")


# --------------------------------------------------------------------------- pad id

def decide_pad_id(processor) -> tuple[int, Decision]:
    tok = getattr(processor, "tokenizer", processor)
    if tok.pad_token_id is not None:
        return int(tok.pad_token_id), Decision("pad_token_id", str(tok.pad_token_id),
                                               f"the tokenizer's pad token {tok.pad_token!r}")
    if tok.eos_token_id is not None:
        return int(tok.eos_token_id), Decision("pad_token_id", str(tok.eos_token_id),
                                               f"no pad token: the eos token {tok.eos_token!r} (labels mask it)",
                                               changed=True)
    raise ModelLoadError("the tokenizer has neither a pad nor an eos token", where="model.name",
                         fix="use a tokenizer with a pad token")


# --------------------------------------------------------------------------- evaluation

def decide_best_metric(cfg) -> tuple[bool, Decision]:
    """Which way eval.best_metric improves (evaluate/best_metric.py: a requested direction that contradicts
    the metric is refused there)."""
    from ..evaluate.best_metric import best_is_higher

    g, why = best_is_higher(cfg)
    return g, Decision("eval.greater_is_better", str(g), why, changed=cfg.eval.greater_is_better is None)


# --------------------------------------------------------------------------- components

def trainable_components(adapter, family) -> tuple[str, ...]:
    """What the optimizer updates, by component: LoRA on the decoder (or everything for full), plus
    components trained in full, minus frozen ones."""
    have = set(family.components)
    for key in ("train_components", "freeze_components"):
        missing = [c for c in getattr(adapter, key) if c not in have]
        if missing:
            raise ConfigError(f"adapter.{key}: {family.name} has no {', '.join(missing)} component",
                              where=f"adapter.{key}", fix=f"components of {family.name}: {', '.join(sorted(have))}")
    if adapter.method == "full":
        comps = [c for c in family.components if c not in adapter.freeze_components]
    else:
        comps = ["decoder (LoRA)"] + [c for c in adapter.train_components if c not in adapter.freeze_components]
    return tuple(comps)


def trained_set(adapter, family, stages=None) -> dict[str, str]:
    """The resolved trainable set, by component: component -> how it learns ("LoRA", "in full", "last 2
    blocks", each with where that comes from). One rule for the resolved run's `trainable`, the doctor's
    component checks (MM010) and its learning-rate check (MM032): a component a stage of train.stages
    trains is trained, a frozen one is not."""
    out: dict[str, str] = {}
    if adapter.method == "full":
        for c in family.components:
            if c not in adapter.freeze_components:
                out[c] = "in full (adapter.method=full)"
    else:
        out["decoder"] = f"LoRA (adapter.method={adapter.method})"
        for c in adapter.train_components:
            if c not in adapter.freeze_components:
                out[c] = "in full (adapter.train_components)"
    from ..stages import unit_component

    for i, st in enumerate(stages or ()):
        for unit in st.train:
            comp, how = unit_component(unit)
            out.setdefault(comp, f"{how} (train.stages[{i}]: {unit})")
    return out


# --------------------------------------------------------------------------- strategy

SHARDED = ("fsdp", "zero3")  # strategies that shard the weights themselves (every rank runs every tower)
# `auto` keeps a full copy per GPU (ddp, the fastest) while weights + trainable state take at most this
# share of one GPU's memory; the rest is for activations, which no strategy shards.
DDP_STATE_SHARE = 0.5
LORA_SHARE = 50  # LoRA's trainable weights: at most 1/50 of the model (2 %), as the run's estimates count them


def decide_strategy(requested: str, target, adapter, stages, model_params, optimizer: str = "adamw") -> tuple[str, Decision]:
    """How the processes share the run: ddp | fsdp | zero2 | zero3.

    `model_params()` -> (total parameters, bytes per frozen weight), called only when `auto` must weigh
    the model against the GPU. QLoRA's 4-bit weights are sharded by FSDP2 (stored in the compute dtype:
    resolve/quantization.py) but not by ZeRO-3 here, int8 weights by neither, and staged unfreezing
    changes which parameters learn mid-run, which sharded optimizers do not allow: each is refused with
    the strategy that works. So are bitsandbytes' optimizers (`optimizer`, train.optimizer) over FSDP2's
    sharded parameters on several processes: their kernels take plain tensors, not DTensor shards."""
    key, n = "train.strategy", target.processes
    if adapter.method == "qlora" and requested == "zero3":
        raise ConfigError("train.strategy=zero3 cannot shard QLoRA's 4-bit decoder weights (DeepSpeed ZeRO-3 does not "
                          "partition bitsandbytes Params4bit here)", where=key,
                          fix="train.strategy=fsdp (FSDP2 shards the 4-bit weights stored in the compute dtype), "
                              "train.strategy=ddp (the 4-bit weights fit on each GPU; QLoRA's point) or train.strategy=zero2")
    if adapter.method == "lora8bit" and requested in SHARDED:
        raise ConfigError(f"train.strategy={requested} cannot shard 8-bit LoRA's int8 decoder weights: their scales live "
                          "outside the parameter (bitsandbytes Int8Params' SCB), so a gathered shard has none "
                          "(\"Must flatten tensors with uniform dtype ... torch.int8\", bitsandbytes#1709)", where=key,
                          fix="train.strategy=ddp or zero2 (each GPU holds the int8 model), or adapter.method=qlora with "
                              "train.strategy=fsdp to shard a 4-bit base")
    if stages and requested in ("zero2", "zero3"):
        raise ConfigError(f"train.strategy={requested} with train.stages: a sharded optimizer cannot change which "
                          "parameters learn in the middle of a run", where=key,
                          fix="train.strategy=ddp or fsdp for staged unfreezing, or one run per stage (docs/stages.md)")
    if n > 1 and requested == "fsdp":
        _bitsandbytes_over_fsdp(optimizer, "requested")
    if requested != "auto":
        why = "requested" + ("; one process: nothing to shard, checkpoints keep the sharded format"
                             if n == 1 and requested == "fsdp" else "")
        return requested, Decision(key, requested, why)
    if n == 1:
        return "ddp", Decision(key, "ddp", "auto: one process (nothing to share)", changed=True)
    if adapter.method in ("qlora", "lora8bit"):
        return "ddp", Decision(key, "ddp", f"auto: {adapter.method}'s k-bit weights are meant to fit each GPU whole "
                               "(train.strategy=fsdp shards a 4-bit base)", changed=True)
    if stages:
        return "ddp", Decision(key, "ddp", "auto: staged unfreezing needs the whole optimizer on each rank",
                               changed=True)
    if target.gpu is None:
        return "ddp", Decision(key, "ddp", f"auto: {n} CPU processes (no GPU memory to save)", changed=True)
    total, weight_bytes = model_params()
    size = f"{total / 1e9:.1f} B" if total >= 1e9 else f"{total / 1e6:.1f} M"
    trainable = total if adapter.method == "full" else total // LORA_SHARE  # LoRA + trained towers: a few % at most
    per_gpu = total * weight_bytes + trainable * (4 + 4 + 8)  # fp32 master + gradient + Adam moments
    mem = target.gpu.memory_bytes
    gib = 2 ** 30
    if per_gpu <= DDP_STATE_SHARE * mem:
        return "ddp", Decision(key, "ddp", f"auto: {size} parameters; weights + trainable state "
                               f"~{per_gpu / gib:.0f} GiB fit whole on each {target.gpu.name} "
                               f"({mem / gib:.0f} GiB) with room for activations: a copy per GPU is the fastest",
                               changed=True)
    _bitsandbytes_over_fsdp(optimizer, f"auto: {size} parameters do not fit whole on each {target.gpu.name}")
    return "fsdp", Decision(key, "fsdp", f"auto: {size} parameters; weights + trainable state "
                            f"~{per_gpu / gib:.0f} GiB are over {DDP_STATE_SHARE:.0%} of one {target.gpu.name} "
                            f"({mem / gib:.0f} GiB): sharded over {n} GPUs, ~{per_gpu / n / gib:.1f} GiB each",
                            changed=True)


def _bitsandbytes_over_fsdp(optimizer: str, why: str) -> None:
    """bitsandbytes' optimizer steps run its own operators on each parameter; under FSDP2 on several processes
    the parameters are DTensor shards, and the first update fails after the model has loaded: "Operator
    bitsandbytes.optimizer_update_32bit.default does not have a sharding strategy registered" (2 CPU ranks;
    bitsandbytes#89, LlamaFactory#5619). One process keeps plain tensors, and DDP each rank's whole copy."""
    from ..optim import BITSANDBYTES

    if optimizer in BITSANDBYTES:
        raise ConfigError(f"train.strategy=fsdp ({why}) with train.optimizer={optimizer}: bitsandbytes' optimizer "
                          "kernels step plain tensors, not FSDP2's sharded parameters (DTensor), so the first update "
                          "would fail with \"... does not have a sharding strategy registered\"", where="train.optimizer",
                          fix="train.optimizer=adamw (its state sharded with the parameters), or train.strategy=ddp "
                              f"to keep {optimizer} (each GPU holds the whole model and its state)")


# --------------------------------------------------------------------------- sequence packing

def decide_packing(cfg, family, attn: str) -> Decision | None:
    """data.packing: on where it is exact; a ConfigError saying why where it is not."""
    if not cfg.data.packing:
        return None
    key = "data.packing"
    why_not = None
    if not family.packable:  # Family.packable: verified exact on the tiny twin (tests/data/test_packing.py)
        from ..models.families import FAMILIES

        packable = ", ".join(f.name for f in FAMILIES.values() if f.packable)
        why_not = (f"{family.name} is not verified exact under packing ("
                   + (family.unpackable_reason or "audio encoders and Omni's interleaved time positions are per "
                      "batch row") + f"); packable: {packable}")
    elif cfg.train.aux_losses:
        why_not = "auxiliary losses read their targets per batch row, and a packed row holds several records"
    elif cfg.data.group_by_length:
        why_not = "packing already fills rows; data.group_by_length would only reorder them"
    if why_not:
        raise ConfigError(f"data.packing=true cannot be used: {why_not}", where=key, fix="data.packing=false")
    how = {"flash_attention_2": "FlashAttention-2 varlen over the records, found from position_ids",
           "sdpa": "SDPA with a block-diagonal causal mask built from position_ids",
           "eager": "a block-diagonal causal mask built from position_ids"}[attn]
    rope = " and 3-D M-RoPE positions per record" if family.mrope else ""
    from ..data.packing import joins_rows

    mbs = cfg.train.micro_batch_size
    if joins_rows(attn) and mbs > 1:  # FA2 finds the records of a one-row batch only (data/packing.py)
        value = (f"rows of up to {cfg.data.max_length} tokens (data.max_length), {mbs} per micro-batch, given to "
                 f"the model joined as one sequence of up to {mbs * cfg.data.max_length} tokens")
        how += " (transformers' FA2 reads them only in a one-row batch, so a micro-batch's rows are joined)"
    else:
        value = f"rows of up to {cfg.data.max_length} tokens (data.max_length), {mbs} per micro-batch"
    return Decision(key, value,
                    f"requested; {how}; positions restart per record{rope}; loss summed over the same answer tokens")


def decide_padding_mask(cfg, family, attn: str, kernels: str) -> tuple[bool, Decision | None]:
    """(whether the model is given the training batch's attention_mask, the decision).

    The training collator pads on the right, so under a causal attention every real token attends only to real
    tokens before it, and a pad position is never attended: the mask changes nothing the loss reads. Without it
    SDPA runs causal (is_causal: no (seq x seq) mask built and applied every forward; on CUDA its flash kernel,
    which refuses an explicit mask). Where the family is verified exact that way (Family.unmasked_right_padding,
    tests/train/test_padding_mask.py), the collator keeps the mask as `token_mask` (tokens counted, never given
    to the model). `kernels`: the attention.kernels decision's value. A packed batch has no mask to leave out
    (data/packing.py): no decision."""
    if cfg.data.packing:
        return True, None
    key = "attention.padding_mask"
    if cfg.train.objective == "grpo":
        why = "train.objective=grpo: its prompts are padded on the left, for generation"
    elif attn == "flash_attention_2":
        why = "FlashAttention-2 reads the mask to skip the padding (varlen)"
    elif attn != "sdpa":
        why = f"{attn} attention builds a (seq x seq) mask with or without it"
    elif kernels == "mem_efficient>math":
        why = ("no flash kernel on this target: without a mask transformers asks SDPA for GQA, which the "
               "memory-efficient kernel refuses, so a GQA model would run the math kernel (O(seq^2) fp32 scores)")
    elif not family.unmasked_right_padding:
        why = f"{family.name} is not verified exact without it (Family.unmasked_right_padding)"
    else:
        return False, Decision(key, "left out", "right padding under a causal attention: no real token attends a "
                               "pad, so SDPA runs causal without a (seq x seq) mask (verified exact for "
                               f"{family.name}); the mask only counts tokens")
    return True, Decision(key, "given", why)


def decide_patch_embed(family) -> tuple[bool, Decision | None]:
    """(whether the vision tower's patch embedding runs as one matmul, the decision; None: the family has none
    verified, Family.patch_embed_matmul). Exact (same weight, same products), so no setting turns it off."""
    if not family.patch_embed_matmul:
        return False, None
    return True, Decision("model.patch_embed", "one matmul (F.linear on the Conv3d's weight)",
                          "a Conv3d whose kernel equals its stride, over patches the processor flattened, is a matmul; "
                          "as a convolution 2.4-3.4x its time on a CPU and far slower with some GPU / cuDNN / dtype "
                          "(models/patch_embed.py); verified exact for " + family.name, changed=True)
