"""How much of torch's backward needs Python's GIL, and what that means for a thread that encodes beside the step.

    python benchmarks/backward_gil.py --rounds 15 --save benchmarks/results/backward_gil_cpu2_DATE_COMMIT.json

Three measurements, each in one process with its conditions alternated in rounds (ABCABC...), medians reported,
so the machine's load falls on every condition alike:

1. `chain`: the backward of 30 (matmul + tanh) layers on small tensors, alone and beside a thread that runs pure
   Python, at the default GIL switch interval (5 ms) and at 0.2 ms. A backward that never took the GIL would not
   notice the thread; one that takes it k times waits up to one switch interval each time. The backward's
   median over the interval estimates k.
2. `twin`: the tiny Qwen2-VL's forward and backward (LoRA, one micro-batch of 4 image records) alone and beside a
   thread that encodes micro-batches without pause (the run's real loader), at 5 ms and 0.2 ms.
3. `loop`: the training loop's pattern (2 micro-batches of 4, forward, backward, AdamW step) with each micro-batch
   encoded on the loop's path (`serial`), by train/prefetch.py's thread only during the backward and while the
   loop waits (`in backward`, what `train.prefetch` decides on a 2-core CPU with one torch thread), and by the
   same thread whenever it has work (`beside`), and `in backward` with the switch interval shortened to 0.2 ms
   inside the window; ms per step and the ratio to serial per round.

Run with one torch thread (the script sets it) on a machine with a second core for the thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _provenance import dumps, provenance, write_results  # noqa: E402

RESULT_KEYS = ("rounds", "chain", "twin", "loop")
INTERVALS = {"5 ms": 5e-3, "0.2 ms": 2e-4}


class Beside:
    """A daemon thread running `work()` until stopped, at a given GIL switch interval (restored after)."""

    def __init__(self, work, interval: float):
        self.work, self.interval, self.stop = work, interval, threading.Event()

    def __enter__(self):
        self.before = sys.getswitchinterval()
        sys.setswitchinterval(self.interval)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while not self.stop.is_set():
            self.work()

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        sys.setswitchinterval(self.before)


def pure_python():
    x = 0
    for i in range(10_000):
        x += i


def chain(rounds: int) -> dict:
    import torch

    weights = [torch.randn(64, 64, requires_grad=True) for _ in range(30)]

    def backward_ms() -> float:
        x = torch.randn(32, 64)
        for w in weights:
            x = torch.tanh(x @ w)
        loss = x.sum()
        t = time.perf_counter()
        loss.backward()
        return (time.perf_counter() - t) * 1e3

    conds = {"alone": None, **{f"beside pure Python, switch {k}": v for k, v in INTERVALS.items()}}
    ms = {c: [] for c in conds}
    for _ in range(rounds):
        for c, interval in conds.items():
            if interval is None:
                ms[c].extend(backward_ms() for _ in range(5))
                continue
            with Beside(pure_python, interval):
                ms[c].extend(backward_ms() for _ in range(5))
    out = {"layers": 30, "backward_ms": {c: statistics.median(v) for c, v in ms.items()}}
    # each wait for the GIL lasts up to one switch interval: the backward's excess over it counts them
    out["gil_waits_per_backward_est"] = {c: round((out["backward_ms"][c] - out["backward_ms"]["alone"]) / (v * 1e3), 1)
                                         for c, v in conds.items() if v}
    return out


def _twin_run(out_dir: str):
    import throughput

    ns = throughput.parser().parse_args(["--data", "counting", "--model", "tiny/qwen2-vl", "--steps", "100000",
                                         "--out", out_dir, "--set", "train.prefetch=none",
                                         # every draw encodes (no cache): the loader cycles over 2,000 records
                                         "--set", "data.synthetic_train_size=2000", "--set", "data.cache_mb=0"])
    from mmtune.build import build_run

    return build_run(throughput._config(ns))


def _clean(mb: dict) -> dict:
    from mmtune.train.feed import BAD

    mb.pop(BAD, None)
    return mb


def twin(run, loader, rounds: int) -> dict:
    from mmtune.objectives import SFT

    sft, model = SFT(), run.model
    batch = _clean(next(loader))

    def fwd_bwd() -> tuple[float, float]:
        t0 = time.perf_counter()
        total, output, _ = sft.loss_sum(model, batch, impl="full")
        del output
        t1 = time.perf_counter()
        total.backward()
        return (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3

    conds = {"alone": None, **{f"beside the encoding thread, switch {k}": v for k, v in INTERVALS.items()}}
    fwd, bwd = {c: [] for c in conds}, {c: [] for c in conds}

    def record(c):
        for _ in range(8):
            f, b = fwd_bwd()
            fwd[c].append(f)
            bwd[c].append(b)

    for _ in range(rounds):
        for c, interval in conds.items():
            if interval is None:
                record(c)
                continue
            with Beside(lambda: next(loader), interval):
                record(c)
    model.zero_grad(set_to_none=True)
    return {"forward_ms": {c: statistics.median(v) for c, v in fwd.items()},
            "backward_ms": {c: statistics.median(v) for c, v in bwd.items()}}


def loop(run, loader, rounds: int, steps: int) -> dict:
    import torch

    from mmtune.objectives import SFT
    from mmtune.train.prefetch import Prefetched

    sft, model = SFT(), run.model
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6, foreach=True)

    def ms_per_step(it, window) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            for mb in [_clean(next(it)) for _ in range(2)]:
                total, output, _ = sft.loss_sum(model, mb, impl="full")
                del output
                with window():
                    total.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return (time.perf_counter() - t0) / steps * 1e3

    from contextlib import contextmanager, nullcontext

    def short_switch(pf):
        @contextmanager
        def window():
            before = sys.getswitchinterval()
            sys.setswitchinterval(2e-4)
            try:
                with pf.open_window():
                    yield
            finally:
                sys.setswitchinterval(before)
        return window

    modes = {"in backward": (True, lambda pf: pf.open_window), "in backward, switch 0.2 ms in it": (True, short_switch),
             "beside": (False, lambda pf: pf.open_window)}
    ms = {"serial": [], **{c: [] for c in modes}}
    for _ in range(rounds):
        ms["serial"].append(ms_per_step(loader, nullcontext))
        for c, (in_backward, window) in modes.items():
            pf = Prefetched(loader, 2, in_backward=in_backward)
            ms_per_step(pf, window(pf))  # the thread's first items, not timed
            ms[c].append(ms_per_step(pf, window(pf)))
            pf.close()  # what it prepared ahead is dropped: the records are synthetic
    return {"steps_per_round": steps, "micro_batches_per_step": 2,
            "ms_per_step": {c: statistics.median(v) for c, v in ms.items()},
            "speedup_over_serial_pairwise_median": {c: statistics.median(s / x for s, x in zip(ms["serial"], ms[c]))
                                                   for c in modes}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=40, help="loop: timed steps per condition and round")
    ap.add_argument("--out", default="/tmp/mmtune_backward_gil")
    ap.add_argument("--save")
    args = ap.parse_args()
    started = provenance()
    import torch

    torch.set_num_threads(1)
    report = {"rounds": args.rounds, "chain": chain(args.rounds)}
    print(report["chain"], flush=True)
    run = _twin_run(args.out)
    from mmtune.train.feed import open_feed

    _, loader = open_feed(run, {"epoch": 0, "index": 0})
    report["twin"] = twin(run, loader, args.rounds)
    print(report["twin"], flush=True)
    report["loop"] = loop(run, loader, args.rounds, args.steps)
    print(report["loop"], flush=True)
    if args.save:
        write_results(args.save, report, started)
    print(dumps(report, started))


if __name__ == "__main__":
    main()
