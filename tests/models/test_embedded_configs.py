"""The embedded public configs (src/mmtune/models/configs/*.json) build models of their published size.

Each is built on the meta device (no memory) from its embedded config and its parameter count compared with a
documented count, within 1 %. A config copied wrong in a shape field (hidden, intermediate, layers, heads, vocab,
tied embeddings, a vision tower's width) moves the count by far more than that.
"""

from __future__ import annotations

import pytest

PADDLE = "github ZHUI/paddlenlp_model_readme {}/index.md (the hub model card)"
KERAS = "github keras-team/keras-hub keras_hub/src/models/{} backbone_presets (exact counts of the converted checkpoints)"
# hub id -> (documented parameter count, where it is documented)
DOCUMENTED = {
    "Qwen/Qwen2.5-0.5B-Instruct": (0.49e9, PADDLE.format("Qwen/Qwen2.5-0.5B-Instruct") + ": Number of Parameters: 0.49B"),
    "Qwen/Qwen2.5-1.5B-Instruct": (1.54e9, PADDLE.format("Qwen/Qwen2.5-1.5B-Instruct") + ": 1.54B"),
    "Qwen/Qwen2.5-3B-Instruct": (3.09e9, PADDLE.format("Qwen/Qwen2.5-3B-Instruct") + ": 3.09B"),
    "Qwen/Qwen2.5-7B-Instruct": (7.61e9, PADDLE.format("Qwen/Qwen2.5-7B-Instruct") + ": 7.61B"),
    "Qwen/Qwen2.5-14B-Instruct": (14.7e9, PADDLE.format("Qwen/Qwen2.5-14B-Instruct") + ": 14.7B"),
    "Qwen/Qwen2.5-32B-Instruct": (32.5e9, PADDLE.format("Qwen/Qwen2.5-32B-Instruct") + ": 32.5B"),
    "Qwen/Qwen2.5-72B-Instruct": (72.7e9, PADDLE.format("Qwen/Qwen2.5-72B-Instruct") + ": 72.7B"),
    "Qwen/Qwen2-7B-Instruct": (7.6e9, PADDLE.format("Qwen/Qwen2-7B") + ": the performance table's '# Params 7.6B'"),
    "Qwen/Qwen3-0.6B": (0.6e9, "docs.nvidia.com/nemo/automodel model-coverage qwen3 ('Qwen3: 0.6B, 1.7B, 4B, ...')"),
    "Qwen/Qwen3-4B": (4.0e9, "docs.nvidia.com/nemo/automodel model-coverage qwen3 ('Qwen3: 0.6B, 1.7B, 4B, ...')"),
    "Qwen/Qwen3-8B": (8.2e9, "huggingface.co/Qwen/Qwen3-8B model card 'Number of Parameters: 8.2B' (quoted in the code index)"),
    "meta-llama/Llama-3.2-1B-Instruct": (1.23e9, PADDLE.format("meta-llama/Llama-3.2-1B-Instruct") + ": '1B (1.23B)'"),
    "meta-llama/Llama-3.2-3B-Instruct": (3.21e9, PADDLE.format("meta-llama/Llama-3.2-3B-Instruct") + ": '3B (3.21B)'"),
    "meta-llama/Llama-3.1-8B": (8.0e9, PADDLE.format("meta-llama/Meta-Llama-3.1-8B") + ": Params 8B"),
    "meta-llama/Llama-3.1-70B-Instruct": (70e9, PADDLE.format("meta-llama/Meta-Llama-3.1-70B-Instruct") + ": Params 70B"),
    "mistralai/Mistral-7B-Instruct-v0.3": (7.2e9, PADDLE.format("Qwen/Qwen2-7B") + ": Mistral-7B '# Params 7.2B' "
                                           "(v0.1; v0.3's 768 more vocabulary rows add 6.3M, 0.09 %)"),
    "Qwen/Qwen2-VL-2B-Instruct": (2.209e9, "huggingface.co datasets open-cn-llm-leaderboard/vlm_requests "
                                  "Qwen/Qwen2-VL-2B-Instruct_eval_request_False_float16_Original.json: params 2.209"),
    "Qwen/Qwen2-VL-7B-Instruct": (8.29e9, "hub page Qwen/Qwen2-VL-7B-Instruct: 8.29B params (tests/models/test_loading.py)"),
    "Qwen/Qwen2.5-VL-3B-Instruct": (3.75e9, "raw.githubusercontent.com/jakemanger/whatmodel/main/pages/model/"
                                    "qwen2-5-vl-3b.md: '3.75B params'"),
    "Qwen/Qwen3-1.7B": (1720574976, KERAS.format("qwen3/qwen3_presets.py") + " qwen3_1.7b_en 'params': 1720574976"),
    "Qwen/Qwen3-14B": (14768307200, KERAS.format("qwen3/qwen3_presets.py") + " qwen3_14b_en 'params': 14768307200"),
    "Qwen/Qwen3-32B": (32762123264, KERAS.format("qwen3/qwen3_presets.py") + " qwen3_32b_en 'params': 32762123264"),
    "Qwen/Qwen2-72B-Instruct": (72e9, PADDLE.format("Qwen/Qwen2-72B") + ": the performance table's '#Params 72B' (rounded: "
                                "the build's 72.71B is 0.98 % above it)"),
    "meta-llama/Llama-2-7b-chat-hf": (6738415616, KERAS.format("llama/llama_presets.py")
                                      + " llama2_instruct_7b_en 'params': 6738415616"),
    "meta-llama/Llama-2-13b-chat-hf": (13e9, PADDLE.format("meta-llama/Llama-2-13b-chat") + ": the model card's Params '13B'"),
    "meta-llama/Meta-Llama-3-8B-Instruct": (8030261248, KERAS.format("llama3/llama3_presets.py")
                                            + " llama3_instruct_8b_en 'params': 8030261248"),
    "Qwen/Qwen3-VL-4B-Instruct": (4.44e9, "codersera.com/blog/qwen3-vl-4b-instruct-vs-qwen3-vl-4b-thinking-complete-2025-guide: "
                                  "'a dense transformer architecture with 4.44 billion parameters'"),
    "google/gemma-2-9b": (9241705984, KERAS.format("gemma/gemma_presets.py") + " gemma2_9b_en 'params': 9241705984"),
    "google/gemma-2-2b-it": (2614341888, KERAS.format("gemma/gemma_presets.py") + " gemma2_instruct_2b_en 'params': 2614341888"),
    "microsoft/Phi-3.5-mini-instruct": (3821079552, KERAS.format("phi3/phi3_presets.py") + " phi3_mini_128k_instruct_en "
                                        "'params': 3821079552 (Phi-3-mini-128k: the same shapes as Phi-3.5-mini)"),
    "mistralai/Mixtral-8x7B-v0.1": (46702792704, KERAS.format("mixtral/mixtral_presets.py")
                                    + " mixtral_8_7b_en 'params': 46702792704"),
    "Qwen/Qwen3.5-35B-A3B": (35e9, "gitea.pragmazest.com cardosofelipe/strix-halo-optimizations docs/model-recommendations.md, "
                             "the Qwen3.5 family table: 'Qwen3.5-35B-A3B | MoE | 35B | 3B | 256 experts, 8 routed + 1 shared' "
                             "(the build: 35.11B with the vision tower)"),
    "Qwen/Qwen3-30B-A3B": (30532122624, KERAS.format("qwen3_moe/qwen3_moe_presets.py")
                           + " qwen3_moe_30b_a3b_en 'params': 30532122624"),
    "Qwen/Qwen3-VL-30B-A3B-Instruct": (31.07e9, "free2aitools.com/model/qwen/qwen3-vl-30b-a3b-instruct 'Parameters 31.07' "
                                       "(haimaker.ai's Thinking page: 31.1B)"),
    "zai-org/GLM-4.5V": (107710933120, "a public model-info report of the zai-org/GLM-4.5V checkpoint (stored file id "
                         "62538297598: '参数总量: 107,710,933,120', its tensors listed); the build's parameters are 5,760 "
                         "fewer: the routers' e_score_correction_bias, 45 x 128, are buffers here"),
    "LiquidAI/LFM2-VL-1.6B": (1.6e9, "the model card (LiquidAI/LFM2-VL-1.6B README, mirrored at "
                              "gabriellarson/LFM2-VL-1.6B-GGUF): '1.6B' parameters, LM only 1.2B (LFM2-1.2B), "
                              "SigLIP2 NaFlex shape-optimized (400M) "
                              "(the build: 1.600B; its LM 1.170B, the tower 0.413B)"),
}
# hub id -> (documented parameter count of the language model alone, where): a VLM whose public count is its GGUF's
# (llama.cpp converts the text model; the vision tower is a separate mmproj file)
DOCUMENTED_TEXT = {
    "Qwen/Qwen3.5-9B": (8.95e9, "lzwjava.github.io/qwen3-5-9b-hybrid-review-en: llama.cpp's metadata of the Q4_K_M "
                        "GGUF, 'Params: 8.95B' (32 layers, 4096 wide, FFN 12288, vocab 248,320)"),
}
# Embedded before this check existed, their counts not yet looked up: listed so a new config cannot slip past.
NOT_YET_CHECKED = {
    "openai/clip-vit-large-patch14-336", "google/gemma-3-12b-it", "google/gemma-3-27b-it", "google/gemma-3-4b-it",
    "google/gemma-3n-E4B-it", "THUDM/GLM-4.1V-9B-Thinking", "HuggingFaceM4/Idefics3-8B-Llama3", "OpenGVLab/InternVL3-8B-hf",
    "meta-llama/Llama-3.2-11B-Vision-Instruct", "llava-hf/llava-1.5-7b-hf", "llava-hf/llava-onevision-qwen2-7b-ov-hf",
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503", "microsoft/Phi-4-multimodal-instruct", "mistral-community/pixtral-12b",
    "Qwen/Qwen2-Audio-7B-Instruct", "Qwen/Qwen2.5-Omni-7B", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-Omni-30B-A3B-Instruct",
    "Qwen/Qwen3-VL-8B-Instruct", "HuggingFaceTB/SmolVLM2-2.2B-Instruct",
    # reconstructed (its config.json was not found offline: the spec's `source`) and no published count of the VL
    # checkpoint found either: the build's 235.67B against the name's 235B is all that was checked
    "Qwen/Qwen3-VL-235B-A22B-Instruct",
}


def _meta_params(hub_id: str, skip: str | None = None) -> int:
    import torch
    import transformers

    from mmtune.models.configs import embedded, hf_config
    from mmtune.models.families import family_for_config

    config = hf_config(embedded(hub_id))
    cls = getattr(transformers, family_for_config(config).model_class)
    with torch.device("meta"):
        model = cls.from_config(config) if hasattr(cls, "from_config") else cls._from_config(config)
    return sum(p.numel() for n, p in model.named_parameters() if skip is None or not n.startswith(skip))


def test_every_embedded_config_is_listed():
    from mmtune.models.configs import embedded_names

    names = set(embedded_names())
    listed = set(DOCUMENTED) | set(DOCUMENTED_TEXT)
    assert names == listed | (NOT_YET_CHECKED & names), sorted(names ^ (listed | NOT_YET_CHECKED))
    assert not listed & NOT_YET_CHECKED


@pytest.mark.parametrize("hub_id", sorted(DOCUMENTED_TEXT))
def test_embedded_config_has_its_published_language_model_size(hub_id):
    documented, where = DOCUMENTED_TEXT[hub_id]
    n = _meta_params(hub_id, skip="model.visual.")
    assert abs(n - documented) / documented < 0.01, (hub_id, n, documented, where)


@pytest.mark.parametrize("hub_id", sorted(DOCUMENTED))
def test_embedded_config_has_its_published_size(hub_id):
    documented, where = DOCUMENTED[hub_id]
    n = _meta_params(hub_id)
    assert abs(n - documented) / documented < 0.01, (hub_id, n, documented, where)


def test_new_embedded_configs_name_their_source():
    """The configs added with this check say where their text came from (a repository file or a hub page)."""
    from mmtune.models.configs import embedded

    for hub_id in DOCUMENTED:
        spec = embedded(hub_id)
        if hub_id in ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-72B-Instruct", "meta-llama/Llama-3.1-8B",
                      "Qwen/Qwen2-VL-7B-Instruct"):
            continue  # embedded before sources were recorded
        assert spec.get("source"), hub_id


def test_aliases_find_the_same_spec():
    from mmtune.models.configs import embedded

    for alias, hub_id in [("Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-14B-Instruct"), ("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B-Instruct"),
                          ("meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.2-3B-Instruct"),
                          ("meta-llama/Meta-Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"),
                          ("mistralai/Mistral-7B-v0.3", "mistralai/Mistral-7B-Instruct-v0.3"),
                          ("Qwen/Qwen2-7B", "Qwen/Qwen2-7B-Instruct"),
                          ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-chat-hf"),
                          ("meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-13b-chat-hf"),
                          ("meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-8B-Instruct")]:
        assert embedded(alias)["hub_id"] == hub_id, alias
