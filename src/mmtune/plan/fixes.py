"""The smallest changes that make a run fit: what `plan` and `doctor` (MM001) print after "does NOT fit".

Moves, in the order of what they cost the run (cheapest first): only speed (gradient checkpointing on, a
smaller micro-batch with the accumulation raised to keep the effective batch, the chunked loss), then a
little precision (8-bit AdamW state, 4-bit QLoRA weights; optimizer offload, only speed, sits before them
under a sharding strategy), then, last, what the model sees (a shorter
sequence cap). A move that is already the run's value is not a move (no `micro_batch_size=1` when it is 1).

Search: each single move alone first (the micro-batch halved step by step; memory only grows with it, so
the first size that fits is the largest), and the cheapest single move that fits is the answer. When none
does, the moves are stacked in order until the run fits, and then each stacked move the run fits without
is dropped again. Every candidate is planned for real (planner.predict), in one process: imports, the
embedded model config, the stand-in processor and the torch dispatch caches are built once and reused,
so after the first plan each costs the trace alone (~2.5 s for a 7B LoRA at 512 tokens on 2 cores).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Fix:
    overrides: dict  # dotted key -> value, in the order applied
    result: object  # PlanResult of the run with them
    notes: list = field(default_factory=list)  # what each move costs, one line each

    @property
    def lines(self) -> list[str]:
        """One copyable `key=value` per line."""
        return [f"{k}={_fmt(v)}" for k, v in self.overrides.items()]


@dataclass
class FixSearch:
    fix: Fix | None
    tried: int  # candidates planned
    seconds: float
    why_none: str = ""


def _fmt(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _moves(cfg) -> list[tuple[str, list[dict], str]]:
    """(name, candidate override sets from mildest to strongest, what it costs) for the run `cfg` (the config
    in force: resolved values, so "already so" is judged on what the run does)."""
    t, out = cfg.train, []
    if not cfg.model.gradient_checkpointing:
        out.append(("checkpointing", [{"model.gradient_checkpointing": True}],
                    "recomputes activations in backward: ~30 % slower steps, same result"))
    if t.micro_batch_size > 1:
        steps, mb = [], t.micro_batch_size
        while mb > 1:
            mb = mb // 2
            if t.micro_batch_size % mb == 0:
                steps.append({"train.micro_batch_size": mb,
                              "train.grad_accum": t.grad_accum * (t.micro_batch_size // mb)})
        out.append(("micro-batch", steps, "the same effective batch in more, smaller micro-batches: slower steps"))
    if t.loss_impl == "full":
        out.append(("chunked loss", [{"train.loss_impl": "chunked"}],
                    "the loss in chunks of the sequence: no full fp32 logits, same result"))
    if t.strategy in ("fsdp", "zero2", "zero3") and t.offload == "none" and t.optimizer in ("adamw", "sgd"):
        out.append(("optimizer offload", [{"train.offload": "optimizer"}],
                    "the optimizer state in pinned host memory, stepped on the CPU (resolve/offload.py): slower steps "
                    "(PCIe copies + the CPU step), the host RAM the plan states"))
    if t.optimizer in ("adamw", "paged_adamw"):
        out.append(("8-bit AdamW", [{"train.optimizer": "adamw_8bit"}],
                    "AdamW's two moments in 8 bits (bitsandbytes): a quarter of the state memory"))
    if cfg.adapter.method == "lora":
        out.append(("QLoRA", [{"adapter.method": "qlora"}],
                    "the frozen weights in 4-bit NF4 (bitsandbytes): ~a quarter of their memory, slower steps"))
    if cfg.data.max_length >= 256:
        out.append(("shorter sequences", [{"data.max_length": cfg.data.max_length // 2},
                                          {"data.max_length": cfg.data.max_length // 4}],
                    "CHANGES WHAT THE MODEL SEES: longer records are cut (the doctor counts them)"))
    return out


def find_fix(resolved, *, plan_fn, first=None) -> FixSearch:
    """The smallest changes that make `resolved` fit, each candidate planned by `plan_fn(overrides) ->
    PlanResult` (the caller binds the GPU, GPUs, margin and declared media). `first`: the run's own plan,
    when the caller has it (not planned again)."""
    import time

    from ..errors import MMTuneError

    t0 = time.perf_counter()
    tried = 0

    def plan(ov):
        nonlocal tried
        tried += 1
        try:
            return plan_fn(dict(ov))
        except MMTuneError:
            return None  # an invalid combination (e.g. QLoRA refused by the strategy): not a fix

    if first is not None and first.fits:
        return FixSearch(None, 0, 0.0, "the run fits as it is")
    moves = _moves(resolved.cfg)
    # 1. each move alone; the first (cheapest) that fits is the answer
    for _name, steps, cost in moves:
        for ov in steps:
            r = plan(ov)
            if r is None:
                break
            if r.fits:
                return FixSearch(Fix(ov, r, [cost]), tried, time.perf_counter() - t0)
    # 2. stacked in order until the run fits ...
    stacked: list[tuple[dict, str]] = []
    found = None
    for _name, steps, cost in moves:
        stacked.append((steps[-1], cost))  # the strongest step of each move
        r = plan(_merge(stacked))
        if r is not None and r.fits:
            found = r
            break
    if found is None:
        return FixSearch(None, tried, time.perf_counter() - t0,
                         "nothing mmtune can change on this GPU makes it fit: " + ", ".join(m[0] for m in moves)
                         + " all together do not; a larger GPU or more GPUs (--gpus N --strategy fsdp)")
    # 3. ... then each stacked move the run fits without is dropped (the most costly first)
    for i in range(len(stacked) - 2, -1, -1):
        without = stacked[:i] + stacked[i + 1:]
        r = plan(_merge(without))
        if r is not None and r.fits:
            stacked, found = without, r
    return FixSearch(Fix(_merge(stacked), found, [c for _, c in stacked]), tried, time.perf_counter() - t0)


def _merge(stacked) -> dict:
    out: dict = {}
    for ov, _ in stacked:
        out.update(ov)
    return out


def planner_for(cfg, *, gpu, gpus: int = 1, nodes: int = 1, declared=None, margin_pct=None, strategy=None,
                assume_installed: str = "gpu-extra"):
    """A `plan_fn` for find_fix: `cfg` (a RunConfig as written) with the overrides, resolved for `gpu` and
    planned as `mmtune plan` plans it."""
    from ..resolve import resolve_run, target_for
    from .planner import predict
    from .search import _with

    def plan_fn(ov):
        c = _with(cfg, ov)
        resolved = resolve_run(c, target_for(c, gpu, local=False, gpus=gpus, nodes=nodes,
                                             assume_installed=assume_installed))
        return predict(resolved, gpus=gpus * nodes, strategy=strategy or resolved.strategy, declared=declared,
                       margin_pct=margin_pct, nodes=nodes)
    return plan_fn


def render_fix(search: FixSearch, console, command: tuple[str, str] | None = None) -> None:
    """The answer, last on the screen: copyable `key=value` lines (plain text, never wrapped). `command`:
    (the command before the overrides, the options after them) to print the whole command with the fix."""
    if search.fix is None:
        console.print(f"no change found that makes it fit ({search.tried} candidates, {search.seconds:.0f} s): "
                      f"{search.why_none}", soft_wrap=True)
        return
    f, r = search.fix, search.fix.result
    console.print(f"to make it fit ({r.process_total_bytes / 2**30:.2f} GiB planned, {r.margin_bytes / 2**30:.2f} GiB "
                  f"free; searched {search.tried} candidates in {search.seconds:.0f} s), change:", soft_wrap=True)
    for line in f.lines:
        console.print(f"  {line}", soft_wrap=True, highlight=False)
    for note in dict.fromkeys(f.notes):
        console.print(f"  [dim]({note})[/]", soft_wrap=True)
    if command:
        console.print(f"  {command[0]} {' '.join(f.lines)}{command[1]}", soft_wrap=True, highlight=False)
