"""Reserved memory over a run of varying batch lengths, with torch's fixed-segment CUDA allocator.

A plan traces one worst-case step. With `expandable_segments:False` (torch's default; mmtune's own runs use
expandable segments unless the environment says otherwise, resolve/decisions.decide_cuda_allocator) the
caching allocator keeps every segment it ever cudaMalloc'd, and a later step whose tensors do not fit the
cached blocks (a longer batch, or the same sizes cut differently) adds segments: `max_memory_reserved` over
the run climbs past any single step. The climb depends on the order of lengths, so it is replayed, not
estimated: the micro-batches the run's own sampler draws (data/batches.micro_batches_of_epoch, the run's
seed, length grouping as configured), each padded to its longest record as the collator pads, traced one
after another on fake tensors and replayed through allocator.CachingAllocatorModel from one state.

Where the lengths come from: the training set's records as the plan's scan measured them, or lengths
declared with the plan (`Declared.lengths`, e.g. a published dataset's length distribution). Not replayed:
packed runs and runs padded to one length (one shape every step), expandable segments (they extend the
segment's end instead; benchmarks/allocator_varying_lengths.py: within 0.4 % of the one-step plan), CPU
targets. At most RUN_STEPS micro-batches are replayed (each costs one traced step: ~0.7 s of CPU for a 7B
LoRA step); what the rest of a longer run adds is not, so the figure is a lower bound of the run's growth.
Each replayed micro-batch ends with an optimizer step (the run steps it every grad_accum micro-batches):
its temporaries are the same every step (parameter-sized, not length-sized), so they reuse their blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RUN_STEPS = 48  # micro-batches replayed: the cost of the replay is one traced step each


@dataclass
class RunGrowth:
    peak_reserved: int  # bytes reserved at the end of the replayed run (monotone: the run's max)
    peak_allocated: int
    steps: int  # micro-batches replayed
    lengths: list[int] = field(default_factory=list)  # each micro-batch's padded length, in run order
    curve: list[int] = field(default_factory=list)  # reserved after each micro-batch

    def describe(self, one_step_reserved: int) -> str:
        gib = 2 ** 30
        grow = self.peak_reserved - one_step_reserved
        return (f"allocator: fixed segments over a run of varying lengths: {self.steps} micro-batches as the sampler "
                f"draws them (padded lengths {min(self.lengths)}..{max(self.lengths)}) replayed through the caching "
                f"allocator: {self.peak_reserved / gib:.2f} GiB reserved, {grow / gib:+.2f} GiB over the one-step plan "
                "(cached segments of earlier shapes that later tensors do not fit; plan/run_growth.py; "
                "expandable_segments:True avoids it)")


def step_lengths(record_lengths: list[int], *, micro_batch_size: int, seed: int, max_length: int,
                 group_by_length: bool = False, steps: int = RUN_STEPS) -> list[int]:
    """The padded length of each of the run's first `steps` micro-batches: the run's own sampler over the
    records (seeded shuffle, ragged tail dropped, length grouping when the run groups), each batch padded to
    its longest record, capped at max_length as the encoder caps (longer records are refused or skipped)."""
    from ..data.batches import micro_batches_of_epoch

    lens = [min(int(n), max_length) for n in record_lengths]
    out: list[int] = []
    epoch = 0
    while len(out) < steps and len(lens) >= micro_batch_size:
        batches = micro_batches_of_epoch(len(lens), seed=seed, epoch=epoch, micro_batch_size=micro_batch_size,
                                         lengths=lens if group_by_length else None)
        out += [max(lens[i] for i in b) for b in batches[:steps - len(out)]]
        epoch += 1
    return out


def varies(resolved, record_lengths: list[int] | None) -> bool:
    """Whether the run sees more than one batch shape that the fixed-segment allocator would cache apart."""
    cfg = resolved.cfg
    if not record_lengths or cfg.data.packing or resolved.target.gpu is None or resolved.expandable_segments:
        return False
    if cfg.train.objective != "sft":  # dpo / grpo batches have shapes of their own (pairs, completions)
        return False
    return len({min(n, cfg.data.max_length) for n in record_lengths}) > 1


def replay_run(resolved, record_lengths: list[int], declared=None, steps: int = RUN_STEPS) -> RunGrowth:
    """Trace the run's first micro-batches at their own lengths and replay them through the fixed-segment
    allocator model (module docstring)."""
    from dataclasses import replace

    from .allocator import CachingAllocatorModel
    from .batch import Declared, worst_case_batch
    from .planner import trace_config

    cfg = resolved.cfg
    lengths = step_lengths(record_lengths, micro_batch_size=cfg.train.micro_batch_size, seed=cfg.train.seed,
                           max_length=cfg.data.max_length, group_by_length=cfg.data.group_by_length, steps=steps)
    base = declared or Declared()
    batches = [worst_case_batch(resolved, declared=replace(base, tokens=n, lengths=None)).micro_batch for n in lengths]
    _, _, ex, _ = trace_config(resolved, step_batches=batches)
    events = ex.tracker.trace.events
    m = CachingAllocatorModel(resolved.target.gpu.total_bytes)
    curve, j = [], 0
    for end in step_ends(events):
        m.apply(events[j:end])
        j = end
        curve.append(m.peak_reserved)
    return RunGrowth(m.peak_reserved, m.peak_allocated, len(lengths), lengths, curve)


def step_ends(events) -> list[int]:
    """Index after each traced step: where the next step's forward starts (after an optimizer phase)."""
    ends, in_opt = [], False
    for i, ev in enumerate(events):
        if ev.phase == "optimizer":
            in_opt = True
        elif in_opt and ev.phase == "forward":
            ends.append(i)
            in_opt = False
    ends.append(len(events))
    return ends
