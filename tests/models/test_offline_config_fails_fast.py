"""A hub id neither cached nor embedded, on a machine that cannot reach the hub: the config error comes at once
(no ~25 s of huggingface_hub retries) and its fix names the nearest embedded models besides `mmtune download`."""

from __future__ import annotations

import time

import pytest

from mmtune.errors import ModelLoadError


@pytest.fixture
def no_cache(monkeypatch, tmp_path):
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr("mmtune.compat.hub._UNREACHABLE", {})


def _no_network(monkeypatch):
    import socket

    def refuse(*a, **k):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", refuse)


def test_unreachable_hub_fails_at_once_naming_embedded_sizes(no_cache, monkeypatch):
    from mmtune.models.model_config import load_hf_config

    _no_network(monkeypatch)
    t = time.monotonic()
    with pytest.raises(ModelLoadError) as e:
        load_hf_config("Qwen/Qwen2.5-Coder-7B-Instruct")
    assert time.monotonic() - t < 5
    assert "cannot be reached" in e.value.what and "embeds no config" in e.value.what
    assert e.value.fix.startswith("mmtune download Qwen/Qwen2.5-Coder-7B-Instruct")
    assert "Qwen/Qwen2.5-7B-Instruct" in e.value.fix


def test_offline_setting_fails_at_once_too(no_cache, monkeypatch):
    from mmtune.models.model_config import load_hf_config

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE") as e:
        load_hf_config("Qwen/Qwen3-14B")
    assert "Qwen/Qwen3-8B" in e.value.fix and "mmtune download Qwen/Qwen3-14B" in e.value.fix


def test_plan_of_an_unembedded_model_offline_is_one_fast_error(no_cache, monkeypatch, tmp_path):
    from mmtune.config.schema import RunConfig
    from mmtune.models.model_config import structure_config

    _no_network(monkeypatch)
    cfg = RunConfig(model={"name": "meta-llama/Llama-3.3-70B-Instruct", "weights": "random"})
    with pytest.raises(ModelLoadError) as e:
        structure_config(cfg)
    assert "meta-llama/Llama-3.1-70B-Instruct" in e.value.fix


def test_reachable_hub_reads_the_config_as_before(no_cache, monkeypatch):
    """Reachable (the probe connects), the hub id goes to transformers exactly as before the probe existed."""
    import socket

    import transformers

    from mmtune.models.model_config import load_hf_config

    class Conn:
        def close(self):
            pass

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: Conn())
    asked = []

    def from_pretrained(src, **kw):
        asked.append(src)
        return transformers.Qwen2Config()

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", from_pretrained)
    assert load_hf_config("some-org/not-embedded").model_type == "qwen2"
    assert asked == ["some-org/not-embedded"]


def test_behind_a_proxy_the_probe_stays_out_of_the_way(monkeypatch):
    import socket

    from mmtune.compat.hub import hub_unreachable

    monkeypatch.setattr("mmtune.compat.hub._UNREACHABLE", {})
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("no direct probe behind a proxy"))
    assert hub_unreachable() is None


def test_nearest_embedded_prefers_other_sizes_of_the_family():
    from mmtune.models.configs import nearest_embedded

    assert nearest_embedded("Qwen/Qwen2.5-14B-Instruct-1M")[0] == "Qwen/Qwen2.5-14B-Instruct"
    assert "Qwen/Qwen2-VL-2B-Instruct" in nearest_embedded("Qwen/Qwen2-VL-72B-Instruct")
    assert nearest_embedded("zzz/totally-unrelated-xyz") == []
