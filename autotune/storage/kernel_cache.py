"""The tuning cache of one decorated kernel: memory in front of the persistent tiers (the local disk, and a
remote store when one is configured), read through in that order and written through on a tuning.

This is where a stored record is judged usable here (`stale_reason`: same kernel, source, space, device,
Triton version, winner still in the space) and where single flight is kept: one thread per process (the
memory tier's per-entry lock) and one holder per persistent tier (its lease) tunes a key at a time; the
others wait and take its winner.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET

from ..errors import (
    AutotuneError,
    CacheEntryError,
    CallError,
    CrashWarning,
    DeviceError,
    NoValidConfigError,
    warn_at_caller,
)
from ..fork_safety import reset_in_forked_child
from ..format import plural
from ..kernel.call import Found
from ..options import env_offline
from ..options import lock_timeout_s as configured_lock_timeout_s
from ..record import SCHEMA_VERSION, PriorNote, Search, TrialStatus, TuningRecord, Where, stronger_search
from ..space.spaces import Config
from . import fingerprint
from .counters import count, count_hit, count_tuning, register
from .disk import DiskCache, KeptEntries
from .entries import MAX_ENTRY_BYTES, as_key_tuple, kernel_dirname, key_text, wanted_key_text
from .files import ENTRY_SUFFIX, is_real_dir, names_in, read_entry_bytes
from .memory import Ident, MemoryCache
from .protocol import Cache, EntryRef, Lease, StoredEntry, warn
from .remote_config import remote_tiers, required_remote_tier

__all__ = ["ForceBaseline", "KernelCache", "counted_as", "live_caches", "same_slot", "slot_for"]

logger = logging.getLogger("autotune")

_LIVE: weakref.WeakSet[KernelCache] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
# .tuning: the entries this thread is tuning now (re-entrance is an error); .forget: those whose crash notes its
# tuning asked to drop (`forget_crashes`), dropped once their record is stored
_TLS = threading.local()
_PEEK_AGAIN_S = 5.0  # a `peek` miss asks the remote tier again after this long (the disk: always)
_DEVICE_SCAN_FILES = 4096  # entry files an offline miss's diagnosis reads at most (of its kernel's directory)
_DEVICE_SCAN_BYTES = 256 << 20  # and bytes, all files together


@reset_in_forked_child
def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: a lock another thread held (a key it was tuning) would be
    held forever there. Every cache's locks start free; a key a parent thread was tuning is tuned (or read from
    disk, after the parent's entry lock is released) by the child's own call."""
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()
    for cache in list(_LIVE):
        cache.after_fork()


def _keys_this_thread_tunes() -> set:
    """The marks of the entries this thread is tuning now: a hook that re-enters one is refused, not deadlocked."""
    tuning_now: set = getattr(_TLS, "tuning", None) or set()
    _TLS.tuning = tuning_now
    return tuning_now


def _notes_to_forget() -> set:
    """The marks of the entries whose crash notes this thread's tuning asked to drop once its record is stored."""
    marks: set | None = getattr(_TLS, "forget", None)
    if marks is None:
        marks = _TLS.forget = set()
    return marks


def _what_a_launch_does(what: str, replaced: bool) -> str:
    """What a launch does about an unusable disk entry of `what` (the end of the disk tier's warning): a tuning that
    replaces it (`replaced`: a write would), or under AUTOTUNE_OFFLINE=1 an untuned launch that leaves it."""
    if env_offline():
        return f"and AUTOTUNE_OFFLINE=1 launches {what} untuned (the entry is left as it is)"
    return f"tuning {what}" + (" and replacing it" if replaced else "")


class _Seen(NamedTuple):  # a NamedTuple, not a frozen dataclass: ~7x cheaper to define at import
    """What held an entry when a get_or_tune(force=True) began: only a record other than these counts."""

    in_memory: TuningRecord | None
    in_tiers: dict[int, TuningRecord | None]  # id(tier) -> its usable record then


class ForceBaseline(NamedTuple):
    """What memory held for a key when a forced call first looked at it (`KernelCache.force_baseline`): taken
    before prune= runs, so a winner another thread stores meanwhile counts as fresh, not as one to tune again."""

    in_memory: TuningRecord | None


def same_slot(a: TuningRecord, b: TuningRecord) -> bool:
    """Whether records `a` and `b` of one key belong in one slot: tuned by the same version of the kernel (what
    `stale_reason` compares apart from the key and the winner: source, space, Triton, objective, prune='s
    candidates; the device is in the entry's name), so that two versions sharing a cache (a rolling deploy) each
    keep their own entry. A `Tuning.objective` entry's candidates are its set's: a new set replaces the key's
    entry (one set per key, the last tuned), as a launch may use any of them (`stale_reason`'s `winner_among`)."""
    return _version_of(a) == _version_of(b)


def _version_of(r: TuningRecord) -> tuple:
    candidates = None if r.objective else r.candidates
    return (r.kernel_id, r.source_hash, r.space_checksum, r.triton_version, r.objective or None, candidates)


def counted_as(e: StoredEntry) -> tuple:
    """What makes a removed entry one entry wherever it was (memory, disk, Redis): its kernel's place, device, key,
    dtypes and version (`same_slot`), not its file name: memory knows neither the slot nor the file's device name,
    and one in memory and on disk counts once."""
    record = e.record
    return (e.location, str(record.device), key_text(record.key), tuple(map(str, record.dtypes)), _version_of(record))


def slot_for(tier: Cache, entry: EntryRef, record: TuningRecord) -> EntryRef:
    """Where `record` goes in `tier` among `entry`'s slots (one per version of the kernel, `same_slot`;
    `EntryRef.slots`): the slot of its version, else an empty one, else the one with the oldest record (of its
    source and space first);
    never one a newer autotune wrote (`entry` itself when it wrote every slot: its `put` refuses, warned).
    Call it holding the lease of `entry` (slot 0)."""
    held = [(slot, r) for slot in entry.slots() if (r := tier.get(slot)) is not None or not tier.newer_at(slot)]
    if not held:
        return entry
    same = [slot for slot, r in held if r is not None and same_slot(r, record)]
    empty = [slot for slot, r in held if r is None]
    if same or empty:
        return (same or empty)[0]
    # every slot holds another version: the oldest of this source and space (another Triton, objective or prune=
    # result) goes before another source's or space's (the other half of a rolling deploy)
    ours = [(slot, r) for slot, r in held if r is not None and _source_of(r) == _source_of(record)]
    return min(ours or held, key=lambda pair: pair[1].timestamp if pair[1] is not None else 0.0)[0]


def _source_of(r: TuningRecord) -> tuple:
    return (r.kernel_id, r.source_hash, r.space_checksum)


def live_caches() -> list[KernelCache]:
    """Every KernelCache alive in this process (for `clear_autotune_cache`)."""
    with _LIVE_LOCK:
        return list(_LIVE)


class KernelCache:
    """Memory + persistent tiers of one decorated kernel. Thread-safe.

    `tiers` are the persistent tiers behind memory, first read first: by default the disk cache, then the
    remote tier when one is configured (`storage/redis_tier.py`, set up by `storage/remote_config.py`); `[]` keeps winners in memory only
    (`autotune.compat`'s `cache_results=False`).
    """

    def __init__(
        self,
        kernel_name: str,
        source_hash: str | Callable[[], str],
        space_checksum: str,
        space_contains: Callable[[Config], bool],
        identity: str | None = None,
        tiers: Sequence[Cache] | None = None,
        key_fields: tuple[str, ...] | None = None,
        device: str | None = None,
        search: Search | None = None,
        objective: str | None = None,
    ) -> None:
        self.kernel_name = kernel_name
        self.objective = objective  # the multi-call objective this kernel's entries are tuned for (None: per call)
        self.device = device  # the device fingerprint entries are filed under; None: this process's (a sweep's driver
        # writes each worker's winners under that worker's)
        self.search = search  # the search a tuning of this kernel runs: a stronger one than an entry's tunes again
        self.key_fields = key_fields  # the text of each key value (KeyBuilder.fields); None: not known
        self.identity = identity  # "module:qualname" of the kernel; None: the short name alone
        self._source_hash: str | None = source_hash if isinstance(source_hash, str) else None
        self._source_hash_of: Callable[[], str] | None = None if isinstance(source_hash, str) else source_hash
        self._source_hash_lock = threading.Lock()
        self.space_checksum = space_checksum
        self.space_contains = space_contains
        self.memory = MemoryCache(kernel_name, identity, self.dirname)
        self._tiers: list[Cache] | None = list(tiers) if tiers is not None else None
        self._disk = DiskCache(then=_what_a_launch_does)
        self._kept = KeptEntries(kernel_name)  # the disk's records of its source and space, read once per file
        self._shared_configs: dict[Config, Config] = {}  # the one object of each config the kept records hold
        if tiers is None:
            remote_tiers()  # a wrong AUTOTUNE_REMOTE_CACHE is an OptionError now, at decoration, not at a launch
        self._lock = threading.Lock()
        self._offline_missed: set[Ident] = set()
        self._peek_missed: dict[Ident, float] = {}  # (key, dtypes) -> when peek may ask the tiers again
        self._devices_seen: dict[tuple[str, tuple[str, ...]], set[str]] | None = None  # `_other_devices`'s scan
        self._forget_listeners: list[weakref.WeakMethod] = []
        # A clear is a barrier: what a lookup or a tuning begun before it found is not kept after it (`_keep`).
        self._store_lock = threading.Lock()  # a check of the clears and the stores it allows, against `forget`
        self._clears = 0  # clears of this cache so far
        self._cleared_all = 0  # `_clears` at the last clear of every key
        self._cleared_keys: dict[str, int] = {}  # key text -> `_clears` at its last clear
        self._crash_warned: set = set()  # (key, dtypes, config) said to have ended a process, warned of once
        with _LIVE_LOCK:
            _LIVE.add(self)
        register(kernel_name)

    def after_fork(self) -> None:
        """In a forked child: every lock free (their holders were the parent's other threads)."""
        self._lock, self._store_lock, self._source_hash_lock = threading.Lock(), threading.Lock(), threading.Lock()
        self.memory.after_fork()
        self._kept.after_fork()

    def __repr__(self) -> str:
        return f"KernelCache({self.kernel_name!r}, entries={len(self.memory)}, tiers={[t.name for t in self.tiers]})"

    @property
    def tiers(self) -> list[Cache]:
        """The persistent tiers behind memory, first read first: the given ones, else the local disk and the
        remote tier when one is configured (read at each miss, so a cache configured later is used)."""
        if self._tiers is not None:
            return self._tiers
        return [self._disk, *remote_tiers()]

    @property
    def source_hash(self) -> str:
        """The kernel's source hash. Given as a function, it is computed at its first use (a tuning or a lookup of
        a stored entry), when the kernel's module is fully imported: a helper defined below the kernel counts."""
        if self._source_hash is None:
            with self._source_hash_lock:
                if self._source_hash is None:
                    assert self._source_hash_of is not None  # __init__ sets it whenever no hash string was given
                    self._source_hash = self._source_hash_of()
        return self._source_hash

    @property
    def dirname(self) -> str:
        """Where this kernel's entries are grouped: its cache sub-directory, its remote key prefix."""
        return kernel_dirname(self.kernel_name, self.identity)

    def entry(self, key: tuple, dtypes: tuple[str, ...]) -> EntryRef:
        """The entry of `key` and `dtypes` on this device."""
        return EntryRef(self.kernel_name, self.identity, self.device_fingerprint(), key, tuple(dtypes))

    def device_fingerprint(self) -> str:
        """The device this cache's entries are for: the one it was made for, else this process's."""
        return self.device or fingerprint.device_fingerprint()

    def new_record(
        self,
        key: tuple,
        dtypes: tuple[str, ...],
        *,
        winner: Config,
        trials: list,
        tuning_s: float,
        candidates: str | None,
        strategy: str | None = None,
        space_size: int | None = None,
        prior: PriorNote | None = None,
        where: Where | None = None,
        remeasured: list[Config] | None = None,
        calls: list[str] | None = None,
    ) -> TuningRecord:
        """The record of a tuning of this kernel for (key, dtypes) on this machine: the one place a record's
        fingerprints are filled in, so what `stale_reason` checks is what every tuning wrote."""
        triton_version, torch_version = fingerprint.runtime_versions()
        return TuningRecord(
            kernel=self.kernel_name,
            kernel_id=self.identity,
            source_hash=self.source_hash,
            device=self.device_fingerprint(),
            triton_version=triton_version,
            torch_version=torch_version,
            space_checksum=self.space_checksum,
            key=list(key),
            dtypes=list(dtypes),
            winner=winner,
            trials=trials,
            tuning_s=tuning_s,
            candidates=candidates,
            strategy=strategy,
            space_size=space_size,
            prior=prior,
            search=self._search_of(trials),
            where=where,
            remeasured=remeasured or None,
            objective=UNSET if self.objective is None else self.objective,
            calls=UNSET if calls is None else calls,
        )

    def _search_of(self, trials: list) -> Search | None:
        """This kernel's search, with how many of `trials` it measured."""
        if self.search is None:
            return None
        measured = sum(1 for t in trials if t.status is not TrialStatus.SKIPPED)
        return msgspec.structs.replace(self.search, measured=measured)

    def clears(self) -> int:
        """How many clears this cache has had: the `since=` of `store_tuned` for a tuning that begins now."""
        return self._clears

    def _keep(self, entry: EntryRef, record: TuningRecord, since: int, tiers: Sequence[Cache]) -> int:
        """Keep `record` in memory and write it to `tiers`, unless its key was cleared after `since` (a clear is a
        barrier: a winner found or tuned by a lookup begun before it is used by that call only). Checked and
        stored under the lock `forget` takes, so a clear that returned never sees such a record stored after it.
        Returns how many of `tiers` wrote it (0 when it was not kept)."""
        with self._store_lock:
            if max(self._cleared_all, self._cleared_keys.get(key_text(entry.key), 0)) > since:
                logger.info(
                    "autotune cache: %s was cleared while it was being looked up or tuned; its winner is "
                    "used by that call only",
                    entry.what,
                )
                return 0
            self.memory.store(entry.key, entry.dtypes, record)
            return sum(bool(tier.put(slot_for(tier, entry, record), record)) for tier in tiers)

    def store_tuned(self, key: tuple, dtypes: tuple[str, ...], record: TuningRecord, since: int | None = None) -> None:
        """Keep a winner decided outside `get_or_tune` (online tuning, across calls): in memory and in every
        persistent tier (atomic writes, no single flight: two processes tuning online may both write). `since`
        (`clears()` when the tuning began): not kept when its key was cleared after that."""
        count_tuning(self.kernel_name, record)
        self._keep(self.entry(key, dtypes), record, self._clears if since is None else since, self.tiers)

    def tuned_records(self) -> list[TuningRecord]:
        """Every record of this kernel usable on this machine, whatever its key: memory first, then the local
        persistent tiers (not the remote one, whose listing scans the whole store). What a warm start seeds a
        new key's search with."""
        found: dict[tuple, TuningRecord] = {}
        for record in self.memory.records().values():
            found[(key_text(record.key), tuple(record.dtypes))] = record
        for tier in self.tiers:
            if tier.name == "remote":  # a scan of the fleet's store: never on a launch's path
                continue
            for e in self._entries_of(tier):
                r = e.record
                if self.stale_reason(r, tuple(r.key), tuple(r.dtypes), r.candidates) is None:
                    found.setdefault((key_text(r.key), tuple(r.dtypes)), r)
        return list(found.values())

    def prior_records(self) -> list[tuple[str, TuningRecord]]:
        """(tier name, record) for each record of this kernel (same identity, source and space) tuned on another
        device kind, whatever its key: what a search may start from (`search.prior`). Every tier, the remote one
        included: this is read when a key is tuned, which takes seconds anyway, never on a launch's hit path."""
        device = fingerprint.device_fingerprint()
        found = []
        for tier in self.tiers:
            for e in self._entries_of(tier):
                if e.record.device != device and self._of_this_source(e.record):
                    found.append((tier.name, e.record))
        return found

    def _entries_of(self, tier: Cache) -> list[StoredEntry]:
        """`tier`'s entries of this kernel, at least those of its source and space: of a disk tier, only those,
        each file read once while it is unchanged (`KeptEntries`); of another tier, all it lists (a remote tier:
        every entry read at each call)."""
        if isinstance(tier, DiskCache):
            return self._kept.entries(tier, self._kept_form)
        return tier.entries(self.kernel_name)

    def _kept_form(self, record: TuningRecord) -> TuningRecord | None:
        """What a warm start or a prior may use of `record`, kept for the life of the cache: None unless it is of
        this kernel, source and space (on any device); else the record with only its trials that ran, without their
        samples, each config one shared object (every key's trials repeat the space's configs), so that thousands of
        entries of hundreds of trials stay a few MB."""
        if not self._of_this_source(record):
            return None
        shared = self._shared_configs
        trials = [
            msgspec.structs.replace(t, config=shared.setdefault(t.config, t.config), samples_ms=[])
            for t in record.trials
            if t.ok
        ]
        return msgspec.structs.replace(record, trials=trials)

    def _of_this_source(self, record: TuningRecord) -> bool:
        """Whether `record` is of this kernel (name and identity), source and space, on any device."""
        return (
            record.kernel == self.kernel_name
            and record.kernel_id == self.identity
            and record.source_hash == self.source_hash
            and record.space_checksum == self.space_checksum
        )

    # -- validity ---------------------------------------------------------------------------------

    def stale_reason(
        self,
        record: TuningRecord,
        key: tuple,
        dtypes: tuple[str, ...],
        candidates: str | None = None,
        winner_among: Sequence[Config] | None = None,
    ) -> str | None:
        """Why `record` may not be used for `key` here, or None when it may. `candidates` is the checksum of
        the configs this call's prune= kept: an entry tuned among other candidates is not this call's winner.
        `winner_among` (a launch of a `Tuning.objective` kernel, whose entry was tuned among the configs prune=
        keeps for every call of a set): the configs prune= kept for this call, which must hold the winner instead."""
        if winner_among is not None:
            if record.winner not in winner_among:
                return f"prune= leaves its winner {dict(record.winner)} out for this call"
        elif record.candidates != candidates:
            return "prune= kept other configs for it"
        if (record.objective or None) != self.objective:
            tuned_for = f"objective={record.objective!r}" if record.objective else "each call (no objective)"
            return f"it was tuned for {tuned_for}, this kernel's Tuning has objective={self.objective!r}"
        if record.kernel != self.kernel_name:
            return f"it belongs to kernel {record.kernel!r}"
        if record.kernel_id != self.identity:
            return f"it belongs to another kernel named {record.kernel!r} ({record.kernel_id or 'unknown module'})"
        if record.source_hash != self.source_hash:
            return "the kernel source changed"
        device = self.device_fingerprint()
        if record.device != device:
            return f"it was tuned on {record.device!r}, this is {device!r}"
        triton_version = fingerprint.triton_version()
        if record.triton_version != triton_version:
            return f"it was tuned with Triton {record.triton_version}, this is {triton_version}"
        if record.space_checksum != self.space_checksum:
            return "the search space changed"
        if key_text(record.key) != key_text(key) or [str(d) for d in record.dtypes] != [str(d) for d in dtypes]:
            return "its key differs"
        try:
            contained = bool(self.space_contains(record.winner))
        except Exception as exc:  # a predicate that chokes on the stored config: not usable
            return f"checking its winner against the space failed ({exc})"
        if not contained:
            return f"its winner {record.winner!r} is not in the search space"
        return None

    def _usable(
        self,
        tier: Cache,
        entry: EntryRef,
        candidates: str | None,
        stale: list[tuple[str, str]] | None = None,
        weaker: list[str] | None = None,
        winner_among: Sequence[Config] | None = None,
    ) -> TuningRecord | None:
        """`tier`'s record of `entry` when it may be used here (in any of the key's slots, one per source and space),
        else None (and, when there is one, the tier's name and why its record is not usable appended to `stale`).
        With `weaker`, a record found by a weaker search than this kernel's is not used either (it is tuned again),
        and why is appended there. `winner_among`: as `stale_reason`'s."""
        reasons: list[str] = []
        for slot in entry.slots():
            record = tier.get(slot)
            if record is None:
                continue
            reason = self.stale_reason(record, entry.key, entry.dtypes, candidates, winner_among)
            if reason is not None:  # another source's or space's slot, or out of date: never this kernel's winner
                if reason not in reasons:
                    reasons.append(reason)
                continue
            if weaker is not None and self.search is not None and record.search is not None:
                stronger = stronger_search(self.search, record.search, record.space_size)
                if stronger is not None:
                    weaker.append(f"the Tuning asks for {stronger} (the {tier.name} entry)")
                    return None
            return record
        for reason in reasons:
            logger.info(
                "autotune cache: the %s entry of %s is out of date (%s); not used", tier.name, entry.what, reason
            )
            if stale is not None:
                stale.append((tier.name, reason))
        return None

    def _found(
        self, tiers: list[Cache], tier: Cache, entry: EntryRef, record: TuningRecord, since: int
    ) -> tuple[TuningRecord, Found]:
        """Use `record`, found in `tier` by a lookup begun at `since` (`clears()`): keep it in memory and copy it
        into the tiers read before `tier` (a remote hit lands on the local disk, so the next process on this
        machine reads it there), unless its key was cleared meanwhile."""
        self._keep(entry, record, since, tiers[: tiers.index(tier)])
        how: Found = "disk" if tier.name == "disk" else "remote"
        count(self.kernel_name, **{f"{how}_hits": 1})
        return record, how

    # -- memory -----------------------------------------------------------------------------------

    def remember(self, key: tuple, dtypes: tuple[str, ...], record: TuningRecord) -> None:
        """Put `record` in memory for (key, dtypes), without touching other tiers or the counters (a record
        agreed on with other ranks, say)."""
        self.memory.store(key, tuple(dtypes), record)

    def in_memory(self, key: tuple, dtypes: tuple[str, ...]) -> TuningRecord | None:
        """The record in memory for (key, dtypes), or None; reads no other tier, counts nothing."""
        return self.memory.lookup(key, tuple(dtypes))

    def records(self) -> dict[Ident, TuningRecord]:
        """A copy of what is in memory: {(key, dtypes): record}."""
        return self.memory.records()

    # -- the main entry point ---------------------------------------------------------------------

    def get_or_tune(
        self,
        key: tuple,
        dtypes: tuple[str, ...],
        tune: Callable[[], TuningRecord],
        *,
        force: bool = False,
        lock_timeout_s: float | None = None,
        candidates: str | None = None,
        baseline: ForceBaseline | None = None,
    ) -> tuple[TuningRecord, Found]:
        """The record for (key, dtypes), and where it was found: "memory", "disk", "remote" or "tuned".

        Single flight: at most one thread per process and one holder per persistent tier tunes a key at a
        time; the others wait and use its winner. `force=True` ignores records that existed before this call
        (but takes a winner another thread or process produced while this call waited); `baseline` says what
        memory held when the call began (`force_baseline`), else it is read now. If `tune()` raises,
        nothing is stored, the leases are released and the exception propagates; when it is a verdict on the
        configs or the device (`_tune_and_store`), the threads that waited for that tuning raise it too (a fresh
        exception of its type, chained to it) instead of tuning again, and a call after it tunes anew.
        """
        entry = self.entry(key, dtypes)
        tiers = self.tiers  # read once: the whole call works with one list (a remote set meanwhile waits)
        since = self._clears  # a clear after this: what this lookup finds is used by this call only
        if not force:
            found = self._lookup(tiers, entry, candidates, since)
            if found is not None:
                return found
        tuning_now = _keys_this_thread_tunes()
        self._refuse_reentry(entry, tuning_now)
        # With force, only a winner produced while this call waited counts: one other than what each tier held
        # when this call started (compared by content, not by timestamps, which a skewed clock would make lie).
        seen = None
        if force:
            in_memory = (baseline or self.force_baseline(entry.key, entry.dtypes)).in_memory
            seen = _Seen(in_memory, {id(tier): self._usable(tier, entry, candidates) for tier in tiers})
        return self._get_or_tune_leased(tiers, entry, tune, tuning_now, seen, lock_timeout_s, candidates)

    def force_baseline(self, key: tuple, dtypes: tuple[str, ...]) -> ForceBaseline:
        """What memory holds for (key, dtypes) now: a forced call's `get_or_tune(baseline=)`, taken at its start."""
        return ForceBaseline(self.memory.lookup(key, dtypes))

    def _marks(self, entry: EntryRef) -> tuple[tuple, tuple]:
        """What a tuning of `entry` marks as tuned by this thread: in this cache, and in any of the same kernel."""
        return (id(self), entry), (entry.location, entry.entry_id)

    def _refuse_reentry(self, entry: EntryRef, tuning_now: set) -> None:
        """A hook of this thread's tuning of `entry` launched the same kernel and key, through this cache or another
        of the same kernel: waiting for its lease would hang, so it is an error."""
        if any(mark in tuning_now for mark in self._marks(entry)):
            raise AutotuneError(
                f"{entry.what} is already being tuned by this thread: its own setup=, verify=, prune= or do_bench= "
                "launched the autotuned kernel; launch the plain @triton.jit kernel there (kernel.fn) or compute "
                "the reference another way"
            )

    def _get_or_tune_leased(
        self,
        tiers: list[Cache],
        entry: EntryRef,
        tune: Callable[[], TuningRecord],
        tuning_now: set,
        seen: _Seen | None,
        lock_timeout_s: float | None,
        candidates: str | None,
    ) -> tuple[TuningRecord, Found]:
        memory_lease = self.memory.lock(entry)
        since = self._clears  # a clear while this thread waited for the lease came before what it reads now
        leases: list[tuple[Cache, Lease]] = []
        try:
            record = self.memory.lookup(entry.key, entry.dtypes)
            if record is not None and (seen is None or record is not seen.in_memory):
                count_hit(self.kernel_name)
                return record, "memory"
            timeout_s = lock_timeout_s if lock_timeout_s is not None else configured_lock_timeout_s()
            weaker: list[str] = []  # why an entry found by a weaker search than this kernel's is tuned again
            found = self._lease_tiers(tiers, entry, candidates, timeout_s, seen, leases, weaker)
            if found is not None:
                return self._found(tiers, found[0], entry, found[1], since)
            failed = memory_lease.failure(candidates)  # a tuning this thread waited for failed: its verdict
            if failed is not None:
                raise _shared_verdict(failed, entry)
            if weaker and seen is None:
                logger.info("autotune cache: tuning %s again: %s", entry.what, weaker[0])
            return self._tune_and_store(tune, tuning_now, entry, candidates, since, [t for t, _ in leases]), "tuned"
        finally:
            for _, lease in reversed(leases):
                lease.release()
            memory_lease.release()

    def _lease_tiers(
        self,
        tiers: list[Cache],
        entry: EntryRef,
        candidates: str | None,
        timeout_s: float,
        seen: _Seen | None,
        leases: list[tuple[Cache, Lease]],
        weaker: list[str],
    ) -> tuple[Cache, TuningRecord] | None:
        """Take each tier's lease in turn (kept in `leases`) and read it again: the first tier with a usable record
        (with `seen`, force: one other than the tier held at the start) and that record, or None: tune."""
        for tier in tiers:
            lease = tier.lock(entry, timeout_s=timeout_s)
            if lease is None:
                continue  # warned by the tier: tune without writing to it
            leases.append((tier, lease))
            record = self._usable(tier, entry, candidates, weaker=weaker)
            if record is not None and (seen is None or record != seen.in_tiers.get(id(tier))):
                return tier, record
        return None

    def _tune_and_store(
        self,
        tune: Callable[[], TuningRecord],
        tuning_now: set,
        entry: EntryRef,
        candidates: str | None,
        since: int,
        leased: list[Cache],
    ) -> TuningRecord:
        """Tune `entry` (holding its memory lock) and store the record. A verdict on the configs (every config
        failed, not all with one run error, which the call may cause: `NoValidConfigError.of_the_call`) or on the
        device (`DeviceError`) goes to the threads waiting for this tuning; any other error (its call's, a failed
        agreement of ranks, Ctrl-C) is this thread's own. The crash notes the tuning asked to drop
        (`forget_crashes`) are dropped only once a persistent tier holds the record: a store that fails, or a
        process that dies first, keeps them."""
        marks = self._marks(entry)
        to_forget = _notes_to_forget()
        try:
            try:
                record = self._tuned_marked(tune, tuning_now, marks)
            except (NoValidConfigError, DeviceError) as exc:
                if not (isinstance(exc, NoValidConfigError) and exc.of_the_call):  # the configs' or the device's
                    self.memory.tuning_failed(entry, candidates, exc)
                raise
            written = self._store(entry, record, candidates, since, leased)
            if marks[0] in to_forget and written:
                self._forget_notes(entry.key, entry.dtypes)
            return record
        finally:
            to_forget.discard(marks[0])

    def _tuned_marked(
        self, tune: Callable[[], TuningRecord], tuning_now: set, marks: tuple[tuple, tuple]
    ) -> TuningRecord:
        tuning_now.update(marks)
        try:
            return self._tuned(tune)
        finally:
            tuning_now.difference_update(marks)

    def _lookup(
        self, tiers: list[Cache], entry: EntryRef, candidates: str | None, since: int
    ) -> tuple[TuningRecord, Found] | None:
        """A usable record of `entry` in memory or a persistent tier, without waiting for any lock."""
        record = self.memory.lookup(entry.key, entry.dtypes)
        if record is not None:
            count_hit(self.kernel_name)
            return record, "memory"
        for tier in tiers:
            record = self._usable(tier, entry, candidates, weaker=[])
            if record is not None:
                return self._found(tiers, tier, entry, record, since)
        return None

    def _tuned(self, tune: Callable[[], TuningRecord]) -> TuningRecord:
        try:
            record = tune()
        except NoValidConfigError as exc:  # a tuning that found nothing is still a miss and a tuning
            failed = sum(1 for t in exc.trials if t.status is not TrialStatus.SKIPPED)
            count(self.kernel_name, misses=1, failed_tunings=1, failed_configs=failed)
            raise
        if not isinstance(record, TuningRecord):
            raise TypeError(f"tune() must return a TuningRecord, got {type(record).__name__}")
        count_tuning(self.kernel_name, record)
        return record

    def _store(
        self,
        entry: EntryRef,
        record: TuningRecord,
        candidates: str | None,
        since: int,
        leased: list[Cache],
    ) -> int:
        """Keep a new winner in memory and the tiers whose lease this call holds (beside an entry of another search
        space: `slot_for`); how many of them wrote it."""
        mismatch = self.stale_reason(record, entry.key, entry.dtypes, candidates)
        if mismatch is not None:
            warn(
                f"autotune cache: the record tuned for {entry.what} would not be accepted when read back "
                f"({mismatch}); it is used now but will be tuned again by the next process"
            )
        return self._keep(entry, record, since, leased)

    # -- offline mode, clearing ---------------------------------------------------------------------

    def peek(
        self,
        key: tuple,
        dtypes: tuple[str, ...],
        candidates: str | None = None,
        stale: list[str] | None = None,
        *,
        judge_search: bool = False,
        winner_among: Sequence[Config] | None = None,
    ) -> TuningRecord | None:
        """The record in memory, else a usable one of a persistent tier (then kept in memory), else None;
        never tunes. Counts hits. For AUTOTUNE_OFFLINE, whose warning says why a stored entry was not used: each
        tier's reason is appended to `stale` ("the disk entry is out of date (the kernel source changed)").
        `judge_search` (online tuning, which tunes on a None): an entry found by a weaker search than this
        kernel's is not used either, as in `get_or_tune`. `winner_among`: as `stale_reason`'s (then `candidates`
        is not compared)."""
        record = self.memory.lookup(key, tuple(dtypes))
        if record is not None:
            count_hit(self.kernel_name)
            return record
        entry = self.entry(key, dtypes)
        since = self._clears
        now = time.monotonic()
        # The remote tier was asked a moment ago: an offline launch does not pay its round trip again at once.
        skip_remote = now < self._peek_missed.get((entry.key, entry.dtypes), 0.0)
        tiers = self.tiers
        outdated: list[tuple[str, str]] = []
        try:
            for tier in tiers:
                if skip_remote and tier.name == "remote":
                    continue
                weaker: list[str] | None = [] if judge_search else None
                record = self._usable(tier, entry, candidates, outdated, weaker, winner_among)
                if weaker:
                    logger.info("autotune cache: tuning %s again: %s", entry.what, weaker[0])
                if record is not None:
                    return self._found(tiers, tier, entry, record, since)[0]
        finally:
            if stale is not None:
                stale.extend(f"the {tier_name} entry is out of date ({reason})" for tier_name, reason in outdated)
        if stale is not None and (key, tuple(dtypes)) not in self._offline_missed:  # an offline miss, warned once
            stale.extend(self._other_devices(entry))
        if not skip_remote:
            with self._lock:
                self._peek_missed[(entry.key, entry.dtypes)] = now + _PEEK_AGAIN_S
        return None

    def _other_devices(self, entry: EntryRef) -> list[str]:
        """For an offline miss's warning: the devices whose entries of `entry`'s key and dtypes this kernel's disk
        directory holds (another GPU model, or AUTOTUNE_DEVICE_KIND set where they were tuned), said in words; []
        for none. The directory is read once per cache, on its first offline miss (`_devices_of_keys`)."""
        with self._lock:
            seen = self._devices_seen
        if seen is None:
            disk = next((t for t in self.tiers if isinstance(t, DiskCache)), None)
            seen = {} if disk is None else _devices_of_keys(disk.path(entry).parent, self.identity)
            with self._lock:
                self._devices_seen = seen
        mine = self.device_fingerprint()
        devices = sorted(seen.get((key_text(entry.key), tuple(entry.dtypes)), set()) - {mine})
        if not devices:
            return []
        return [
            f"entries of this key exist for device {', '.join(map(repr, devices))}, this process is "
            f"{mine!r}: tune on this device, or set AUTOTUNE_DEVICE_KIND where that is the same kind of device"
        ]

    def calls_changed(self, key: tuple, dtypes: tuple[str, ...], candidates: str | None, calls: Sequence[str]) -> bool:
        """Whether the usable entry of (key, dtypes) was tuned for a set of calls (`Tuning.objective`) other than
        `calls`, in any order: a sweep or warmup of another set tunes the key again (logged). Counts nothing."""
        entry = self.entry(key, dtypes)
        record = self.memory.lookup(entry.key, entry.dtypes)
        for tier in self.tiers:
            if record is not None:
                break
            record = self._usable(tier, entry, candidates)
        if record is None or sorted(record.calls or ()) == sorted(calls):
            return False
        logger.info(
            "autotune cache: tuning %s again: its entry was tuned for other calls (%s)",
            entry.what,
            "; ".join(record.calls or ()) or "one call at a time",
        )
        return True

    @property
    def journal_id(self) -> str:
        """The kernel as the crash journal names it: its identity, else its short name."""
        return self.identity or self.kernel_name

    def crash_journal(
        self, key: tuple, dtypes: tuple[str, ...], *, force: bool
    ) -> tuple[Callable[[Config], AbstractContextManager[Any]] | None, dict[Config, str]]:
        """The crash journal's note around each in-process measurement of (key, dtypes), and the configs noted as
        having ended a process (the caller warns of those it may try: `warn_crashes`); under `force` none (the notes are dropped: they are tried again). A cache without tiers (compat's
        cache_results=False) writes nothing to a directory: no journal (None, {})."""
        if not self.tiers:
            return None, {}
        from . import journal  # not at import: only a tuning (or a clear) reads or writes the crash journal

        if force:
            journal.forget(self.journal_id, key, dtypes)
        crashed = {} if force else journal.crashed(self.journal_id, key, dtypes)
        return functools.partial(journal.measuring, self.journal_id, key, dtypes), crashed

    def warn_crashes(
        self, key: tuple, dtypes: tuple[str, ...], crashed: Mapping[Config, str], *, isolated: bool
    ) -> None:
        """Warn once per process of each config of `crashed` (noted as having ended a process), saying what this
        tuning does with it: recorded as crashed without a run, or (`isolated`: trials run in a worker process)
        tried again there, where a crash ends only the worker."""
        for config, why in crashed.items():
            if (key, dtypes, config) in self._crash_warned:
                continue
            self._crash_warned.add((key, dtypes, config))
            if isolated:  # the note's "not tried again until ..." is said of in-process tunings
                from . import journal

                what = why.removesuffix(f"; {journal.NOT_TRIED_AGAIN}")
                then = (
                    "Trials run in a worker process here: it is tried again there like any other config, where a "
                    "crash ends only the worker"
                )
            else:
                what, then = why, "It is recorded as crashed and the other configs are tuned"
            warn_at_caller(
                f"autotune: {self.kernel_name} config {dict(config)} for key={key}: {what}. {then}", CrashWarning
            )

    def forget_crashes(self, key: tuple, dtypes: tuple[str, ...]) -> None:
        """Drop the crash journal's notes of (key, dtypes) once a record holds them: asked by this thread's tuning
        inside `get_or_tune`, once a persistent tier holds that record (`_tune_and_store`); otherwise now."""
        mark = self._marks(self.entry(key, dtypes))[0]
        if mark in _keys_this_thread_tunes():
            _notes_to_forget().add(mark)
            return
        self._forget_notes(key, dtypes)

    def _forget_notes(self, key: tuple, dtypes: tuple[str, ...]) -> None:
        from . import journal

        journal.forget(self.journal_id, key, dtypes)

    def count_offline_miss(self, key: tuple, dtypes: tuple[str, ...]) -> bool:
        """Count a miss in stats (offline mode); True the first time for (key, dtypes), so the caller warns
        once per key."""
        ident: Ident = (key, tuple(dtypes))
        count(self.kernel_name, misses=1)
        with self._lock:
            first = ident not in self._offline_missed
            self._offline_missed.add(ident)
        return first

    def on_forget(self, method: Callable[[], object]) -> None:
        """Call the bound `method` after every `forget` (a clear by object, by name or of everything): for a view
        that mirrors this memory, such as `autotune.compat`'s Triton-style `cache` dict. Held weakly, so the
        listener's object is not kept alive by its cache."""
        self._forget_listeners.append(weakref.WeakMethod(method))

    def forget(self, key: tuple | None = None) -> list[StoredEntry]:
        """Drop memory records (of `key`, every dtype variant, or all) and return them; other tiers keep theirs.
        A lookup or tuning of a key begun before this keeps nothing it finds (`_keep`). The `on_forget` listeners
        are told afterwards."""
        wanted = wanted_key_text(key)
        with self._lock:
            self._offline_missed = {i for i in self._offline_missed if wanted is not None and key_text(i[0]) != wanted}
            self._devices_seen = None  # a clear may have removed entries: the next offline miss reads again
        with self._store_lock:  # counted before the tiers are cleared: a lookup or tuning begun earlier keeps nothing
            self._clears += 1
            if wanted is None:
                self._cleared_all = self._clears
            else:
                self._cleared_keys[wanted] = self._clears
            removed = self.memory.remove(key=key)
        for ref in list(self._forget_listeners):
            listener = ref()
            if listener is not None:
                listener()
        return removed

    def _check_key_arity(self, key: tuple) -> None:
        """A clear's `key` with another number of values than the kernel's keys have matches nothing: a CallError
        naming the key's fields, not a silent 0."""
        fields = self.key_fields
        if fields is None or len(key) == len(fields):
            return
        name, got = self.kernel_name, plural(len(key), "value", "values")
        if not fields:
            raise CallError(
                f"clear_autotune_cache(kernel={name}, key={key!r}): {got}, but {name} was decorated with "
                f"key=None, one entry for every call; pass key=() or leave key= out"
            )
        raise CallError(
            f"clear_autotune_cache(kernel={name}, key={key!r}): {got}, but {name}'s key={list(fields)!r} "
            f"has {len(fields)}; pass key= as the tuple that key computes, in that order (or leave key= "
            "out to clear every key of the kernel)"
        )

    def clear(self, key: tuple | None = None, *, remote: bool = False) -> int:
        """Remove this kernel's entries from memory and disk, and from the remote tier with `remote=True` (of
        `key`, every dtype variant and device, or all); return how many distinct entries were removed (one in
        memory and on disk counts once). `remote=True` tries the remote tier now, whatever the pause after an
        outage, and with no remote tier configured raises OptionError before clearing anything."""
        if key is not None:
            wanted_key_text(key)  # a value that cannot be a key is an error before anything is cleared
            key = as_key_tuple(key)
            self._check_key_arity(key)
        tiers = [tier for tier in self.tiers if remote or tier.name != "remote"]
        if remote and not any(tier.name == "remote" for tier in tiers):
            tiers.append(required_remote_tier("clear_autotune_cache(..., remote=True)"))
        removed = {counted_as(e) for e in self.forget(key)}
        from ..keys import normalise_key
        from . import journal

        # configs that ended a process are tried again (the notes are filed under the key as a call normalises it)
        journal.forget(self.journal_id, None if key is None else normalise_key(key))
        # the remote tier first: a lookup copies what it finds into the tiers before it (remote to disk), never after
        for tier in reversed(tiers):
            removed |= {counted_as(e) for e in tier.remove(self.kernel_name, key, identity=self.identity)}
        # a barrier: what a lookup begun while the tiers were being cleared kept in memory goes too
        removed |= {counted_as(e) for e in self.forget(key)}
        return len(removed)


def _shared_verdict(error: AutotuneError, entry: EntryRef) -> AutotuneError:
    """What a thread that waited for another's tuning of `entry` raises when that tuning failed (`error`): a fresh
    exception of its type and text, chained to it, so each thread's traceback is its own; else `error` itself."""
    logger.info("autotune cache: the tuning of %s this call waited for failed; raising its error", entry.what)
    try:
        fresh = copy.copy(error)  # its type built on its args, then its attributes (a NoValidConfigError's trials)
    except Exception:  # a subclass whose constructor takes other arguments: the one object (as concurrent.futures)
        return error
    fresh.__cause__ = error
    return fresh


class _EntryOwner(msgspec.Struct):
    """The fields of a stored entry that say whose it is; the others (trials: most of its bytes) are skipped."""

    schema_version: Any = None
    kernel_id: Any = None
    device: Any = None
    key: Any = None
    dtypes: Any = None


def _devices_of_keys(directory: Path, identity: str | None) -> dict[tuple[str, tuple[str, ...]], set[str]]:
    """(key text, dtypes) -> the devices that `identity`'s entries in `directory` are for. Reads at most
    `_DEVICE_SCAN_FILES` entry files and `_DEVICE_SCAN_BYTES` bytes; a link is never followed, and a file that is
    unreadable or not an entry is skipped (the listing's business, not this diagnosis's)."""
    out: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    if not is_real_dir(directory):
        return out
    budget = _DEVICE_SCAN_BYTES
    for path in _entry_names(directory):
        try:
            data = read_entry_bytes(path, min(budget, MAX_ENTRY_BYTES))
        except (OSError, CacheEntryError):
            continue
        budget -= len(data)
        try:
            owner = msgspec.json.decode(data, type=_EntryOwner)
            usable = owner.schema_version == SCHEMA_VERSION and owner.kernel_id == identity
            if (
                usable
                and isinstance(owner.device, str)
                and isinstance(owner.key, list)
                and isinstance(owner.dtypes, list)
            ):
                out.setdefault((key_text(owner.key), tuple(map(str, owner.dtypes))), set()).add(owner.device)
        except (msgspec.DecodeError, RecursionError, ValueError, TypeError):  # a diagnosis never fails a call
            continue
        if budget <= 0:
            break
    return out


def _entry_names(directory: Path) -> list[Path]:
    """Up to `_DEVICE_SCAN_FILES` paths in `directory` named like an entry file (one listing, no stat per name)."""
    names = names_in(directory, lambda name: name.endswith(ENTRY_SUFFIX), listed=4 * _DEVICE_SCAN_FILES)
    return [directory / name for name in names[:_DEVICE_SCAN_FILES]]
