"""Architectures reported to overflow in fp16 (inf / NaN activations, NaN loss from the first steps), for doctor
MM041. Two sources, one answer (`fp16_overflow`):

- a registered family's own vision-tower reports (`Family.fp16_overflow`: Qwen2-VL, Qwen2.5-VL);
- the language model's type, whatever family wraps it: Gemma 3's decoder (`gemma3_text`, in the 1B text model, in
  the 4B-27B VLMs and in any day-0 folder) has RMSNorm weights large enough that activations pass fp16's 65504.
  Keyed by the text config's model_type, so a registered VLM and a day-0 text folder of the same decoder get the
  same finding, and a new report is one line here.
"""

from __future__ import annotations

# text config model_type -> (severity, sources)
DECODER_FP16_OVERFLOW = {
    # transformers#36822 ("Gemma 3 is broken with fp16"), transformers#39972 (Gemma3-4B NaN in fp16, the overflow
    # traced to the decoder's norms and MLP), unsloth#2040 (Gemma3 4B: NaN loss from the first step on a V100)
    "gemma3_text": ("warning", "transformers#36822, transformers#39972, unsloth#2040"),
}


def fp16_overflow(family, text_config) -> tuple[str, str, str] | None:
    """(severity, the part that overflows, sources) for a run of `family` whose language model's config is
    `text_config`, or None when nothing is reported."""
    if family is not None and family.fp16_overflow is not None:
        severity, sources = family.fp16_overflow
        return severity, "vision tower", sources
    known = DECODER_FP16_OVERFLOW.get(getattr(text_config, "model_type", None))
    if known is None:
        return None
    severity, sources = known
    return severity, f"{text_config.model_type} decoder", sources
