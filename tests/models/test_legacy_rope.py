"""Qwen2.5-Omni's public config names its rope "mrope", which transformers 5 rejects at build time."""


def test_omni_public_config_builds_after_rope_normalisation():
    import torch

    from mmtune.build import load_model
    from mmtune.config.schema import RunConfig
    from mmtune.models.configs import embedded, hf_config

    assert embedded("Qwen/Qwen2.5-Omni-7B")["config"]["text_config"]["rope_scaling"]["type"] == "mrope"
    cfg = hf_config(embedded("Qwen/Qwen2.5-Omni-7B"))
    rope = cfg.text_config.rope_parameters
    assert rope["rope_type"] == "default" and rope["mrope_section"] == [16, 24, 24]
    run_cfg = RunConfig.model_validate({"model": {"name": "Qwen/Qwen2.5-Omni-7B"}})
    lm = load_model(run_cfg, device="cpu", dtype=torch.bfloat16, meta=True)  # KeyError('mrope') before
    assert type(lm.model).__name__ == "Qwen2_5OmniThinkerForConditionalGeneration"
