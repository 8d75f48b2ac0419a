"""One rank of tests/train/test_dist_timeout.py's launch: resolve CONFIG here, build its Accelerator (nothing
else: no model, no data) and print, as JSON, the timeout the resolved run decided, the one given to accelerate
and the one the default process group really has."""

import json
import sys

from mmtune.build import make_accelerator
from mmtune.compat.process_group import process_group_timeout
from mmtune.config import load_config
from mmtune.resolve import resolve_here

resolved = resolve_here(load_config(sys.argv[1], sys.argv[2:]))
accelerator = make_accelerator(resolved)
handler = accelerator.init_handler
print("GROUP_TIMEOUT " + json.dumps({
    "rank": accelerator.process_index, "processes": accelerator.num_processes,
    "strategy": resolved.strategy, "decided_minutes": resolved.dist_timeout_minutes,
    "handler_s": handler.timeout.total_seconds() if handler is not None else None,
    "group_s": process_group_timeout().total_seconds()}), flush=True)
