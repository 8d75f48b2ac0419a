"""Trace four layers of a stack of identical layers and replicate the interior one's allocation profile.

A 7B decoder has 28 identical layers, a 72B one 80; tracing each costs ~130 us per aten op on fake
tensors, most of a plan's time. Every interior layer allocates and frees the same storages in the same
order, relative to its neighbours. So the traced model runs layers [0, 1, 2, L-1] of each long
`nn.ModuleList` (swapped in for the step, restored after), and after each micro-batch's backward the
event stream of the L-layer model is rebuilt: layer 2's forward segment is copied for layers 3..L-2
(between layer 2's and the last layer's forward) and its backward segment likewise, each copy with fresh
storage serials, its frees pointed at the same relative storage of its own layer or of a neighbour
(layer l frees what layer l-1 left in forward; its backward frees its own saved tensors, its forward
input and the gradient the layer above produced). The last layer's events that referred to layer 2
now refer to layer L-2, and layer 2's to the last layer now to layer 3. Gradients of the copied layers'
parameters become real (fake) tensors bound to the copied allocation events, so the optimizer, gradient
clipping and zero_grad run for real on every parameter, exactly as in the full trace.

Exactness is checked, not assumed: the four layers' segments must have the same allocations (layer 1 =
layer 2 = last, forward and backward), layer 2's forward must equal the last layer's and its backward
layer 1's, including which relative storage each free releases; every storage of layer 2 must be freed
inside the layers' segments or be a parameter's gradient; configs with per-layer differences
(`layer_types` not uniform, full-attention block indexes, deepstack indexes, MoE layer lists) are never
deduplicated. Any miss raises `DedupMismatch` and the planner traces the full model instead.
tests/plan/test_layer_dedup.py compares both traces byte for byte.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

from ..compat.torch_internals import in_autograd_backward
from .tracker import Event, Storage

MIN_LAYERS = 5  # below this nothing is saved (four layers are traced)
# Config keys whose value makes layers of one stack behave differently by their index.
INDEX_KEYS = ("fullatt_block_indexes", "deepstack_visual_indexes", "mlp_only_layers", "decoder_sparse_step",
              "no_rope_layers", "cross_attention_layers", "full_attn_idxs")


class DedupMismatch(RuntimeError):
    """A layer did not repeat its neighbour's allocations exactly: trace the full model."""


@dataclass
class Group:
    parent: torch.nn.Module
    name: str  # attribute of `parent`
    full: torch.nn.ModuleList
    path: str = ""  # module path in the model (reported)
    marks: list = field(default_factory=list)  # (kind, pos, what, event index, cost index)
    spliced: int = 0  # micro-batches whose copies were spliced in

    @property
    def n(self) -> int:
        return len(self.full)


def _signature(mod) -> tuple:
    return (type(mod), tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in mod.named_parameters()),
            tuple((n, tuple(b.shape), b.dtype) for n, b in mod.named_buffers()))


def _index_dependent(config) -> bool:
    d = config.to_dict() if hasattr(config, "to_dict") else {}

    def walk(x) -> bool:
        if isinstance(x, dict):
            for k, v in x.items():
                if k in INDEX_KEYS and v not in (None, [], 0, 1):
                    return True
                if k == "layer_types" and isinstance(v, list) and len(set(v)) > 1:
                    return True
                if walk(v):
                    return True
        return False
    return walk(d)


def find_groups(model, hf_config) -> list[Group]:
    """Every ModuleList of >= MIN_LAYERS structurally identical layers (decoder layers, vision blocks)."""
    if hf_config is not None and _index_dependent(hf_config):
        return []
    groups = []
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.ModuleList) or len(mod) < MIN_LAYERS or not name:
            continue
        sig = _signature(mod[0])
        if any(_signature(m) != sig for m in mod):
            continue
        parent_name, _, attr = name.rpartition(".")
        groups.append(Group(model.get_submodule(parent_name), attr, mod, name))
    return groups


class LayerDedup:
    """Swap the short stacks in, mark the layers' segments, splice the copies after each backward."""

    def __init__(self, groups: list[Group], tracker, mode):
        self.groups, self.tracker, self.mode = groups, tracker, mode
        self.handles: list = []

    def __enter__(self):
        for g in self.groups:
            kept = [g.full[0], g.full[1], g.full[2], g.full[g.n - 1]]
            for pos, layer in enumerate(kept):
                self.handles.append(layer.register_forward_pre_hook(self._pre(g, pos)))
                self.handles.append(layer.register_forward_hook(self._post(g, pos)))
            setattr(g.parent, g.name, torch.nn.ModuleList(kept))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        for g in self.groups:
            setattr(g.parent, g.name, g.full)

    def _mark(self, g, kind, pos, what):
        tr = self.tracker.trace
        g.marks.append((kind, pos, what, len(tr.events), len(tr.costs)))

    def _pre(self, g, pos):
        def hook(mod, args):
            if not in_autograd_backward():
                self._mark(g, "F", pos, "start")
        return hook

    def _post(self, g, pos):
        def hook(mod, args, out):
            if in_autograd_backward():
                return
            self._mark(g, "F", pos, "end")
            t = out[0] if isinstance(out, (tuple, list)) else out
            if isinstance(t, torch.Tensor) and t.requires_grad:
                # Fires when the gradient of this layer's output is complete: its backward starts.
                t.register_hook(lambda grad: self._mark(g, "B", pos, "start"))
        return hook

    def after_backward(self) -> None:
        for g in self.groups:
            marks, g.marks = g.marks, []
            inserted = _splice(self.tracker, self.mode, g, marks)
            for other in self.groups:  # the other stacks' marks of this micro-batch move with the insertions
                other.marks = [(k, p, w, ei + sum(n for at, n, _, _ in inserted if at <= ei),
                                ci + sum(n for _, _, at, n in inserted if at <= ci)) for k, p, w, ei, ci in other.marks]
        self.tracker.recount()


def _segments(tr, marks):
    """Event and cost ranges of the four traced layers' forward (F) and backward (B) in this micro-batch."""
    fs, fe, bs = {}, {}, {}
    for kind, pos, what, ei, ci in marks:
        d = fs if (kind, what) == ("F", "start") else fe if kind == "F" else bs
        if pos in d:
            raise DedupMismatch(f"layer {pos} ran twice in one forward")
        d[pos] = (ei, ci)
    if sorted(fs) != [0, 1, 2, 3] or sorted(fe) != [0, 1, 2, 3] or sorted(bs) not in ([], [0, 1, 2, 3]):
        raise DedupMismatch("the traced layers did not each run once")
    seg = {("F", k): (fs[k], fs[k + 1]) for k in range(3)}
    end = fe[3][0]
    # The last layer's forward ends with the frees the stack's loop makes after it returns (the previous
    # hidden state going out of scope), as the other layers' segments do before the next one starts.
    last_f_allocs = {e.serial for e in tr.events[fs[2][0]:fs[3][0]] if e.nbytes > 0}
    while end < len(tr.events) and tr.events[end].nbytes < 0 and tr.events[end].serial in last_f_allocs:
        end += 1
    seg[("F", 3)] = (fs[3], (end, fe[3][1]))
    if bs:
        for k in (3, 2, 1):
            seg[("B", k)] = (bs[k], bs[k - 1])
    return seg


def _splice(tracker, mode, g: Group, marks) -> list:
    tr = tracker.trace
    if not marks:
        return []
    seg = _segments(tr, marks)
    kinds = ["F"] + (["B"] if ("B", 1) in seg else [])
    addr: dict[int, tuple] = {}  # serial -> (kind, traced layer, position among the segment's allocations)
    inv: dict[tuple, int] = {}
    for (kind, k), ((e0, _), (e1, _)) in seg.items():
        pos = 0
        for e in tr.events[e0:e1]:
            if e.nbytes > 0:
                addr[e.serial] = (kind, k, pos)
                inv[(kind, k, pos)] = e.serial
                pos += 1

    def tokens(kind, k, allocs_only=False):
        (e0, _), (e1, _) = seg[(kind, k)]
        out = []
        for e in tr.events[e0:e1]:
            if e.nbytes > 0:
                st = tr.storages[e.serial]
                out.append(("+", e.nbytes, e.phase, e.tag, st.op))
            elif not allocs_only:
                a = addr.get(e.serial)
                ref = (a[0], a[1] - k, a[2]) if a else ("G",)
                out.append(("-", e.nbytes, e.phase, e.tag, ref))
        return out

    def costs(kind, k):
        (_, c0), (_, c1) = seg[(kind, k)]
        return tr.costs[c0:c1]

    for kind in kinds:
        if not tokens(kind, 1, True) == tokens(kind, 2, True) == tokens(kind, 3, True):
            raise DedupMismatch(f"layers 1, 2 and the last allocate differently ({kind})")
    if tokens("F", 2) != tokens("F", 3) or costs("F", 2) != costs("F", 3):
        raise DedupMismatch("layer 2's forward differs from the last layer's")
    if "B" in kinds and (tokens("B", 2) != tokens("B", 1) or costs("B", 2) != costs("B", 1)):
        raise DedupMismatch("layer 2's backward differs from layer 1's")
    allowed = {"F": {("F", 0), ("F", -1)}, "B": {("B", 0), ("B", 1), ("F", 0), ("F", -1)}}
    for kind in kinds:
        for t in tokens(kind, 2):
            if t[0] == "-" and (t[4][0] == "G" or (t[4][0], t[4][1]) not in allowed[kind]):
                raise DedupMismatch(f"layer 2 frees a storage outside its neighbourhood: {t}")

    L = g.n
    copies = range(3, L - 1)  # full-model layer numbers of the copies; traced 2 is layer 2, traced 3 is L-1
    synth: dict[tuple, int] = {}  # (kind, full layer, pos) -> new serial
    for ell in copies:
        for (kind, _k, pos) in [a for a in inv if a[1] == 2]:
            synth[(kind, ell, pos)] = tracker.new_serial()

    def resolve(kind, ell, pos):
        if 3 <= ell <= L - 2:
            return synth[(kind, ell, pos)]
        return inv[(kind, 2 if ell == 2 else 3, pos)]

    def copy_segment(kind, ell):
        (e0, _), (e1, _) = seg[(kind, 2)]
        out, pos = [], 0
        for e in tr.events[e0:e1]:
            if e.nbytes > 0:
                s = synth[(kind, ell, pos)]
                src = tr.storages[e.serial]
                tr.storages[s] = Storage(s, src.nbytes, src.phase, src.tag, src.op)
                pos += 1
            else:
                a = addr[e.serial]
                s = resolve(a[0], ell + a[1] - 2, a[2])
            out.append(Event(s, e.nbytes, e.phase, e.tag))
        return out

    # Every storage of layer 2 is freed in the layers' segments (checked above for its own frees; here for
    # the others') or is a parameter's gradient, which the copies get as bound tensors below.
    # A storage of layer 2 freed by layer 1 or by the last layer: the copies reproduce only the relations
    # their templates have (layer l+1 frees layer l's forward leftovers, layer l-1's backward the gradient
    # layer l passed down).
    free_at = {}
    first = min(e0 for (e0, _), _ in seg.values())  # nothing before this micro-batch frees its storages
    for i in range(first, len(tr.events)):
        e = tr.events[i]
        if e.nbytes < 0 and addr.get(e.serial, (None, None))[1] == 2:
            free_at[e.serial] = i
    grad_serials = {tracker.serial(p.grad) for p in g.full[2].parameters() if p.grad is not None}
    survivors = []  # alive after the backward, freed later with the step's state (autocast's weight casts)
    for s, a in addr.items():
        if a[1] != 2:
            continue
        i = free_at.get(s)
        if i is None:
            if s not in grad_serials:
                if tr.storages[s].op != "_to_copy.default":
                    # a layer's output kept past the micro-batch (a captured hidden state) may be one layer's
                    # only: not something every copy repeats
                    raise DedupMismatch(f"a storage of layer 2 outlives the micro-batch ({tr.storages[s].op})")
                survivors.append(s)
            continue
        consumer = [(kind, k) for (kind, k), ((e0, _), (e1, _)) in seg.items() if e0 <= i < e1]
        if not consumer or (a[0], 2 - consumer[0][1]) not in allowed[consumer[0][0]]:
            raise DedupMismatch(f"a storage of layer 2 is freed outside its neighbourhood ({tr.storages[s].op})")

    # Rebuild the micro-batch's events: copies' forward after layer 2's, copies' backward after the last
    # layer's; the real segments' references across the gap re-pointed.
    remap = {}
    for kind in kinds:
        for rk, (e0, e1) in (((3, -1), _rng(seg, kind, 3)), ((2, 1), _rng(seg, kind, 2))):
            for i in range(e0, e1):
                e = tr.events[i]
                a = addr.get(e.serial) if e.nbytes < 0 else None
                if a and a[1] - rk[0] == rk[1]:
                    ell = (L - 1) + rk[1] if rk[0] == 3 else 2 + rk[1]
                    remap[i] = Event(synth[(a[0], ell, a[2])], e.nbytes, e.phase, e.tag)
    inserts = {seg[("F", 3)][0][0]: [e for ell in copies for e in copy_segment("F", ell)]}
    cost_inserts = {seg[("F", 3)][0][1]: [c for _ in copies for c in costs("F", 2)]}
    if "B" in kinds:
        inserts[seg[("B", 2)][0][0]] = [e for ell in reversed(copies) for e in copy_segment("B", ell)]
        cost_inserts[seg[("B", 2)][0][1]] = [c for _ in copies for c in costs("B", 2)]
    tr.events = _insert([remap.get(i, e) for i, e in enumerate(tr.events)], inserts)
    tr.costs = _insert(tr.costs, cost_inserts)
    inserted = [(at, len(v), cat, len(cv)) for (at, v), (cat, cv) in zip(sorted(inserts.items()),
                                                                         sorted(cost_inserts.items()))]

    # Gradients of the copied layers' parameters: bound to their copies' allocation events.
    pending = mode.tracker
    mode.tracker = None
    try:
        if survivors:
            # Layer 2's leftovers (autocast's cached casts of its weights) die together when autocast
            # exits; each copy's are stand-in storages of the same size released with them.
            storage_of = tracker.storages_of(set(survivors))
            if len(storage_of) != len(survivors):
                raise DedupMismatch("a storage of layer 2 outlives the micro-batch and cannot be followed")
            for s in survivors:
                a, nbytes = addr[s], tr.storages[s].nbytes
                held = []
                for ell in copies:
                    # a floating factory stays fake (fake.py runs small integer factories for real)
                    dt = torch.float32 if nbytes % 4 == 0 else torch.float16 if nbytes % 2 == 0 else torch.uint8
                    t = torch.empty(nbytes // dt.itemsize, dtype=dt)
                    tracker.bind(t, synth[(a[0], ell, a[2])])
                    held.append(t)
                weakref.finalize(storage_of[s], held.clear)
        for n, p2 in g.full[2].named_parameters():
            if p2.grad is None:
                continue
            s2 = tracker.serial(p2.grad)
            a = addr.get(s2)
            for ell in copies:
                p = g.full[ell].get_parameter(n)
                if a is None:  # accumulated in place into an earlier micro-batch's gradient
                    if p.grad is None:
                        raise DedupMismatch(f"{n}: layer 2 has a gradient, layer {ell} none")
                    continue
                grad = torch.empty_strided(p2.grad.shape, p2.grad.stride(), dtype=p2.grad.dtype)
                p.grad = grad
                tracker.bind(grad, synth[(a[0], ell, a[2])])
    finally:
        mode.tracker = pending
    g.spliced += 1
    return inserted


def _rng(seg, kind, k):
    (e0, _), (e1, _) = seg[(kind, k)]
    return e0, e1


def _insert(items: list, inserts: dict) -> list:
    out, prev = [], 0
    for at in sorted(inserts):
        out += items[prev:at]
        out += inserts[at]
        prev = at
    return out + items[prev:]


__all__ = ["DedupMismatch", "LayerDedup", "find_groups"]
