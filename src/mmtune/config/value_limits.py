"""Config values no run can use, refused when the config is read, naming the key (the validator's location).

Integers past int64: torch, numpy and the planner's arithmetic overflow on them ("cannot fit 'int' into an
index-sized integer" from `mmtune plan` with train.micro_batch_size=1e23 written out).

Values that name files or folders, checked as text before anything looks them up: a path component longer than
file systems allow (255 bytes on ext4, xfs, APFS, NTFS) makes `Path.is_dir()` / `is_file()` raise "File name too
long" on Python 3.11 instead of answering False, from whichever library looks first; a NUL byte makes every lookup
raise."""

from __future__ import annotations

NAME_MAX = 255
INT64_MAX = 2**63 - 1

# Section class -> its fields that hold a path (or a hub id / PATH::SPLIT, which these rules never refuse).
PATH_FIELDS = {
    "ModelConfig": ("name", "processor"),
    "ComposedFrom": ("vision", "lm"),
    "SourceConfig": ("path", "media_root", "eval"),
    "DataConfig": ("train", "eval", "dataset_info", "media_root"),
    "RunConfig": ("output_dir",),
}


def check_value(section: str, field: str, value) -> None:
    """ValueError (the message pydantic shows under the key) for a value no run can use."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
        raise ValueError(f"{value:.3g} is past the largest 64-bit integer ({INT64_MAX:.3g}); no run can use it")
    if isinstance(value, str) and field in PATH_FIELDS.get(section, ()):
        check_path_text(value)


def check_path_text(value: str) -> None:
    """ValueError when `value` cannot be a path on any file system (the message is the validator's)."""
    if "\x00" in value:
        raise ValueError("contains a NUL byte, which no file or folder name can hold")
    for part in value.replace("\\", "/").split("/"):
        n = len(part.encode("utf-8", "surrogatepass"))
        if n > NAME_MAX:
            raise ValueError(f"has a name of {n} bytes ({part[:40]!r}...); file systems allow at most {NAME_MAX} bytes "
                             "per file or folder name: check for a pasted text or a missing '/'")
