"""Run code on fake tensors while the small integer tensors that steer control flow keep real values.

The one mechanism for every family (issue item 3). FakeTensorMode already carries a real "constant"
beside a fake tensor, but only for single-element tensors (`CONSTANT_NUMEL_LIMIT = 1`), so
`grid_thw.tolist()`, `input_ids == image_token_id`, rope index computation or `cu_seqlens` fail with
a data-dependent error. `ValueFakeMode` widens that rule to integer and boolean tensors up to
`max_const_numel` elements: an op whose inputs are all such constants runs for real on CPU (they are
tiny: token ids, masks, grids, position ids) and its integer/bool output stays a constant; anything
that touches a floating tensor (weights, activations) stays fake and allocates nothing.

So model code sees real token ids, grids and masks, takes the same branches it takes in training,
and the planner never needs a patch per model.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

_VALUE_DTYPES = {torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool}

# Integer inputs of one step: ids/masks (batch x seq), 3 x batch x seq rope positions, grids. A 7B
# run at 32k tokens is ~100k elements; 8M leaves room while never covering a weight matrix.
DEFAULT_MAX_CONST_NUMEL = 1 << 23

class NoValueError(RuntimeError):
    """Model code read the value of an integer tensor computed from floating data (e.g. argmax)."""

    def __init__(self, t):
        self.tensor = t
        super().__init__(f"a {tuple(t.shape)} {t.dtype} tensor computed from floating-point data was read "
                         "as a Python value; its value is unknown without running the model for real")


_NoValue = NoValueError

_aten = torch.ops.aten
_FACTORIES = {_aten.zeros, _aten.ones, _aten.full, _aten.empty, _aten.empty_strided, _aten.arange,
              _aten.scalar_tensor, _aten.new_zeros, _aten.new_ones, _aten.new_full, _aten.new_empty}


class ValueFakeMode(FakeTensorMode):
    """FakeTensorMode in which small integer/bool tensors carry their real values."""

    def __init__(self, *, max_const_numel: int = DEFAULT_MAX_CONST_NUMEL, **kw):
        kw.setdefault("allow_non_fake_inputs", True)
        super().__init__(**kw)
        self.max_const_numel = max_const_numel

    def may_turn_const(self, t: torch.Tensor) -> bool:  # noqa: D102 - see module docstring
        if t.numel() <= 1:
            return super().may_turn_const(t)
        return (t.dtype in _VALUE_DTYPES and t.numel() <= self.max_const_numel
                and t.layout == torch.strided and not self.is_our_fake(t) and t.device.type != "meta")

    def dispatch(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _aten._local_scalar_dense.default:
            t = args[0]
            if self.is_our_fake(t) and t.constant is None:
                if t.is_floating_point() or t.is_complex():
                    # A float read (logged loss, grad norm, GradScaler's found_inf) never steers a
                    # shape; the plan models the ordinary step, so it reads 0.0 (no overflow).
                    return 0.0
                raise NoValueError(t)
        out = self._value_factory(func, args, kwargs)
        if out is not None:
            return out
        return super().dispatch(func, types, args, kwargs)

    def _value_factory(self, func, args, kwargs):
        """A factory (`zeros`, `arange`, `full`, ...) of a small integer/bool tensor runs for real.

        Fake mode only carries values through ops that have constant tensor inputs; a factory has no
        tensor input, so `position_ids = torch.zeros(3, b, s, dtype=long)` would lose its value before
        model code fills and reads it. The shape is learnt on meta first so nothing big is allocated.
        """
        if func.overloadpacket not in _FACTORIES:
            return None
        from torch.utils._pytree import tree_leaves
        from torch.utils._mode_utils import no_dispatch

        if any(isinstance(a, torch.Tensor) for a in tree_leaves((args, kwargs))):
            return None
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == "meta":
            return None
        with no_dispatch():
            probe = func(*args, **dict(kwargs, device="meta"))
            if probe.dtype not in _VALUE_DTYPES or probe.numel() > self.max_const_numel:
                return None
            real = func(*args, **dict(kwargs, device="cpu"))
        out = self.fake_tensor_converter.from_real_tensor(self, real, make_constant=True)
        if dev is not None and torch.device(dev).type != "cpu":
            out.fake_device = torch.device(dev)
        return out

    def with_value(self, t: torch.Tensor) -> torch.Tensor:
        """A fake copy of a real tensor; integer/bool ones keep their values as a constant."""
        const = self.may_turn_const(t)
        return self.fake_tensor_converter.from_real_tensor(self, t, make_constant=const)


def _real_values(x):
    """Replace fake tensors that carry a constant by real tensors, inside nested lists/tuples."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(x, FakeTensor):
        if x.constant is None:
            raise _NoValue(x)
        from torch.utils._mode_utils import no_dispatch

        with no_dispatch():
            return x.constant.tolist()
    if isinstance(x, (list, tuple)):
        return type(x)(_real_values(v) for v in x)
    return x




class ValueFunctionMode(torch.overrides.TorchFunctionMode):
    """`torch.tensor([...])` reads element data without the dispatcher; feed it the carried values.

    Model code builds small tensors from lists of 0-d tensors (e.g. Qwen2-VL's rope deltas). Those
    elements are fake constants, so their values are known: hand the real ones to the constructor, and
    the result is lifted back into the fake mode as a constant.
    """

    _CTORS = (torch.tensor, torch.as_tensor)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self._CTORS and args:
            try:
                args = (_real_values(args[0]),) + tuple(args[1:])
            except _NoValue:
                pass  # no value to give: let the constructor raise its own error
        return func(*args, **kwargs)
