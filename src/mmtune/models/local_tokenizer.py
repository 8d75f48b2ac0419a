"""A byte-level BPE tokenizer made on the spot, so tiny models need no download.

It is trained on a small built-in corpus in milliseconds. Digits and common words of the demo become
single tokens, and every special token a family's processor looks for is registered, so the real
processor classes (Qwen2VLProcessor, LlavaProcessor, ...) work with it unchanged.
"""

from __future__ import annotations

from functools import lru_cache

QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|AUDIO|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<image>",
    "<video>",
]

# Qwen's chat layout. Media items become the placeholder strings the family's processor expands.
_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{IMAGE}"
    "{% elif part['type'] == 'video' %}{VIDEO}"
    "{% elif part['type'] == 'audio' %}{AUDIO}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = [
    "You are a helpful assistant. How many circles are there? How many squares are there? "
    "How many triangles are there? How many stars are there? Count the objects in the picture. "
    "What is shown in the image? Describe the video. What did the speaker say? Answer with a number.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 yes no red green blue white black a the is are of in on and",
    "system user assistant question answer image video audio frame chart table text",
]


def chat_template(image: str = "<|vision_start|><|image_pad|><|vision_end|>",
                  video: str = "<|vision_start|><|video_pad|><|vision_end|>",
                  audio: str = "<|audio_bos|><|AUDIO|><|audio_eos|>") -> str:
    """Qwen-style chat template whose media parts render as the given placeholder strings."""
    return _CHAT_TEMPLATE.replace("{IMAGE}", image).replace("{VIDEO}", video).replace("{AUDIO}", audio)


@lru_cache(maxsize=4)
def _trained_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=QWEN_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer)
    return tok.to_str()


def make_tokenizer(vocab_size: int = 512, template: str | None = None, extra_special_tokens: dict | None = None):
    """A fast tokenizer with Qwen's special tokens and chat template; deterministic for a given size.

    `extra_special_tokens` ({"image_token": "<|IMAGE|>", ...}) become attributes such as
    `tok.image_token` / `tok.image_token_id` that some processors read (Qwen2.5-Omni); tokens not
    already in the vocabulary are appended at the end, so existing ids never move.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_tokenizer(vocab_size)),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        padding_side="right",
        **({"extra_special_tokens": extra_special_tokens} if extra_special_tokens else {}),
    )
    tok.chat_template = template or chat_template()
    return tok
