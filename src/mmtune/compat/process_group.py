"""The default process group's timeout: read back, and set on a group that was started before the run.

torch has no public getter for a group's timeout, and `init_process_group(timeout=)` is the only public
setter; a group already started (a second run in one process, a user's own `init_process_group`) keeps
its timeout unless torch's private `_set_pg_timeout` changes it. Checked on torch 2.13 (CPU, gloo) and
the names on 2.14: `distributed_c10d._get_default_group`, `ProcessGroup._get_backend(device)`, the
backend's `options._timeout`, `distributed_c10d._set_pg_timeout`.
"""

from __future__ import annotations

from datetime import timedelta

from . import need, need_attr

_FEATURE = "train.dist_timeout_minutes (the process group's timeout)"


def _backend(group):
    """The group's backend for its first device type (cpu: gloo, cuda: NCCL)."""
    import torch

    devices = need_attr(group, "_device_types", "torch", _FEATURE)
    device = torch.device("cuda") if torch.device("cuda") in devices else torch.device("cpu")
    return need_attr(group, "_get_backend", "torch", _FEATURE)(device)


def process_group_timeout() -> timedelta | None:
    """The default process group's timeout, None when no group is started."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    group = need("torch.distributed.distributed_c10d", "_get_default_group", "torch", _FEATURE)()
    options = need_attr(_backend(group), "options", "torch", _FEATURE)
    return need_attr(options, "_timeout", "torch", _FEATURE)


def set_process_group_timeout(timeout: timedelta) -> None:
    """Give the started default group `timeout` (every backend of it)."""
    need("torch.distributed.distributed_c10d", "_set_pg_timeout", "torch", _FEATURE)(timeout)
