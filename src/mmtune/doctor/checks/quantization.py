"""k-bit bases (adapter.method=qlora / lora8bit): bitsandbytes where the run executes, int8 matmul on the target
GPU, QLoRA's 4-bit storage under FSDP2, and one trainable dtype per FSDP2 unit. The decisions themselves are
the resolved run's (resolve/quantization.py); these say what a user would otherwise meet mid-run. Sources per
check: docs/doctor.md.
"""

from __future__ import annotations

import importlib.util

from ..findings import error, info, warning
from ..registry import check

KBIT = ("qlora", "lora8bit")


@check("MM090", "bitsandbytes is installed where a k-bit LoRA run (qlora / lora8bit) executes", needs=("cfg",), fast=True)
def kbit_needs_bitsandbytes(ctx):
    """Without it, the build stops at the first 4-bit / int8 layer (transformers: "Using `bitsandbytes` 8-bit
    quantization requires the latest version of bitsandbytes")."""
    cfg = ctx.need("cfg")
    if cfg.adapter.method not in KBIT:
        return
    if importlib.util.find_spec("bitsandbytes") is not None:
        yield from _bitsandbytes_too_old(ctx, cfg)
        return
    bits = "4-bit" if cfg.adapter.method == "qlora" else "int8"
    what = f"adapter.method={cfg.adapter.method} needs bitsandbytes (its {bits} layers)"
    if ctx.has("gpu"):  # planned for another machine: that machine needs it
        yield info(f"{what}; it is not installed on this machine, the GPU machine needs it", where="adapter.method",
                   fix="pip install 'mmtune[gpu]' on the GPU machine")
    else:
        yield error(f"{what}, which is not installed here: the model build stops at the first quantized layer",
                    where="adapter.method", fix="pip install 'mmtune[qlora]', or adapter.method=lora")


def _bitsandbytes_too_old(ctx, cfg):
    """Installed, but older than transformers' minimum: from_pretrained refuses at the quantizer ("4 bit
    quantization requires bitsandbytes>=0.39.0": bitsandbytes-foundation/bitsandbytes#815, artidoro/qlora#26;
    transformers 5 raised it to 0.46.1, huggingface/transformers#41283). Only where the run executes: a plan for
    another GPU says nothing of this machine's packages."""
    from importlib.metadata import PackageNotFoundError, version

    from ...compat.transformers_internals import bitsandbytes_min_version
    from .model_setup import _version  # release numbers as int tuples (a .devN / rc suffix is not compared)

    if ctx.has("gpu"):
        return
    need = bitsandbytes_min_version()
    try:
        have = version("bitsandbytes")
    except PackageNotFoundError:  # a source tree on the path without metadata: its version is unknown
        return
    if need and _version(have) < _version(need):
        import transformers

        yield error(f"adapter.method={cfg.adapter.method}: bitsandbytes {have} is installed, and transformers "
                    f"{transformers.__version__} quantizes only with bitsandbytes>={need}: the model build stops at "
                    "the quantizer", where="adapter.method", fix=f"pip install -U 'bitsandbytes>={need}'")


@check("MM091", "8-bit LoRA's int8 matmul runs well on the target GPU", needs=("cfg", "gpu"), fast=True)
def int8_matmul_supported(ctx):
    """LLM.int8()'s int8 matmul uses the int8 tensor cores of sm_75+ (Turing and newer); older GPUs (V100, P100,
    P40) run bitsandbytes' slow fallback ("Compute capability < 7.5 detected! Only slow 8-bit matmul is supported
    for your GPU", bitsandbytes#529). On Hopper (sm_90) bitsandbytes before 0.45 stopped with "Your GPU does not
    support Int8 Matmul" / wrong results (bitsandbytes#538; axolotl#1827 refused 8-bit LoRA on H100)."""
    cfg, gpu = ctx.need("cfg"), ctx.need("gpu")
    if cfg.adapter.method != "lora8bit":
        return
    major, minor = gpu.compute_capability
    if (major, minor) < (7, 5):
        yield warning(f"adapter.method=lora8bit on {gpu.name} (sm_{major}{minor}): no int8 tensor cores, so "
                      "bitsandbytes runs its slow 8-bit matmul; the plan's step time assumes the fast one",
                      where="adapter.method",
                      fix="adapter.method=qlora (4-bit runs on every GPU, and takes less memory)")
    if major >= 9:
        from importlib.metadata import PackageNotFoundError, version

        try:
            have = version("bitsandbytes")
        except PackageNotFoundError:
            return  # MM090 says it
        if tuple(int(x) for x in have.split(".")[:2] if x.isdigit()) < (0, 45):
            yield error(f"adapter.method=lora8bit on {gpu.name} (sm_{major}{minor}) with bitsandbytes {have}: its int8 "
                        "matmul does not run on Hopper before 0.45 (\"Your GPU does not support Int8 Matmul\")",
                        where="adapter.method", fix="pip install 'bitsandbytes>=0.45', or adapter.method=qlora")


@check("MM092", "QLoRA's 4-bit weights are stored in the compute dtype (or uint8), so FSDP2 shards them intact",
       needs=("cfg",), fast=True)
def qlora_storage_under_fsdp(ctx):
    """FSDP2 gathers every floating weight in the mixed-precision compute dtype: packed 4-bit data stored in
    another float dtype is reinterpreted (on 2 gloo ranks: "shape '[128, 32]' is invalid for input of size
    2048"; fp16 storage under bf16: silently wrong weights). The resolved run refuses it
    (resolve/quantization.py); this reports that refusal with its sources: bitsandbytes#970 (quant_storage
    introduced for FSDP), accelerate#3983 (FSDP2 + QLoRA with the wrong storage: crash or loss 0 / NaN)."""
    cfg = ctx.need("cfg")
    if cfg.adapter.method != "qlora" or cfg.adapter.bnb_4bit_quant_storage in ("auto", "uint8"):
        return
    if ctx.has("resolved"):
        return  # accepted: the storage is the compute dtype
    from ...resolve.quantization import STORAGE_KEY

    for b in ctx.build_errors:
        if b.piece == "resolved" and b.where == STORAGE_KEY:
            b.claimed = True
            yield error(b.what, where=b.where, fix=b.fix)


@check("MM093", "under FSDP2 every wrapped unit's trainable parameters share one dtype", needs=("cfg", "resolved", "adapted"))
def fsdp_uniform_trainable_dtype(ctx):
    """FSDP2 reduces one unit's gradients in one collective and stops at its first forward otherwise ("FSDP
    expects uniform original parameter dtype but got {torch.bfloat16, torch.float32}"); FSDP1's form of the same
    rule is the "Must flatten tensors with uniform dtype" of trl#1723, axolotl#1494, LlamaFactory#3853."""
    resolved = ctx.need("resolved")
    if resolved.strategy != "fsdp":
        return
    adapted = ctx.need("adapted")
    from ...sharding import shard_units

    model = adapted.result.model
    units = shard_units(model, adapted.loaded.family)
    inside = {id(p) for _, u in units for p in u.parameters()}
    groups = [(n, list(u.parameters())) for n, u in units]
    groups.append(("the root", [p for p in model.parameters() if id(p) not in inside]))
    for name, params in groups:
        dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params if p.requires_grad})
        if len(dtypes) > 1:
            yield error(f"FSDP2 unit {name} trains parameters of {', '.join(dtypes)}: FSDP2 stops at its first forward "
                        "(\"FSDP expects uniform original parameter dtype\")", where="train.strategy",
                        fix="train.fp32_trainable=true (every trainable weight fp32), or train.strategy=ddp")
            return


@check("MM228", "a k-bit base (qlora / lora8bit) quantizes most of the decoder: no fused 3-D expert weights left in 16 bits",
       needs=("cfg", "resolved", "loaded"))
def kbit_leaves_fused_experts(ctx):
    """bitsandbytes quantizes nn.Linear layers only. transformers 5 stores a mixture of experts' experts as fused
    3-D parameters (Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE: `mlp.experts.gate_up_proj` / `down_proj`), so a QLoRA
    base of Qwen3-30B-A3B keeps ~54 GiB of experts in bf16: "4-bit" only in its attention (bitsandbytes#1849
    "Failed to quant MoE models with fused expert weights in transformers v5"; axolotl#3787: a 30B-A3B QLoRA floor
    of 17-24 GiB needs expert quantization of its own). The plan counts these bytes (models/kbit_coverage.py);
    this says why they are there: a warning when they are most of the decoder's weight bytes, an info otherwise."""
    cfg = ctx.need("cfg")
    if cfg.adapter.method not in KBIT:
        return
    from ...models.kbit_coverage import kbit_left_out, size_text

    loaded = ctx.need("loaded")
    paths, left, total = kbit_left_out(loaded.model, loaded.family)
    if not left:
        return
    share = left / total if total else 0.0
    what = (f"adapter.method={cfg.adapter.method} quantizes the decoder's nn.Linear layers only: {', '.join(paths)} are "
            f"fused 3-D expert weights, {size_text(left)} ({share:.0%} of the decoder's weight bytes), and stay in "
            f"{cfg.train.precision}, so the k-bit base is not the ~4x smaller model a {cfg.adapter.method} run suggests")
    fix = ("size the GPU by `mmtune plan` (it counts the experts in 16 bits), or train.strategy=fsdp to shard them across "
           "GPUs (ZeRO-3 takes no k-bit base); adapter.method=lora keeps the same expert bytes with unquantized attention")
    if share >= 0.5:
        yield warning(what, where="adapter.method", fix=fix)
    else:
        yield info(what, where="adapter.method", fix=fix)
