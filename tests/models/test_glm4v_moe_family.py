"""GLM-4.5V's own facts beyond the contract tests: the hub names pick it over the dense GLM-4.1V (whose hub pattern
`glm4v` also matches a `glm4v-moe` name), the twin is built as the real decoder is (a dense first layer, then MoE
layers with a shared expert), and LoRA's default targets stay off the fused experts, the router, the shared experts
and the dense MLP."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("name,family", [
    ("zai-org/GLM-4.5V", "glm4v_moe"), ("zai-org/GLM-4.6V", "glm4v_moe"), ("zai-org/GLM-4.6V-FP8", "glm4v_moe"),
    ("someone/glm4v-moe-finetune", "glm4v_moe"), ("THUDM/GLM-4.1V-9B-Thinking", "glm4v"), ("someone/glm4v-sft", "glm4v"),
])
def test_hub_names_pick_the_moe_family_only_for_moe_checkpoints(name, family):
    from mmtune.models.families import family_for_hub_name

    assert family_for_hub_name(name).name == family


def test_a_dense_glm_4_6v_flash_is_not_taken_for_the_moe():
    from mmtune.models.families import family_for_hub_name

    fam = family_for_hub_name("zai-org/GLM-4.6V-Flash")
    assert fam is None or fam.name != "glm4v_moe"


def test_embedded_config_resolves_to_the_family_and_has_no_mtp_layer():
    from mmtune.models.configs import embedded, hf_config
    from mmtune.models.families import family_for_config

    config = hf_config(embedded("zai-org/GLM-4.5V"))
    assert family_for_config(config).name == "glm4v_moe"
    text = config.text_config
    assert (text.num_hidden_layers, text.first_k_dense_replace, text.n_shared_experts) == (46, 1, 1)
    assert not getattr(text, "num_nextn_predict_layers", 0)  # transformers builds no MTP layer (family module)
    assert text.output_router_logits is False  # no balancing loss is asked for (doctor MM124 stays silent)


def test_twin_has_a_dense_first_layer_then_moe_layers_with_a_shared_expert():
    from mmtune.models.tiny import build_tiny

    model, _ = build_tiny("tiny/glm4v-moe")
    layers = model.model.language_model.layers
    assert type(layers[0].mlp).__name__ == "Glm4vMoeTextMLP"
    assert {type(layer.mlp).__name__ for layer in layers[1:]} == {"Glm4vMoeTextMoE"} and len(layers) > 2
    assert all(hasattr(layer.mlp, "shared_experts") for layer in layers[1:])


def test_default_lora_wraps_attention_only():
    """adapter.target_modules=auto on the twin: LoRA on q/k/v/o of every decoder layer. The fused 3-D experts and the
    router stay plain and frozen, and so do the nn.Linear shared experts and layer 0's dense MLP, which GLM-4.1V's
    default (every decoder linear) would have wrapped."""
    from mmtune.build import build_model_and_adapters
    from mmtune.config import load_config
    from mmtune.resolve import gpu_target, resolve_run

    r = resolve_run(load_config(None, ["model.name=tiny/glm4v-moe"]), gpu_target("a100-80gb"))
    _, result = build_model_and_adapters(r, meta=True)
    wrapped = {n.rsplit(".lora_A", 1)[0] for n, _ in result.model.named_parameters() if ".lora_A." in n}
    assert {n.rsplit(".", 1)[1] for n in wrapped} == {"q_proj", "k_proj", "v_proj", "o_proj"}, wrapped
    assert all(".language_model.layers." in n for n in wrapped)
    trainable = [n for n, p in result.model.named_parameters() if p.requires_grad]
    assert not [n for n in trainable if ".mlp." in n], trainable
