"""Formatting shared by every printed surface (AUTOTUNE_PRINT lines, reports, the CLI, the progress bar):
milliseconds, configs, keys, dtypes, ages and aligned tables, written once so they read the same everywhere."""

from __future__ import annotations

import json
import math
import time
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "CANNOT_RUN_MS",
    "format_ms",
    "format_config",
    "format_key",
    "format_dtypes",
    "format_record_key",
    "format_age",
    "format_table",
    "format_timestamp",
    "one_line",
    "plural",
    "safe_text",
    "shorten",
]


# a time no real run reaches, standing for "cannot run" (autotune.compat's do_bench= returning inf, as Triton's does)
CANNOT_RUN_MS = 1e30


def format_ms(value: float | None) -> str:
    """Milliseconds with 4 significant digits (never exponent notation below 10 s); '-' for None, 'inf' for
    `CANNOT_RUN_MS`."""
    if value is None or not math.isfinite(value):
        return "-"
    if value >= CANNOT_RUN_MS:
        return "inf"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    if value != 0 and abs(value) < 1e-4:
        return f"{value:.2e}"
    # 4 significant digits, fixed notation: 0.01234, 1.234, 123.4
    digits = max(0, 3 - int(math.floor(math.log10(abs(value))))) if value else 4
    return f"{value:.{digits}f}"


def format_config(config: Any, sep: str = ",") -> str:
    """`BLOCK=64,num_warps=4`: a config (or any mapping) without spaces (`sep=" "` for the CLI's columns);
    string values are quoted. '-' for None."""
    if config is None:
        return "-"
    return sep.join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in dict(config).items())


def format_key(key: Any) -> str:
    """A key as compact JSON, `[4096,1024]`: what the CLI prints and `--key` reads back."""
    return json.dumps(key, separators=(",", ":"))


def format_dtypes(dtypes: Iterable[str]) -> str:
    """`float32,float16`: dtypes without their `torch.` prefix, comma-separated; '-' when there are none."""
    return ",".join(str(d).removeprefix("torch.") for d in dtypes) or "-"


def format_record_key(record: Any) -> str:
    """`key=(1024,) float32`: a record's key as a tuple, then its tensor dtypes (left out when none)."""
    key = "key=" + repr(tuple(record.key))
    if record.dtypes:
        key += " " + format_dtypes(record.dtypes)
    return key


def format_age(seconds: float) -> str:
    """A short age: 42s, 7m, 3h, 12d."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


# Control characters (C0, DEL, C1), format characters (bidirectional overrides, zero-width joiners), the Unicode
# line and paragraph separators, and lone surrogates (no terminal encoding can write one): none is printed as itself.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def safe_text(value: Any) -> str:
    """`str(value)` with every control or format character written as an escape (`\\x1b`, `\\u202e`), so that
    text read from a cache entry (a kernel name, a dtype, a trial's error) cannot send the terminal escape
    sequences or reorder what is shown. Newlines are escaped too: one value is one line."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if unicodedata.category(ch) not in _UNSAFE_CATEGORIES else _escape(ord(ch)) for ch in text)


def _escape(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def format_timestamp(timestamp: float) -> str:
    """A record's timestamp as local date and time; a value no clock can show (a schema-valid 1e20) is printed
    as the number it is, with no traceback."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))
    except (OverflowError, OSError, ValueError):
        return f"timestamp {timestamp!r} (out of range)"


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = ()) -> str:
    """Plain aligned columns with a header and a rule; columns whose index is in `right` align right."""
    text_rows = [[("" if v is None else safe_text(v)) for v in row] for row in rows]  # escaped before widths
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    right = set(right)

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), line(["-" * w for w in widths])] + [line(r) for r in text_rows])


def one_line(error: str | None, limit: int) -> str:
    """An error message squeezed onto one line: the first line and, if different, the last one.

    Triton's compile errors start with a location (`at 3:8:`) and end with the actual exception,
    so both ends are kept; the middle (source excerpt, traceback) is dropped.
    """
    if not error:
        return ""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return ""
    return shorten(lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}", limit)


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, the last three "..." when it was longer."""
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def plural(n: int, one: str, many: str) -> str:
    """`1 entry`, `3 entries`."""
    return f"{n} {one if n == 1 else many}"
