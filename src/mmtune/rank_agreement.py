"""Every rank of a multi-process run sees the same output_dir and runs the same run, checked once the process group
is up and before the model is built.

Each launcher starts the same command on every node, but the nodes need not be alike, and public threads show three
ways they differ that surfaced late or never:
- output_dir on a disk local to each node: each rank writes its own part of every checkpoint (its RNG state; under
  fsdp its shards), so a checkpoint is whole on no node. On a fresh run rank 1 stopped with a raw FileNotFoundError at
  its first save (rank 0 then with gloo's "Connection closed by peer"); where the folder exists on every node the run
  trains, and a resume reads another checkpoint on each node (rank 0 resumes at step N, the others start over).
- another config on another node (an edited copy of the file, other key=value overrides): the ranks disagree on the
  batch, the steps or the data, and wait for each other in collectives that do not match.
- other library versions on another node (one environment per node, upgraded on one): other code on each rank.
- the same config resolved otherwise on another node (another GPU: another precision or strategy; flash-attn
  installed on one node only): the ranks run different programs from one file.
The main rank writes a marker named by a token it broadcasts; every rank says whether it sees it, with its config and
its versions, in one all_gather; every rank then raises the same error, so no rank is left waiting. One process: no
check.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

PROBE_PREFIX = ".mmtune-rank-probe-"
# NFS caches directory entries for some seconds (acdirmin): a marker not seen at once is looked for again.
_PROBE_WAIT_S = 10.0
_VERSIONED = ("python", "mmtune", "torch", "transformers", "peft", "accelerate", "datasets", "bitsandbytes", "deepspeed")


def versions() -> dict[str, str | None]:
    """The versions of what a training step runs through, read without importing anything."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in _VERSIONED[1:]:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _flat(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out: dict = {}
        for key, value in tree.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def _sees(out: Path, token: str) -> bool:
    deadline = time.monotonic() + _PROBE_WAIT_S
    while True:
        try:
            if (out / f"{PROBE_PREFIX}{token}").is_file():
                return True
            os.listdir(out)  # revalidates the folder's cached entries on network filesystems
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def check_ranks_agree(accelerator, resolved) -> None:
    """Raise ConfigError on every rank when a rank does not see the main rank's output_dir, runs other library
    versions, was started with another config, or resolved it to another run (`resolved.requested` is the config as
    given, `resolved.cfg` with every automatic decision applied). Call it on every rank right after the process
    group starts."""
    if accelerator.num_processes <= 1:
        return
    cfg = resolved.cfg
    import uuid

    import torch.distributed as dist

    out = Path(cfg.output_dir)
    box = [None]
    if accelerator.is_main_process:
        box[0] = uuid.uuid4().hex
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{PROBE_PREFIX}{box[0]}").write_text(socket.gethostname())
    dist.broadcast_object_list(box, src=0)
    token = box[0]
    mine = {"host": socket.gethostname(), "sees": _sees(out, token), "versions": versions(),
            "config": _flat(resolved.requested.model_dump(mode="json")), "resolved": _flat(cfg.model_dump(mode="json"))}
    every: list = [None] * accelerator.num_processes
    dist.all_gather_object(every, mine)
    if accelerator.is_main_process:  # every rank has looked: the gather waited for all of them
        (out / f"{PROBE_PREFIX}{token}").unlink(missing_ok=True)
    problem = disagreement(every, str(out))
    if problem is not None:
        from .errors import ConfigError

        raise ConfigError(problem[0], where=problem[1], fix=problem[2])


def _who(every: list, ranks: list[int]) -> str:
    shown = ", ".join(f"{r} ({every[r]['host']})" for r in ranks[:4])
    return f"rank(s) {shown}" + (f" and {len(ranks) - 4} more" if len(ranks) > 4 else "")


def disagreement(every: list[dict], out: str) -> tuple[str, str, str] | None:
    """(what is wrong, where, the fix) from every rank's report (rank order), else None. Pure: the same on each rank."""
    main = every[0]
    blind = [r for r, seen in enumerate(every) if not seen["sees"]]
    if blind:
        return (f"output_dir {out} is not one folder for every rank: {_who(every, blind)} do not see the marker "
                f"rank 0 ({main['host']}) wrote there, so it is another disk on their node (each rank writes its "
                "own part of every checkpoint, so none would be whole on any node, and a resume would start each "
                "node from what its own disk holds)", "output_dir",
                "put output_dir on a filesystem every node mounts at the same path (NFS, Lustre, a cluster share), "
                "as docs/distributed.md says")
    for r, other in enumerate(every[1:], start=1):
        keys = sorted(k for k in set(main["versions"]) | set(other["versions"])
                      if main["versions"].get(k) != other["versions"].get(k))
        if keys:
            diff = "; ".join(f"{k} {other['versions'].get(k)} (rank 0: {main['versions'].get(k)})" for k in keys)
            return (f"rank {r} ({other['host']}) runs other versions than rank 0 ({main['host']}): {diff}",
                    "the installed packages on each node",
                    "install the same versions on every node (one environment on the shared filesystem, or one "
                    "container image), then launch again")
        diff = _differences(main, other, "config")
        if diff:
            return (f"rank {r} ({other['host']}) was started with another config than rank 0 ({main['host']}): {diff}",
                    "the config file and key=value overrides on each node",
                    "start every node with the same command: the same config file (kept on the shared filesystem) "
                    "and the same key=value overrides")
        diff = _differences(main, other, "resolved")
        if diff:  # the same config, decided otherwise: another GPU or other packages on that node
            return (f"rank {r} ({other['host']}) resolved the same config to another run than rank 0 "
                    f"({main['host']}): {diff}, decided by the GPU or the packages of its node",
                    "the automatic decisions of each node (config.resolved.yaml)",
                    "the same GPUs and packages on every node, or set those keys in the config so that no node "
                    "decides them")
    return None


def _differences(main: dict, other: dict, part: str) -> str:
    """The keys of `part` whose values differ between two ranks' reports, as 'key=value (rank 0: value)'."""
    a, b = main[part], other[part]
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    shown = "; ".join(f"{k}={b.get(k)!r} (rank 0: {a.get(k)!r})" for k in keys[:5])
    return shown + (f" and {len(keys) - 5} more key(s)" if len(keys) > 5 else "")
