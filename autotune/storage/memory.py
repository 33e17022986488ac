"""The memory tier: the records of one kernel in use in this process, and its in-process single flight.

It is the first tier every lookup reads (the launch hot path reads it through `lookup`, a dict get) and
the only one of `autotune.compat`'s `cache_results=False`. It is not persistent: nothing outlives the process.
"""

from __future__ import annotations

import threading

from ..errors import AutotuneError
from ..record import TuningRecord
from . import fingerprint
from .entries import entry_id, kernel_matches, key_text, wanted_key_text
from .protocol import ANY, EntryRef, HeldLock, StoredEntry

__all__ = ["FlightLock", "MemoryCache"]

Ident = tuple[tuple, tuple[str, ...]]


class FlightLock(HeldLock):
    """An entry's thread lock, held, and the tunings of the entry that failed while this thread waited for it."""

    def __init__(self, lock: threading.Lock, failed: dict[str | None, AutotuneError]) -> None:
        super().__init__(lock)
        self._failed = failed

    def failure(self, candidates: str | None) -> AutotuneError | None:
        """The verdict of a tuning of these `candidates` that failed while this thread waited, else None."""
        return self._failed.get(candidates)


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
        self._waiting: dict[Ident, int] = {}  # threads waiting for an entry's lock now
        # the last failed tuning of an entry per candidates (what prune= kept), while threads wait for the entry
        self._failed: dict[Ident, dict[str | None, AutotuneError]] = {}

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
        self._key_locks, self._waiting, self._failed = {}, {}, {}

    def newer_at(self, entry: EntryRef) -> bool:
        return False  # written by this process only

    def lease_holder(self, entry: EntryRef) -> str | None:
        return None  # this process's own lock: a tuning in another thread is waited for, not skipped

    def lock(self, entry: EntryRef, *, timeout_s: float | None = None) -> FlightLock:
        """The entry's thread lock: other threads of this process wait for this one's tuning. `timeout_s` is not
        applied: the holder is a thread of this process, tuning. Its `failure`: the verdict of a tuning of the
        entry that failed while this thread waited (`tuning_failed`), which single flight hands to this thread
        instead of a tuning of its own; a thread that comes after the failure gets None and tunes anew."""
        ident = (entry.key, entry.dtypes)
        with self._guard:
            lock = self._key_locks.setdefault(ident, threading.Lock())
            self._waiting[ident] = self._waiting.get(ident, 0) + 1
            before = self._failed.get(ident, {})
        try:
            lock.acquire()
        finally:  # also when the wait is interrupted (Ctrl-C): it waits no more
            with self._guard:
                after = self._failed.get(ident, {})
                left = self._waiting.pop(ident, 1) - 1
                if left:
                    self._waiting[ident] = left
                else:  # no thread waits for it any more: a later one tunes anew
                    self._failed.pop(ident, None)
        return FlightLock(lock, {c: error for c, error in after.items() if before.get(c) is not error})

    def tuning_failed(self, entry: EntryRef, candidates: str | None, error: AutotuneError) -> None:
        """Hand `error`, the verdict of a tuning of `candidates`, to the threads waiting for `entry`'s lock now.
        Call it holding that lock, before releasing it; kept only while a thread waits."""
        ident = (entry.key, entry.dtypes)
        with self._guard:
            if self._waiting.get(ident):
                self._failed[ident] = {**self._failed.get(ident, {}), candidates: error}

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
