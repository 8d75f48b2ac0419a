"""User-facing errors. Each says what is wrong, where, and what to do.

The CLI prints these without a traceback; anything else that escapes is a bug in mmtune.
"""

from __future__ import annotations


class MMTuneError(Exception):
    """An error caused by user input or environment, with a fix the user can apply."""

    def __init__(self, what: str, where: str | None = None, fix: str | None = None):
        self.what = what
        self.where = where
        self.fix = fix
        parts = [what]
        if where:
            parts.append(f"  where: {where}")
        if fix:
            parts.append(f"  fix:   {fix}")
        super().__init__("\n".join(parts))


class ConfigError(MMTuneError):
    """The configuration is invalid (unknown key, wrong type, missing file)."""

    def __init__(self, what: str, where: str | None = None, fix: str | None = None, problems=None):
        # `problems` holds every individual problem when validation collected several.
        self.problems = list(problems or [])
        super().__init__(what, where, fix)


class DataError(MMTuneError):
    """A dataset record or media file cannot be used."""


class ModelLoadError(MMTuneError):
    """A model or processor cannot be loaded (missing offline, unknown family, bad checkpoint)."""
