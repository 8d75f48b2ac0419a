"""Write the small example datasets the per-family recipes point at (real formats, tiny media).

    python recipes/data/make_examples.py          # writes recipes/data/*.jsonl and recipes/data/media/

Records use the `messages` format: content parts {"type": "image"|"video"|"audio", "path": ...} with
paths relative to the JSONL file. Images are PNG, videos are folders of PNG frames, audio is 16 kHz
mono WAV (a tone whose pitch encodes the spoken-question id; real runs use real speech). Each file holds
a handful of records: enough for `--smoke` and for checking a recipe end to end, not for training.
Replace `data.train` with your own data for real runs.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

HERE = Path(__file__).parent
MEDIA = HERE / "media"
COLORS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 80, 220)}


def shapes_image(path: Path, n: int, color: str, rng: random.Random, size=(224, 224)) -> None:
    img = Image.new("RGB", size, (255, 255, 255))
    d = ImageDraw.Draw(img)
    for _ in range(n):
        x, y = rng.randrange(10, size[0] - 40), rng.randrange(10, size[1] - 40)
        d.ellipse([x, y, x + 28, y + 28], fill=COLORS[color])
    img.save(path)


def moving_dot_frames(folder: Path, frames: int, direction: str, size=(128, 128)) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for t in range(frames):
        img = Image.new("RGB", size, (10, 10, 10))
        x = int(t * (size[0] - 20) / (frames - 1))
        x = x if direction == "right" else size[0] - 20 - x
        ImageDraw.Draw(img).ellipse([x, size[1] // 2 - 10, x + 20, size[1] // 2 + 10], fill=(255, 210, 0))
        img.save(folder / f"{t:03d}.png")


def tone_wav(path: Path, freq: float, seconds: float = 1.5, sr: int = 16000) -> None:
    import soundfile as sf

    t = np.arange(int(seconds * sr)) / sr
    sf.write(path, (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), sr)


def write_jsonl(name: str, rows: list[dict]) -> None:
    with open(HERE / name, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main() -> None:
    rng = random.Random(0)
    (MEDIA / "images").mkdir(parents=True, exist_ok=True)
    (MEDIA / "videos").mkdir(parents=True, exist_ok=True)
    (MEDIA / "audio").mkdir(parents=True, exist_ok=True)

    image_rows = []
    for i in range(8):
        n, color = rng.randint(1, 5), rng.choice(list(COLORS))
        rel = f"media/images/shapes_{i}.png"
        shapes_image(HERE / rel, n, color, rng)
        image_rows.append({"id": f"img{i}", "messages": [
            {"role": "user", "content": [{"type": "image", "path": rel},
                                         {"type": "text", "text": f"How many {color} circles are there?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": str(n)}]}]})
    write_jsonl("image_qa.jsonl", image_rows)

    questions = [("Which way does the dot move?", 300.0), ("Does the dot go left or right?", 500.0)]
    video_rows, audio_rows = [], []
    for i in range(6):
        direction = "right" if i % 2 == 0 else "left"
        vrel = f"media/videos/dot_{i}"
        moving_dot_frames(HERE / vrel, 8, direction)
        q, freq = questions[i % len(questions)]
        arel = f"media/audio/question_{i % len(questions)}.wav"  # one file per distinct question
        if not (HERE / arel).exists():
            tone_wav(HERE / arel, freq)
        video_rows.append({"id": f"vid{i}", "messages": [
            {"role": "user", "content": [{"type": "video", "path": vrel}, {"type": "audio", "path": arel},
                                         {"type": "text", "text": "Answer the spoken question about the video."}]},
            {"role": "assistant", "content": [{"type": "text", "text": direction}]}]})
        audio_rows.append({"id": f"aud{i}", "messages": [
            {"role": "user", "content": [{"type": "audio", "path": arel},
                                         {"type": "text", "text": "Is the tone high or low?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "high" if freq > 400 else "low"}]}]})
    write_jsonl("video_audio_qa.jsonl", video_rows)
    write_jsonl("audio_qa.jsonl", audio_rows)
    print(f"wrote {len(image_rows)} image, {len(video_rows)} video+audio, {len(audio_rows)} audio records in {HERE}")


if __name__ == "__main__":
    main()
