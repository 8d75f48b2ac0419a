"""DataLoader workers against the cores where the run executes (MM263).

- MM263: train.num_workers worker processes (per rank) beside the training processes fit the cores this machine
  gives the run -- its affinity mask, capped by a container's CPU quota (cores.py), which torch's own warning does
  not count. More processes than cores take turns: torch warns "excessive worker creation might get DataLoader
  running slow or even freeze" (https://github.com/embeddings-benchmark/mteb/issues/1331,
  https://github.com/AILab-CVC/YOLO-World/issues/413), and under a quota the host's core count hides the limit.
"""

from __future__ import annotations

from ..findings import warning
from ..registry import check


@check("MM263", "DataLoader workers and the training processes fit the cores the run may use (a container's CPU "
       "quota counted)", needs=("cfg", "resolved"), fast=True)
def workers_fit_cores(ctx):
    import os

    from ...cores import usable_cores

    resolved = ctx.need("resolved")
    n = resolved.loader.num_workers if resolved.loader is not None else 0
    if not n or not resolved.target.local:  # another machine's cores are not known here
        return
    ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))  # processes of this run on this machine
    cores, how = usable_cores()
    if n * ranks + ranks <= cores:
        return
    fit = max(0, cores // ranks - 1)
    per = f" in each of {ranks} processes" if ranks > 1 else ""
    yield warning(f"train.num_workers={n}{per}: {n * ranks} DataLoader worker process(es) beside {ranks} training "
                  f"process(es) on {how}: they take turns on the cores, so encoding a step's records and the step "
                  "slow each other down (torch: \"excessive worker creation might get DataLoader running slow or even "
                  "freeze\"), and each worker holds its own copy of the records and its share of data.cache_mb",
                  where="train.num_workers",
                  fix=f"train.num_workers={fit}" + (" (without workers a thread of the training process encodes the "
                                                    "next step's records during this one: train.prefetch)" if not fit
                                                    else ""))
