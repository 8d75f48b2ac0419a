"""Config values that name files or folders, checked as text before anything looks them up.

A path component longer than file systems allow (255 bytes on ext4, xfs, APFS, NTFS) makes `Path.is_dir()` /
`is_file()` raise "File name too long" on Python 3.11 instead of answering False, from whichever library looks
first; a NUL byte makes every lookup raise. Both are refused here, naming the key (the validator's location)."""

from __future__ import annotations

NAME_MAX = 255

# Section class -> its fields that hold a path (or a hub id / PATH::SPLIT, which these rules never refuse).
PATH_FIELDS = {
    "ModelConfig": ("name", "processor"),
    "ComposedFrom": ("vision", "lm"),
    "SourceConfig": ("path", "media_root", "eval"),
    "DataConfig": ("train", "eval", "dataset_info", "media_root"),
    "RunConfig": ("output_dir",),
}


def check_path_text(value: str) -> None:
    """ValueError when `value` cannot be a path on any file system (the message is the validator's)."""
    if "\x00" in value:
        raise ValueError("contains a NUL byte, which no file or folder name can hold")
    for part in value.replace("\\", "/").split("/"):
        n = len(part.encode("utf-8", "surrogatepass"))
        if n > NAME_MAX:
            raise ValueError(f"has a name of {n} bytes ({part[:40]!r}...); file systems allow at most {NAME_MAX} bytes "
                             "per file or folder name: check for a pasted text or a missing '/'")
