"""The tuning cache, as tiers behind one protocol (`Cache`): memory per kernel, the local disk, and (later)
a remote store. Layers: `entries` (names and bytes of an entry) and `fingerprint` (what a winner depends
on) -> `files` (the on-disk store) -> the backends `memory` and `disk` -> `tiers` (one kernel's cache:
validity, read/write-through, single flight) -> `clear`; `stats` counts what happened."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
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


# `clear_autotune_cache` loads `clear` (and the crash journal it clears) on first use: a cache hit never clears.
__getattr__ = lazy_names(__name__, globals(), {"clear_autotune_cache": (f"{__name__}.clear", "clear_autotune_cache")})
