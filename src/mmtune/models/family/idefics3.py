"""Idefics3 and SmolVLM / SmolVLM2 (`HuggingFaceTB/SmolVLM-*`, `HuggingFaceTB/SmolVLM2-*`,
`HuggingFaceM4/Idefics3-8B-Llama3`): a SigLIP vision tower on square tiles, a pixel-shuffle connector
(scale factor s: (tile/patch)^2 / s^2 tokens per tile, one matrix), and a Llama (Idefics3) or SmolLM2
(SmolVLM) decoder. SmolVLM v1 checkpoints are `model_type: idefics3`; SmolVLM2 has its own classes.

How media become tokens: the template writes `<image>`; the processor resizes the image so its long edge
is at most `size.longest_edge`, splits it into `rows x cols` tiles of `max_image_size` plus one global
view, and writes for each tile `<fake_token_around_image><row_i_col_j>` + image_seq_len x `<image>`, then
`<fake_token_around_image><global-img>` + image_seq_len x `<image>` + `<fake_token_around_image>`. The
number of tokens therefore depends on the image's size (rows and cols), and the expansion adds text
around the image tokens. The tiles a picture gets depend on its pixel size only, never its values.

Packing is off: the connector and the `<image>` scatter are per batch row and were not verified exact
on packed rows (tests/data/test_packing.py covers packable families).
"""

from __future__ import annotations

from ..families import Family, register
from ..tiny import TinySpec, register_tiny

TILE = 56  # tiny twin: 4 x 4 patches of 14 px per tile, pixel-shuffled by 2 -> 4 tokens per tile
SEQ_LEN = 4
TOKENS = {"image_token": "<image>", "fake_image_token": "<fake_token_around_image>",
          "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"}
ROW_COL = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]

COMPONENTS = {
    "projector": ("model.connector.",),
    "vision": ("model.vision_model.",),
    "decoder": ("model.text_model.",),
    "lm_head": ("lm_head.",),
}

FAMILY = register(Family(
    name="idefics3",
    model_types=("idefics3",),
    model_class="Idefics3ForConditionalGeneration",
    processor_class="Idefics3Processor",
    modalities=("text", "image"),
    components=COMPONENTS,
    tiny="tiny/idefics3",
    unmasked_right_padding=True,
    hub_pattern=r"idefics3|smolvlm-(?:256m|500m|instruct)|smolvlm(?!2)",
    expansion_adds_text=True,  # <fake_token_around_image>, <row_i_col_j>, <global-img> around the tiles
))

SMOLVLM = register(Family(
    name="smolvlm",
    model_types=("smolvlm",),
    model_class="SmolVLMForConditionalGeneration",
    processor_class="SmolVLMProcessor",
    modalities=("text", "image"),
    components=COMPONENTS,
    tiny="tiny/smolvlm",
    unmasked_right_padding=True,
    hub_pattern=r"smolvlm2",
    expansion_adds_text=True,
))


def _tokenizer():
    from ..local_tokenizer import chat_template, make_tokenizer

    extra = {**TOKENS, **{f"row_col_{i}": t for i, t in enumerate(ROW_COL)}}
    return make_tokenizer(template=chat_template(image="<image>"), extra_special_tokens=extra)


def _config(config_class, tok, **over):
    from ..tiny import _text_common

    text = _text_common(tok, head_dim=16, model_type="llama")
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": TILE, "patch_size": 14}
    cfg = {"text_config": text, "vision_config": vision, "scale_factor": 2,
           "image_token_id": tok.convert_tokens_to_ids("<image>"), "tie_word_embeddings": False,
           "pad_token_id": tok.pad_token_id}
    cfg.update(over)
    return config_class(**cfg)


def _idefics3_config(tok, **over):
    from transformers import Idefics3Config

    return _config(Idefics3Config, tok, **over)


def _smolvlm_config(tok, **over):
    from transformers import SmolVLMConfig

    return _config(SmolVLMConfig, tok, **over)


def _image_processor(cls):
    # long edge resized to at most 2 tiles, tiles of TILE px: a picture gets 1x1 .. 2x2 tiles + the global view
    return cls(size={"longest_edge": 2 * TILE}, max_image_size={"longest_edge": TILE}, do_image_splitting=True,
               image_mean=(0.5,) * 3, image_std=(0.5,) * 3)


def _idefics3_processor(tok):
    from transformers import Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    return Idefics3Processor(image_processor=_image_processor(Idefics3ImageProcessorPil), tokenizer=tok,
                             image_seq_len=SEQ_LEN, chat_template=tok.chat_template)


def _smolvlm_processor(tok):
    from transformers import SmolVLMProcessor
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    from ...compat.transformers_internals import make_processor
    from ..video_frames import FramesVideoProcessor

    # SmolVLM2's own video processor needs torchvision; the twin is images-only (the family's modalities),
    # and SmolVLMProcessor.apply_chat_template reads the video processor's frame count even then.
    video = FramesVideoProcessor()
    video.num_frames = video.fps = None  # "not set": the processor's kwargs defaults, unused without videos
    return make_processor(SmolVLMProcessor, image_processor=_image_processor(SmolVLMImageProcessorPil), tokenizer=tok,
                          video_processor=video, image_seq_len=SEQ_LEN, chat_template=tok.chat_template)


register_tiny(TinySpec("tiny/idefics3", "idefics3", _idefics3_config, _idefics3_processor, make_tokenizer=_tokenizer))
register_tiny(TinySpec("tiny/smolvlm", "smolvlm", _smolvlm_config, _smolvlm_processor, make_tokenizer=_tokenizer))
