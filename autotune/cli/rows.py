"""The table of `autotune cache list`, for the disk's entries and Redis's alike."""
from __future__ import annotations

import time
from typing import Iterable

from ..format import format_age, format_config, format_dtypes, format_key, format_ms, format_table
from ..record import TuningRecord

__all__ = ["entries_table"]


def entries_table(records: Iterable[TuningRecord]) -> str:
    """One line per record: kernel, key, dtypes, device, winner, the winner's median and the record's age."""
    now = time.time()
    rows = []
    for r in records:
        wt = r.winner_trial
        rows.append([r.kernel, format_key(r.key), format_dtypes(r.dtypes), r.device, format_config(r.winner, sep=" "),
                     format_ms(wt.median_ms if wt else None), format_age(now - r.timestamp)])
    return format_table(["KERNEL", "KEY", "DTYPES", "DEVICE", "WINNER", "MEDIAN_MS", "AGE"], rows, right={5, 6})
