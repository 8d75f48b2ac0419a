"""The public VQA datasets' own file layouts, read as published (no conversion step for the user).

- ChartQA (github.com/vis-nlp/ChartQA): `ChartQA Dataset/{train,val,test}/` holds `{split}_human.json`
  and `{split}_augmented.json` (lists of `{imgname, query, label}`) and the images in `png/`.
- InfoVQA (rrc.cvc.uab.es, task 3): `infographicsVQA_{train,val,test}_v1.0*.json`, an object
  `{"dataset_name", "dataset_split", ..., "data": [{questionId, question, image_local_name, answers}]}`,
  images in `infographicsvqa_images/`.
- OCR-VQA (ocr-vqa.github.io): one `dataset.json`, an object keyed by image id
  `{"<id>": {imageURL, questions: [...], answers: [...], title, genre, split: 1|2|3}}` (1 train, 2 val,
  3 test), images fetched by its script to `images/<id>.<extension of imageURL>`.

A folder given as a data source is searched for the split: a file named after it (`val.jsonl`), a
sub-folder named after it (ChartQA's `val/`), or every file whose name holds it as a word
(`val_human.json` + `val_augmented.json`, `infographicsVQA_val_v1.0_withQT.json`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")  # the readers in local_readers.py
# Folders next to the annotation files where each dataset keeps its images.
MEDIA_DIRS = {"chartqa": ("png",), "infovqa": ("infographicsvqa_images", "images"), "ocrvqa": ("images",)}
# OCR-VQA's dataset.json marks each image's split with a number.
OCRVQA_SPLITS = {1: "train", 2: "val", 3: "test"}
CANONICAL_SPLIT = {"train": "train", "training": "train", "validation": "val", "val": "val", "valid": "val",
                   "dev": "val", "eval": "val", "test": "test", "testing": "test"}


def _words(stem: str) -> set[str]:
    return set(re.split(r"[_\-.\s]+", stem.lower()))


def split_files(folder: Path, candidates: tuple[str, ...], parts: list[str] | None = None) -> list[Path]:
    """Files of one split inside `folder` (see the module doc), [] when none; `parts` keeps only files
    whose name also holds one of these words (ChartQA's `human` / `augmented`)."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in FILE_SUFFIXES)
    for name in candidates:  # the historical rule first: a file named exactly after the split
        exact = [p for p in files if p.stem == name]
        if exact:
            return exact
    for name in candidates:
        sub = folder / name
        if sub.is_dir():
            found = split_files(sub, candidates, parts)
            if found:
                return found
    for name in candidates:
        hits = [p for p in files if name.lower() in _words(p.stem)]
        if parts:
            hits = [p for p in hits if _words(p.stem) & {x.lower() for x in parts}]
        if hits:
            return hits
    return []


def with_media_dirs(resolve: Callable[[str, str], str], fmt: str) -> Callable[[str, str], str]:
    """A resolver that also looks in the dataset's own image folder (ChartQA's `png/`, ...)."""
    subdirs = MEDIA_DIRS.get(fmt)
    if not subdirs:
        return resolve
    from .formats import BadRecord

    def resolve_in_dirs(p: str, where: str) -> str:
        try:
            return resolve(p, where)
        except BadRecord as first:
            if not isinstance(p, str) or Path(p).is_absolute() or "://" in p:
                raise
            for sub in subdirs:
                try:
                    return resolve(f"{sub}/{p}", where)
                except BadRecord:
                    continue
            raise first from None

    return resolve_in_dirs


def default_image(row: dict, fmt: str, rid: str) -> str | None:
    """OCR-VQA's dataset.json names no image file: its download script saves `<id><extension of URL>`."""
    if fmt == "ocrvqa" and isinstance(row.get("imageURL"), str):
        ext = Path(row["imageURL"].split("?")[0]).suffix or ".jpg"
        return f"{rid}{ext}"
    return None


def in_split(row, fmt: str, split: str) -> bool:
    """False for an OCR-VQA dataset.json entry marked for another split (1 train, 2 val, 3 test)."""
    if fmt != "ocrvqa" or not isinstance(row, dict) or row.get("split") not in OCRVQA_SPLITS:
        return True
    want = CANONICAL_SPLIT.get(split, split)
    return OCRVQA_SPLITS[row["split"]] == want


# ---- FSC147 (github.com/cvlab-stonybrook/LearningToCountEverything) -------------------------------
# `annotation_FSC147_384.json` = {"<name>.jpg": {"points": [[x, y], ...], "H", "W", ...}},
# `Train_Test_Val_FSC_147.json` = {"train": [names], "val": [...], "test": [...]},
# `ImageClasses_FSC147.txt` = "<name>.jpg\t<object class>" lines, images in `images_384_VarV2/`,
# density maps in `gt_density_map_adaptive_384_VarV2/<name>.npy`.
FSC147_SPLITS = "Train_Test_Val_FSC_147.json"
FSC147_ANNOTATIONS = "annotation_FSC147_384.json"
FSC147_CLASSES = "ImageClasses_FSC147.txt"
FSC147_IMAGES = "images_384_VarV2"
FSC147_DENSITY = "gt_density_map_adaptive_384_VarV2"


def is_fsc147(folder: Path) -> bool:
    return folder.is_dir() and (folder / FSC147_SPLITS).is_file() and (folder / FSC147_ANNOTATIONS).is_file()


def fsc147_rows(folder: Path, split: str):
    """One row per image of the split: {id, image, object, count, points, density}; `density` is None
    when the published map is absent (an auxiliary loss then makes one from the points)."""
    import json

    from ..errors import DataError

    splits = json.loads((folder / FSC147_SPLITS).read_text())
    want = CANONICAL_SPLIT.get(split, split)
    if want not in splits:
        raise DataError(f"{folder / FSC147_SPLITS} has no {split!r} split", where=str(folder / FSC147_SPLITS),
                        fix=f"splits found: {', '.join(sorted(splits))}")
    ann = json.loads((folder / FSC147_ANNOTATIONS).read_text())
    classes = {}
    if (folder / FSC147_CLASSES).is_file():
        for line in (folder / FSC147_CLASSES).read_text().splitlines():
            name, _, cls = line.partition("\t")
            if cls.strip():
                classes[name.strip()] = cls.strip()
    for n, name in enumerate(splits[want]):
        where = f"{folder / FSC147_SPLITS}:{want}[{n}] ({name})"
        entry = ann.get(name)
        if entry is None or not isinstance(entry.get("points"), list):
            from .formats import BadRecord

            yield where, BadRecord("missing field", f"{name} has no points in {FSC147_ANNOTATIONS}", where,
                                   "use the annotation file that ships with the split file")
            continue
        dens = folder / FSC147_DENSITY / (Path(name).stem + ".npy")
        yield where, {"id": name, "image": f"{FSC147_IMAGES}/{name}", "object": classes.get(name, "objects"),
                      "count": len(entry["points"]), "points": entry["points"],
                      "size": [entry.get("W"), entry.get("H")], "density": str(dens) if dens.is_file() else None}
