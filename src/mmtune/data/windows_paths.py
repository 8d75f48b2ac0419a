"""Media paths written on Windows, read on this machine (Linux, macOS: '/' is the only separator).

Data files made on Windows name media as `images\\cat.jpg` (Python's os.path.join there, labelling tools,
json written by pandas): on a POSIX machine the backslash is an ordinary character of one file name, so
the file is "not found" though it sits in images/. A relative path is read as Windows means it when the
literal name does not exist and the name with '/' does (no other file can be meant). A drive-letter
(`C:\\...`) or UNC (`\\\\server\\...`) path names a disk of the machine that wrote the file: nothing here can
say which folder of this machine holds it, so it is refused, saying so.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_DRIVE = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def windows_drive(p: str) -> str | None:
    """'C:' (or 'UNC') when `p` is an absolute Windows path and this machine does not use them, else None."""
    if os.sep == "\\" or not _DRIVE.match(p):
        return None
    return "UNC" if p.startswith("\\\\") else p[:2]


def posix_form(root: Path, p: str) -> Path | None:
    """root / p with Windows separators read as '/', when that file exists and `p` has any; else None."""
    if os.sep == "\\" or "\\" not in p:
        return None
    full = root / p.replace("\\", "/")
    return full if full.exists() else None
