"""Qwen3-Omni, the Thinker (`Qwen/Qwen3-Omni-30B-A3B-Instruct` / `-Thinking` / `-Captioner`;
Qwen3OmniMoeThinkerForConditionalGeneration): a Qwen3-VL-style vision tower (16 px patches, 2 x 2 merge,
learned position embeddings, DeepStack mergers feeding early decoder layers), an audio encoder (three
stride-2 conv2d layers over the mel spectrogram in 100-frame chunks, a transformer, then ln_post + proj1 +
proj2 to the LM width), and a Qwen3 *mixture-of-experts* decoder (48 layers, 128 experts, 8 routed per
token, 3B of its 30B parameters active). As for Qwen2.5-Omni, mmtune trains the Thinker only (the Talker
and code2wav speak; the Omni checkpoint's `thinker_config` is the part loaded).

How media become tokens: the template writes `<|vision_start|><|image_pad|><|vision_end|>` (video:
`<|video_pad|>`, audio: `<|audio_start|><|audio_pad|><|audio_end|>`); the processor repeats the pad token
once per merged patch (grid t*h*w / 4) or per audio frame after the encoder's downsampling, adding no text,
so lengths come from the processor's arithmetic. A video part with `use_audio` gets its own audio track
interleaved with the frames by time (the processor's `load_audio_from_video`, as for Qwen2.5-Omni); the collator
gives such a micro-batch's forward `use_audio_in_video=True`, which puts that block on one time axis
(data/audio_in_video.py: which records the flag changes, and the mixes refused).
Video positions are time-aware (`video_second_per_grid` from the clip's rate, default 1 fps in this processor).

Mixture of experts, what it means here:
- The experts of a layer are two fused 3-D parameters (`mlp.experts.gate_up_proj`: experts x 2*inter x
  hidden, `mlp.experts.down_proj`), not `nn.Linear` modules: peft's `target_modules` cannot wrap them, and
  peft's `target_parameters` would rebuild the full delta of all 128 experts at every access of the weight.
  The default LoRA targets are therefore the attention projections (q/k/v/o, in all 48 layers), what
  ms-swift's users fell back to when its default `all-linear` failed on this model (ms-swift#9321); the
  experts and the router (`mlp.gate`) train only with `adapter.method=full`. A frozen router also keeps
  the routing the checkpoint was balanced for, which a run without the balancing loss (below) could drift
  from. QLoRA's 4-bit reaches the same attention linears only: bitsandbytes quantizes `nn.Linear`, so the
  experts (~95 % of the decoder) stay in the compute dtype; the planner counts what is really resident,
  since it builds the same model.
- The planner holds every expert's weights (all are resident, whatever the routing) and traces the
  forward the model runs (transformers' `grouped_mm` experts: tokens sorted by expert, one grouped matmul):
  each token's activations go through its top-k experts only.
- Router load-balancing loss: the published config has `output_router_logits: false`, and mmtune computes
  the loss from the logits without passing labels, so transformers' `aux_loss` is neither computed nor
  added; the router learns only from the language-model loss (fine for a LoRA run, where it is frozen).
  Doctor MM124 names a config that switches `output_router_logits` on (the term would still not be trained).

Packing is off: the audio encoder and the interleaved audio-in-video positions were not verified exact on
packed rows (tests/data/test_packing.py covers packable families).
"""

from __future__ import annotations

from ..families import Family, register
from ..tiny import TinySpec, register_tiny

TOKENS = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "audio_token": "<|audio_pad|>",
          "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>",
          "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>"}

COMPONENTS = {
    # the vision merger and its DeepStack copies, and the audio encoder's tail (ln_post -> proj1 -> proj2),
    # are the bridges into the LM width
    "projector": ("model.visual.merger.", "model.visual.merger_list.", "model.audio_tower.ln_post.",
                  "model.audio_tower.proj1.", "model.audio_tower.proj2."),
    "audio": ("model.audio_tower.",),
    "vision": ("model.visual.",),
    "decoder": ("model.language_model.",),
    "lm_head": ("lm_head.",),
}

FAMILY = register(Family(
    name="qwen3_omni",
    patch_embed_matmul=True,
    model_types=("qwen3_omni_moe_thinker", "qwen3_omni_moe"),
    model_class="Qwen3OmniMoeThinkerForConditionalGeneration",
    processor_class="Qwen3OmniMoeProcessor",
    modalities=("text", "image", "video", "audio"),
    components=COMPONENTS,
    tiny="tiny/qwen3-omni",
    sub_config="thinker_config",
    hub_pattern=r"qwen3-omni",
    time_aware_video=True,
    default_fps=1.0,  # Qwen3OmniMoeProcessor's rate for a video given without one
    # attention only: the fused experts are not nn.Linear (module docstring), and peft 0.21 turns a dense MLP's
    # `gate_proj` / `up_proj` / `down_proj` target on this MoE class into a LoRA on every expert's fused parameter
    lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"),
))


def _tokenizer():
    from ..tiny import _omni_tokenizer

    return _omni_tokenizer(TOKENS)


def _config(tok, **over):
    from transformers import Qwen3OmniMoeThinkerConfig

    from ..tiny import AUDIO_MELS, _text_common

    # 4 experts, 2 routed per token, 32-wide each: the routing is real (tokens split between experts) and tiny
    text = _text_common(tok, head_dim=16, intermediate_size=64, moe_intermediate_size=32, num_experts=4,
                        num_experts_per_tok=2, output_router_logits=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3],
                                         "mrope_interleaved": True, "interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text["hidden_size"],
                  patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0])
    audio = dict(num_mel_bins=AUDIO_MELS, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64, d_model=32,
                 output_dim=text["hidden_size"], max_source_positions=1500, n_window=50, n_window_infer=800,
                 downsample_hidden_size=8)
    cfg = dict(text_config=text, vision_config=vision, audio_config=audio,
               audio_token_id=tok.audio_token_id, image_token_id=tok.image_token_id,
               video_token_id=tok.video_token_id, vision_start_token_id=tok.vision_bos_token_id,
               vision_end_token_id=tok.vision_eos_token_id, audio_start_token_id=tok.audio_bos_token_id,
               audio_end_token_id=tok.audio_eos_token_id, user_token_id=tok.convert_tokens_to_ids("user"),
               tie_word_embeddings=False)
    cfg.update(over)
    return Qwen3OmniMoeThinkerConfig(**cfg)


def _processor(tok):
    from transformers import Qwen3OmniMoeProcessor

    from ...compat.transformers_internals import make_processor
    from ..tiny import _qwen_image_processor, _qwen_video_processor, _whisper_features, qwen3_media_kwargs

    kw = qwen3_media_kwargs()
    return make_processor(Qwen3OmniMoeProcessor, image_processor=_qwen_image_processor(**kw),
                          video_processor=_qwen_video_processor(**kw), feature_extractor=_whisper_features(),
                          tokenizer=tok, chat_template=tok.chat_template)


register_tiny(TinySpec("tiny/qwen3-omni", "qwen3_omni", _config, _processor, make_tokenizer=_tokenizer))
