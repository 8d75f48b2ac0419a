"""Compose a LLaVA-style model from parts: a vision encoder (CLIP or SigLIP), a projector, any causal LM.

The result is a real `LlavaForConditionalGeneration` (LlavaConfig built from the parts' own configs)
with the parts' weights copied in, saved as an ordinary transformers folder with its processor, so
`load_model`, LoRA, export and `from_pretrained` treat it like any hub LLaVA.

Why not a custom module: seed 004 built the projector on `meta` and hit "Cannot copy out of meta
tensor" (failure mode 8). Here the whole model is created on a real device, the new projector is
initialised by transformers' own `_init_weights`, and a meta check runs before returning.

Projectors: "mlp2x_gelu" (LLaVA-1.5: Linear-GELU-Linear) or "linear". LlavaConfig always builds two
Linear layers; "linear" sets the activation to identity, so the projector is a linear map (factored as
two matrices, which trains the same function class with a few more parameters).

Audio: `compose_audio` grafts a Whisper encoder onto any causal LM the same way, producing a real
`Qwen2AudioForConditionalGeneration` (Qwen2-Audio *is* Whisper's encoder + a linear projector + an LM;
its encoder's weights have Whisper's names). Vision and audio in one composed model is not offered:
no transformers class takes a CLIP tower and a Whisper encoder together; a model that needs audio +
video should start from Qwen2.5-Omni (its Thinker has both), which is what the seed-000 recipe does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, ModelLoadError

PROJECTORS = {"mlp2x_gelu": "gelu", "linear": "linear"}
IMAGE_TOKEN = "<image>"


@dataclass
class Composed:
    model: Any  # LlavaForConditionalGeneration
    processor: Any  # LlavaProcessor
    notes: list[str]


def _vision_model(vision):
    """A CLIPVisionModel / SiglipVisionModel from a module, a folder or a hub id (vision tower only)."""
    from transformers import AutoConfig, CLIPVisionModel, SiglipVisionModel

    if not isinstance(vision, str):
        return vision
    from .hub_files import model_folder

    src = str(model_folder(vision, tokenizer=False))
    mt = AutoConfig.from_pretrained(src).model_type
    if mt in ("clip", "clip_vision_model"):
        return CLIPVisionModel.from_pretrained(src)
    if mt in ("siglip", "siglip_vision_model"):
        return SiglipVisionModel.from_pretrained(src)
    raise ModelLoadError(f"vision encoder {vision} is a {mt!r} model; compose takes CLIP or SigLIP",
                         where="compose --vision")


def _image_processor(vision, image_processor):
    if image_processor is not None:
        return image_processor
    if isinstance(vision, str):
        from ..compat.transformers_internals import auto_image_processor
        from .hub_files import model_folder

        return auto_image_processor().from_pretrained(str(model_folder(vision, tokenizer=False)), backend="pil")
    raise ConfigError("compose: an in-memory vision model needs its image_processor passed explicitly")


def _lm(lm, tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(lm, str):
        from .hub_files import model_folder

        src = str(model_folder(lm))
        return AutoModelForCausalLM.from_pretrained(src), tokenizer or AutoTokenizer.from_pretrained(src)
    if tokenizer is None:
        raise ConfigError("compose: an in-memory language model needs its tokenizer passed explicitly")
    return lm, tokenizer


def _assemble(model_cls, config, encoder_attr: str, encoder, text, vocab: int, notes: list[str], *,
              device, dtype, seed: int):
    """Create the composed model on a real device and copy the encoder and the LM into it.

    New modules (the projector) are allocated and initialised on `device`, never left on meta (failure
    mode 8); strict loading proves every copied weight found its place.
    """
    import torch

    from .audits import check_no_meta

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device(device):
            model = model_cls(config)
    getattr(model.model, encoder_attr).load_state_dict(encoder.state_dict(), strict=True)
    if text.get_input_embeddings().num_embeddings < vocab:
        text.resize_token_embeddings(vocab)
        notes.append(f"resized the LM's embeddings to {vocab} for the new special tokens")
    base = text.get_decoder() if hasattr(text, "get_decoder") else text.model
    model.model.language_model.load_state_dict(base.state_dict(), strict=True)
    model.lm_head.load_state_dict(text.get_output_embeddings().state_dict(), strict=True)
    if dtype is not None:
        model.to(dtype)
    check_no_meta(model)
    return model


def llava_config(vcfg, tcfg, *, image_id: int, vocab: int, projector: str, vision_feature_layer: int):
    """The LlavaConfig of a vision encoder's config + a causal LM's config: what compose_llava builds, and
    what plan / doctor plan before the composed folder exists (planned_llava_config)."""
    from transformers import LlavaConfig

    # CLIP prepends a CLS token the projector drops ("default"); SigLIP has none ("full").
    strategy = "full" if vcfg.model_type.startswith("siglip") else "default"
    text = tcfg.to_dict()
    text["vocab_size"] = vocab
    return LlavaConfig(vision_config=vcfg.to_dict(), text_config=text, image_token_index=image_id,
                       projector_hidden_act=PROJECTORS[projector], multimodal_projector_bias=True,
                       vision_feature_layer=vision_feature_layer, vision_feature_select_strategy=strategy,
                       image_seq_length=(vcfg.image_size // vcfg.patch_size) ** 2,
                       tie_word_embeddings=bool(getattr(tcfg, "tie_word_embeddings", False)))


def planned_llava_config(composed_from):
    """The config `mmtune compose --vision V --lm L` will write, from V's and L's embedded public configs (no
    download): for plan / doctor of a recipe whose model folder a previous stage makes (model.composed_from).
    The image token's id is the LM vocabulary's last (the stand-in processor's is remapped onto it, as for
    every embedded config: construct.remap_token_ids); the vocabulary keeps the LM's embedding size, which
    holds the added <image> token (Qwen2.5: 151,665 tokens in 152,064 rows)."""
    from .configs import embedded, hf_config

    specs = {}
    for part in ("vision", "lm"):
        name = getattr(composed_from, part)
        specs[part] = embedded(name)
        if specs[part] is None:
            from .configs import embedded_names

            raise ModelLoadError(f"model.composed_from.{part}={name!r} has no embedded config to plan from",
                                 where=f"model.composed_from.{part}",
                                 fix="run the stage that makes model.name first (then its folder is read), or name "
                                     "a part mmtune embeds: " + ", ".join(embedded_names()))
    vcfg, tcfg = hf_config(specs["vision"]), hf_config(specs["lm"])
    return llava_config(vcfg, tcfg, image_id=tcfg.vocab_size - 1, vocab=tcfg.vocab_size,
                        projector=composed_from.projector, vision_feature_layer=composed_from.vision_feature_layer)


def compose_llava(vision, lm, *, tokenizer=None, image_processor=None, projector: str = "mlp2x_gelu",
                  vision_feature_layer: int = -2, device="cpu", dtype=None, chat_template: str | None = None,
                  seed: int = 0) -> Composed:
    """Build a LlavaForConditionalGeneration from a vision encoder and a causal LM (see module docstring)."""
    from transformers import LlavaForConditionalGeneration, LlavaProcessor

    if projector not in PROJECTORS:
        raise ConfigError(f"unknown projector {projector!r}", where="compose --projector",
                          fix=f"one of: {', '.join(PROJECTORS)}")
    notes: list[str] = []
    vis = _vision_model(vision)
    ip = _image_processor(vision, image_processor)
    text, tok = _lm(lm, tokenizer)
    vcfg = vis.config
    siglip = vcfg.model_type.startswith("siglip")
    strategy = "full" if siglip else "default"

    if IMAGE_TOKEN not in tok.get_vocab():
        tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
        notes.append(f"added {IMAGE_TOKEN} to the tokenizer (id {tok.convert_tokens_to_ids(IMAGE_TOKEN)})")
    image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    vocab = max(len(tok), text.get_input_embeddings().num_embeddings)
    n_patches = (vcfg.image_size // vcfg.patch_size) ** 2
    config = llava_config(vcfg, text.config, image_id=image_id, vocab=vocab, projector=projector,
                          vision_feature_layer=vision_feature_layer)
    model = _assemble(LlavaForConditionalGeneration, config, "vision_tower", vis, text, vocab, notes,
                      device=device, dtype=dtype, seed=seed)
    notes.append(f"composed {type(vis).__name__} + {projector} projector + {type(text).__name__} "
                 f"-> LlavaForConditionalGeneration ({n_patches} image tokens, feature layer {vision_feature_layer})")
    if chat_template is None:
        # An LM's own template knows nothing of images (Qwen2.5's renders string content only), so the
        # composed model gets a ChatML layout whose image parts render as "<image>\n" (LLaVA's layout).
        from .local_tokenizer import chat_template as chatml

        chat_template = chatml(image=IMAGE_TOKEN + "\n")
        notes.append("chat template: ChatML with <image> placeholders (pass chat_template= to override)")
    template = chat_template
    processor = LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=vcfg.patch_size,
                               vision_feature_select_strategy=strategy,
                               num_additional_image_tokens=0 if siglip else 1, image_token=IMAGE_TOKEN,
                               chat_template=template)
    return Composed(model=model, processor=processor, notes=notes)


WHISPER_ENCODER_KEYS = ("num_mel_bins", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim", "d_model",
                        "dropout", "attention_dropout", "activation_function", "activation_dropout",
                        "scale_embedding", "init_std", "max_source_positions")
AUDIO_TOKENS = ("<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>")


def _audio_encoder(audio):
    """The WhisperEncoder of a WhisperModel / WhisperForConditionalGeneration / encoder, folder or hub id."""
    if isinstance(audio, str):
        from transformers import WhisperModel

        from .hub_files import model_folder

        audio = WhisperModel.from_pretrained(str(model_folder(audio, tokenizer=False)))
    if hasattr(audio, "get_encoder"):
        audio = audio.get_encoder()
    if type(audio).__name__ != "WhisperEncoder":
        raise ModelLoadError(f"audio encoder is a {type(audio).__name__}; compose takes a Whisper model or encoder",
                             where="compose --audio")
    return audio


def compose_audio(audio, lm, *, tokenizer=None, feature_extractor=None, device="cpu", dtype=None,
                  chat_template: str | None = None, seed: int = 0) -> Composed:
    """Build a Qwen2AudioForConditionalGeneration from a Whisper encoder and a causal LM.

    The encoder's and the LM's weights are copied in (strict); the linear projector is new and
    initialised on a real device. The processor pairs the Whisper feature extractor with the LM's
    tokenizer, which gains Qwen2-Audio's audio tokens when it lacks them.
    """
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration, Qwen2AudioProcessor

    notes: list[str] = []
    enc = _audio_encoder(audio)
    if feature_extractor is None:
        if not isinstance(audio, str):
            raise ConfigError("compose: an in-memory audio encoder needs its feature_extractor passed explicitly")
        from transformers import WhisperFeatureExtractor

        from .hub_files import model_folder

        feature_extractor = WhisperFeatureExtractor.from_pretrained(str(model_folder(audio, tokenizer=False)))
    text, tok = _lm(lm, tokenizer)
    missing = [t for t in AUDIO_TOKENS if t not in tok.get_vocab()]
    if missing:
        tok.add_special_tokens({"additional_special_tokens": missing})
        notes.append(f"added {', '.join(missing)} to the tokenizer")
    audio_id = tok.convert_tokens_to_ids("<|AUDIO|>")
    vocab = max(len(tok), text.get_input_embeddings().num_embeddings)
    acfg = {k: getattr(enc.config, k) for k in WHISPER_ENCODER_KEYS}
    tcfg = text.config.to_dict()
    tcfg["vocab_size"] = vocab
    config = Qwen2AudioConfig(audio_config={"model_type": "qwen2_audio_encoder", **acfg}, text_config=tcfg,
                              audio_token_index=audio_id,
                              tie_word_embeddings=bool(getattr(text.config, "tie_word_embeddings", False)))
    model = _assemble(Qwen2AudioForConditionalGeneration, config, "audio_tower", enc, text, vocab, notes,
                      device=device, dtype=dtype, seed=seed)
    notes.append(f"composed {type(enc).__name__} + linear projector + {type(text).__name__} "
                 "-> Qwen2AudioForConditionalGeneration")
    if chat_template is None:
        from .local_tokenizer import chat_template as chatml

        chat_template = chatml(audio="".join(AUDIO_TOKENS))
        notes.append("chat template: ChatML with Qwen2-Audio's audio placeholders (pass chat_template= to override)")
    processor = Qwen2AudioProcessor(feature_extractor=feature_extractor, tokenizer=tok, chat_template=chat_template)
    return Composed(model=model, processor=processor, notes=notes)


def save_composed(composed: Composed, out_dir) -> None:
    """An ordinary transformers folder: config.json, model.safetensors, processor and tokenizer files."""
    composed.model.save_pretrained(out_dir)
    composed.processor.save_pretrained(out_dir)
