"""A fingerprint of the base model's weight files, kept in every checkpoint's meta.json.

peft loads an adapter onto any model whose module names and shapes fit it, without a word: a base folder
replaced after training by another seed, revision or fine-tune of the same architecture gives a chat, an
export and a merge that are not what was trained (https://github.com/huggingface/peft/issues/1932,
https://github.com/predibase/lorax/pull/58). Shapes alone cannot tell them apart (train/checkpoint.py
`base_changed` covers the shapes that differ), so the run records what the weights were.

What is hashed: each *.safetensors file's tensor names, dtypes and shapes, and the first FIRST_BYTES bytes
of every tensor, read straight from the files (no torch, no load: milliseconds for a 7B model). Another
fine-tune changes the values of the tensors it trained, and every tensor's first row is read. The bytes
on disk are hashed, so the same weights saved in another dtype count as another model (the message says
so). A model with no local files (a tiny twin, random weights, a hub id not yet downloaded) has no
fingerprint and nothing is compared.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

FIRST_BYTES = 4096


def _folder(name: str, revision: str | None) -> Path | None:
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if name.startswith("tiny/") or name.count("/") != 1:
        return None
    from .hub_files import cached_snapshot

    return cached_snapshot(name, revision)


def fingerprint(name: str, revision: str | None = None) -> dict | None:
    """{"sha256", "tensors", "files"} of the weights at model.name, or None when there are no local files or
    one cannot be read (the run goes on; nothing is compared later)."""
    folder = _folder(name, revision)
    files = sorted(folder.glob("*.safetensors")) if folder is not None else []
    if not files:
        return None
    digest = hashlib.sha256()
    count = 0
    try:
        for file in files:
            with open(file, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(size))
                for key in sorted(k for k in header if k != "__metadata__"):
                    info = header[key]
                    start, end = info["data_offsets"]
                    f.seek(8 + size + start)
                    digest.update(f"{key}|{info['dtype']}|{info['shape']}|".encode())
                    digest.update(f.read(min(FIRST_BYTES, end - start)))
                    count += 1
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None  # a damaged or pointer-only file: the load itself says what is wrong with it
    return {"sha256": digest.hexdigest(), "tensors": count, "files": [f.name for f in files], "revision": revision}


def differs(saved: dict | None, name: str) -> str | None:
    """A sentence saying how the weights at model.name now differ from `saved` (a checkpoint's record), or
    None when they agree or either side has no fingerprint."""
    if not isinstance(saved, dict) or not saved.get("sha256"):
        return None
    now = fingerprint(name, saved.get("revision"))
    if now is None or now["sha256"] == saved["sha256"]:
        return None
    return (f"fingerprint of {saved.get('tensors')} tensors {str(saved['sha256'])[:12]} at training, of {now['tensors']} "
            f"tensors {now['sha256'][:12]} now (another seed, revision, fine-tune or dtype of the same architecture)")
