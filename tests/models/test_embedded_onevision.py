"""The embedded LLaVA-OneVision-Qwen2-7B config equals what transformers' conversion script wrote to the
hub (llava-hf/llava-onevision-qwen2-7b-ov-hf): the facts below are that script's and Qwen2-7B-Instruct's
published config.json (cited in the JSON's `_source`), so a mistyped number is caught."""

from mmtune.models.configs import embedded, hf_config


def test_llava_onevision_7b_matches_the_published_conversion():
    spec = embedded("llava-hf/llava-onevision-qwen2-7b-ov-hf")
    c = hf_config(spec)
    v, t = c.vision_config, c.text_config
    assert (v.hidden_size, v.image_size, v.intermediate_size, v.num_attention_heads, v.num_hidden_layers,
            v.patch_size, v.vision_use_head) == (1152, 384, 4304, 16, 26, 14, False)
    assert (t.hidden_size, t.intermediate_size, t.num_hidden_layers, t.num_attention_heads, t.num_key_value_heads,
            t.max_position_embeddings, t.rms_norm_eps, t.hidden_act) == (3584, 18944, 28, 28, 4, 32768, 1e-6, "silu")
    assert t.vocab_size == -(-(152064 + 2) // 64) * 64 == 152128  # Qwen2-7B-Instruct + <image>, <video>, padded to 64
    assert (c.image_token_index, c.video_token_index, c.vision_feature_layer, c.vision_feature_select_strategy,
            c.vision_aspect_ratio, c.tie_word_embeddings) == (151646, 151647, -1, "full", "anyres_max_9", False)
    assert c.image_grid_pinpoints == [[384 * i, 384 * j] for i in range(1, 7) for j in range(1, 7)]
    assert spec["processor"]["num_image_tokens"] == 729 == (384 // 14) ** 2
    assert spec["processor"]["image_grid_pinpoints"] == c.image_grid_pinpoints
