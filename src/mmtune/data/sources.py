"""Where records come from: JSONL, JSON, parquet, CSV, Arrow, a `datasets` folder, a Hub id, a data.dataset_info
name, synthetic:NAME, or a list of them (a mixture).

`load_records(spec, data_cfg, split)` dispatches: a mixture (mixture.py), a stream's first records
(streaming.py), or one source read whole (one_source.py: rows from rows.py's readers, turned into Records
through the configured format, bad records raised or counted by data.on_bad_record).
"""

from __future__ import annotations

from .one_source import load_source
from .records import RecordSet


def load_records(spec, data_cfg, split: str = "train") -> RecordSet:
    """Records of one split. `spec` is a path (optionally PATH::SPLIT), `synthetic:NAME`, or a list of
    mixture sources (data.train as a list; see data/mixture.py)."""
    if isinstance(spec, (list, tuple)):
        from .mixture import load_mixture

        return load_mixture(spec, data_cfg, split)
    if split == "train" and getattr(data_cfg, "streaming", False):  # its first K records (data/streaming.py)
        from .streaming import sample_records

        return sample_records(spec, data_cfg, split)
    rs = load_source(spec, data_cfg, split)
    if split != "train" and data_cfg.eval_max_samples and len(rs.records) > data_cfg.eval_max_samples:
        rs.notes.append(f"kept the first {data_cfg.eval_max_samples} of {len(rs.records)} records (data.eval_max_samples)")
        rs.records = rs.records[: data_cfg.eval_max_samples]
    return rs
