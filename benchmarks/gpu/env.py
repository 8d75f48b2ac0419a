"""What this machine is and has: device, driver, library versions, and which optional packages import.

Rows that need an optional package that is missing are skipped with that reason (rows.py `needs`), never
failed and never dropped; README.md says how to bring the wheels to a machine without network.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import subprocess

# optional package -> import name; what each enables in the rows
OPTIONAL = {"bitsandbytes": "bitsandbytes", "flash-attn": "flash_attn", "liger-kernel": "liger_kernel",
            "trl": "trl", "deepspeed": "deepspeed"}


# mmtune's own dependencies (pyproject.toml) by import name: a GPU image that lacks one needs its wheel too
REQUIRED = ("torch", "transformers", "peft", "accelerate", "datasets", "pydantic", "yaml", "typer", "rich", "PIL",
            "numpy", "safetensors", "tokenizers", "huggingface_hub", "pyarrow", "av", "soundfile")


def required_missing() -> list[str]:
    return [m for m in REQUIRED if importlib.util.find_spec(m) is None]


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def importable(module: str) -> bool:
    """Installed and importing cleanly (a wheel built for another torch/CUDA fails at import, not at find_spec)."""
    if importlib.util.find_spec(module) is None:
        return False
    try:
        importlib.import_module(module)
        return True
    except Exception:  # noqa: BLE001 -- any import failure means the rows needing it cannot run
        return False


def optional_packages() -> dict[str, str | None]:
    """{package: version, or None when it is missing or does not import here}."""
    return {dist: (version(dist) or "installed") if importable(mod) else None for dist, mod in OPTIONAL.items()}


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: str) -> dict:
    import torch

    env = {"device_type": device, "python": platform.python_version(), "platform": platform.platform(),
           "cpu_count": __import__("os").cpu_count(),
           "versions": {d: version(d) for d in ("torch", "transformers", "peft", "accelerate", "mmtune")},
           "optional": optional_packages(), "required_missing": required_missing()}
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(device=torch.cuda.get_device_name(0), device_count=torch.cuda.device_count(),
                   memory_bytes=p.total_memory, compute_capability=f"{p.major}.{p.minor}", driver=_driver(),
                   cuda=torch.version.cuda)
    else:
        env.update(device="CPU", device_count=0, driver=None, cuda=None)
    return env


def catalog_gpu(device: str) -> str | None:
    """This GPU's id in mmtune's catalogue (what `mmtune plan --gpu` takes), or None when it has none."""
    if device != "cuda":
        return None
    import torch

    from mmtune.gpus import GPUS

    name, total = torch.cuda.get_device_name(0).lower(), torch.cuda.get_device_properties(0).total_memory
    # "NVIDIA H100 80GB HBM3" is the catalogue's "h100": its id in the device name, the memory within 8 GiB
    words = name.replace(" ", "-").split("-")
    hits = [g for g in GPUS.values() if g.id.split("-")[0] in words and abs(g.memory_bytes - total) < 8 * 2**30]
    return hits[0].id if hits else None


def probe(device: str) -> dict:
    """environment() and the catalogue id, measured in a child process: touching the GPU here would create a CUDA
    context in the harness that stays for the whole run, taking memory from every row it measures."""
    import json
    import sys

    here = __file__
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from env import environment, catalog_gpu; "
            "e = environment(sys.argv[2]); e['gpu_id_detected'] = catalog_gpu(sys.argv[2]); print('ENV ' + json.dumps(e))")
    p = subprocess.run([sys.executable, "-c", code, str(__import__("pathlib").Path(here).parent), device],
                       capture_output=True, text=True, timeout=600)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("ENV ")]
    if not line:
        raise SystemExit(f"could not read this machine's environment:\n{p.stderr[-3000:]}")
    return json.loads(line[0][4:])
