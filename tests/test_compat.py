"""mmtune.compat: the only place private library internals are used, each entry working on the
installed versions and failing with a clear message (library, version, feature) when one is missing."""

from __future__ import annotations

import ast
import importlib.util
import pickle
import threading
from pathlib import Path

import pytest
import torch

import mmtune
from mmtune.compat import CompatError, installed_version

LIBS = ("torch", "transformers", "peft", "accelerate", "huggingface_hub", "bitsandbytes")
SRC = Path(mmtune.__file__).parent
COMPAT = SRC / "compat"


# ------------------------------------------------------------------------------------------ (a) the rule
def _outside_compat() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py")) if COMPAT not in p.parents]


# Underscore names that are documented public API of the standard library (os._exit: leave the process
# at once, which a second Ctrl-C needs; sys._getframe is not among them).
PUBLIC_UNDERSCORE = {"_exit"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) \
        and name not in PUBLIC_UNDERSCORE


def _owned_names(files) -> set[str]:
    """Private names mmtune defines itself (functions, classes, variables, attributes it assigns)."""
    owned: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                owned.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                owned.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                owned.add(node.attr)
            elif isinstance(node, ast.arg):
                owned.add(node.arg)
            elif isinstance(node, ast.alias):
                owned.add(node.asname or node.name.split(".")[0])
    return {n for n in owned if _private(n)}


def _lib_module(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in LIBS


def private_library_uses(path: Path, owned: set[str]) -> list[str]:
    """`file:line: what` for each private or mutating use of a library in one file."""
    tree = ast.parse(path.read_text())
    lib_names = set()  # local names bound to library modules (`import transformers`, `from x import constants`)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            lib_names |= {(a.asname or a.name.split(".")[0]) for a in node.names if _lib_module(a.name)}
        elif isinstance(node, ast.ImportFrom) and _lib_module(node.module):
            lib_names |= {a.asname or a.name for a in node.names}
    # `self._x` / `cls._x` inside a method, where self / cls is the method's own first argument, is the
    # class's own business; a local variable that happens to be called `cls` is not.
    own_access = set()
    for klass in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        for fn in klass.body:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.args.args:
                first = fn.args.args[0].arg
                own_access |= {id(n) for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                               and isinstance(n.value, ast.Name) and n.value.id == first}
    found = []

    def hit(node, what):
        shown = path.relative_to(SRC.parent) if SRC.parent in path.parents else path.name
        found.append(f"{shown}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _lib_module(node.module):
            if any(_private(part) for part in node.module.split(".")) or any(_private(a.name) for a in node.names):
                hit(node, f"from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if _lib_module(a.name) and any(_private(p) for p in a.name.split(".")):
                    hit(node, f"import {a.name}")
        elif isinstance(node, ast.Attribute):
            base = node.value
            if id(node) in own_access:
                continue
            if _private(node.attr) and node.attr not in owned:
                hit(node, f"private attribute .{node.attr}")
            elif isinstance(node.ctx, ast.Store) and isinstance(base, ast.Name) and base.id in lib_names:
                hit(node, f"assignment to {base.id}.{node.attr} (mutates a library)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2:
            obj, name = node.args[0], node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value) \
                    and name.value not in owned:
                hit(node, f"{node.func.id}(..., {name.value!r})")
            if node.func.id in ("setattr", "delattr") and isinstance(obj, ast.Name) and obj.id in lib_names:
                hit(node, f"{node.func.id}({obj.id}, ...) (mutates a library)")
    return found


def test_no_private_library_use_outside_compat():
    files = _outside_compat()
    owned = _owned_names(files)
    found = [f for p in files for f in private_library_uses(p, owned)]
    assert not found, "private/mutating library uses outside mmtune/compat (move them into compat):\n" + \
        "\n".join(found)


def test_the_rule_finds_what_it_forbids(tmp_path):
    """The scanner above would catch each kind of use this package replaced."""
    src = tmp_path / "probe.py"
    code = ("import torch\nimport transformers\nfrom huggingface_hub import constants\n"
            "from torch._subclasses.fake_tensor import FakeTensorMode\n"
            "from torch.utils._pytree import tree_map\n"
            "from accelerate.state import AcceleratorState\n"
            "AcceleratorState._reset_state()\n"
            "torch._C._current_graph_task_id()\n"
            "setattr(transformers, 'X', 1)\n"
            "constants.HF_HUB_OFFLINE = True\n"
            "getattr(object(), '_gradient_checkpointing_func', None)\n"
            "def build(cls, config):\n    return cls._from_config(config)\n")
    src.write_text(code)
    found = private_library_uses(src, set())
    text = "\n".join(found)
    for what in ("fake_tensor import", "_pytree import", "._reset_state", "._C", "._current_graph_task_id",
                 "setattr(transformers", "constants.HF_HUB_OFFLINE", "'_gradient_checkpointing_func'", "._from_config"):
        assert what in text, (what, text)


# ------------------------------------------------------------------------------ (b) each entry works here
def test_torch_internals_on_the_installed_torch():
    from mmtune.compat import torch_internals as ti

    tree = {"a": [torch.ones(1), 2], "b": (torch.zeros(2),)}
    leaves, spec = ti.tree_flatten(tree)
    assert len(leaves) == 3 and ti.tree_unflatten(leaves, spec)["a"][1] == 2
    assert len([x for x in ti.tree_leaves(tree) if isinstance(x, torch.Tensor)]) == 2
    assert ti.tree_map(lambda x: 7 if isinstance(x, int) else x, tree)["a"][1] == 7
    assert ti.suggest_memory_format(torch.empty(1, 3, 4, 4).to(memory_format=torch.channels_last)) \
        == torch.channels_last
    assert torch.ops.aten.mm in ti.flop_registry

    seen = []

    class Seen(ti.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            with ti.no_dispatch():
                return func(*args, **(kwargs or {}))

    with Seen():
        torch.ones(2) + 1
    assert torch.ops.aten.add.Tensor in seen

    phases = []
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: phases.append(ti.in_autograd_backward()))
    phases.append(ti.in_autograd_backward())
    y.sum().backward()
    assert phases == [False, True]
    # The profiler's allocator events: 4 MB allocated and freed inside, the peak above what was live.
    assert 4 << 20 <= ti.cpu_allocator_peak(lambda: torch.empty(1 << 20).fill_(1)) < 5 << 20
    for name in ("_unsafe_view", "_local_scalar_dense", "_unsafe_index", "_unsafe_index_put",
                 "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward"):
        assert ti.private_aten(name) is getattr(torch.ops.aten, name)


@pytest.mark.parametrize("fast", [True, False])
def test_fake_mode_base_on_the_installed_torch(fast):
    from mmtune.compat.fake_tensor import META_QUERIES, FakeModeBase, FakeTensor, constant_of

    mode = FakeModeBase(fast=fast, allow_non_fake_inputs=True)
    ids = mode.fake_of(torch.tensor([3, 4]), constant=True)
    w = mode.fake_of(torch.ones(4, 5), constant=False)
    assert constant_of(ids).tolist() == [3, 4] and constant_of(w) is None
    with mode:
        y = (w @ w.T).relu()
        z = y.view(16)
    assert isinstance(z, FakeTensor) and tuple(z.shape) == (16,) and mode.is_our_fake(z)
    assert torch.ops.aten.sym_size.default in META_QUERIES or torch.ops.prim.device.default in META_QUERIES


def test_model_from_config_builds_a_concrete_class():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mmtune.compat.transformers_internals import model_from_config

    cfg = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    model = model_from_config(Qwen2ForCausalLM, cfg, dtype=torch.float32, attn_implementation="eager")
    assert type(model) is Qwen2ForCausalLM and model.config.hidden_size == 16


def test_video_processor_accepted_without_mutating_transformers(tmp_path):
    import transformers

    from mmtune.models.tiny import tiny_config_and_processor
    from mmtune.models.video_frames import FramesVideoProcessor

    exported_before = hasattr(transformers, "VideoProcessorMixin")
    _, proc = tiny_config_and_processor("tiny/qwen2-vl")
    assert isinstance(proc, transformers.Qwen2VLProcessor) and type(proc).__name__ == "Qwen2VLProcessor"
    assert isinstance(proc.video_processor, FramesVideoProcessor)
    assert hasattr(transformers, "VideoProcessorMixin") == exported_before  # the library is left as it was
    again = pickle.loads(pickle.dumps(proc))  # spawned data-loader workers pickle the processor
    assert type(again) is type(proc)
    proc.save_pretrained(tmp_path)
    assert '"processor_class": "Qwen2VLProcessor"' in (tmp_path / "processor_config.json").read_text()


def test_omni_interleaving_on_the_installed_transformers():
    import transformers.processing_utils as pu

    from mmtune.compat.transformers_internals import interleaves_video_audio
    from mmtune.models.tiny import tiny_config_and_processor

    omni = tiny_config_and_processor("tiny/qwen2.5-omni")[1]
    vl = tiny_config_and_processor("tiny/qwen2-vl")[1]
    assert interleaves_video_audio(vl) is False
    if hasattr(pu, "OmniModalProcessorMixin"):
        assert interleaves_video_audio(omni) is True
    else:
        with pytest.raises(CompatError, match="OmniModalProcessorMixin"):
            interleaves_video_audio(omni)


def test_auto_image_processor_loads_a_saved_processor_with_pil(tmp_path):
    from mmtune.compat.transformers_internals import auto_image_processor
    from mmtune.models.tiny import tiny_config_and_processor

    saved = tiny_config_and_processor("tiny/llava")[1].image_processor
    saved.save_pretrained(tmp_path)
    loaded = auto_image_processor().from_pretrained(str(tmp_path), backend="pil")
    assert type(loaded).__name__ == type(saved).__name__ and loaded.crop_size == saved.crop_size


def test_checkpointing_function_reports_non_reentrant():
    from mmtune.compat.transformers_internals import checkpointing_function
    from mmtune.models.checkpointing import enable_checkpointing
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny("tiny/qwen2")
    assert all(checkpointing_function(m) is None for m in model.modules())
    enable_checkpointing(model)
    fns = [checkpointing_function(m) for m in model.modules() if checkpointing_function(m) is not None]
    assert fns and all(f.keywords.get("use_reentrant") is False for f in fns)


def test_reset_accelerate_state_forgets_the_first_run():
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from mmtune.compat.accelerate_state import reset_accelerate_state

    reset_accelerate_state()
    Accelerator(cpu=True, mixed_precision="no")
    assert AcceleratorState().mixed_precision == "no"
    reset_accelerate_state()
    assert Accelerator(cpu=True, mixed_precision="bf16").mixed_precision == "bf16"
    reset_accelerate_state()


def test_bare_optimizer_only_where_accelerate_adds_nothing():
    """One process without a scaler: torch's optimizer itself (its step skips accelerate's per-call checks);
    fp16 with loss scaling keeps accelerate's wrapper, whose step goes through the GradScaler."""
    import torch
    from accelerate import Accelerator
    from accelerate.optimizer import AcceleratedOptimizer

    from mmtune.compat.accelerate_state import bare_optimizer, enable_cpu_fp16, reset_accelerate_state

    for precision, kept in (("no", False), ("fp16", True)):
        reset_accelerate_state()
        acc = Accelerator(cpu=True, mixed_precision=precision)
        enable_cpu_fp16(acc)
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        _, prepared = acc.prepare(model, opt)
        assert isinstance(prepared, AcceleratedOptimizer)
        bare = bare_optimizer(acc, prepared)
        assert (bare is prepared) == kept and (bare is opt) == (not kept)
        assert bare.state_dict()["param_groups"] == prepared.state_dict()["param_groups"]
    assert bare_optimizer(acc, opt) is opt  # not wrapped: as it is
    reset_accelerate_state()


def test_unwrapped_asks_accelerate_only_where_it_wrapped_something():
    import torch
    from accelerate import Accelerator

    from mmtune.compat.accelerate_state import reset_accelerate_state, unwrapped

    reset_accelerate_state()
    acc = Accelerator(cpu=True)
    model = acc.prepare(torch.nn.Linear(4, 4))
    assert unwrapped(acc, model) is model  # one process: accelerate wrapped nothing
    compiled = torch.compile(model)  # a wrapper holding `_orig_mod` (nothing compiles until it is called)
    assert unwrapped(acc, compiled) is acc.unwrap_model(compiled)  # accelerate's own answer
    reset_accelerate_state()


def test_offline_scope_is_local_and_mutates_nothing(monkeypatch):
    import os

    from huggingface_hub import constants

    from mmtune.compat.hub import hub_offline, offline_scope
    from mmtune.errors import ModelLoadError
    from mmtune.models.hub_files import model_folder

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    env_before = dict(os.environ)
    assert not hub_offline()
    other_thread = []
    with offline_scope() as was:
        assert was is False and hub_offline()
        assert dict(os.environ) == env_before and constants.HF_HUB_OFFLINE is False
        t = threading.Thread(target=lambda: other_thread.append(hub_offline()))
        t.start()
        t.join()
        # Offline inside the scope: an uncached hub id is an error naming the download command, no request.
        with pytest.raises(ModelLoadError, match="mmtune download"):
            model_folder("mmtune-test-org/never-cached-model")
    assert other_thread == [False] and not hub_offline()


# ------------------------------------------------------------------- (c) a missing internal is a clear error
def _assert_clear(err: CompatError, lib: str, feature: str):
    text = str(err)
    assert f"{lib} {installed_version(lib)}" in text and feature in text and "Checked on" in text
    assert f"pip install '{lib}>=" in err.fix
    # no library traceback chained to it
    assert err.__cause__ is None and (err.__suppress_context__ or err.__context__ is None)


def test_missing_fake_tensor_internal_is_a_clear_error(monkeypatch):
    import torch._subclasses.fake_tensor as ft

    monkeypatch.delattr(ft, "_DISPATCH_META_HANDLERS")
    spec = importlib.util.spec_from_file_location("mmtune.compat._fake_tensor_probe", COMPAT / "fake_tensor.py")
    with pytest.raises(CompatError) as e:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    _assert_clear(e.value, "torch", "FakeTensorMode internals")


def test_missing_private_aten_op_is_a_clear_error():
    from mmtune.compat.torch_internals import private_aten

    with pytest.raises(CompatError) as e:
        private_aten("_no_such_op_in_any_torch")
    _assert_clear(e.value, "torch", "planner")


def test_missing_from_config_is_a_clear_error(monkeypatch):
    import transformers
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mmtune.compat.transformers_internals import model_from_config

    monkeypatch.delattr(transformers.PreTrainedModel, "_from_config")
    with pytest.raises(CompatError) as e:
        model_from_config(Qwen2ForCausalLM, Qwen2Config())
    _assert_clear(e.value, "transformers", "model building from a config")


def test_missing_omni_mixin_is_a_clear_error(monkeypatch):
    import transformers.processing_utils as pu

    from mmtune.compat.transformers_internals import interleaves_video_audio
    from mmtune.models.tiny import tiny_config_and_processor

    omni = tiny_config_and_processor("tiny/qwen2.5-omni")[1]
    monkeypatch.delattr(pu, "OmniModalProcessorMixin", raising=False)
    with pytest.raises(CompatError) as e:
        interleaves_video_audio(omni)
    _assert_clear(e.value, "transformers", "use_audio")
    assert "transformers>=5.23" in e.value.fix  # the version that has it, not the tested range


def test_missing_accelerate_reset_is_a_clear_error(monkeypatch):
    from accelerate.state import GradientState

    from mmtune.compat.accelerate_state import reset_accelerate_state

    monkeypatch.delattr(GradientState, "_reset_state")
    with pytest.raises(CompatError) as e:
        reset_accelerate_state()
    _assert_clear(e.value, "accelerate", "a second run in one process")


def test_omni_layout_of_the_installed_transformers_is_in_the_family_table():
    """Every parameter of the tiny Omni twin has a component under this transformers' module names, and
    the decoder's LoRA regex selects decoder layers only (5.17 and 5.23 name the parts differently)."""
    import re

    from mmtune.models.families import get_family
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny("tiny/qwen2.5-omni")
    fam = get_family("qwen2_5_omni")
    comps = {n: fam.component_of(n) for n, _ in model.named_parameters()}
    assert "other" not in comps.values(), [n for n, c in comps.items() if c == "other"]
    assert {"vision", "audio", "projector", "decoder", "lm_head"} <= set(comps.values())
    regex = re.compile(fam.decoder_lora_regex())
    hits = [n for n, _ in model.named_modules() if regex.match(n)]
    assert hits and all(fam.component_of(n + ".") == "decoder" for n in hits)


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed here")
def test_missing_dependencies_reads_the_installed_transformers(tmp_path):
    """transformers' failure to load a torchvision-only image processor names the package (models/processor_loading.py
    turns it into the install line): Phi-4-multimodal's, as a hub folder names it."""
    import json

    import transformers

    from mmtune.compat.transformers_internals import missing_dependencies

    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "Phi4MultimodalImageProcessor"}))
    with pytest.raises((ImportError, ValueError)) as e:
        transformers.AutoImageProcessor.from_pretrained(str(tmp_path))
    assert missing_dependencies(e.value) == ["torchvision"], str(e.value)
    assert missing_dependencies(ValueError("unrelated")) == []
