"""Finding cached records for a report: by kernel (its short name, or module:qualname) and by key, as typed on a
command line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..format import format_record_key
from ..record import TuningRecord
from .export import PathLike

__all__ = ["find_records", "select_records", "key_matches", "cache_entries", "normalise"]


def normalise(value: Any) -> Any:
    """Lists become tuples, all the way down (a key as read from JSON, compared with one typed as a tuple)."""
    if isinstance(value, (list, tuple)):
        return tuple(normalise(v) for v in value)
    return value


def key_matches(record: TuningRecord, text: str) -> bool:
    """Does `--key TEXT` select this record? TEXT is read by `autotune.keyspec.parse_key`, as by every
    subcommand; the printed key (`(1024,) float32`, spaces ignored) matches too. Every dtype variant matches."""
    from ..keys import normalise_key
    from ..keyspec import parse_key
    from ..storage.entries import key_text

    try:  # normalised as a call's key is stored (-0.0 as 0.0), as `autotune cache clear --key` reads it
        if key_text(normalise_key(parse_key(text), "--key")) == key_text(record.key):
            return True
    except ValueError:  # a KeyValueError too (NaN)
        return False
    printed = format_record_key(record).removeprefix("key=")
    squeeze = lambda s: "".join(s.split())  # noqa: E731
    return squeeze(text) in (squeeze(printed), squeeze(repr(normalise(record.key))))


def cache_entries(cache_root: PathLike | None = None) -> list[Any]:
    """Every entry file of the disk cache (`autotune.storage.disk_entries`), readable or not."""
    from ..storage import disk_entries

    return disk_entries(None, cache_root)


def find_records(kernel: str, key: str | None = None, *, cache_root: PathLike | None = None) -> list[TuningRecord]:
    """The disk cache's records of `kernel` (its short name: every module's kernel of that name; or module:qualname,
    that kernel alone: `storage.entries.kernel_matches`), optionally of one key; oldest first.

    Reads through `autotune.storage.disk_entries` (JSON only, validated; nothing is evaluated);
    unreadable entries are skipped here and reported by the CLI command.
    """
    return select_records(cache_entries(cache_root), kernel, key)


def select_records(entries: Iterable[Any], kernel: str, key: str | None) -> list[TuningRecord]:
    """The readable records among `entries` of `kernel` (and `key`), oldest first."""
    from ..storage.entries import kernel_matches

    records = [
        e.record
        for e in entries
        if e.record is not None and kernel_matches(e.record.kernel, e.record.kernel_id, kernel)
    ]
    if key is not None:
        records = [r for r in records if key_matches(r, key)]
    return sorted(records, key=lambda r: r.timestamp)
