"""Where a relative media path that is not found is after all: the fix names the folder or the archive.

Published image sets keep their annotations in one place and the images in another: LLaVA-Pretrain's
blip_laion_cc_sbu_558k.json names `00000/000000001.jpg` beside an `images/` folder (LLaVA's `--image_folder`),
ShareGPT4V's json sits two folders above `coco/train2017/`, and the images ship as `images.zip`, which must be
extracted first (https://github.com/haotian-liu/LLaVA/issues/342, https://github.com/OpenGVLab/InternVL/issues/369).
Read against the data file's folder every path is "not found", and "set data.media_root" does not say to what.
This looks for the path in the few places such layouts put it (sub-folders of the resolving folder two deep, its
parent and the parent's sub-folders, the grand-parent) and in the zip archives there, and says which
`data.media_root` reads it or which archive holds it. Bounded: a few hundred folders and archive listings, done
only for the first few misses of a source (a million missing paths are not searched a million times); a place
found is checked again for each later miss with one stat or one set lookup. A path found in several folders
(shard folders that each keep their own `images/0001.jpg`) names no one folder: each source needs its own.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

MAX_DIRS = 400  # folders looked into at most, per search
SEARCHES = 3  # misses searched for per source; later misses only test the place found
ARCHIVES = (".tar", ".tgz", ".tar.gz", ".tar.zst")  # not listed: a tar has no index (a 25 GB one is read whole)


def _entries(folder: Path, want_dirs: bool) -> list[Path]:
    """Sub-folders (or files) of `folder`, by name; os.scandir reads the kind from the listing itself, so a folder of
    558k images costs one listing, not a stat per file."""
    try:
        with os.scandir(folder) as it:
            return sorted(Path(e.path) for e in it if not e.name.startswith(".")
                          and (e.is_dir() if want_dirs else e.is_file()))
    except OSError:
        return []


def _subdirs(folder: Path, depth: int, budget: list[int]):
    kids = _entries(folder, True)
    for kid in kids:
        if budget[0] <= 0:
            return
        budget[0] -= 1
        yield kid
        if depth > 1:
            yield from _subdirs(kid, depth - 1, budget)


def _places(root: Path):
    """Folders a relative path may be relative to, nearest first."""
    budget = [MAX_DIRS]
    yield from _subdirs(root, 2, budget)
    parent = root.parent
    if parent != root:
        yield parent
        yield from (d for d in _subdirs(parent, 1, budget) if d != root)
        if parent.parent != parent:
            yield parent.parent


def _files(folders, suffixes):
    for folder in folders:
        yield from (p for p in _entries(folder, False) if p.name.lower().endswith(suffixes))


class Whereabouts:
    """One source's search for its missing media (make_resolver keeps one)."""

    def __init__(self, root: Path, media_root_set: bool):
        self.root, self.media_root_set = root, media_root_set
        self.searches = 0
        self.folder: Path | None = None  # a folder the paths are relative to
        self.archive: tuple[Path, str, frozenset] | None = None  # (zip, member prefix, member names)

    def hint(self, p: str) -> str | None:
        """A fix naming where `p` (relative, not found under root) is, or None."""
        if Path(p).is_absolute():
            return None
        if self.folder is not None and (self.folder / p).exists():
            return self._folder_fix(p)
        if self.archive is not None and self.archive[1] + p in self.archive[2]:
            return self._archive_fix(p)
        if self.searches >= SEARCHES or (self.folder or self.archive):
            return None
        self.searches += 1
        return self._search(p)

    def _search(self, p: str) -> str | None:
        places = [self.root, *_places(self.root)]
        holders = [folder for folder in places[1:] if (folder / p).exists()]
        if len(holders) > 1:  # shard folders that each hold images/0001.jpg: no one folder is right for all
            self.searches = SEARCHES
            return (f"{p} is in {len(holders)} folders ({', '.join(str(h) for h in holders[:3])}"
                    f"{' ...' if len(holders) > 3 else ''}), so no one data.media_root reads it: records of "
                    f"different folders name their own files by the same names. Give one source per folder "
                    f"(data.train as a list, each with its media_root), or paths that tell the files apart "
                    f"(a/images/0001.jpg)")
        if holders:
            self.folder = holders[0]
            return self._folder_fix(p)
        near = [self.root, *(d for d in places[1:] if d.parent == self.root), self.root.parent]
        for zp in _files(near, (".zip",)):
            try:
                with zipfile.ZipFile(zp) as z:
                    names = frozenset(z.namelist())
            except (OSError, zipfile.BadZipFile):
                continue
            prefix = next((n[:-len(p)] for n in names if n == p or n.endswith("/" + p)), None)
            if prefix is not None:
                self.archive = (zp, prefix, names)
                return self._archive_fix(p)
        tars = list(_files(near, ARCHIVES))
        if tars:
            return (f"no folder here holds {p}, and {tars[0]} is an archive beside the data (not read: mmtune reads "
                    f"media files, not archive members): extract it and set data.media_root to the folder the "
                    f"records' paths are relative to")
        return None

    def _folder_fix(self, p: str) -> str:
        return (f"{p} is at {self.folder / p}: set data.media_root={self.folder} (the folder the records' paths are "
                f"relative to, LLaVA's image_folder)" + (" instead of the one set" if self.media_root_set else ""))

    def _archive_fix(self, p: str) -> str:
        zp, prefix = self.archive[0], self.archive[1]
        # a zip without a top folder (LLaVA-Pretrain's images.zip) goes into a folder named after it
        target = zp.parent / prefix.rstrip("/") if prefix else zp.parent / zp.stem
        media_root, target = target, (zp.parent if prefix else target)
        return (f"{p} is a member of {zp}, which is not extracted (mmtune reads media files, not archive members): "
                f"unzip {zp} -d {target} and set data.media_root={media_root}")
