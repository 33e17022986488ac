"""The memory tier: the records of one kernel in use in this process, and its in-process single flight.

It is the first tier every lookup reads (the launch hot path reads it through `lookup`, a dict get) and
the only one of `autotune.compat`'s `cache_results=False`. It is not persistent: nothing outlives the process.
"""

from __future__ import annotations

import threading

from ..record import TuningRecord
from . import fingerprint
from .entries import entry_id, kernel_matches, key_text, wanted_key_text
from .protocol import ANY, EntryRef, HeldLock, StoredEntry

__all__ = ["MemoryCache"]

Ident = tuple[tuple, tuple[str, ...]]


class MemoryCache:
    """Records of one kernel by (key, dtypes), for this process. Thread-safe."""

    name = "memory"
    persistent = False

    def __init__(self, kernel: str, identity: str | None = None, location: str = "") -> None:
        self.kernel = kernel
        self.identity = identity
        self.location = location
        self._records: dict[Ident, TuningRecord] = {}
        self._guard = threading.Lock()
        self._key_locks: dict[Ident, threading.Lock] = {}

    def __len__(self) -> int:
        return len(self._records)

    def lookup(self, key: tuple, dtypes: tuple[str, ...]) -> TuningRecord | None:
        """The record of (key, dtypes), or None: the launch hot path, one dict get."""
        return self._records.get((key, dtypes))

    def get(self, entry: EntryRef) -> TuningRecord | None:
        return self._records.get((entry.key, entry.dtypes))

    def put(self, entry: EntryRef, record: TuningRecord) -> bool:
        self.store(entry.key, entry.dtypes, record)
        return True

    def store(self, key: tuple, dtypes: tuple[str, ...], record: TuningRecord) -> None:
        """Keep `record` for (key, dtypes)."""
        with self._guard:
            self._records[(key, tuple(dtypes))] = record

    def after_fork(self) -> None:
        """In a forked child: the threads that held the entry locks (tunings in flight) do not exist there."""
        self._guard = threading.Lock()
        self._key_locks = {}

    def lease_holder(self, entry: EntryRef) -> str | None:
        return None  # this process's own lock: a tuning in another thread is waited for, not skipped

    def lock(self, entry: EntryRef, *, timeout_s: float | None = None) -> HeldLock:
        """The entry's thread lock. `timeout_s` is not applied: the holder is a thread of this process, tuning."""
        ident = (entry.key, entry.dtypes)
        with self._guard:
            lock = self._key_locks.setdefault(ident, threading.Lock())
        lock.acquire()
        return HeldLock(lock)  # other threads of this process wait for this one's tuning

    def records(self) -> dict[Ident, TuningRecord]:
        """A copy of every record: {(key, dtypes): record}."""
        with self._guard:
            return dict(self._records)

    def entries(self, kernel: str | None = None) -> list[StoredEntry]:
        if kernel is not None and not kernel_matches(self.kernel, self.identity, kernel):
            return []
        return [StoredEntry(self.name, self.location, _entry_id(r), r) for r in self.records().values()]

    def remove(self, kernel: str | None = None, key: tuple | None = None, identity: object = ANY) -> list[StoredEntry]:
        if (kernel is not None and not kernel_matches(self.kernel, self.identity, kernel)) or (
            identity is not ANY and identity != self.identity
        ):
            return []
        wanted = wanted_key_text(key)
        removed = []
        with self._guard:
            for ident in list(self._records):
                if wanted is None or key_text(ident[0]) == wanted:
                    record = self._records.pop(ident)
                    removed.append(StoredEntry(self.name, self.location, _entry_id(record), record))
        return removed


def _entry_id(record: TuningRecord) -> str:
    """The id the entry of `record` has on this device (where this process reads and writes it)."""
    return entry_id(fingerprint.device_fingerprint(), record.key, record.dtypes)
