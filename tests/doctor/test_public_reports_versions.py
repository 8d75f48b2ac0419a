"""Broken environments from the seventeenth batch of public bug reports (docs/doctor.md, "Public bug reports, batch
17: installed versions and broken environments"): a transformers / peft / accelerate older than mmtune's
requirements after another tool's install, a flash-attn wheel built for another torch, a CPU-only torch on a GPU
machine, a PyAV built for numpy 1 under numpy 2. Each broken package is rebuilt as it is found on disk: a
distribution's metadata at an older version, or a package whose import fails as the reported wheels fail, put first
on sys.path; the real packages stay installed beside them.
"""

from __future__ import annotations

import sys

import pytest
from doctor_helpers import context_for, run_codes

_TEXT = {"model": {"name": "tiny/qwen2"}, "data": {"train": "synthetic:counting", "synthetic_train_size": 8},
         "adapter": {"method": "lora", "r": 4}, "train": {"precision": "fp32", "device": "cpu"}}


def _old_distribution(root, name: str, version: str):
    """The metadata pip leaves for `name` at `version` (what a later `pip install name==version` installs)."""
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _unimportable(root, module: str, message: str):
    """A package `module` whose import fails with `message`, as a compiled wheel for another ABI fails."""
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(f"raise ImportError({message!r})\n")


@pytest.fixture
def fresh_imports(monkeypatch):
    """Forget which modules imported (the cached answer and the loaded modules), restored afterwards."""
    from mmtune.resolve.installed import import_problem

    import_problem.cache_clear()
    yield lambda *mods: [monkeypatch.delitem(sys.modules, m, raising=False) for m in mods]
    import_problem.cache_clear()


# https://github.com/QwenLM/Qwen3-VL/issues/723, https://github.com/QwenLM/Qwen3-VL/issues/1018,
# https://github.com/modelscope/ms-swift/issues/3109: "cannot import name 'Qwen2_5_VLForConditionalGeneration' from
# 'transformers'" (4.48, a 4.49 dev build); https://github.com/hiyouga/LlamaFactory/issues/2696,
# https://github.com/unslothai/unsloth/issues/201: peft without DoRA, "unexpected keyword argument 'use_dora'";
# https://github.com/huggingface/transformers/issues/34714: a transformers and an accelerate that do not match.

def test_packages_older_than_mmtunes_requirements_are_an_error(tmp_path, monkeypatch):
    _old_distribution(tmp_path / "site", "transformers", "4.49.0")
    _old_distribution(tmp_path / "site", "peft", "0.10.0")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    rep = run_codes(context_for(tmp_path, _TEXT), "MM188")
    errors = {f.where: f for f in rep.errors}
    assert set(errors) == {"transformers (installed package)", "peft (installed package)"}
    assert "transformers 4.49.0 is installed; mmtune needs transformers>=" in errors["transformers (installed package)"].message
    assert errors["peft (installed package)"].fix.startswith("pip install 'peft>=")


def test_the_installed_environment_meets_mmtunes_requirements(tmp_path):
    rep = run_codes(context_for(tmp_path, _TEXT), "MM188")
    assert rep.errors == [] and not rep.codes("warning")
    assert "MM188" in {c.code for c in __import__("mmtune.doctor.registry", fromlist=["x"]).all_checks() if c.fast}


# https://github.com/modelscope/FunClip/pull/91, https://github.com/PyAV-Org/PyAV/issues/1401,
# https://github.com/holgern/pyedflib/issues/262: a module compiled against numpy 1.x under numpy 2: "numpy.core.multiarray
# failed to import" at its import, which mmtune does only when a record with a video is read.

def test_a_media_reader_built_for_another_numpy_is_an_error(tmp_path, monkeypatch, fresh_imports):
    _unimportable(tmp_path / "site", "av", "numpy.core.multiarray failed to import")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    fresh_imports("av")
    rep = run_codes(context_for(tmp_path, _TEXT), "MM188")
    (err,) = rep.errors
    assert err.where == "av (installed package)" and "numpy.core.multiarray failed to import" in err.message
    assert "pip install --force-reinstall --no-cache-dir av" in err.fix


# https://github.com/Dao-AILab/flash-attention/issues/966, https://github.com/Dao-AILab/flash-attention/issues/1832,
# https://github.com/Dao-AILab/flash-attention/issues/975, https://github.com/axolotl-ai-cloud/axolotl/issues/1588:
# "flash_attn_2_cuda...so: undefined symbol" (a wheel built for another torch): found by find_spec, fails on import.

def test_a_flash_attn_that_does_not_import_is_not_picked(tmp_path, monkeypatch, fresh_imports):
    from mmtune.errors import ConfigError
    from mmtune.gpus import GPUS
    from mmtune.resolve.decisions import decide_attention
    from mmtune.resolve.target import Target

    _unimportable(tmp_path / "site", "flash_attn", "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: undefined "
                                                   "symbol: _ZN3c104cuda9SetDeviceEi")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    fresh_imports("flash_attn")
    here = Target("cuda", GPUS["a100-80gb"], "this machine", local=True)  # a run on this machine's A100
    attn, decision = decide_attention("auto", here, "bf16")
    assert attn == "sdpa" and "undefined symbol" in decision.reason and "pip uninstall -y flash-attn" in decision.reason
    with pytest.raises(ConfigError, match="flash_attn is installed but does not import here"):
        decide_attention("flash_attention_2", here, "bf16")
    # planned for another machine: that machine's flash_attn, not this one's, is what counts
    planned = Target("cuda", GPUS["a100-80gb"], "--gpu a100-80gb", local=False, assume_installed="gpu-extra")
    assert decide_attention("auto", planned, "bf16")[0] == "flash_attention_2"


# https://github.com/X-PLUG/MobileAgent/issues/60, https://github.com/karpathy/nanoGPT/issues/281,
# https://github.com/facebookresearch/detectron2/issues/460: "AssertionError: Torch not compiled with CUDA enabled" on
# a machine with a GPU (nvidia-smi works): the CPU wheel of torch.

def test_a_cpu_only_torch_is_named_as_why_no_gpu_is_used(tmp_path, monkeypatch):
    import torch

    from mmtune.errors import ConfigError
    from mmtune.resolve import launch_env
    from mmtune.resolve.target import local_target

    if torch.cuda.is_available():
        pytest.skip("this machine's torch sees a GPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    driver = tmp_path / "gpus"
    for bus in ("0000:3b:00.0", "0000:5e:00.0"):
        (driver / bus).mkdir(parents=True)
    monkeypatch.setattr(launch_env, "NVIDIA_DRIVER_GPUS", str(driver))
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:  # the CPU wheel (torch 2.13 here)
        with pytest.raises(ConfigError) as e:
            local_target("cuda")
        assert "is a CPU-only build" in str(e.value) and "lists 2 NVIDIA GPU(s)" in str(e.value)
        assert "download.pytorch.org/whl/cu" in e.value.fix
        assert "CPU-only build" in local_target("auto").origin
    # the rule itself, for both builds: a CUDA build is never called CPU-only; no GPU listed, nothing to say at auto
    assert launch_env.cpu_torch_note("2.14.1+cu128", "12.8", None, 2) is None
    assert "it cannot use a GPU" in launch_env.cpu_torch_note("2.13.0+cpu", None, None, 0)
