"""A family whose model needs a package mmtune does not depend on (Family.requires) stops every build path with
one error naming the packages and the install line, and the doctor says it first (MM127): Gemma 3n, whose vision
tower transformers builds with timm (timm imports torchvision), is the registered case."""

from __future__ import annotations

import importlib.util

import pytest

from mmtune.models.families import Family, get_family
from mmtune.models.requirements import MissingPackageError, check_requirements, install_line, missing_packages

NO_TIMM = importlib.util.find_spec("timm") is None or importlib.util.find_spec("torchvision") is None


def test_a_missing_package_is_named_with_its_install_line():
    fam = Family(name="needs_pkg", model_types=(), model_class="X", modalities=("text",),
                 requires=(("mmtune_no_such_package_xyz", "its tower is built by it"), ("json", "always here")))
    assert missing_packages(fam) == [("mmtune_no_such_package_xyz", "its tower is built by it")]
    with pytest.raises(MissingPackageError) as e:
        check_requirements(fam)
    assert "mmtune_no_such_package_xyz" in e.value.what and e.value.fix == "pip install mmtune_no_such_package_xyz"
    assert "matching torch" in install_line(["timm", "torchvision"])  # a torchvision wheel pins one torch


def test_families_without_requirements_pass():
    check_requirements(get_family("phi4_multimodal"))
    assert get_family("phi4_multimodal").requires == ()


def test_gemma3n_resolves_from_its_embedded_config():
    from mmtune.config.schema import RunConfig
    from mmtune.models.families import family_for_hub_name
    from mmtune.models.model_config import meta_config, resolve_family

    cfg = RunConfig.model_validate({"model": {"name": "google/gemma-3n-E4B-it"}})
    assert resolve_family(cfg).name == "gemma3n" and family_for_hub_name("google/gemma-3n-E2B-it").name == "gemma3n"
    config = meta_config(cfg)
    text = config.text_config
    assert (text.num_hidden_layers, text.hidden_size, text.num_kv_shared_layers) == (35, 2048, 15)
    assert config.vision_config.architecture == "mobilenetv5_300m_enc"
    assert {p for p, _ in get_family("gemma3n").requires} == {"timm", "torchvision"}


@pytest.mark.skipif(not NO_TIMM, reason="timm and torchvision are installed: Gemma 3n builds here")
def test_gemma3n_plan_and_smoke_stop_with_the_install_line(tmp_path):
    from mmtune.config import load_config
    from mmtune.models.smoke_twin import smoke_twin
    from mmtune.plan.planner import predict

    cfg = load_config(None, ["model.name=google/gemma-3n-E4B-it", f"output_dir={tmp_path}",
                             "data.train=synthetic:arithmetic", "train.gpu=a100-80gb"])
    with pytest.raises(MissingPackageError) as e:
        predict(cfg, plan_eval=False)
    assert "timm" in e.value.what and e.value.fix.startswith("pip install timm torchvision")
    with pytest.raises(MissingPackageError):
        smoke_twin("google/gemma-3n-E4B-it")


@pytest.mark.skipif(not NO_TIMM, reason="timm and torchvision are installed: Gemma 3n builds here")
def test_doctor_names_the_packages_once(tmp_path):
    import yaml

    from mmtune.doctor.runner import run_doctor

    recipe = tmp_path / "g.yaml"
    recipe.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "run"), "model": {"name": "google/gemma-3n-E4B-it"},
                                      "data": {"train": "synthetic:arithmetic"}}))
    rep = run_doctor(recipe, [], "a100-80gb", max_records=10)
    mine = [f for f in rep.errors if f.code == "MM127"]
    assert len(mine) == 1 and "timm" in mine[0].message and mine[0].fix.startswith("pip install timm torchvision")
    assert not any("timm" in f.message for f in rep.errors if f.code != "MM127")  # said once
