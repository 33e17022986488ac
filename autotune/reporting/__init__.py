"""Seeing what a tuning did. Everything here reads a finished `TuningRecord`; nothing measures or tunes.

`lines` (the AUTOTUNE_PRINT lines and their logging), `table` (the trial table, `render_report`), `plot` (the
PNG chart), `export` (CSV and JSON), `lookup` (finding cached records by kernel and key); `ranking` orders
trials for all of them. `kernel.report()` and `autotune report` call `render_report()`.
"""

from __future__ import annotations

from .export import record_from_json, record_to_csv, record_to_json, records_from_csv
from .lines import emit, format_summary, format_trials
from .lookup import find_records
from .plot import plot_trials, trial_figure
from .table import render_report, report_table

__all__ = [
    "format_summary",
    "format_trials",
    "emit",
    "report_table",
    "plot_trials",
    "trial_figure",
    "render_report",
    "record_to_csv",
    "records_from_csv",
    "record_to_json",
    "record_from_json",
    "find_records",
]
