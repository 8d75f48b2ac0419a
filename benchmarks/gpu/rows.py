"""The rows of each subcommand: what runs, what it needs, what it costs (seconds, estimated).

paths:      every recipe under recipes/ (its architecture from its config, random weights, full width), the
            recipe as written in bf16 / SDPA / checkpointing on, then one row per path that differs from it:
            fp16 + loss scaling, each other adapter method (LoRA / QLoRA NF4 / full), FlashAttention-2,
            checkpointing off, 8-bit AdamW, Liger's fused loss, DDP. Ordered path by path across recipes,
            so a short budget covers every recipe's base row first.
planner:    34 configurations (text / image / video / audio; LoRA, QLoRA, full; seq 512..8192; batch 1..8;
            checkpointing on/off), each planned for this GPU and measured by `mmtune plan --verify`'s code.
throughput: benchmarks/throughput.py's variants (mmtune, plain transformers+peft loop, HF Trainer, TRL
            SFTTrainer), one row per variant and repeat, interleaved as that script does.

`--tiny` swaps each model for its tiny twin (same class, shrunk config: mmtune.models.smoke_twin) and caps
sequence length and batch, so the same rows run on a CPU in seconds: that is how the harness is tested.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS = 20  # optimizer steps of a paths row
FULL_LAYERS = 8  # decoder layers of a full fine-tuning row of a 7-8B model (see `full_layers`)
TINY_MAX_LENGTH = 256


@dataclass
class Row:
    id: str
    kind: str  # paths | planner | throughput
    recipe: str | None = None  # path relative to the repository root
    overrides: list[str] = field(default_factory=list)
    layers: int | None = None  # decoder cut to this many layers (memory), stated in the row
    layers_reason: str | None = None
    declared: dict = field(default_factory=dict)  # planner: images [[w, h]], videos [[f, w, h]], audio_seconds [s]
    needs: list[str] = field(default_factory=list)  # optional packages (env.OPTIONAL) / "cuda" / "gpus>=2"
    est_s: float = 60.0
    notes: list[str] = field(default_factory=list)
    variant: str | None = None  # throughput: ours | plain | trainer | sft
    repeat: int = 0
    skip: str | None = None  # a reason known when the rows are made (no config of the model here)

    steps: int = 20  # paths: optimizer steps (the harness's --steps)

    def __post_init__(self):
        self.overrides = merged(self.overrides)

    def spec(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def merged(overrides: list[str]) -> list[str]:
    """key=value overrides with each key once, the last value winning, in first-seen order (a row's extra
    overrides replace its base's: the command printed is the one that runs)."""
    out: dict[str, str] = {}
    for o in overrides:
        k, v = o.split("=", 1)
        out[k] = v
    return [f"{k}={v}" for k, v in out.items()]


def full_layers(tiny: bool) -> tuple[int | None, str | None]:
    """Full fine-tuning of a 7-8B model keeps fp32 weights, fp32 gradients and two fp32 AdamW moments: 16 bytes a
    parameter, ~120 GB, over an 80 GB card. 8 decoder layers (~2.8B parameters with the embeddings and towers,
    ~45 GB of states) leave room for activations on 80 GB; a tiny twin needs no cut."""
    if tiny:
        return None, None
    return FULL_LAYERS, (f"full fine-tuning: fp32 weights + gradients + AdamW moments are 16 bytes a parameter "
                         f"(~120 GB for 7B); decoder cut to {FULL_LAYERS} layers so it fits 80 GB")


# --------------------------------------------------------------------------- paths

def recipes() -> list[Path]:
    return sorted((ROOT / "recipes").glob("*.yaml"))


def _recipe_facts(path: Path, tiny: bool) -> dict:
    """What the rows of a recipe need to know: its model (or tiny twin), method, modalities, data, and
    whether this machine has the model's config (an embedded one, a folder or the hub cache)."""
    from mmtune.config import load_config
    from mmtune.models.model_config import meta_config, resolve_family
    from mmtune.models.smoke_twin import smoke_twin
    from mmtune.models.tiny import is_tiny

    cfg = load_config(path, [])
    facts = {"name": cfg.model.name, "method": cfg.adapter.method, "precision": cfg.train.precision,
             "optimizer": cfg.train.optimizer, "mixture": isinstance(cfg.data.train, list),
             "data": cfg.data.train, "grad_accum": cfg.train.grad_accum, "skip": None, "twin": None}
    if tiny and not is_tiny(cfg.model.name):
        facts["twin"] = smoke_twin(cfg.model.name, family=cfg.model.family)
    if not tiny and not is_tiny(cfg.model.name) and meta_config(cfg) is None:
        facts["skip"] = (f"no config of {cfg.model.name} on this machine and none embedded in mmtune (a composed or "
                         "unreleased model): mmtune download it, or compose it, then run this row")
        facts["modalities"] = ()
        return facts
    probe = cfg if not facts["twin"] else load_config(path, [f"model.name={facts['twin']}"])
    facts["modalities"] = tuple(resolve_family(probe).modalities)
    return facts


def _common(facts: dict, device: str, tiny: bool, steps: int) -> list[str]:
    """Overrides every paths row carries: random weights, STEPS steps logged each, no eval, no checkpoint
    during the steps (the worker stops after step STEPS, before the final save: `stop_after`)."""
    ov = ["model.weights=random", f"train.max_steps={steps + 1}", "train.epochs=null", "train.log_every=1",
          "train.warmup_steps=0", "train.warmup_ratio=null", "train.save_every=null", "train.save_every_minutes=null",
          "data.eval=null", "eval.every=null", "logging.tensorboard=false", "logging.wandb=false",
          "logging.mlflow=false", "train.resume=false", f"train.device={device}", "train.gpu=null",
          "train.ignore_plan=true"]
    if facts["twin"]:
        ov.append(f"model.name={facts['twin']}")
    if not facts["data"]:  # a recipe written for planning names no data: the family's synthetic set
        ov.append("data.train=" + ("synthetic:counting" if "image" in facts["modalities"] else "synthetic:arithmetic"))
    if facts["mixture"]:
        ov.append(f"data.mixture_size={16 if tiny else 256}")
    if facts["grad_accum"] > 2:
        ov.append("train.grad_accum=2")
    if tiny:
        ov += [f"data.max_length={TINY_MAX_LENGTH * 4}", "train.num_workers=0", "data.synthetic_train_size=16"]
    return ov


PATH_AXES = ("base", "fp16", "lora", "qlora", "full", "fa2", "ckpt_off", "adamw8bit", "liger", "ddp")


def _path_row(ctx: dict, axis: str, extra: list[str], needs=(), est_factor: float = 1.0) -> Row:
    """One paths row: the recipe's base overrides plus `extra` (one path that differs from the base)."""
    facts, tiny = ctx["facts"], ctx["tiny"]
    method = next((o.split("=", 1)[1] for o in extra if o.startswith("adapter.method=")), facts["method"])
    layers, why = (None, None)
    if method == "full" and not facts["twin"] and not facts["name"].startswith("tiny/"):
        layers, why = full_layers(tiny)
    # the recipe's own QLoRA / 8-bit optimizer needs bitsandbytes, except on the rows that replace them
    base_needs = ctx["needs_base"] if axis not in ("lora", "full") else []
    return Row(id=f"paths/{ctx['stem']}/{axis}", kind="paths", recipe=ctx["rel"], overrides=ctx["base"] + list(extra),
               needs=sorted(set(base_needs) | set(needs)), layers=layers, layers_reason=why,
               est_s=ctx["est"] * est_factor, notes=list(ctx["notes"]), skip=facts["skip"], steps=ctx["steps"])


def paths_rows(device: str, tiny: bool, steps: int = STEPS) -> list[Row]:
    by_axis: dict[str, list[Row]] = {a: [] for a in PATH_AXES}
    for path in recipes():
        facts = _recipe_facts(path, tiny)
        base = _common(facts, device, tiny, steps) + [
            "train.precision=bf16", "model.attn_implementation=sdpa", "model.gradient_checkpointing=true"]
        notes = [f"grad_accum {facts['grad_accum']} -> 2 (a path's {steps} steps, not the recipe's batch)"] \
            if facts["grad_accum"] > 2 else []
        if facts["twin"]:
            notes.append(f"tiny twin {facts['twin']} of {facts['name']}")
        ctx = {"facts": facts, "tiny": tiny, "stem": path.stem, "rel": str(path.relative_to(ROOT)), "base": base,
               "notes": notes, "est": 20.0 if tiny else 75.0, "steps": steps,
               "needs_base": ["bitsandbytes"] if facts["method"] == "qlora" or "8bit" in facts["optimizer"] else []}
        rows = [_path_row(ctx, "base", []), _path_row(ctx, "fp16", ["train.precision=fp16"])]
        for m in ("lora", "qlora", "full"):
            if m != facts["method"]:
                rows.append(_path_row(ctx, m, [f"adapter.method={m}"] + (["train.optimizer=adamw"] if m != "qlora" else []),
                                      needs=["bitsandbytes"] if m == "qlora" else ()))
        rows += [_path_row(ctx, "fa2", ["model.attn_implementation=flash_attention_2"], needs=["flash-attn", "cuda"]),
                 _path_row(ctx, "ckpt_off", ["model.gradient_checkpointing=false"]),
                 _path_row(ctx, "adamw8bit", ["train.optimizer=adamw_8bit"], needs=["bitsandbytes", "cuda"]),
                 _path_row(ctx, "liger", ["train.loss_impl=liger"], needs=["liger-kernel", "cuda"]),
                 _path_row(ctx, "ddp", [], needs=["gpus>=2"], est_factor=1.5)]
        for r in rows:
            by_axis[r.id.rsplit("/", 1)[1]].append(r)
    return [r for axis in PATH_AXES for r in by_axis[axis]]


# --------------------------------------------------------------------------- planner

# (id, recipe, overrides, declared media, needs). Text / image / video / audio; LoRA, QLoRA, full; seq 512..8192;
# batch 1..8; checkpointing on and off. Planned and measured with no data (declared media, records filled to
# data.max_length), as `mmtune plan --image/--video/--audio` does.
_T = "recipes/seed001_qwen2.5-7b_lora.yaml"
_VL = "recipes/qwen2_vl_7b_lora.yaml"
_VL25 = "recipes/qwen2_5_vl_7b_lora.yaml"
_VL3 = "recipes/qwen3_vl_8b_lora.yaml"
_LLAVA = "recipes/llava_1_5_7b_lora.yaml"
_OV = "recipes/seed002_docvqa_mixture_8gpu.yaml"
_AUD = "recipes/qwen2_audio_7b_lora.yaml"
_OMNI = "recipes/seed000_video_audio_qa.yaml"
_LLAMA = ["model.name=meta-llama/Llama-3.1-8B-Instruct"]


def _p(seq, mbs, method="lora", ckpt=True, precision="bf16", extra=()):
    return [f"data.max_length={seq}", f"train.micro_batch_size={mbs}", f"adapter.method={method}",
            f"model.gradient_checkpointing={'true' if ckpt else 'false'}", f"train.precision={precision}",
            *extra]


IMG = {"images": [[1280, 720]]}
PLANNER = [
    # text: Qwen2.5-7B (seed 001) and Llama-3.1-8B
    ("text/qwen2.5-7b/lora/fp16/s512/b1/ckpt", _T, _p(512, 1, precision="fp16"), {}),
    ("text/qwen2.5-7b/lora/s512/b8/nockpt", _T, _p(512, 8, ckpt=False), {}),
    ("text/qwen2.5-7b/lora/s2048/b4/ckpt", _T, _p(2048, 4), {}),
    ("text/qwen2.5-7b/lora/s4096/b2/nockpt", _T, _p(4096, 2, ckpt=False), {}),
    ("text/qwen2.5-7b/lora/s8192/b1/ckpt", _T, _p(8192, 1), {}),
    ("text/qwen2.5-7b/lora/s8192/b4/ckpt", _T, _p(8192, 4), {}),
    ("text/qwen2.5-7b/qlora/s2048/b2/ckpt", _T, _p(2048, 2, "qlora"), {}),
    ("text/qwen2.5-7b/qlora/s8192/b1/nockpt", _T, _p(8192, 1, "qlora", ckpt=False), {}),
    ("text/qwen2.5-7b/full/s1024/b2/ckpt", _T, _p(1024, 2, "full"), {}),
    ("text/qwen2.5-7b/full/s512/b1/nockpt", _T, _p(512, 1, "full", ckpt=False), {}),
    ("text/llama-3.1-8b/lora/s4096/b1/ckpt", _T, _LLAMA + _p(4096, 1), {}),
    ("text/llama-3.1-8b/qlora/s1024/b8/ckpt", _T, _LLAMA + _p(1024, 8, "qlora"), {}),
    # image
    ("image/qwen2-vl-7b/lora/s2048/b2/ckpt", _VL, _p(2048, 2), IMG),
    ("image/qwen2-vl-7b/lora/s1024/b8/nockpt", _VL, _p(1024, 8, ckpt=False), {"images": [[512, 512]]}),
    ("image/qwen2-vl-7b/qlora/s4096/b1/ckpt", _VL, _p(4096, 1, "qlora"), IMG),
    ("image/qwen2-vl-7b/full/s1024/b1/ckpt", _VL, _p(1024, 1, "full"), {"images": [[448, 448]]}),
    ("image/qwen2.5-vl-7b/lora/s2048/b2/ckpt", _VL25, _p(2048, 2), {"images": [[1024, 1024]]}),
    ("image/qwen2.5-vl-7b/lora/s8192/b1/nockpt", _VL25, _p(8192, 1, ckpt=False), {"images": [[1920, 1080]]}),
    ("image/qwen3-vl-8b/lora/s2048/b2/ckpt", _VL3, _p(2048, 2), {"images": [[1024, 768]]}),
    ("image/qwen3-vl-8b/qlora/s4096/b4/ckpt", _VL3, _p(4096, 4, "qlora"), {"images": [[1024, 768]]}),
    ("image/llava-1.5-7b/lora/s1024/b8/ckpt", _LLAVA, _p(1024, 8), {"images": [[336, 336]]}),
    ("image/llava-1.5-7b/lora/s2048/b4/nockpt", _LLAVA, _p(2048, 4, ckpt=False), {"images": [[336, 336]]}),
    ("image/llava-onevision-7b/lora/s8192/b1/ckpt", _OV, ["eval.best_metric=eval_loss"] + _p(8192, 1),
     {"images": [[1280, 960]]}),
    # video
    ("video/qwen2-vl-7b/lora/s4096/b1/ckpt", _VL, _p(4096, 1), {"videos": [[16, 448, 448]]}),
    ("video/qwen2-vl-7b/lora/s2048/b2/nockpt", _VL, _p(2048, 2, ckpt=False), {"videos": [[8, 336, 336]]}),
    ("video/qwen2.5-vl-7b/qlora/s8192/b1/ckpt", _VL25, _p(8192, 1, "qlora"), {"videos": [[32, 448, 252]]}),
    ("video/qwen3-vl-8b/lora/s4096/b1/ckpt", _VL3, _p(4096, 1), {"videos": [[16, 640, 360]]}),
    ("video/qwen2-vl-7b/full/s2048/b1/ckpt", _VL, _p(2048, 1, "full"), {"videos": [[8, 448, 448]]}),
    # audio
    ("audio/qwen2-audio-7b/lora/s1024/b4/ckpt", _AUD, _p(1024, 4), {"audio_seconds": [30]}),
    ("audio/qwen2-audio-7b/lora/s512/b8/nockpt", _AUD, _p(512, 8, ckpt=False), {"audio_seconds": [10]}),
    ("audio/qwen2-audio-7b/qlora/s2048/b2/ckpt", _AUD, _p(2048, 2, "qlora"), {"audio_seconds": [30]}),
    ("audio/qwen2-audio-7b/full/s512/b1/ckpt", _AUD, _p(512, 1, "full"), {"audio_seconds": [30]}),
    ("audio/qwen2.5-omni-7b/lora/s4096/b1/ckpt", _OMNI, _p(4096, 1), {"audio_seconds": [20], "videos": [[8, 448, 448]]}),
    ("audio/qwen2.5-omni-7b/lora/s2048/b2/nockpt", _OMNI, _p(2048, 2, ckpt=False), {"audio_seconds": [10]}),
]


def planner_rows(device: str, tiny: bool) -> list[Row]:
    from mmtune.models.smoke_twin import smoke_twin

    rows = []
    for rid, recipe, overrides, declared in PLANNER:
        ov = ["data.train=null", "data.eval=null", "train.gpu=null", "train.strategy=ddp", "train.grad_accum=1",
              *overrides]
        method = next(o.split("=", 1)[1] for o in ov if o.startswith("adapter.method="))
        needs = ["bitsandbytes", "cuda"] if method == "qlora" else []
        layers, why = full_layers(tiny) if method == "full" else (None, None)
        notes = []
        if tiny:  # the same row on the tiny twin: sequence, batch and media capped so a CPU runs it in seconds
            name = next((o.split("=", 1)[1] for o in ov if o.startswith("model.name=")), None)
            if name is None:
                from mmtune.config import load_config

                name = load_config(ROOT / recipe, []).model.name
            twin = smoke_twin(name)
            ov = [o for o in ov if not o.startswith(("data.max_length=", "train.micro_batch_size="))]
            ov += [f"model.name={twin}", f"data.max_length={TINY_MAX_LENGTH}", "train.micro_batch_size=1"]
            declared = {k: ([[min(f, 2), 56, 56] for f, _, _ in v] if k == "videos" else
                            [[56, 56] for _ in v] if k == "images" else [1.0 for _ in v]) for k, v in declared.items()}
            notes.append(f"tiny: {twin}, seq {TINY_MAX_LENGTH}, batch 1, small media")
        rows.append(Row(id=f"planner/{rid}", kind="planner", recipe=recipe, overrides=ov, declared=declared,
                        needs=needs, layers=layers, layers_reason=why, est_s=8.0 if tiny else 45.0, notes=notes))
    return rows


# --------------------------------------------------------------------------- throughput

VARIANTS = ("ours", "plain", "trainer", "sft")


def throughput_rows(device: str, tiny: bool, repeats: int) -> list[Row]:
    rows = []
    for i in range(repeats):  # interleaved: ours, plain, trainer, sft, ours, ... (as benchmarks/throughput.py)
        for v in VARIANTS:
            rows.append(Row(id=f"throughput/{v}/{i}", kind="throughput", variant=v, repeat=i,
                            needs=["trl"] if v == "sft" else [], est_s=15.0 if tiny else 90.0))
    return rows
