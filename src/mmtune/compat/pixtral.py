"""transformers' `PixtralProcessor` (Mistral 3 / Mistral Small 3.1 and 3.2, Pixtral-12B) without torchvision.

transformers 5.24's `models/pixtral/processing_pixtral.py` imports one helper, `get_resize_output_image_size`,
from `image_processing_pixtral.py`, the torchvision image processor, so without torchvision the processor
module cannot be imported at all and `transformers.PixtralProcessor` is a "requires torchvision" placeholder.
The processor itself needs no torchvision: the helper only sizes `_get_num_multimodal_tokens`' answer, and the
PIL image processor module (`image_processing_pil_pixtral.py`) defines the same function with the same body
(tests/test_compat.py compares the two sources, so a transformers release where they part fails there).

So the real processor class is used, never a re-implementation of its [IMG] / [IMG_BREAK] / [IMG_END]
expansion: with torchvision installed, the library's class as it is; without, `processing_pixtral` is
imported once with the PIL module standing in under the torchvision module's name for the duration of that
import only (the alias is removed right after; no library attribute is set), and the class is returned as a
subclass that changes nothing but its home: `__module__` is this module (whose `__getattr__` gives it back),
so pickle finds it in a DataLoader worker that never ran this import; `__name__` stays `PixtralProcessor`,
so a saved processor_config.json names the library's class and loads with `AutoProcessor` where torchvision
is installed. Checked on transformers 5.24, without torchvision.
"""

from __future__ import annotations

import functools

from . import broken, need

_LIB = "transformers"
_PKG = "transformers.models.pixtral"
_TV_MODULE = f"{_PKG}.image_processing_pixtral"
_PIL_MODULE = f"{_PKG}.image_processing_pil_pixtral"
_NAME = "PixtralProcessor"
_FEATURE = "Mistral 3 / Pixtral processor without torchvision"


def torchvision_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchvision") is None


@functools.cache
def pixtral_processor_class():
    """The `PixtralProcessor` class to instantiate (`cls(image_processor=PixtralImageProcessorPil(...), ...)`);
    one class per process (pickle checks that the class it finds by name is the object's own)."""
    return _import_class()


def _import_class():
    import importlib
    import sys

    if not torchvision_missing():
        return importlib.import_module(f"{_PKG}.processing_pixtral").PixtralProcessor
    need(_PIL_MODULE, "get_resize_output_image_size", _LIB, _FEATURE)
    pil = sys.modules[_PIL_MODULE]
    saved = sys.modules.get(_TV_MODULE)
    sys.modules[_TV_MODULE] = pil  # only while processing_pixtral runs its one `from ... import` of the helper
    try:
        module = importlib.import_module(f"{_PKG}.processing_pixtral")
    except ImportError as e:  # it imports more than the one helper from the torchvision module now
        raise broken(_LIB, _FEATURE, "processing_pixtral importable with the PIL image processor's helper", str(e)) from None
    finally:
        if saved is None:
            del sys.modules[_TV_MODULE]
        else:
            sys.modules[_TV_MODULE] = saved
    cls = module.PixtralProcessor
    return type(_NAME, (cls,), {"__module__": __name__, "__qualname__": _NAME, "__doc__": cls.__doc__})


def __getattr__(name: str):
    if name == _NAME:  # pickle's lookup of the class made above
        return pixtral_processor_class()
    raise AttributeError(name)


HELPERS = ("get_resize_output_image_size", "_num_image_tokens")  # the helper and the one function it calls


def helper_sources() -> tuple[str, str]:
    """The source text of the sizing helpers (HELPERS) in the torchvision and the PIL image processor modules,
    read from their files (the torchvision module cannot be imported here)."""
    import ast
    import importlib.util

    out = []
    for name in (_TV_MODULE, _PIL_MODULE):
        path = importlib.util.find_spec(name).origin
        text = open(path, encoding="utf-8").read()
        fns = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name in HELPERS]
        out.append("\n".join(ast.unparse(f) for f in sorted(fns, key=lambda f: f.name)))
    return out[0], out[1]
