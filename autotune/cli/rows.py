"""The table of `autotune cache list`, for the disk's entries and Redis's alike. What the CLI prints from an entry
goes through `format.safe_text` (control characters escaped; `format_table` applies it to every cell) and
`format.format_timestamp` (no crash on an out-of-range time): an entry is a file anyone may have written, and its
text must not drive the terminal."""
from __future__ import annotations

import time
from typing import Iterable

from ..format import format_age, format_config, format_dtypes, format_key, format_ms, format_table
from ..record import TuningRecord

__all__ = ["entries_table", "age_of"]

def age_of(timestamp: float, now: float) -> str:
    """How long ago `timestamp` was ('-' for a timestamp that is not a time)."""
    try:
        return format_age(now - timestamp)
    except (OverflowError, ValueError):
        return "-"


def entries_table(records: Iterable[TuningRecord]) -> str:
    """One line per record: kernel, key, dtypes, device, winner, the winner's median and the record's age."""
    now = time.time()
    rows = []
    for r in records:
        wt = r.winner_trial
        rows.append([r.kernel, format_key(r.key), format_dtypes(r.dtypes), r.device, format_config(r.winner, sep=" "),
                     format_ms(wt.median_ms if wt else None), age_of(r.timestamp, now)])   # format_table escapes
    return format_table(["KERNEL", "KEY", "DTYPES", "DEVICE", "WINNER", "MEDIAN_MS", "AGE"], rows, right={5, 6})
