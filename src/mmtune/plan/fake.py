"""Run a training step on fake tensors while the small tensors that steer control flow stay real.

The one mechanism for every family (issue item 3). Weights, activations and media tensors are fake:
they have shapes and dtypes and allocate nothing. Token ids, masks, grids (`image_grid_thw`), position
ids and everything computed *only* from such tensors stay ordinary CPU tensors with real values, so
model code reads `grid_thw.tolist()`, compares `input_ids == image_token_id`, computes rope indices and
`cu_seqlens`, and decides "is this mask all ones?" exactly as in training (transformers takes its
tracing branch for fake masks, which would make the plan follow a different path than the run).

`ValueFakeMode.dispatch` applies one rule to every aten op:
- no fake input (all inputs real, or an integer/bool factory such as `zeros(dtype=long)`/`arange`):
  run it for real when its output is small (shape learnt first on `meta`); these are index/mask
  computations. Floating factories larger than a scalar (`empty`, `zeros`, `rand` of a weight, activation or
  dropout mask) are always fake;
- any fake input: real inputs join as fake tensors that carry their value as a FakeTensor constant;
  boolean-mask indexing with a known mask becomes indexing with the mask's (real) `nonzero()`, which
  has a static shape, so `embeds[mask]` works without a data-dependent error;
- reading a fake *floating* scalar (logged loss, grad norm, GradScaler's found_inf) gives 0.0: float
  values never steer shapes, and the plan models the ordinary step. Reading a fake *integer* raises
  NoValueError, which the planner reports with the module and op.
"""

from __future__ import annotations

import torch

from ..compat.fake_tensor import (
    GROUPED_MM,
    META_QUERIES,
    NOT_HANDLED,
    FakeModeBase,
    constant_of,
    grouped_mm_output,
)
from ..compat.torch_internals import (
    no_dispatch,
    private_aten,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_unflatten,
)

_VALUE_DTYPES = {torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool}

# Largest real tensor the plan computes for real: ids/masks (batch x seq), 3 x batch x seq rope
# positions, small float tables derived from them. 8M elements never reaches a weight or an
# activation of interest, and bounds the planner's own memory.
DEFAULT_MAX_REAL_NUMEL = 1 << 23

_aten = torch.ops.aten
# `rand`/`randn`: a scalar draw that steers control flow (transformers 5.17's Whisper-style encoders
# draw `torch.rand([])` for LayerDrop on every layer) is drawn for real; larger draws stay fake.
_FACTORIES = {_aten.zeros, _aten.ones, _aten.full, _aten.empty, _aten.empty_strided, _aten.arange,
              _aten.scalar_tensor, _aten.rand, _aten.randn}
_LOCAL_SCALAR_DENSE = private_aten("_local_scalar_dense").default
_UNSAFE_VIEW = private_aten("_unsafe_view").default
# Ops that only copy or compare a tensor's values (and every view op). On a fake *input* that carries its value (the batch's
# media: their real values exist already, see execute._fake_inputs) the output keeps carrying one, whatever
# its size, so model code that reads the pixels themselves works as in training: Idefics3 / SmolVLM drop
# the all-zero padding tiles with `(pixel_values.view(...) == 0.0).sum(...)` before the vision tower.
# Anything that meets a weight is fake without a value, as before. Every view op keeps the value too: torch
# would otherwise drop the input's value as soon as a view of it could not carry one (a view aliases it).
_VALUE_KEEPING = {private_aten("_to_copy").default, _aten.clone.default, _aten.eq.Scalar, _aten.ne.Scalar}
_INDEX_OPS = {_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default,
              private_aten("_unsafe_index").Tensor, private_aten("_unsafe_index_put").default}


class NoValueError(RuntimeError):
    """Model code read the value of an integer tensor computed from floating data (e.g. argmax)."""

    def __init__(self, t, op: str = ""):
        self.tensor = t
        self.op = op
        super().__init__(f"a {tuple(t.shape)} {t.dtype} tensor computed from floating-point data was read "
                         "as a Python value; its value is unknown without running the model for real")


def _tensors_in(x, out: list) -> list:
    """The tensors in an op's (args, kwargs): what `tree_leaves` finds, without pytree's generic
    per-node dispatch (aten arguments nest only lists, tuples and dicts)."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            if isinstance(v, torch.Tensor):
                out.append(v)
            elif isinstance(v, (list, tuple, dict)):
                _tensors_in(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors_in(v, out)
    return out


def _numel(x) -> int:
    return sum(t.numel() for t in tree_leaves(x) if isinstance(t, torch.Tensor))


class ValueFakeMode(FakeModeBase):
    """FakeTensorMode in which small tensors computed from real inputs stay real (see module docstring)."""

    def __init__(self, *, max_real_numel: int = DEFAULT_MAX_REAL_NUMEL, fast: bool = True, **kw):
        kw.setdefault("allow_non_fake_inputs", True)
        # fast: shortcuts through FakeTensorMode's internals that give the same trace faster
        # (mmtune.compat.fake_tensor); False takes torch's own paths everywhere.
        super().__init__(fast=fast, **kw)
        self.max_real_numel = max_real_numel
        # A StorageTracker observing this mode's top-level ops (set by execute.run_steps). Observing here
        # instead of stacking the tracker as a second dispatch mode saves one Python mode per op; ops the
        # fake mode dispatches to itself (decompositions) are nested (depth > 0) and, as before, not seen.
        self.tracker = None
        self._depth = 0

    def may_turn_const(self, t: torch.Tensor) -> bool:  # noqa: D102 - constants may be whole id tensors
        # Never a parameter: a weight is no value, and FakeTensorMode refuses to make one a constant (a real
        # one-element parameter -- Mllama's cross-attention gates, made real as scalars are -- updated by a
        # foreach optimizer beside fake ones in a full fine-tune's plan).
        return (t.numel() <= self.max_real_numel and t.layout == torch.strided and not self.is_our_fake(t)
                and t.device.type != "meta" and (t.numel() <= 1 or t.dtype in _VALUE_DTYPES)
                and not isinstance(t, torch.nn.Parameter))

    def with_value(self, t: torch.Tensor) -> torch.Tensor:
        """A fake copy of a real tensor; small integer/bool ones keep their values as a constant."""
        return self.fake_of(t, constant=self.may_turn_const(t))

    def real_value(self, t):
        """The real tensor behind a fake constant (or `t` itself when it is real)."""
        if self.is_our_fake(t):
            value = constant_of(t)
            if value is None:
                raise NoValueError(t)
            return value
        return t

    def dispatch(self, func, types, args=(), kwargs=None):
        out = self.meta_query(func, args, kwargs)  # `.device`/`.size()`: answered directly
        if out is not NOT_HANDLED:
            return out
        tracker = self.tracker
        if tracker is None or self._depth:
            return self._dispatch(func, types, args, kwargs)
        self._depth += 1
        try:
            out = self._dispatch(func, types, args, kwargs)
        finally:
            self._depth -= 1
        if func not in META_QUERIES:
            tracker.observe(func, args, kwargs, out)
        return out

    def _dispatch(self, func, types, args=(), kwargs=None):
        if func in META_QUERIES and not kwargs and all(self.is_our_fake(a) for a in args
                                                       if isinstance(a, torch.Tensor)):
            return super().dispatch(func, types, args, kwargs)
        kwargs = kwargs or {}
        tensors = _tensors_in((args, kwargs), [])
        fakes = [t for t in tensors if self.is_our_fake(t)]
        if func is _LOCAL_SCALAR_DENSE and fakes:
            t = fakes[0]
            value = constant_of(t)
            if value is not None:
                with no_dispatch():
                    return value.item()
            if t.is_floating_point() or t.is_complex():
                return 0.0
            raise NoValueError(t, str(func))
        if not fakes and (tensors or func.overloadpacket in _FACTORIES):
            if all(t.device.type == "cpu" for t in tensors):
                out = self._run_real(func, args, kwargs)
                if out is not NotImplemented:
                    return out
        if (func in _VALUE_KEEPING or func.is_view) and len(fakes) == 1 and not kwargs.get("device") and \
                constant_of(fakes[0]) is not None:
            with no_dispatch():
                value = func(*tree_map(lambda a: constant_of(a) if self.is_our_fake(a) else a, args), **kwargs)
            return tree_map(lambda v: self.fake_of(v, constant=True) if isinstance(v, torch.Tensor) else v, value)
        if func is GROUPED_MM and fakes:
            out = grouped_mm_output(args, kwargs)  # MoE experts in fp32/fp16: torch's meta kernel takes bf16 only
            if out is not None:
                return super().dispatch(_aten.empty.memory_format, types, (out[0],),
                                        {"dtype": out[1], "device": fakes[0].device})
        if func in _INDEX_OPS:
            args = self._static_indices(args)
        if fakes and len(fakes) != len(tensors):
            args, kwargs = tree_map(lambda a: self.with_value(a) if isinstance(a, torch.Tensor)
                                    and not self.is_our_fake(a) else a, (args, kwargs))
        if func is _UNSAFE_VIEW and self.fast and not kwargs and len(args) == 2 \
                and self.is_our_fake(args[0]) and constant_of(args[0]) is None and args[0].is_contiguous():
            # FakeTensorMode never caches `_unsafe_view` (reshape of a fresh matmul output, ~5 % of all
            # ops, each through its slow uncached path). Below autograd it is `view` of a contiguous
            # tensor: same metadata, same storage; autograd above still records `_unsafe_view`.
            return super().dispatch(_aten.view.default, types, args, kwargs)
        return super().dispatch(func, types, args, kwargs)

    def _run_real(self, func, args, kwargs):
        """Run an op with only real inputs for real, if its outputs are small (learnt on meta first)."""
        with no_dispatch():
            try:
                meta_args, meta_kwargs = tree_map(
                    lambda a: a.to("meta") if isinstance(a, torch.Tensor) else a, (args, kwargs))
                if func.overloadpacket in _FACTORIES:
                    meta_kwargs = dict(meta_kwargs, device="meta")
                probe = func(*meta_args, **meta_kwargs)
                if _numel(probe) > self.max_real_numel:
                    return NotImplemented
                if func.overloadpacket in _FACTORIES and isinstance(probe, torch.Tensor) and \
                        probe.numel() > 1 and probe.dtype not in _VALUE_DTYPES:
                    return NotImplemented  # a new float buffer (weights, activations): fake
            except (RuntimeError, NotImplementedError, TypeError, ValueError):
                # Data-dependent output shape (nonzero, masked_select, unique, repeat_interleave...):
                # its output is no larger than its (small, real) inputs.
                if _numel((args, kwargs)) > self.max_real_numel:
                    return NotImplemented
            if func.overloadpacket in _FACTORIES and kwargs.get("device") not in (None, "cpu", torch.device("cpu")):
                kwargs = dict(kwargs, device="cpu")
            return func(*args, **kwargs)

    def _static_indices(self, args):
        """`x[mask]` with a known boolean mask -> `x[mask.nonzero()]`: same result, static shape."""
        if len(args) < 2 or not isinstance(args[1], (list, tuple)):
            return args
        new = []
        for idx in args[1]:
            if isinstance(idx, torch.Tensor) and idx.dtype in (torch.bool, torch.uint8):
                try:
                    mask = self.real_value(idx)
                except NoValueError:
                    new.append(idx)
                    continue
                with no_dispatch():
                    new.extend(mask.bool().nonzero(as_tuple=True))
            else:
                new.append(idx)
        return (args[0], new, *args[2:])


def _real_values(x, mode: ValueFakeMode):
    """Replace fake constants by Python values inside nested lists/tuples (for `torch.tensor([...])`)."""
    if isinstance(x, torch.Tensor) and mode.is_our_fake(x):
        v = mode.real_value(x)
        with no_dispatch():
            return v.tolist()
    if isinstance(x, (list, tuple)):
        return type(x)(_real_values(v, mode) for v in x)
    return x


class ValueFunctionMode(torch.overrides.TorchFunctionMode):
    """`torch.tensor([...])` reads element data without the dispatcher; feed it the carried values."""

    _CTORS = (torch.tensor, torch.as_tensor)

    def __init__(self, mode: ValueFakeMode):
        super().__init__()
        self.mode = mode

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self._CTORS and args:
            try:
                args = (_real_values(args[0], self.mode),) + tuple(args[1:])
            except NoValueError:
                pass  # no value to give: the constructor raises its own error, reported by the planner
        return func(*args, **kwargs)


__all__ = ["ValueFakeMode", "ValueFunctionMode", "NoValueError", "tree_flatten", "tree_unflatten"]
