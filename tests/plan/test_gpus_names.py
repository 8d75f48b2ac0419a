"""GPU names: one name, one card. A name sold in several memory sizes is an error listing them."""

import pytest

from mmtune.errors import ConfigError
from mmtune.gpus import AMBIGUOUS, GPUS, get_gpu


@pytest.mark.parametrize("name", sorted(AMBIGUOUS))
def test_a_name_with_several_sizes_lists_them(name):
    with pytest.raises(ConfigError) as e:
        get_gpu(name.upper())
    for choice in AMBIGUOUS[name]:
        assert choice in e.value.fix and f"{GPUS[choice].memory_bytes // 2**30} GB" in e.value.fix


def test_exact_names_and_aliases_still_resolve():
    assert get_gpu("A100 80GB").id == "a100-80gb" and get_gpu("a100_40gb").id == "a100-40gb"
    assert get_gpu("4090").id == "rtx-4090" and get_gpu("h100-80gb").id == "h100"


def test_plan_refuses_an_ambiguous_gpu():
    from typer.testing import CliRunner

    from mmtune.cli import app

    res = CliRunner().invoke(app, ["plan", "recipes/demo_counting.yaml", "--gpu", "a100"])
    assert res.exit_code == 2 and "a100-40gb" in res.output and "a100-80gb" in res.output
