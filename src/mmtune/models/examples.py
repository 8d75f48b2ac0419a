"""Small real media (a drawn image, a few frames, a tone) and a processor batch for any family.

Used by tests, by `--smoke` checks and by the doctor's fake backward: the batch goes through the
family's own processor, so placeholder expansion and media tensors are the real ones.
"""

from __future__ import annotations

AUDIO_SR = 16000


def example_image(size=(96, 80), seed: int = 0):
    """A PIL image with a few coloured shapes (not a constant array: the vision path sees structure)."""
    import random

    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    img = Image.new("RGB", size, (255, 255, 255))
    d = ImageDraw.Draw(img)
    for _ in range(3):
        x, y = rng.randrange(0, size[0] - 20), rng.randrange(0, size[1] - 20)
        d.ellipse([x, y, x + 18, y + 18], fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    return img


def example_video(frames: int = 4, size=(64, 64)):
    """A list of PIL frames: a dot moving left to right."""
    from PIL import Image, ImageDraw

    out = []
    for t in range(frames):
        img = Image.new("RGB", size, (0, 0, 0))
        x = int(t * (size[0] - 12) / max(frames - 1, 1))
        ImageDraw.Draw(img).ellipse([x, size[1] // 2 - 6, x + 12, size[1] // 2 + 6], fill=(255, 200, 0))
        out.append(img)
    return out


def example_audio(seconds: float = 1.0, freq: float = 440.0):
    """A mono float32 waveform at 16 kHz (a tone with a little noise)."""
    import numpy as np

    t = np.arange(int(seconds * AUDIO_SR)) / AUDIO_SR
    rng = np.random.default_rng(0)
    return (0.3 * np.sin(2 * np.pi * freq * t) + 0.01 * rng.standard_normal(t.shape)).astype(np.float32)


def example_messages(modalities, question: str = "How many circles are there?", answer: str = "3"):
    parts = [{"type": m} for m in ("image", "video", "audio") if m in modalities]
    return [
        {"role": "user", "content": parts + [{"type": "text", "text": question}]},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


def example_batch(processor, modalities, *, video_frames: int = 4, audio_seconds: float = 1.0) -> dict:
    """A one-sample processor batch with `labels` (media and padding tokens masked with -100)."""
    modalities = tuple(m for m in modalities if m != "text")
    messages = example_messages(modalities)
    if not modalities:  # text model: the processor is the tokenizer
        text = processor.apply_chat_template(messages, tokenize=False)
        batch = dict(processor([text], return_tensors="pt"))
    else:
        text = processor.apply_chat_template(messages, tokenize=False)
        kwargs = {}
        if "image" in modalities:
            kwargs["images"] = [example_image()]
        if "video" in modalities:
            kwargs["videos"] = [example_video(video_frames)]
        if "audio" in modalities:
            kwargs["audio"] = [example_audio(audio_seconds)]
            kwargs["sampling_rate"] = AUDIO_SR
        batch = dict(processor(text=[text], return_tensors="pt", **kwargs))
    labels = batch["input_ids"].clone()
    tok = getattr(processor, "tokenizer", processor)
    special = set(tok.all_special_ids)
    for name in ("image_token", "video_token", "audio_token"):
        t = getattr(processor, name, None)
        if isinstance(t, str):
            special.add(tok.convert_tokens_to_ids(t))
    for sid in special:
        labels[labels == sid] = -100
    batch["labels"] = labels
    return batch
