"""A gate before the checkpoint files that libraries unpickle themselves: each file's pickle is read as
opcodes (Python's pickletools: nothing is executed) and every global it would call or build is checked
against the few the library writes; any other is refused before the library ever opens the file.

Why: mmtune's own state is pickle-free (train/state_files.py), but two formats it hands to libraries are
pickles those libraries load with code execution allowed -- torch.distributed.checkpoint's `.metadata`
(`pickle.load`) under `train.strategy=fsdp`, and DeepSpeed's model / optimizer-partition files
(`torch.load` with weights_only off, inside DeepSpeed) under zero2 / zero3. A planted file there would run
on resume just as a planted `state.pt` did. Reading the globals statically is fail-closed: a global whose
name cannot be read from the opcodes (built some other way) counts as refused.
"""

from __future__ import annotations

import pickletools
import zipfile
from pathlib import Path

# torch.distributed.checkpoint's metadata (torch 2.4 - 2.13): dataclasses and enums describing shards,
# torch.Size, dtypes, layouts (by name, through torch.serialization._get_layout), paths.
DCP_GLOBALS = frozenset({
    "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePosixPath", "pathlib.PureWindowsPath", "torch.Size",
    "torch.serialization._get_layout", "collections.OrderedDict",
    "torch.distributed.checkpoint.filesystem._StorageInfo",
    *(f"torch.distributed.checkpoint.metadata.{n}" for n in (
        "BytesStorageMetadata", "ChunkStorageMetadata", "Metadata", "MetadataIndex", "StorageMeta",
        "TensorProperties", "TensorStorageMetadata", "_MEM_FORMAT_ENCODING")),
})

# DeepSpeed's checkpoint files (save_checkpoint): tensors through torch's own rebuild functions, the
# loss scaler and ZeRO stage objects, the config as plain values.
DEEPSPEED_GLOBALS = frozenset({
    "collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
    "torch._tensor._rebuild_from_type_v2", "torch.Tensor", "torch.nn.parameter.Parameter", "torch.Size",
    "torch.serialization._get_layout", "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler", "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
})
# (Read from zero2 / zero3 checkpoints of DeepSpeed 0.19.8 on CPU, LoRA and full fine-tune, by
# tests/train/test_deepspeed.py; DynamicLossScaler is the scaler class fp16 runs use, not exercised on CPU:
# a GPU run that pickles another global is refused naming it, which is where to extend this list.
# Storage classes and dtypes of any precision pass by kind: _is_dtype / _is_storage.)


class UnsafePickle(ValueError):
    """A library checkpoint file whose pickle names a global the library does not write."""


def _is_dtype(name: str) -> bool:
    import torch

    module, _, attr = name.rpartition(".")
    return module == "torch" and isinstance(getattr(torch, attr, None), torch.dtype)


def _is_storage(name: str) -> bool:
    import torch

    module, _, attr = name.rpartition(".")
    cls = getattr(torch, attr, None) if module == "torch" else None
    return attr.endswith("Storage") and isinstance(cls, type) and issubclass(
        cls, (torch.storage.TypedStorage, torch.storage.UntypedStorage))


def pickle_globals(data: bytes) -> set[str]:
    """Every global a pickle names, read from its opcodes without executing it ("?" for one whose name
    is not a plain string pushed just before it)."""
    found: set[str] = set()
    pushed: list = []  # what the string / memo opcodes put on the stack, None for anything else
    memo: dict = {}
    for op, arg, _ in pickletools.genops(data):
        name = op.name
        if name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING",
                    "STRING"):
            pushed.append(arg)
        elif name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[arg] = pushed[-1] if pushed else None
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            pushed.append(memo.get(arg))
        elif name == "STACK_GLOBAL":
            module, attr = (pushed[-2], pushed[-1]) if len(pushed) >= 2 else (None, None)
            found.add(f"{module}.{attr}" if isinstance(module, str) and isinstance(attr, str) else "?")
            pushed.append(None)
        elif name in ("GLOBAL", "INST"):
            found.add(str(arg).replace(" ", ".", 1))
            pushed.append(None)
        elif name in ("EXT1", "EXT2", "EXT4"):  # the copyreg extension registry: not used by these writers
            found.add("?")
            pushed.append(None)
        else:
            pushed.append(None)
    return found


def _pickles(path: Path) -> list[tuple[str, bytes]]:
    """(name, pickle bytes) of a file: the pickles inside a torch.save zip, or the file itself."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            return [(f"{path.name}:{n}", z.read(n)) for n in z.namelist() if n.endswith(".pkl")]
    return [(path.name, path.read_bytes())]


def check_file(path: Path, allowed: frozenset[str]) -> None:
    """Raise UnsafePickle when `path` names a global outside `allowed` (torch dtypes and storage classes
    always pass: data, not calls)."""
    try:
        for where, data in _pickles(path):
            bad = sorted(g for g in pickle_globals(data) if g not in allowed and not _is_dtype(g) and not _is_storage(g))
            if bad:
                raise UnsafePickle(f"{where} would call {', '.join(bad[:3])}, which this format never holds; "
                                   "it was refused, not run")
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        if isinstance(e, UnsafePickle):
            raise
        raise UnsafePickle(f"{path.name} is not a pickle this format writes ({e.__class__.__name__}: "
                           f"{str(e)[:200]}); it was refused, not run") from None


def guard_folder(folder: Path, pattern: str, allowed: frozenset[str], ckpt: Path) -> None:
    """Check every file of `folder` matching `pattern`; an MMTuneError naming the checkpoint on refusal."""
    from ..errors import MMTuneError

    for path in sorted(folder.rglob(pattern)):
        if path.is_file():
            try:
                check_file(path, allowed)
            except UnsafePickle as e:
                raise MMTuneError(f"cannot resume from {ckpt.name}: {e}", where=str(path),
                                  fix="start over with train.resume=false, or move this checkpoint out of the run "
                                      "folder to resume from the one before") from None
