"""`import mmtune` (and its config layer) stays cheap: no torch, no CUDA probing, no optional backends."""

import subprocess
import sys

HEAVY = ["torch", "transformers", "peft", "bitsandbytes", "deepspeed", "wandb", "mlflow", "flash_attn", "accelerate"]


def _imported_after(stmt: str) -> set[str]:
    code = f"import sys; {stmt}; print(','.join(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.strip().split(","))


def test_import_mmtune_pulls_in_nothing_heavy():
    mods = _imported_after("import mmtune, mmtune.config, mmtune.errors")
    assert not [m for m in HEAVY if m in mods]


def test_cli_help_imports_no_optional_backend():
    mods = _imported_after("import mmtune.cli")
    # `mmtune --help` must be instant: sub-commands import torch and friends only when they run.
    assert not [m for m in ["torch", "transformers", "bitsandbytes", "deepspeed", "wandb", "mlflow", "flash_attn"] if m in mods]
