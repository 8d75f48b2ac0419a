"""`mmtune plan CONFIG --search --gpu NAME`: the fastest estimated config that fits, with its overrides.

Knobs: micro-batch (accumulation adjusted to keep the effective batch), gradient checkpointing, 4-bit vs
16-bit weights (lora <-> qlora; full fine-tuning stays full), AdamW vs 8-bit AdamW, ZeRO stage (with
--gpus > 1; there also AdamW with its state offloaded to the CPU, train.offload=optimizer), grpo's completions
per prompt (G, halved, only when no micro-batch fits with the configured G), and, only when nothing fits otherwise,
the sequence cap and max pixels / frames (these
change what the model sees, so they come last). Every candidate is planned for real (a trace each);
memory only grows with the micro-batch, so once one size does not fit, larger ones are not tried.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field

from .planner import PlanResult, predict


@dataclass
class Candidate:
    overrides: dict
    result: PlanResult | None
    error: str | None = None

    @property
    def line(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.overrides.items())


@dataclass
class SearchResult:
    best: Candidate | None
    tried: list = field(default_factory=list)
    margin_pct: float | None = None  # the margin rule's percentage (plan/margin.py); None: its default

    def to_json(self) -> str:
        def row(c):
            r = c.result
            return {"overrides": c.overrides, "override_line": c.line, "error": c.error,
                    "fits": r.fits if r else None, "peak_reserved_bytes": r.peak_reserved_bytes if r else None,
                    "process_total_bytes": r.process_total_bytes if r else None,
                    "step_time_s": r.step_time_s if r else None}
        return json.dumps({"best": row(self.best) if self.best else None, "tried": [row(c) for c in self.tried],
                           "margin_pct": self.margin_pct}, indent=2)

    def render(self, console, rows: bool = True) -> None:
        """The candidates (unless they were printed as planned: `rows=False`), then the answer, last."""
        for c in self.tried if rows else ():
            candidate_line(c, console)
        if self.best is None:
            from .margin import describe

            console.print(f"[red]no searched config fits with the margin, headroom {describe(self.margin_pct or 5.0)}[/]")
            return
        r = self.best.result
        console.print(f"[green]fastest that fits[/]: {r.process_total_bytes / 2**30:.2f} GiB of "
                      f"{r.gpu_total_bytes / 2**30:.2f} GiB, ~{r.step_time_s:.2f} s/step")
        console.print(f"override line: {self.best.line or '(the config as given)'}")


def candidate_line(c: Candidate, console) -> None:
    r = c.result
    if r is None:
        console.print(f"  [dim]{c.line or '(as given)'}: {c.error}[/]", soft_wrap=True, highlight=False)
    else:
        console.print(f"  {'fits ' if r.fits else 'no   '} {r.process_total_bytes / 2**30:6.2f} GiB "
                      f"{r.step_time_s:8.2f} s/step  {c.line or '(as given)'}", soft_wrap=True, highlight=False)


def _with(cfg, overrides: dict):
    from ..config.loader import set_dotted, validate

    tree = cfg.model_dump(mode="json")
    for k, v in overrides.items():
        if not k.startswith("_"):  # "_strategy" is predict()'s argument, not a config key
            set_dotted(tree, k, v)
    return validate(tree)


def _plan(cfg, ov, gpu, gpus, strategy, declared, margin_pct, dedup=True, nodes=1, node_link_gbs=None,
          assume_installed="gpu-extra") -> Candidate:
    from ..errors import MMTuneError

    try:
        c = _with(cfg, ov)
        st = ov.get("_strategy", strategy)
        ov_clean = {k: v for k, v in ov.items() if not k.startswith("_")}
        r = predict(c, gpu=gpu, gpus=gpus, strategy=st, declared=declared, margin_pct=margin_pct, dedup=dedup,
                    assume_installed=assume_installed,
                    nodes=nodes, node_link_gbs=node_link_gbs)
        if "_strategy" in ov:
            ov_clean["--strategy"] = st
        return Candidate(ov_clean, r)
    except MMTuneError as e:
        return Candidate({k: v for k, v in ov.items() if not k.startswith("_")}, None, e.what)


def search(cfg, *, gpu, gpus: int = 1, strategy: str = "ddp", declared=None, margin_pct: float | None = None,
           micro_batches=(1, 2, 4, 8), methods=None, optimizers=None, checkpointing=None,
           dedup: bool = True, nodes: int = 1, node_link_gbs: float | None = None, on_candidate=None,
           assume_installed: str = "gpu-extra") -> SearchResult:
    """`gpus` counts all GPUs, `nodes` the nodes they sit on (joined by `node_link_gbs`; planner.predict).
    `on_candidate(Candidate)` is called as each candidate is planned (the CLI prints it then, not at the end)."""
    eff = cfg.train.micro_batch_size * cfg.train.grad_accum
    methods = methods or (["full"] if cfg.adapter.method == "full" else ["lora", "qlora"])
    # "adamw+offload": AdamW with train.offload=optimizer under zero2 / zero3 (several GPUs only; plan/offload.py)
    optimizers = optimizers or ["adamw", "adamw_8bit"] + (["adamw+offload"] if gpus > 1 else [])
    ckpts = checkpointing or [False, True]
    strategies = ["ddp", "zero2", "zero3"] if gpus > 1 else [strategy]
    tried: list[Candidate] = []
    for method, opt, ckpt, st in itertools.product(methods, optimizers, ckpts, strategies):
        offload = opt.endswith("+offload")
        if offload and st == "ddp":
            continue  # ddp keeps a whole optimizer per GPU: nothing to offload through
        for mb in micro_batches:
            if eff % mb:
                continue
            ov = {"adapter.method": method, "train.optimizer": opt.removesuffix("+offload"),
                  "model.gradient_checkpointing": ckpt, "train.micro_batch_size": mb, "train.grad_accum": eff // mb}
            if offload:  # the strategy in the config too: the resolved run decides offload from it
                ov.update({"train.offload": "optimizer", "train.strategy": st})
            if gpus > 1:
                ov["_strategy"] = st
            c = _plan(cfg, ov, gpu, gpus, strategy, declared, margin_pct, dedup, nodes, node_link_gbs, assume_installed)
            tried.append(c)
            if on_candidate is not None:
                on_candidate(c)
            if c.result is None or not c.result.fits:
                break
    fitting = [c for c in tried if c.result is not None and c.result.fits]
    def first_fit(extras) -> None:
        """Plan the smallest setup (micro-batch 1, 4-bit where allowed, 8-bit AdamW, checkpointing) with each of
        `extras` in turn, keeping the first that fits."""
        for extra in extras:
            ov = {"adapter.method": methods[-1], "train.optimizer": "adamw_8bit", "model.gradient_checkpointing": True,
                  "train.micro_batch_size": 1, "train.grad_accum": eff, **extra}
            c = _plan(cfg, ov, gpu, gpus, strategy, declared, margin_pct, dedup, nodes, node_link_gbs, assume_installed)
            tried.append(c)
            if on_candidate is not None:
                on_candidate(c)
            if c.result is not None and c.result.fits:
                fitting.append(c)
                return

    if not fitting and cfg.train.objective == "grpo":
        # grpo: fewer completions per prompt (G) hold fewer training sequences per micro-batch; G sets how the
        # advantages are normalised, so it is changed only when no micro-batch fits with the configured G.
        first_fit({"train.grpo.generations": g} for g in grpo_generation_candidates(cfg.train.grpo.generations))
    if not fitting:
        # Last resort: shorter sequences / fewer pixels change what the model sees; try them smallest-first.
        pixels = {"model.max_pixels": 256 * 28 * 28} if cfg.model.max_pixels or getattr(cfg.model, "max_pixels", None) \
            is None else {}
        first_fit({"data.max_length": cap, **pixels} for cap in (cfg.data.max_length // 2, cfg.data.max_length // 4))
    best = min(fitting, key=lambda c: c.result.step_time_s) if fitting else None
    return SearchResult(best, tried, margin_pct)


def grpo_generation_candidates(g: int) -> list[int]:
    """Fewer completions per prompt to try, largest first: halvings of G down to 2 (GRPO's least: a group of one
    has no spread to normalise by)."""
    out = []
    while g // 2 >= 2:
        g //= 2
        out.append(g)
    return out
