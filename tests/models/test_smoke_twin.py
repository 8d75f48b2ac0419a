"""smoke_twin maps real models to tiny twins; shrink_config keeps the class and structure."""

from __future__ import annotations

import json

import pytest
import transformers

from mmtune.errors import ModelLoadError
from mmtune.models.configs import embedded, hf_config
from mmtune.models.families import family_for_model_type
from mmtune.models.smoke_twin import shrink_config, smoke_twin


@pytest.mark.parametrize("name,twin", [
    ("Qwen/Qwen2-VL-7B-Instruct", "tiny/qwen2-vl"),
    ("Qwen/Qwen2.5-VL-7B-Instruct", "tiny/qwen2.5-vl"),
    ("Qwen/Qwen3-VL-8B-Instruct", "tiny/qwen3-vl"),
    ("Qwen/Qwen2-Audio-7B-Instruct", "tiny/qwen2-audio"),
    ("Qwen/Qwen2.5-Omni-7B", "tiny/qwen2.5-omni"),
    ("llava-hf/llava-1.5-7b-hf", "tiny/llava"),
    ("llava-hf/llava-v1.6-mistral-7b-hf", "tiny/llava-next"),  # not embedded: the name table
    ("Qwen/Qwen2-VL-2B-Instruct", "tiny/qwen2-vl"),
    ("tiny/llava", "tiny/llava"),
])
def test_smoke_twin(name, twin):
    assert smoke_twin(name) == twin


def test_smoke_twin_reads_a_local_config_and_explicit_family(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_audio"}))
    assert smoke_twin(str(tmp_path)) == "tiny/qwen2-audio"
    assert smoke_twin("someone/custom-model", family="llava") == "tiny/llava"
    with pytest.raises(ModelLoadError, match="model.family"):
        smoke_twin("someone/custom-model")


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen2.5-Omni-7B", "llava-hf/llava-1.5-7b-hf",
                                    "Qwen/Qwen2-Audio-7B-Instruct"])
def test_shrink_config_keeps_class_structure_and_token_ids(hub_id):
    real = hf_config(embedded(hub_id))
    fam = family_for_model_type(real.model_type)
    tiny = shrink_config(real)
    assert type(tiny) is type(real)
    for key in ("image_token_id", "video_token_id", "image_token_index", "audio_token_index", "vision_feature_layer",
                "projector_hidden_act"):
        if hasattr(real, key):
            assert getattr(tiny, key) == getattr(real, key), key
    if hasattr(real, "vision_config"):
        for key in ("patch_size", "spatial_merge_size", "temporal_patch_size", "hidden_act"):
            if hasattr(real.vision_config, key):
                assert getattr(tiny.vision_config, key) == getattr(real.vision_config, key)
    small = shrink_config(real, vocab_size=1000)
    cls = getattr(transformers, fam.model_class)
    model = cls._from_config(small)
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    ids = [v for k, v in small.to_dict().items() if k.endswith(("token_id", "token_index")) and isinstance(v, int)]
    assert all(0 <= i < 1000 for i in ids) and len(set(ids)) == len(ids)
