"""`synthetic:counting`, the demo's data: "How many circles are there?" -> "3".

Built so a tiny model trained from random init on 2 CPU cores can learn it: a 112x112 image is a 4x4
grid of 28x28 cells (one merged Qwen2-VL token each at max_pixels=112*112), a cell holds at most one
large shape, and every kind has its own colour (circle red, square blue, triangle green), so counting
is "how many cells hold the colour the question names". 1-6 shapes of the asked kind, 0-2 distractors
of other kinds, light background colours that vary. Deterministic from `data.synthetic_seed`; the eval
split uses another seed and drops any layout that also occurs in train, so the splits are disjoint.
Generated in memory (PIL images in the part, `{"type": "image", "image": img}`).
"""

from __future__ import annotations

import random

from ..errors import DataError
from .records import Record, RecordSet

SIZE = 112
GRID = 4
CELL = SIZE // GRID
KINDS = ("circle", "square", "triangle")
COLOURS = {"circle": (220, 40, 40), "square": (40, 70, 220), "triangle": (30, 160, 60)}
BACKGROUNDS = [(245, 245, 240), (235, 235, 250), (250, 240, 225), (230, 245, 235), (225, 225, 225), (250, 250, 210)]
MAX_COUNT = 6
MAX_DISTRACTORS = 2
QUESTION = "How many {kind}s are there?"


def _layout(rng: random.Random):
    """(asked kind, count, shapes [(cell, kind)], background index): the whole content of one image."""
    kind = rng.choice(KINDS)
    count = rng.randint(1, MAX_COUNT)
    n_distract = rng.randint(0, MAX_DISTRACTORS)
    others = [k for k in KINDS if k != kind]
    cells = rng.sample(range(GRID * GRID), count + n_distract)
    shapes = [(c, kind) for c in cells[:count]] + [(c, rng.choice(others)) for c in cells[count:]]
    return kind, count, tuple(sorted(shapes)), rng.randrange(len(BACKGROUNDS))


def _draw(shapes, bg: int, rng: random.Random):
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (SIZE, SIZE), BACKGROUNDS[bg])
    d = ImageDraw.Draw(img)
    for cell, kind in shapes:
        r, c = divmod(cell, GRID)
        # A little jitter in size and place keeps the task from being a lookup of exact pixels.
        m = rng.randint(2, 4)
        x0, y0 = c * CELL + m, r * CELL + m
        x1, y1 = (c + 1) * CELL - m - 1, (r + 1) * CELL - m - 1
        col = COLOURS[kind]
        if kind == "circle":
            d.ellipse([x0, y0, x1, y1], fill=col)
        elif kind == "square":
            d.rectangle([x0 + 1, y0 + 1, x1 - 1, y1 - 1], fill=col)
        else:
            d.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=col)
    return img


def _seed(base: int, split: str) -> int:
    return base * 1_000_003 + (0 if split == "train" else 7919)


def counting_layouts(n: int, seed: int, split: str, exclude: set | None = None) -> list[tuple]:
    rng = random.Random(_seed(seed, split))
    out = []
    while len(out) < n:
        lay = _layout(rng)
        if exclude and lay in exclude:
            continue
        out.append(lay)
    return out


def make_counting(n: int, seed: int = 0, split: str = "train", train_size: int | None = None) -> list[Record]:
    """`n` counting records of `split`. Non-train splits exclude every layout of the train split."""
    exclude = None
    if split != "train":
        exclude = set(counting_layouts(train_size if train_size is not None else n, seed, "train"))
    layouts = counting_layouts(n, seed, split, exclude)
    draw_rng = random.Random(_seed(seed, split) + 1)
    records = []
    for i, (kind, count, shapes, bg) in enumerate(layouts):
        img = _draw(shapes, bg, draw_rng)
        records.append(Record(
            id=f"counting-{split}-{i:05d}",
            source=f"synthetic:counting/{split}:{i}",
            references=[str(count)],
            messages=[
                {"role": "user", "content": [{"type": "image", "image": img},
                                             {"type": "text", "text": QUESTION.format(kind=kind)}]},
                {"role": "assistant", "content": [{"type": "text", "text": str(count)}]},
            ],
        ))
    return records


def make_arithmetic(n: int, seed: int = 0, split: str = "train", train_size: int | None = None) -> list[Record]:
    """Text-only records, "What is 3 + 4?" -> "7": what `--smoke` feeds a text recipe that names no data."""
    rng = random.Random(_seed(seed, split) + 2)
    records = []
    for i in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        records.append(Record(
            id=f"arithmetic-{split}-{i:05d}", source=f"synthetic:arithmetic/{split}:{i}", references=[str(a + b)],
            messages=[{"role": "user", "content": [{"type": "text", "text": f"What is {a} + {b}?"}]},
                      {"role": "assistant", "content": [{"type": "text", "text": str(a + b)}]}]))
    return records


SYNTHETIC = {"counting": make_counting, "arithmetic": make_arithmetic}


def load_synthetic(name: str, data_cfg, split: str) -> RecordSet:
    if name not in SYNTHETIC:
        raise DataError(f"unknown synthetic data set {name!r}", where=f"synthetic:{name}",
                        fix=f"one of: {', '.join('synthetic:' + k for k in SYNTHETIC)}")
    n = data_cfg.synthetic_train_size if split == "train" else data_cfg.synthetic_eval_size
    recs = SYNTHETIC[name](n, data_cfg.synthetic_seed, split, train_size=data_cfg.synthetic_train_size)
    return RecordSet(records=recs)
