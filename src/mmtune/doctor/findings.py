"""A finding: what is wrong, where, and the fix (an override line where one exists)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    code: str  # stable: MM001 ... (see docs/doctor.md)
    severity: str  # error | warning | info
    message: str
    where: str | None = None  # config key, file:record, or module name
    fix: str | None = None

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def with_code(self, code: str) -> "Finding":
        return replace(self, code=code)


# Checks build findings without a code; the runner stamps the code of the check that produced them,
# so a check cannot report under another check's code by mistake.
def error(message: str, where: str | None = None, fix: str | None = None) -> Finding:
    return Finding("", "error", message, where, fix)


def warning(message: str, where: str | None = None, fix: str | None = None) -> Finding:
    return Finding("", "warning", message, where, fix)


def info(message: str, where: str | None = None, fix: str | None = None) -> Finding:
    return Finding("", "info", message, where, fix)
