"""One results file per subcommand: the environment once, then one row per id, written after every row.

Writes are atomic (a temporary file in the same folder, fsynced, then renamed over the old one), so a call
killed at its time limit leaves the rows measured so far; the next call reads them and skips every row whose
status is final. A row skipped for a missing package is not final: it is checked again on every call, so
installing the wheel later runs it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

FINAL = ("pass", "fail", "oom", "timeout")  # measured (or failed for real): not run again


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _provenance import finish, provenance  # noqa: E402

STARTED = provenance()
# The top-level keys of a gpu_*.json results file (tests/test_benchmark_results.py), beside the provenance.
RESULT_KEYS = ("environment", "rows", "summary")  # this invocation's start: the commit and the load before its rows ran


class ResultsFile:
    def __init__(self, path: Path, environment: dict, mirror: Path | None = None):
        self.path = Path(path)
        self.mirror = Path(mirror) / self.path.name if mirror else None  # a second copy, written the same way
        self.data = {"environment": environment, "rows": []}
        if self.path.is_file():
            old = json.loads(self.path.read_text())
            self.data["rows"] = old.get("rows", [])
            if old.get("environment", {}).get("device") != environment.get("device"):
                # rows measured on another device must not mix with this one's
                raise SystemExit(f"{self.path} holds rows from {old.get('environment', {}).get('device')!r}, this "
                                 f"machine is {environment.get('device')!r}: move it away or pass another --out")
            self.data["environment"] = {**old.get("environment", {}), **environment}
        self.data.setdefault("summary", {})

    def row(self, row_id: str) -> dict | None:
        return next((r for r in self.data["rows"] if r["id"] == row_id), None)

    def done(self, row_id: str) -> bool:
        r = self.row(row_id)
        return r is not None and r.get("status") in FINAL

    def put(self, row: dict) -> None:
        rows = self.data["rows"]
        for i, r in enumerate(rows):
            if r["id"] == row["id"]:
                rows[i] = row
                break
        else:
            rows.append(row)
        self.write()

    def write(self) -> None:
        for path in (self.path, self.mirror):
            if path is not None:
                self._write(path)

    def _write(self, path: Path) -> None:
        # The provenance of the invocation that wrote last (a results file is filled over several: each
        # row keeps its own `environment`): commit, dirty flag, command, versions, machine, load.
        self.data.update(finish(STARTED))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.data, f, indent=2, default=str)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
