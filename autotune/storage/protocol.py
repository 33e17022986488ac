"""The contract of one tier of the tuning cache (`Cache`), the entry it is asked about (`EntryRef`) and the
single-flight lock it hands out (`Lease`).

A tier stores schema-valid `TuningRecord`s by entry and nothing else: whether a record may be *used* (same
kernel source, space, device, Triton version) is decided by the tiers in front of it (`tiers.KernelCache`),
not by a backend. A backend never raises on an I/O fault (unreadable file, full disk, server down): it
warns once with `CacheWarning` and answers as a miss, so a cache fault never fails a launch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from ..errors import CacheWarning, warn_at_caller
from ..record import TuningRecord
from .entries import entry_id, kernel_dirname, key_text

__all__ = [
    "EntryRef",
    "StoredEntry",
    "Lease",
    "HeldLock",
    "Cache",
    "ANY",
    "warn",
    "LOCK_TIMEOUT_ADVICE",
    "SOURCES_PER_KEY",
]

# How a lock-timeout warning ends, in every tier: what a tuning can change. A caller that is not a tuning (`cache
# push`/`pull`, with its own --lock-timeout) takes this ending off and gives its own.
LOCK_TIMEOUT_ADVICE = "; raise AUTOTUNE_LOCK_TIMEOUT_S (or Tuning(lock_timeout_s=...)) if tunings take longer"

logger = logging.getLogger("autotune")

ANY = object()
"""`Cache.remove(identity=ANY)`: entries of every kernel of the short name, whatever its module."""


def warn(message: str) -> None:
    """Report a cache fault: a CacheWarning attributed to the user's code, and the log when one is set up."""
    warn_at_caller(message, CacheWarning)
    # Without any handler configured, logging's last-resort handler would print the same text a second time.
    if logger.hasHandlers():
        logger.warning(message)


def every_slot_newer(what: str, where: str) -> str:
    """The warning of a write refused because a newer autotune wrote every slot of the key (`Cache.newer_at`)."""
    return (
        f"autotune cache: every entry of {what} in {where} was written by a newer autotune (a higher schema "
        "version) and is left in place, so this autotune cannot store its record of the key there (a tuning keeps "
        "its winner in memory only); run the newer autotune, or give this one a cache of its own "
        "(AUTOTUNE_CACHE_DIR, or AUTOTUNE_REMOTE_PREFIX for Redis)"
    )


# Entries kept per (kernel, device, key, dtypes): one per kernel source and search space, so that two kernels of
# one module:qualname with different source (two projects sharing a cache, a rolling deploy), or one kernel under
# two spaces (a narrowed space tried for a run, a native and a compat decoration), both hit instead of evicting
# each other; past this many the oldest entry (by its timestamp) is replaced.
SOURCES_PER_KEY = 4


@dataclass(frozen=True)
class EntryRef:
    """Which entry: one kernel (short name and "module:qualname" identity), one device, one key and the
    dtypes of the call's tensor arguments."""

    kernel: str
    identity: str | None
    device: str
    key: tuple
    dtypes: tuple[str, ...]
    slot: int = 0  # which of the key's SOURCES_PER_KEY entries (one per kernel source and space); 0: the original name
    entry_id: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entry_id", entry_id(self.device, self.key, self.dtypes, self.slot))

    def slots(self) -> list[EntryRef]:
        """The key's entries, one per kernel source and search space that tuned it (two projects, two worktrees or
        two versions of a deploy sharing a cache, with one module:qualname; two spaces), at most SOURCES_PER_KEY:
        slot 0 first."""
        return [replace(self, slot=i) for i in range(SOURCES_PER_KEY)]

    @classmethod
    def of(cls, record: TuningRecord) -> EntryRef:
        """The entry `record` is filed as: its kernel, device, key and dtypes."""
        return cls(
            record.kernel, record.kernel_id, record.device, tuple(record.key), tuple(str(d) for d in record.dtypes)
        )

    @property
    def location(self) -> str:
        """Where the kernel's entries are grouped: its directory name on disk, its key prefix remotely."""
        return kernel_dirname(self.kernel, self.identity)

    @property
    def what(self) -> str:
        """The entry in words, for messages: "<kernel> key <key>"."""
        return f"{self.kernel} key {key_text(self.key)}"


@dataclass(frozen=True)
class StoredEntry:
    """One entry a tier holds (from `Cache.entries` or `Cache.remove`)."""

    tier: str
    location: str
    entry_id: str
    record: TuningRecord


@runtime_checkable
class Lease(Protocol):
    """A held single-flight lock on one entry; while it is held no other holder tunes that entry."""

    def renew(self) -> bool:
        """Extend the lease (a remote tier's expiry); False when it was lost to another holder."""

    def release(self) -> None:
        """Give the lease back; idempotent."""


class HeldLock:
    """A Lease over a lock with no expiry (a thread lock, a file lock the OS drops when its holder dies)."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock

    def renew(self) -> bool:
        return self._lock is not None

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


@runtime_checkable
class Cache(Protocol):
    """One tier of the tuning cache: memory, the local disk, or a remote store."""

    name: str
    persistent: bool  # outlives the process: a winner tuned here is written to it

    def get(self, entry: EntryRef) -> TuningRecord | None:
        """The schema-valid record of `entry`, or None (absent, unreadable or not a record: warned)."""

    def put(self, entry: EntryRef, record: TuningRecord) -> bool:
        """Store `record` as `entry`, replacing an older one; False when it could not (warned). An entry of a
        newer schema than this autotune's is left in place."""

    def newer_at(self, entry: EntryRef) -> bool:
        """Whether `entry` holds an entry a newer autotune wrote (a higher schema version, sharing this tier):
        never replaced, so `slot_for` puts this autotune's record in another slot of the key."""

    def lock(self, entry: EntryRef, *, timeout_s: float | None) -> Lease | None:
        """Block until this caller holds `entry`'s single-flight lease (None: no limit), or until `timeout_s`
        passes (warns naming the holder, returns None: the caller does not write this tier). Returns None, after
        one warning, when the tier cannot lock at all (a read-only directory, a server down)."""

    def lease_holder(self, entry: EntryRef) -> str | None:
        """Who holds `entry`'s single-flight lease now (a live process or node tuning it), in words; None when it
        is free (a dead holder's lease counts as free) or the tier cannot tell. Never waits."""

    def entries(self, kernel: str | None = None) -> list[StoredEntry]:
        """Every readable entry (of `kernel`: a short name, every module's kernel of it, or one "module:qualname",
        as `entries.kernel_matches` reads it; or all)."""

    def remove(self, kernel: str | None = None, key: tuple | None = None, identity: object = ANY) -> list[StoredEntry]:
        """Remove entries (of `kernel`, a short name or a "module:qualname" as `entries.kernel_matches` reads it;
        of one kernel by `identity`; of one key; or all) and return what was removed."""
