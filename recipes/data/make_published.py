"""Write small look-alikes of public datasets in exactly their published file layouts.

    python recipes/data/make_published.py            # writes recipes/data/published/
    python recipes/data/make_published.py OUT_DIR    # anywhere else (tests do this)

The seed recipes read these with `--smoke`; a real run points the same keys at the real downloads.
Layouts (see src/mmtune/data/published.py for what each reader expects):

    chartqa/ChartQA Dataset/{train,val,test}/{split}_human.json, {split}_augmented.json, png/*.png
    infovqa/infographicsVQA_{train,val,test}_v1.0*.json, infovqa/infographicsvqa_images/*.jpeg
    ocrvqa/dataset.json (keyed by image id, split 1/2/3), ocrvqa/images/<id>.jpg
    fsc147/annotation_FSC147_384.json, Train_Test_Val_FSC_147.json, ImageClasses_FSC147.txt,
           images_384_VarV2/*.jpg, gt_density_map_adaptive_384_VarV2/*.npy

Images are tiny drawings whose answer can be read off them (bar heights, a digit string, dots), so a
model could in principle learn them; they are for checking pipelines, not for training.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

COLORS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 80, 220)}
SPLIT_SIZES = {"train": 6, "val": 3, "test": 2}


def _dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))


def bar_chart(path: Path, values: dict[str, int]) -> None:
    img = Image.new("RGB", (96, 96), (255, 255, 255))
    d = ImageDraw.Draw(img)
    for i, (color, v) in enumerate(values.items()):
        d.rectangle([8 + i * 28, 90 - v * 8, 28 + i * 28, 90], fill=COLORS[color])
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


def chartqa(root: Path, rng: random.Random) -> int:
    n = 0
    for split, size in SPLIT_SIZES.items():
        folder = root / "ChartQA Dataset" / split
        human, augmented = [], []
        for i in range(size):
            name = f"{split}_{i:04d}.png"
            values = {c: rng.randint(1, 9) for c in COLORS}
            bar_chart(folder / "png" / name, values)
            top = max(values, key=values.get)
            human.append({"imgname": name, "query": "Which colour has the tallest bar?", "label": top})
            augmented.append({"imgname": name, "query": f"What is the value of the {top} bar?",
                              "label": str(values[top])})
            n += 2
        _dump(folder / f"{split}_human.json", human)
        _dump(folder / f"{split}_augmented.json", augmented)
    return n


def text_image(path: Path, text: str, size=(96, 48)) -> None:
    img = Image.new("RGB", size, (250, 245, 230))
    ImageDraw.Draw(img).text((6, 16), text, fill=(0, 0, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


def infovqa(root: Path, rng: random.Random) -> int:
    files = {"train": "infographicsVQA_train_v1.0.json", "val": "infographicsVQA_val_v1.0_withQT.json",
             "test": "infographicsVQA_test_v1.0.json"}
    n, qid = 0, 60000
    for split, size in SPLIT_SIZES.items():
        data = []
        for i in range(size):
            img_id = 30000 + qid
            pct = rng.randint(5, 95)
            text_image(root / "infographicsvqa_images" / f"{img_id}.jpeg", f"{pct}% agree")
            row = {"questionId": qid, "question": "What percentage agree?", "image_local_name": f"{img_id}.jpeg",
                   "image_url": f"https://example.invalid/{img_id}.jpeg", "ocr_output_file": f"{img_id}.json",
                   "data_split": split}
            if split != "test":  # the published test split has no answers
                row.update(answers=[f"{pct}%", f"{pct} %", f"{pct}"], answer_type=["single span"],
                           evidence=["text"], **{"operation/reasoning": []})
            data.append(row)
            qid += 1
            n += 1
        _dump(root / files[split], {"dataset_name": "infographicsVQA", "dataset_version": "1.0",
                                    "dataset_split": split, "data": data})
    return n


def ocrvqa(root: Path, rng: random.Random) -> tuple[int, int]:
    genres = ["Travel", "Cookbooks, Food & Wine", "Science Fiction & Fantasy"]
    data, n_q = {}, 0
    code = {"train": 1, "val": 2, "test": 3}
    for split, size in SPLIT_SIZES.items():
        for i in range(size):
            img_id = f"{rng.randint(10**9, 10**10 - 1)}"
            title, genre = f"Book {img_id[-4:]}", rng.choice(genres)
            text_image(root / "images" / f"{img_id}.jpg", title)
            qs = ["What is the title of this book?", "What is the genre of this book?", "Is this a travel book?"]
            ans = [title, genre, "Yes" if genre == "Travel" else "No"]
            data[img_id] = {"imageURL": f"http://ecx.images-amazon.com/images/I/{img_id}.jpg", "questions": qs,
                            "answers": ans, "title": title, "authorName": "A. Author", "genre": genre,
                            "genreID": genres.index(genre), "split": code[split]}
            n_q += len(qs)
    _dump(root / "dataset.json", data)
    return len(data), n_q


def fsc147(root: Path, rng: random.Random) -> int:
    classes = ["apples", "birds", "coins"]
    ann, splits, lines = {}, {s: [] for s in SPLIT_SIZES}, []
    n = 0
    for split, size in SPLIT_SIZES.items():
        for _ in range(size):
            n += 1
            name = f"{n}.jpg"
            w, h, k = 64, 48, rng.randint(1, 12)
            img = Image.new("RGB", (w, h), (235, 235, 235))
            d = ImageDraw.Draw(img)
            points = []
            for _ in range(k):
                x, y = rng.uniform(4, w - 4), rng.uniform(4, h - 4)
                d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=(180, 60, 30))
                points.append([round(x, 2), round(y, 2)])
            (root / "images_384_VarV2").mkdir(parents=True, exist_ok=True)
            img.save(root / "images_384_VarV2" / name)
            # The published maps are Gaussians around each point that sum to the count.
            yy, xx = np.mgrid[0:h, 0:w]
            dens = sum(np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / (2 * 3.0 ** 2)) for x, y in points)
            dens = (dens / dens.sum() * k).astype(np.float32)
            (root / "gt_density_map_adaptive_384_VarV2").mkdir(parents=True, exist_ok=True)
            np.save(root / "gt_density_map_adaptive_384_VarV2" / f"{n}.npy", dens)
            box = [[points[0][0] - 4, points[0][1] - 4], [points[0][0] - 4, points[0][1] + 4],
                   [points[0][0] + 4, points[0][1] + 4], [points[0][0] + 4, points[0][1] - 4]]
            ann[name] = {"H": h, "W": w, "box_examples_coordinates": [box], "box_examples_path": [],
                         "density_path": f"gt_density_map_adaptive_384_VarV2/{n}.npy",
                         "img_path": f"images_384_VarV2/{name}", "points": points, "r": [4.0],
                         "ratio_h": 1.0, "ratio_w": 1.0}
            splits[split].append(name)
            lines.append(f"{name}\t{rng.choice(classes)}")
    _dump(root / "annotation_FSC147_384.json", ann)
    _dump(root / "Train_Test_Val_FSC_147.json", splits)
    (root / "ImageClasses_FSC147.txt").write_text("\n".join(lines) + "\n")
    return n


def main(out: Path) -> None:
    rng = random.Random(0)
    n_chart = chartqa(out / "chartqa", rng)
    n_info = infovqa(out / "infovqa", rng)
    n_img, n_ocr = ocrvqa(out / "ocrvqa", rng)
    n_fsc = fsc147(out / "fsc147", rng)
    print(f"wrote ChartQA {n_chart} QA, InfoVQA {n_info} QA, OCR-VQA {n_img} images / {n_ocr} QA, "
          f"FSC147 {n_fsc} images under {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "published")
