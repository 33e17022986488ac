"""The tuning cache, as tiers behind one protocol (`Cache`): memory per kernel, the local disk, and (later)
a remote store. Layers: `entries` (names and bytes of an entry) and `fingerprint` (what a winner depends
on) -> `files` (the on-disk store) -> the backends `memory` and `disk` -> `tiers` (one kernel's cache:
validity, read/write-through, single flight) -> `clear`; `stats` counts what happened."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .counters import reset_stats, stats
from .disk import DiskCache
from .files import DiskEntry, disk_entries, load_record
from .fingerprint import device_fingerprint, runtime_versions, source_hash
from .kernel_cache import KernelCache
from .memory import MemoryCache
from .protocol import Cache, EntryRef, Lease, StoredEntry

if TYPE_CHECKING:
    from .clear import clear_autotune_cache

__all__ = [
    "Cache",
    "EntryRef",
    "Lease",
    "StoredEntry",
    "MemoryCache",
    "DiskCache",
    "KernelCache",
    "DiskEntry",
    "clear_autotune_cache",
    "disk_entries",
    "load_record",
    "device_fingerprint",
    "runtime_versions",
    "source_hash",
    "stats",
    "reset_stats",
]


def __getattr__(name: str) -> object:
    """PEP 562: `clear_autotune_cache` loads `clear` (and the crash journal it clears) on first use, not with the
    package: a cache hit never clears."""
    if name == "clear_autotune_cache":
        from .clear import clear_autotune_cache

        globals()[name] = clear_autotune_cache
        return clear_autotune_cache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
