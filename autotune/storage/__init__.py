"""The tuning cache, as tiers behind one protocol (`Cache`): memory per kernel, the local disk, and (later)
a remote store. Layers: `entries` (names and bytes of an entry) and `fingerprint` (what a winner depends
on) -> `files` (the on-disk store) -> the backends `memory` and `disk` -> `tiers` (one kernel's cache:
validity, read/write-through, single flight) -> `clear`; `stats` counts what happened."""

from __future__ import annotations

from .clear import clear_autotune_cache
from .counters import reset_stats, stats
from .disk import DiskCache
from .files import DiskEntry, disk_entries, load_record
from .fingerprint import device_fingerprint, runtime_versions, source_hash
from .kernel_cache import KernelCache
from .memory import MemoryCache
from .protocol import Cache, EntryRef, Lease, StoredEntry

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
