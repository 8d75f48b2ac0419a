"""What a run did, on one page: `report.html` (self-contained, opens offline) and one SVG per plot.

Read from the files a run writes (metrics.jsonl, summary.json, predictions.jsonl, config.resolved.yaml);
nothing here needs the model, so `mmtune report` works on a copied run folder on a laptop.
"""

from .build import next_steps, write_report, write_report_quietly

__all__ = ["next_steps", "write_report", "write_report_quietly"]
