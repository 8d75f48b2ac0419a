"""The data formats, one module each: `FIELDS` (our field name -> the names tried in a row, in order; the
first is the documented one; `data.columns` renames ours -> theirs) and `to_records(row, fmt, columns, where,
index, rid, resolve, templates) -> list[Record]`. The registry is `formats.FORMATS`; `row_records.row_to_records`
calls the module of the run's data.format (docs/internals.md "Adding a data format")."""
