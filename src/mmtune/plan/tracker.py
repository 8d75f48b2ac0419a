"""Track every tensor storage a step allocates and frees, on fake tensors, in order.

A TorchDispatchMode sees each aten op; every output storage not seen before gets a serial number and
an allocation event, and a `weakref.finalize` on the storage logs its free. Nothing is allocated for
real (the storages are fake), so a 7B step costs seconds. The event list is the input of the CUDA
allocator model (`allocator.py`), and replaying it up to the peak gives the live set at the peak,
classified afterwards by identity (weights, trainable, gradients, optimizer state) or by the phase that
created it (activations, logits/loss, temporaries).

torch's own MemTracker registers gradient hooks on every parameter and fails on frozen ones (LoRA);
this tracker needs no hook on parameters at all.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field

import torch

from ..compat.torch_internals import TorchDispatchMode, in_autograd_backward, private_aten
from ..compat.torch_internals import flop_registry as _FLOPS
from .attention import fused_attention_flops
from .fake import META_QUERIES, _tensors_in
from .kernel_workspace import cpu_kernel_workspaces, cuda_flash_workspaces

_aten = torch.ops.aten
# Ops that move no data (views, metadata): no time in the roofline model.
_VIEW_LIKE = {_aten.view, private_aten("_unsafe_view"), _aten.t, _aten.transpose, _aten.permute, _aten.expand,
              _aten.slice, _aten.select, _aten.unsqueeze, _aten.squeeze, _aten.reshape, _aten.alias,
              _aten.detach, _aten.as_strided, _aten.split, _aten.split_with_sizes, _aten.unbind,
              private_aten("_local_scalar_dense"), _aten.empty, _aten.empty_strided, _aten.empty_like}

# Phases a step goes through, in order; `eval_generation` when eval is planned.
PHASES = ("setup", "forward", "loss", "backward", "optimizer", "eval_loss", "eval_generation")


@dataclass
class Event:
    serial: int
    nbytes: int  # > 0: allocation, < 0: free
    phase: str
    tag: str  # "" or "logits" (created inside the output head or the loss)


@dataclass
class Storage:
    serial: int
    nbytes: int
    phase: str
    tag: str
    op: str = ""  # the aten op that created it (diagnostics)


@dataclass
class Trace:
    events: list[Event] = field(default_factory=list)
    storages: dict[int, Storage] = field(default_factory=dict)
    peak_bytes: int = 0
    peak_index: int = -1  # index in `events` of the allocation that set the peak
    peak_phase: str = "setup"
    live_bytes: int = 0
    costs: list = field(default_factory=list)  # (flops, bytes touched, phase) per op

    def live_at(self, index: int) -> set[int]:
        live: set[int] = set()
        for ev in self.events[: index + 1]:
            if ev.nbytes > 0:
                live.add(ev.serial)
            else:
                live.discard(ev.serial)
        return live


class StorageTracker(TorchDispatchMode):
    """Logs allocation/free events of tensor storages created under it (and of ones registered)."""

    def __init__(self):
        super().__init__()
        self.trace = Trace()
        self._serial_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._next = 0
        self.phase = "setup"
        self.tag = ""
        self.record_costs = True
        # Threads of the CPU kernels whose scratch buffers are modelled (kernel_workspace.py); None on
        # GPU targets, whose kernels differ.
        self.cpu_kernel_threads: int | None = None
        # CUDA targets whose attention runs FlashAttention-2: its backward's buffers (kernel_workspace.py)
        self.cuda_flash: bool = False

    # -- identity --------------------------------------------------------------------------------
    def serial(self, t: torch.Tensor) -> int | None:
        """Serial of a tensor's storage, or None if it was never seen."""
        try:
            return self._serial_of.get(t.untyped_storage())
        except (RuntimeError, NotImplementedError, TypeError):
            return None

    def register(self, t: torch.Tensor, phase: str | None = None, tag: str = "") -> int | None:
        """Count a tensor that exists already (weights, buffers, inputs) as allocated now."""
        return self._see(t, phase or self.phase, tag)

    def new_serial(self) -> int:
        """A fresh serial for an allocation event made up by the planner (layer_dedup.py's copies)."""
        serial = self._next
        self._next += 1
        return serial

    def bind(self, t: torch.Tensor, serial: int) -> None:
        """Make `t`'s storage the one of allocation event `serial` (already in the trace): its free is logged."""
        st = t.untyped_storage()
        self._serial_of[st] = serial
        weakref.finalize(st, self._freed, serial, st.nbytes(), self.trace)

    def storages_of(self, serials: set) -> dict:
        """The live storage objects of these serials (serial -> storage)."""
        return {s: st for st, s in self._serial_of.items() if s in serials}

    def recount(self) -> None:
        """Live bytes and the peak recomputed from the events (after layer_dedup.py rewrote them)."""
        tr = self.trace
        live, tr.peak_bytes, tr.peak_index, tr.peak_phase = 0, 0, -1, "setup"
        for i, ev in enumerate(tr.events):
            live += ev.nbytes
            if ev.nbytes > 0 and live > tr.peak_bytes:
                tr.peak_bytes, tr.peak_index, tr.peak_phase = live, i, ev.phase
        tr.live_bytes = live

    # -- events ----------------------------------------------------------------------------------
    def _see(self, t: torch.Tensor, phase: str, tag: str, op: str = "") -> int | None:
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            return None
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        known = self._serial_of.get(st)
        if known is not None:
            return known
        nbytes = st.nbytes()
        serial = self.new_serial()
        self._serial_of[st] = serial
        tr = self.trace
        tr.storages[serial] = Storage(serial, nbytes, phase, tag, op)
        tr.events.append(Event(serial, nbytes, phase, tag))
        tr.live_bytes += nbytes
        if tr.live_bytes > tr.peak_bytes:
            tr.peak_bytes = tr.live_bytes
            tr.peak_index = len(tr.events) - 1
            tr.peak_phase = phase
        weakref.finalize(st, self._freed, serial, nbytes, tr)
        return serial

    def _freed(self, serial: int, nbytes: int, tr: Trace) -> None:
        if tr is not self.trace:
            return
        tr.events.append(Event(serial, -nbytes, self.phase, ""))
        tr.live_bytes -= nbytes

    def _current_phase(self) -> str:
        # The autograd engine runs backward ops with a graph task id; that is the backward phase,
        # including recomputation under checkpointing, whatever the caller's phase says.
        if in_autograd_backward():
            return "backward"
        return self.phase

    def _cost(self, func, args, kwargs, out, phase) -> None:
        """FLOPs (matmul/attention, torch's flop registry) and bytes touched by one op, for the time model."""
        if func.overloadpacket in _VIEW_LIKE:
            return
        flops = 0
        fn = _FLOPS.get(func.overloadpacket)
        if fn is not None:
            try:
                flops = int(fn(*args, **(kwargs or {}), out_val=out))
            except (TypeError, ValueError, RuntimeError, IndexError):
                flops = 0
        else:  # the CPU flash op that stands for the GPU's fused attention: no registry entry (attention.py)
            flops = fused_attention_flops(func, args, kwargs)
        nbytes = 0
        for t in _tensors_in((args, kwargs, out), []):
            nbytes += t.numel() * t.element_size()
        self.trace.costs.append((flops, nbytes, phase))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func not in META_QUERIES:  # `.device`/`.size()` queries: no kernel, no storage, no bytes moved
            self.observe(func, args, kwargs, out)
        return out

    def observe(self, func, args, kwargs, out) -> None:
        """Log the storages an op created (and its cost). Used as a dispatch mode or by ValueFakeMode."""
        phase = self._current_phase()
        if self.record_costs:
            self._cost(func, args, kwargs, out, phase)
        tag = self.tag if phase != "backward" else ""
        for t in _tensors_in(out, []):
            self._see(t, phase, tag, func.__name__)
        if self.cpu_kernel_threads:
            self._scratch(cpu_kernel_workspaces(func, args, self.cpu_kernel_threads), phase, tag, func.__name__)
        elif self.cuda_flash:
            self._scratch(cuda_flash_workspaces(func, args, kwargs), phase, tag, func.__name__)

    def kernel_cost(self, nbytes: int) -> None:
        """A fused kernel's traffic for the time model (plan/fused_kernels.py): `nbytes` moved, no matmul FLOPs."""
        if self.record_costs:
            self.trace.costs.append((0, nbytes, self._current_phase()))

    @contextlib.contextmanager
    def held(self, nbytes: int, phase: str, op: str):
        """A storage of `nbytes` counted as allocated for the duration of the block (analytic growth)."""
        tr = self.trace
        serial = self._next
        self._next += 1
        tr.storages[serial] = Storage(serial, nbytes, phase, "", op)
        tr.events.append(Event(serial, nbytes, phase, ""))
        tr.live_bytes += nbytes
        if tr.live_bytes > tr.peak_bytes:
            tr.peak_bytes, tr.peak_index, tr.peak_phase = tr.live_bytes, len(tr.events) - 1, phase
        try:
            yield serial
        finally:
            tr.events.append(Event(serial, -nbytes, phase, ""))
            tr.live_bytes -= nbytes

    def _scratch(self, sizes: list[int], phase: str, tag: str, op: str) -> None:
        """Buffers a kernel allocates after its outputs and frees before it returns (kernel_workspace.py)."""
        if not sizes:
            return
        tr = self.trace
        serials = []
        for nbytes in sizes:
            serial = self._next
            self._next += 1
            tr.storages[serial] = Storage(serial, nbytes, phase, tag, op + ":workspace")
            tr.events.append(Event(serial, nbytes, phase, tag))
            tr.live_bytes += nbytes
            serials.append((serial, nbytes))
            if tr.live_bytes > tr.peak_bytes:
                tr.peak_bytes = tr.live_bytes
                tr.peak_index = len(tr.events) - 1
                tr.peak_phase = phase
        for serial, nbytes in reversed(serials):
            tr.events.append(Event(serial, -nbytes, phase, ""))
            tr.live_bytes -= nbytes
