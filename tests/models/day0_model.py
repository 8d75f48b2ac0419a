"""A model folder of an architecture the day-0 test takes out of the registry (Idefics3: SigLIP + pixel-shuffle
connector + Llama), tiny and random, saved as a hub checkout would be: config.json, weights, tokenizer and processor."""

from __future__ import annotations

from pathlib import Path

IMAGE = 56  # tiles of 56 px: 4 x 4 patches of 14 px, pixel-shuffled by 2 to 4 tokens per tile
TOKENS = {"image_token": "<image>", "fake_image_token": "<fake_token_around_image>",
          "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"}


def save_day0_model(folder: Path) -> Path:
    import torch
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    from mmtune.models.local_tokenizer import chat_template, make_tokenizer

    tok = make_tokenizer(template=chat_template(image="<image>"), extra_special_tokens=TOKENS)
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id, model_type="llama")
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IMAGE, patch_size=14)
    config = Idefics3Config(text_config=text, vision_config=vision, scale_factor=2,
                            image_token_id=tok.convert_tokens_to_ids("<image>"), tie_word_embeddings=False)
    torch.manual_seed(0)
    Idefics3ForConditionalGeneration(config).save_pretrained(folder)
    ip = Idefics3ImageProcessorPil(size={"longest_edge": 2 * IMAGE}, max_image_size={"longest_edge": IMAGE},
                                   image_mean=(0.5,) * 3, image_std=(0.5,) * 3)
    Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=4,
                      chat_template=tok.chat_template).save_pretrained(folder)
    return folder
