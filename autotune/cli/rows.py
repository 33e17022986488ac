"""The table of `autotune cache list`, for the disk's entries and Redis's alike, and the two guards every text the
CLI prints from an entry goes through: control characters escaped (`safe_text`), timestamps formatted without
crashing (`format.format_timestamp`). An entry is a file anyone may have written: its text must not drive the terminal."""
from __future__ import annotations

import time
import unicodedata
from typing import Any, Iterable

from ..format import format_age, format_config, format_dtypes, format_key, format_ms, format_table
from ..record import TuningRecord

__all__ = ["entries_table", "safe_text", "age_of"]

# Control characters (C0, DEL, C1), format characters (bidirectional overrides, zero-width joiners) and the Unicode
# line and paragraph separators: none of them is printed as itself.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def safe_text(value: Any) -> str:
    """`str(value)` with every control or format character written as an escape (`\\x1b`, `\\u202e`), so that
    text read from a cache entry (a kernel name, a dtype, a trial's error) cannot send the terminal escape
    sequences or reorder what is shown. Newlines are escaped too: one value is one line."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if unicodedata.category(ch) not in _UNSAFE_CATEGORIES
                   else (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}") for ch in text)


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
        rows.append([safe_text(r.kernel), safe_text(format_key(r.key)), safe_text(format_dtypes(r.dtypes)),
                     safe_text(r.device), safe_text(format_config(r.winner, sep=" ")),
                     format_ms(wt.median_ms if wt else None), age_of(r.timestamp, now)])
    return format_table(["KERNEL", "KEY", "DTYPES", "DEVICE", "WINNER", "MEDIAN_MS", "AGE"], rows, right={5, 6})
