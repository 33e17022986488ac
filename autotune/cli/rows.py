"""The table of `autotune cache list`, for the disk's entries and Redis's alike. What the CLI prints from an entry
goes through `format.safe_text` (control characters escaped; `format_table` applies it to every cell) and
`format.format_timestamp` (no crash on an out-of-range time): an entry is a file anyone may have written, and its
text must not drive the terminal."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ..format import format_age, format_config, format_dtypes, format_key, format_ms, format_table
from ..record import TuningRecord

__all__ = ["entries_table", "age_of", "kernel_labels", "sortable"]


def age_of(timestamp: float, now: float) -> str:
    """How long ago `timestamp` was ('-' for a timestamp that is not a time)."""
    try:
        return format_age(now - timestamp)
    except (OverflowError, ValueError):
        return "-"


def kernel_labels(records: Sequence[TuningRecord]) -> list[str]:
    """How each record's kernel is named in a listing: its short name, unless the records shown hold that short
    name for more than one kernel (`add_kernel` of two modules), where each of those is named by its `kernel_id`
    ("module:qualname", what `--kernel` takes to pick one), or by its short name when it has none (an entry
    written before kernel ids were recorded). One module's kernels read as they always did."""
    ids: dict[str, set] = {}
    for r in records:
        ids.setdefault(r.kernel, set()).add(r.kernel_id)
    return [r.kernel_id or r.kernel if len(ids[r.kernel]) > 1 else r.kernel for r in records]


def sortable(value: Any) -> tuple:
    """A sort key for a stored key value that compares with any other's, whatever their shapes ([40] and [[40]],
    numbers, strings, null): numbers by value (256 before 1000), then flags and null, then strings, then lists
    element by element. Every value maps to (rank, number, text, items), so no two are ever incomparable."""
    if isinstance(value, bool) or value is None:
        return (1, 0, str(value), ())
    if isinstance(value, (int, float)):
        return (0, value, "", ())
    if isinstance(value, str):
        return (2, 0, value, ())
    if isinstance(value, (list, tuple)):
        return (3, 0, "", tuple(sortable(v) for v in value))
    return (4, 0, json.dumps(value, sort_keys=True, default=str), ())


def entries_table(records: Iterable[TuningRecord]) -> str:
    """One line per record: kernel (`kernel_labels`), key, dtypes, device, winner, the winner's median and the
    record's age."""
    now = time.time()
    records = list(records)
    rows = []
    for r, kernel in zip(records, kernel_labels(records)):
        wt = r.winner_trial
        rows.append(
            [
                kernel,
                format_key(r.key),
                format_dtypes(r.dtypes),
                r.device,
                format_config(r.winner, sep=" "),
                format_ms(wt.median_ms if wt else None),
                age_of(r.timestamp, now),
            ]
        )  # format_table escapes
    return format_table(["KERNEL", "KEY", "DTYPES", "DEVICE", "WINNER", "MEDIAN_MS", "AGE"], rows, right={5, 6})
