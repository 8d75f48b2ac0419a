"""Reading checkpoints of the earlier format (`state.pt`, `rng/rank-R.pt`: torch.save pickles) safely.

Those files were read with torch.load with weights_only off, which runs any code a planted file holds.
They are now read with `weights_only=True`: torch's restricted unpickler builds tensors and plain
containers only, plus the few globals named here -- what numpy's RNG state (`np.random.get_state()`: a
tuple holding a uint32 array) pickles to. An array is rebuilt from its raw bytes by numpy's
`_reconstruct`, with no user code run. Anything else a file names (a `__reduce__` that calls os.system,
any class) is refused before it is called, and the refusal names the global. The converted state is the
same dict the new format holds; the next save writes the new format (train/state_files.py).
"""

from __future__ import annotations

from pathlib import Path


class LegacyStateRefused(ValueError):
    """A `.pt` state file that holds more than tensors and plain values (or is not a torch file at all)."""


def _numpy_globals() -> list:
    """numpy's RNG-state globals under both the module path numpy 2 pickles (numpy._core) and the one
    numpy 1 did (numpy.core), so checkpoints written under either load."""
    import numpy as np

    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct
    dtype_classes = {type(np.dtype(t)) for t in (np.uint32, np.float64, np.int64)}
    names = [(_reconstruct, "numpy._core.multiarray._reconstruct"),
             (_reconstruct, "numpy.core.multiarray._reconstruct"), np.ndarray, np.dtype]
    return names + [(c, f"numpy.dtypes.{c.__name__}") for c in dtype_classes]


def read_legacy_state(path: Path):
    """The object a `.pt` state file of the earlier format holds, read without executing it."""
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's message is long advice on how to load it anyway (the opposite of what is wanted here);
        # its gist is the line after "WeightsUnpickler error:", e.g. "Unsupported global: GLOBAL io.open ...".
        gist = str(e).split("WeightsUnpickler error:", 1)[-1].strip().split("\n")[0].strip()
        if "GLOBAL " in gist:
            gist = "it calls " + gist.split("GLOBAL ", 1)[1].split()[0]
        raise LegacyStateRefused(f"{path.name} holds something other than tensors and plain values "
                                 f"({gist[:200] or 'not a torch state file'}); it was refused, not run") from None
    except (OSError, RuntimeError, ValueError, EOFError) as e:
        raise LegacyStateRefused(f"{path.name} cannot be read as a torch file ({e.__class__.__name__}: "
                                 f"{str(e).splitlines()[0][:300] if str(e) else ''})") from None
