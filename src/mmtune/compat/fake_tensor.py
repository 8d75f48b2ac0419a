"""torch's FakeTensorMode internals that the planner's `ValueFakeMode` (plan/fake.py) builds on.

`FakeModeBase` is FakeTensorMode plus the planner's shortcuts through its private methods: a cache key
built without torch's generic per-field walk (`_prep_args_for_hash`), cached outputs rebuilt without
symbolic checks (`_get_output_tensor_from_cache_entry`), `__torch_dispatch__` without its per-call
wrappers (`_should_skip_dynamo`), and metadata queries (`.device`, `.size()`) answered from torch's own
handler table (`_DISPATCH_META_HANDLERS`). Each shortcut gives the same trace as torch's own path
(tests/plan/test_fast_paths.py compares both op by op) and cuts the plan's time by about half.
`fast=False` takes torch's paths everywhere.

Checked on torch 2.13 and 2.14 (CPU). torch 2.11 (the GPU machines') could not be installed on this
CPU machine. A torch without these internals raises CompatError at import of this module, naming the
version and the planner.
"""

from __future__ import annotations

import logging

import torch

from . import need, need_attr
from .torch_internals import suggest_memory_format

_FEATURE = "planner (torch FakeTensorMode internals)"
_MOD = "torch._subclasses.fake_tensor"

FakeTensor = need(_MOD, "FakeTensor", "torch", _FEATURE)
FakeTensorMode = need(_MOD, "FakeTensorMode", "torch", _FEATURE)
in_kernel_invocation_manager = need(_MOD, "in_kernel_invocation_manager", "torch", _FEATURE)
_DISPATCH_META_HANDLERS = need(_MOD, "_DISPATCH_META_HANDLERS", "torch", _FEATURE)
_DISPATCH_HANDLE_DIRECTLY = need(_MOD, "_DISPATCH_HANDLE_DIRECTLY", "torch", _FEATURE)
for _m in ("_prep_args_for_hash", "_get_output_tensor_from_cache_entry", "dispatch", "is_our_fake"):
    need_attr(FakeTensorMode, _m, "torch", _FEATURE)
_set_conj = need_attr(torch._C, "_set_conj", "torch", _FEATURE)
_set_neg = need_attr(torch._C, "_set_neg", "torch", _FEATURE)
_get_dispatch_mode = need_attr(torch._C, "_get_dispatch_mode", "torch", _FEATURE)
_FAKE_KEY = need_attr(need_attr(torch._C, "_TorchDispatchModeKey", "torch", _FEATURE), "FAKE", "torch", _FEATURE)
_OpOverload = need_attr(torch._ops, "OpOverload", "torch", _FEATURE)

# Metadata queries (`.device`, `.size()`, `.stride()`...) FakeTensorMode answers from the fake tensor
# itself; the model asks `.device` of a tensor about twice per aten op, so these take the shortest path.
META_QUERIES = frozenset(_DISPATCH_META_HANDLERS) | frozenset(_DISPATCH_HANDLE_DIRECTLY)
_META_HANDLERS = dict(_DISPATCH_META_HANDLERS)
# Argument types FakeTensorMode's cache key records as (type, value) (see `_prep_args_for_hash`).
_PLAIN_ARGS = frozenset({int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.layout,
                         torch.memory_format})
_CONTIGUOUS = torch.contiguous_format
_META = torch.device("meta")
_fake_log = logging.getLogger(FakeTensorMode.__module__)
NOT_HANDLED = object()


class _SlowKey(Exception):
    """An argument the fast cache key does not handle: build this key with FakeTensorMode's own code."""


def constant_of(t):
    """The real value a fake tensor carries (`FakeTensor.constant`), or None. Checked on torch 2.13, 2.14."""
    return t.constant


class FakeModeBase(FakeTensorMode):
    """FakeTensorMode with the planner's fast paths through its internals (see the module docstring)."""

    def __init__(self, *, fast: bool = True, **kw):
        super().__init__(**kw)
        # False takes torch's own paths everywhere (tests compare the two traces and cache keys op by op).
        self.fast = fast
        self._shape_keys: dict = {}
        self._stride_keys: dict = {}

    def fake_of(self, t: torch.Tensor, constant: bool) -> torch.Tensor:
        """A fake copy of a real tensor; with `constant` it carries the real value along."""
        return self.fake_tensor_converter.from_real_tensor(self, t, make_constant=constant)

    def meta_query(self, func, args, kwargs):
        """`.device`/`.size()`/`.stride()` of this mode's fake tensors (two thirds of all dispatches): what
        FakeTensorMode.dispatch returns, without its per-call no_dispatch/logging preamble; NOT_HANDLED
        for anything else."""
        handler = _META_HANDLERS.get(func)
        if handler is not None and self.fast and not kwargs and not _fake_log.isEnabledFor(logging.DEBUG) \
                and all(type(a) is FakeTensor and a.fake_mode is self for a in args):
            return handler(args)
        return NOT_HANDLED

    # ------------------------------------------------------------------------------------ cache key
    def _prep_args_for_hash(self, result, args, state, id_hashed_objects):
        """FakeTensorMode's cache key, built without its generic per-field walk (about a third of the
        plan's time was spent there). Appends exactly what torch's version appends for plain arguments
        and strided, non-symbolic fake tensors; anything else is handed to torch's version whole."""
        if not self.fast:
            return super()._prep_args_for_hash(result, args, state, id_hashed_objects)
        n = len(result)
        try:
            self._fast_key_values(result, args)
        except _SlowKey:
            del result[n:]
            super()._prep_args_for_hash(result, args, state, id_hashed_objects)

    def _fast_key_values(self, result, args):
        append = result.append
        if isinstance(args, (list, tuple, dict)):
            append(type(args))
            append(f"length_{len(args)}")
        if isinstance(args, dict):
            self._fast_key_values(result, args.keys())
            self._fast_key_values(result, args.values())
            return
        for arg in args:
            tp = type(arg)
            if tp in _PLAIN_ARGS:
                append(tp)
                append(arg)
            elif tp is FakeTensor:
                self._fast_tensor_key(result, arg)
            elif tp is list or tp is tuple:
                self._fast_key_values(result, arg)
            else:
                raise _SlowKey  # SymInt, non-fake tensors, callables, torch.Size...: torch's rules

    def _fast_tensor_key(self, result, t):
        """`extract_tensor_metadata(t)._flatten_into(...)` for a strided, non-symbolic fake tensor."""
        if t.fake_mode is not self or t.constant is not None or t.layout is not torch.strided \
                or t._has_symbolic_sizes_strides:
            raise _SlowKey  # torch bypasses the cache or converts symbols: let it decide
        shape = t.shape
        stride = t.stride()
        ndim = len(shape)
        # suggest_memory_format only differs from contiguous_format for 4-D and 5-D tensors.
        fmt = suggest_memory_format(t) if ndim == 4 or ndim == 5 else _CONTIGUOUS
        if not t.is_contiguous(memory_format=fmt):
            fmt = None
        # (type, "length_n", int, v0, int, v1, ...) of the shape and the stride, as torch flattens
        # them (plain ints: symbolic sizes went to torch's version above); few distinct ones recur.
        sk = self._shape_keys.get(shape)
        if sk is None:
            sk = self._shape_keys[shape] = (torch.Size, f"length_{ndim}") + tuple(x for v in shape for x in (int, v))
        tk = self._stride_keys.get(stride)
        if tk is None:
            tk = self._stride_keys[stride] = (tuple, f"length_{len(stride)}") + tuple(x for v in stride for x in (int, v))
        result.append(t.dtype)
        result += sk
        result += tk
        # device, layout, memory format, storage offset, storage bytes, requires_grad, is_quantized,
        # is_conj, is_neg, is_inference, is_sparse, is_coalesced, dense_dim, sparse_dim
        # FakeTensor.device: "meta" inside a kernel invocation, else the fake device (t is ours).
        device = _META if self.in_kernel_invocation else t.fake_device
        result += (device, torch.strided, fmt, t.storage_offset(), t.untyped_storage().nbytes(), t.requires_grad,
                   t.is_quantized, t.is_conj(), t.is_neg(), t.is_inference(), False, None, None, None)

    def _get_output_tensor_from_cache_entry(self, state, entry, key, func, args):
        """torch's version for a mode without a ShapeEnv (every cached size a plain int): the same
        steps (constant, in-place alias, or a new fake of the cached metadata sharing the input's
        storage for views) without its per-value symbolic checks and guard suppression."""
        if not self.fast or self.shape_env is not None:
            return super()._get_output_tensor_from_cache_entry(state, entry, key, func, args)
        if entry.inplace_idx is None and entry.metadata is None and entry.view_idx is None:
            return entry.constant_value
        if entry.inplace_idx is not None:
            return args[entry.inplace_idx]
        md = entry.metadata
        if md is None:
            return None
        if md.layout is not torch.strided:
            return super()._get_output_tensor_from_cache_entry(state, entry, key, func, args)
        with in_kernel_invocation_manager(self):
            empty = torch.empty_strided(md.shape, md.stride, dtype=md.dtype, layout=md.layout, device="meta",
                                        requires_grad=md.requires_grad)
            if md.is_conj:
                _set_conj(empty, True)
            if md.is_neg:
                _set_neg(empty, True)
            if isinstance(func, _OpOverload) and func.is_view:
                empty.set_(args[entry.view_idx].untyped_storage(), md.storage_offset, md.shape, md.stride)
        return FakeTensor(self, empty, md.device)

    # ------------------------------------------------------------------------------------ dispatch
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch's documented opt-out: do not wrap this class's `__torch_dispatch__` in a dynamo-disable
        # frame (two Python wrappers and four eval-frame switches per op, ~7 % of a plan). The planner
        # never runs torch.compile under this mode, so there is nothing for the wrapper to disable.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        """FakeTensorMode.__torch_dispatch__ without its per-call wrappers (call counter, dynamo disable)."""
        if not self.fast:
            return FakeTensorMode.__torch_dispatch__(self, func, types, args, kwargs or {})
        if _get_dispatch_mode(_FAKE_KEY) is not None:
            raise AssertionError(f"FakeTensorMode should not be set when dispatching {func}")
        try:
            return self.dispatch(func, types, args, kwargs)
        except TypeError:
            _fake_log.exception("fake tensor raised TypeError")
            raise


# ------------------------------------------------------------------ grouped matmul (MoE experts)
# transformers' "grouped_mm" experts (Qwen3-Omni, Qwen3-MoE, ...) call `aten._grouped_mm`. torch's meta kernel
# (torch/_meta_registrations.py `_meta_grouped_mm_common`) copies the CUDA kernel's checks and refuses anything
# but bf16, while the CPU kernel (and CUDA's fallback before sm80) computes fp32 / fp16 too: a plan of an fp32 or
# fp16 step would fail where the step itself runs. For those dtypes the planner gives the output the CPU kernel
# allocates: the meta kernel's shape rule, unpadded (`_create_grouped_mm_output_tensor` pads only for CUDA
# builds). Checked on torch 2.13 (CPU); tests/plan/test_moe_plan.py compares the plan with a real CPU step.
_grouped = getattr(torch.ops.aten, "_grouped_mm", None)
GROUPED_MM = _grouped.default if _grouped is not None else None


def grouped_mm_output(args, kwargs):
    """(size, dtype) of `_grouped_mm(mat_a, mat_b, offs, bias, out_dtype)` where mat_a is not bf16, else None."""
    names = ("mat_a", "mat_b", "offs", "bias", "out_dtype")
    a = dict(zip(names, args), **kwargs)
    mat_a, mat_b, offs = a["mat_a"], a["mat_b"], a.get("offs")
    if mat_a.dtype == torch.bfloat16 or offs is None:
        return None
    if mat_a.dim() == 2:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)] if mat_b.dim() == 2 else [mat_a.size(0), mat_b.size(-1)]
    else:
        size = [mat_a.size(1), mat_b.size(1)] if mat_b.dim() == 2 else [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    return size, a.get("out_dtype") or mat_a.dtype


__all__ = ["FakeModeBase", "FakeTensor", "FakeTensorMode", "GROUPED_MM", "META_QUERIES", "NOT_HANDLED", "constant_of",
           "grouped_mm_output"]
