"""One rank of tests/train/test_dist_timeout.py's launch: resolve CONFIG here, build its Accelerator (nothing
else: no model, no data) and print, as JSON, the timeout the resolved run decided, the one given to accelerate
and the one the default process group really has."""

import json
import sys

import torch
import torch.distributed as dist

from mmtune.build import make_accelerator
from mmtune.config import load_config
from mmtune.resolve import resolve_here


def process_group_timeout():
    """The default group's timeout, read from torch's internals (torch has no public getter; checked on 2.13 and
    2.14): its backend for the CPU (gloo here), whose options hold the timeout the group was started with."""
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    return backend.options._timeout


resolved = resolve_here(load_config(sys.argv[1], sys.argv[2:]))
accelerator = make_accelerator(resolved)
handler = accelerator.init_handler
sys.stdout.write("GROUP_TIMEOUT " + json.dumps({
    "rank": accelerator.process_index, "processes": accelerator.num_processes,
    "strategy": resolved.strategy, "decided_minutes": resolved.dist_timeout_minutes,
    "handler_s": handler.timeout.total_seconds() if handler is not None else None,
    "group_s": process_group_timeout().total_seconds()}) + "\n")  # one write: the ranks share a pipe
sys.stdout.flush()
