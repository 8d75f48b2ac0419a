"""Checkpoint state without pickles: a JSON tree beside a safetensors file of the tensors it names.

Why: `torch.save` / `torch.load` with weights_only off is pickle, and a pickle runs whatever code its
author put in it the moment it is read. A checkpoint folder is a file anyone with write access to the
run folder can replace (and rewrite the manifest beside it), so resuming must never execute what it
reads. `NAME.json` holds the structure -- numbers, strings, lists, dicts, the RNG states, the
scheduler's and scaler's settings, the data position -- and `NAME.safetensors` the tensors (optimizer
moments, torch / CUDA RNG states, numpy's RNG key) by key. Reading either builds only plain values and
tensors; anything else is an error, not a call.

Encoding (a few tagged objects where JSON has no type): {"__tensor__": key} a tensor of the safetensors
file; {"__ndarray__": key} a numpy array (stored as a tensor); {"__tuple__": [...]} a tuple (Python's
RNG state must be one); {"__items__": [[k, v], ...]} a dict whose keys are not all strings (the
optimizer's state is keyed by parameter index). Floats round-trip exactly (JSON keeps repr's digits,
NaN and infinities included).
"""

from __future__ import annotations

import json
from pathlib import Path

_TAGS = ("__tensor__", "__ndarray__", "__tuple__", "__items__")


class StateFormatError(ValueError):
    """A state file that does not decode to the plain values and tensors mmtune writes."""


def _encode(obj, tensors: dict, seen: set):
    import numpy as np
    import torch

    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        # safetensors refuses two entries over one storage; a second view of the same memory is copied.
        ptr = t.untyped_storage().data_ptr() if t.numel() else None
        if ptr is not None and ptr in seen:
            t = t.clone()
        elif ptr is not None:
            seen.add(ptr)
        key = f"t{len(tensors)}"
        tensors[key] = t
        return {"__tensor__": key}
    if isinstance(obj, np.ndarray):
        key = f"t{len(tensors)}"
        tensors[key] = torch.from_numpy(np.ascontiguousarray(obj).copy())
        return {"__ndarray__": key}
    if isinstance(obj, np.generic):  # a numpy scalar: its Python value
        return obj.item()
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, tensors, seen) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, tensors, seen) for v in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and not any(k in _TAGS for k in obj):
            return {k: _encode(v, tensors, seen) for k, v in obj.items()}
        return {"__items__": [[_encode(k, tensors, seen), _encode(v, tensors, seen)] for k, v in obj.items()]}
    raise TypeError(f"a checkpoint state holds plain values and tensors only, not {type(obj).__name__}")


def _decode(obj, tensors: dict):
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        raise StateFormatError(f"unexpected JSON value of type {type(obj).__name__}")
    tag = next((t for t in _TAGS if t in obj), None)
    if tag is None:
        return {k: _decode(v, tensors) for k, v in obj.items()}
    if len(obj) != 1:
        raise StateFormatError(f"{tag} object with other keys: {sorted(obj)}")
    value = obj[tag]
    if tag in ("__tensor__", "__ndarray__"):
        if not isinstance(value, str) or value not in tensors:
            raise StateFormatError(f"names tensor {value!r}, which the tensor file does not hold")
        return tensors[value] if tag == "__tensor__" else tensors[value].numpy()
    if not isinstance(value, list):
        raise StateFormatError(f"{tag} holds {type(value).__name__}, not a list")
    if tag == "__tuple__":
        return tuple(_decode(v, tensors) for v in value)
    out = {}
    for pair in value:
        if not isinstance(pair, list) or len(pair) != 2:
            raise StateFormatError("__items__ entry is not a [key, value] pair")
        key = _decode(pair[0], tensors)
        if not isinstance(key, (str, int, float, bool, type(None), tuple)):
            raise StateFormatError(f"dict key of type {type(key).__name__}")
        out[key] = _decode(pair[1], tensors)
    return out


def write_state(folder: Path, name: str, tree) -> list[Path]:
    """`folder/NAME.json` and `folder/NAME.safetensors` for `tree`; returns the two paths."""
    from safetensors.torch import save_file

    tensors: dict = {}
    encoded = _encode(tree, tensors, set())
    js, st = folder / f"{name}.json", folder / f"{name}.safetensors"
    save_file(tensors, str(st))
    with open(js, "w", encoding="utf-8") as f:
        json.dump({"format": "mmtune-state", "version": 1, "tree": encoded}, f)
    return [js, st]


def has_state(folder: Path, name: str) -> bool:
    return (folder / f"{name}.json").is_file()


def read_state(folder: Path, name: str):
    """The tree `write_state` wrote. Raises StateFormatError naming the file for anything else (a file
    that is not ours, truncated, or names tensors it lacks); never executes code from the files."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    js, st = folder / f"{name}.json", folder / f"{name}.safetensors"
    try:
        doc = json.loads(js.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise StateFormatError(f"{js.name} cannot be read as JSON ({e.__class__.__name__}: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != "mmtune-state" or "tree" not in doc:
        raise StateFormatError(f"{js.name} is not an mmtune state file")
    if doc.get("version") != 1:
        raise StateFormatError(f"{js.name} has format version {doc.get('version')!r}; this mmtune reads version 1 "
                               "(written by a newer mmtune?)")
    try:
        tensors = load_file(str(st))
    except (OSError, SafetensorError, ValueError) as e:
        raise StateFormatError(f"{st.name} cannot be read ({e.__class__.__name__}: {e})") from None
    try:
        return _decode(doc["tree"], tensors)
    except RecursionError:
        raise StateFormatError(f"{js.name} is nested too deeply to be a state mmtune wrote") from None
    except StateFormatError as e:
        raise StateFormatError(f"{js.name}: {e}") from None
