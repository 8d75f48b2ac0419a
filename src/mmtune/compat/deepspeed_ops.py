"""Whether DeepSpeed's CPU Adam op (`DeepSpeedCPUAdam`) can run here, without building it.

ZeRO-Offload steps the optimizer on the CPU; DeepSpeed's own C++ AdamW (SIMD, OpenMP) is the fast way,
torch's AdamW on the CPU the slow one. The op is either prebuilt into the wheel (`DS_BUILD_CPU_ADAM=1 pip
install deepspeed`: `deepspeed.git_version_info.installed_ops["cpu_adam"]`) or compiled on first use
(`CPUAdamBuilder().load()`: a JIT build that needs ninja and a C++ compiler and takes minutes, then is cached
under ~/.cache/torch_extensions). `installed_ops` is DeepSpeed's own record of what `ds_report` prints; it is
read here, not elsewhere. Checked on DeepSpeed 0.19.8 (CPU accelerator; the cpu_adam JIT build took ~9
minutes on this 2-core machine under load).
"""

from __future__ import annotations

import importlib.util
import shutil


def cpu_adam_problem() -> str | None:
    """None when DeepSpeedCPUAdam can be had here (prebuilt, or buildable on first use); else why not."""
    if importlib.util.find_spec("deepspeed") is None:
        return "DeepSpeed is not installed"
    try:
        from deepspeed.git_version_info import installed_ops
    except ImportError:  # an older layout: treat as not prebuilt, the JIT route below decides
        installed_ops = {}
    if installed_ops.get("cpu_adam"):
        return None
    from deepspeed.ops.op_builder import CPUAdamBuilder

    if not CPUAdamBuilder().is_compatible(verbose=False):
        return "DeepSpeed's CPUAdamBuilder reports its op incompatible with this machine (`ds_report` says why)"
    missing = [tool for tool in ("ninja", "c++") if shutil.which(tool) is None]
    if missing:
        return (f"the cpu_adam op is not prebuilt and cannot be compiled on first use: {' and '.join(missing)} not on "
                "PATH (pip install ninja; a C++ compiler, e.g. apt-get install g++)")
    return None


def cpu_adam_prebuilt() -> bool:
    """Whether the op is compiled into the installed DeepSpeed (else the first run builds it: minutes)."""
    try:
        from deepspeed.git_version_info import installed_ops
    except ImportError:
        return False
    return bool(installed_ops.get("cpu_adam"))
