"""The cache as tiers behind the `Cache` protocol: memory, the disk, and a third tier plugged in the way a remote
backend is. Real files and threads; the third tier is a plain dict, so what is asserted is the orchestration."""

from __future__ import annotations

import threading
import warnings

import pytest
from test_cache import BLOCKS, DT, Tuner

from autotune.errors import CacheWarning
from autotune.record import TuningRecord
from autotune.storage import Cache, DiskCache, EntryRef, KernelCache, MemoryCache, StoredEntry, disk_entries, stats
from autotune.storage.protocol import ANY


class DictTier:
    """A persistent tier in a dict shared by 'processes' (KernelCache objects): what a Redis backend implements."""

    name = "remote"
    persistent = True

    def __init__(self, lockable: bool = True) -> None:
        self.data: dict[tuple[str, str], TuningRecord] = {}
        self.lockable = lockable
        self.locks: dict[tuple[str, str], threading.Lock] = {}
        self.puts = 0

    def get(self, entry: EntryRef) -> TuningRecord | None:
        return self.data.get((entry.location, entry.entry_id))

    def put(self, entry: EntryRef, record: TuningRecord) -> bool:
        self.puts += 1
        self.data[(entry.location, entry.entry_id)] = record
        return True

    def newer_at(self, entry: EntryRef) -> bool:
        return False

    def lease_holder(self, entry: EntryRef) -> str | None:
        lock = self.locks.get((entry.location, entry.entry_id))
        return "a thread of this test" if lock is not None and lock.locked() else None

    def lock(self, entry: EntryRef, *, timeout_s: float | None):
        if not self.lockable:
            return None
        lock = self.locks.setdefault((entry.location, entry.entry_id), threading.Lock())
        lock.acquire()

        class Held:
            def renew(self) -> bool:
                return True

            def release(self) -> None:
                lock.release()

        return Held()

    def entries(self, kernel: str | None = None) -> list[StoredEntry]:
        return [
            StoredEntry(self.name, loc, eid, r)
            for (loc, eid), r in self.data.items()
            if kernel is None or r.kernel == kernel
        ]

    def remove(self, kernel=None, key=None, identity: object = ANY) -> list[StoredEntry]:
        gone = [e for e in self.entries(kernel) if key is None or tuple(e.record.key) == tuple(key)]
        for e in gone:
            del self.data[(e.location, e.entry_id)]
        return gone


def cache_with(*tiers, name="add", src="src-1") -> KernelCache:
    return KernelCache(name, src, "space-1", lambda cfg: cfg.get("BLOCK") in BLOCKS, tiers=list(tiers))


def test_backends_implement_the_protocol():
    assert isinstance(DiskCache(), Cache) and isinstance(MemoryCache("add"), Cache)
    assert isinstance(DictTier(), Cache)


def test_a_tuning_writes_through_every_tier_and_a_new_process_reads_the_remote_one(tmp_path):
    remote = DictTier()
    first = cache_with(DiskCache(tmp_path / "node-a"), remote)
    tuner = Tuner((1,))
    record, how = first.get_or_tune((1,), DT, tuner)
    assert (how, tuner.calls) == ("tuned", 1)
    assert len(remote.data) == 1 and len(disk_entries(directory=tmp_path / "node-a")) == 1
    # Another node: its own disk is empty, the remote tier has the winner; it lands on that node's disk too.
    second = cache_with(DiskCache(tmp_path / "node-b"), remote)
    got, how = second.get_or_tune((1,), DT, Tuner((1,), winner=128))
    assert how == "remote" and got.winner == record.winner
    assert [e.record.winner for e in disk_entries(directory=tmp_path / "node-b")] == [record.winner]
    assert stats()["add"]["remote_hits"] == 1
    # A third object on node b now finds it on its disk first.
    third = cache_with(DiskCache(tmp_path / "node-b"), remote)
    assert third.get_or_tune((1,), DT, Tuner((1,)))[1] == "disk"


def test_a_stale_remote_record_is_not_used(tmp_path):
    remote = DictTier()
    old = cache_with(DiskCache(tmp_path / "a"), remote, src="src-0")
    old.get_or_tune((1,), DT, Tuner((1,), src="src-0"))  # a record of an older kernel source
    fresh = cache_with(DiskCache(tmp_path / "b"), remote)
    tuner = Tuner((1,))
    assert fresh.get_or_tune((1,), DT, tuner)[1] == "tuned" and tuner.calls == 1
    # the new source's winner is filed beside the old source's (one entry per kernel source, #40 item 12)
    assert sorted(r.source_hash for r in remote.data.values()) == ["src-0", "src-1"]


def test_a_tier_that_cannot_lock_is_not_written_but_the_others_are(tmp_path):
    remote = DictTier(lockable=False)
    kc = cache_with(DiskCache(tmp_path), remote)
    assert kc.get_or_tune((1,), DT, Tuner((1,)))[1] == "tuned"
    assert remote.data == {} and len(disk_entries(directory=tmp_path)) == 1


def test_memory_only_cache_touches_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    kc = cache_with()  # compat's cache_results=False
    tuner = Tuner((1,))
    assert kc.get_or_tune((1,), DT, tuner)[1] == "tuned"
    assert kc.get_or_tune((1,), DT, tuner)[1] == "memory" and tuner.calls == 1
    assert list(tmp_path.iterdir()) == []


def test_threads_tune_once_across_memory_and_tiers(tmp_path):
    remote = DictTier()
    kc = cache_with(DiskCache(tmp_path), remote)
    tuner = Tuner((1,), delay=0.5)
    results = []
    barrier = threading.Barrier(6)  # all six ask at once, while the first one's tuning is under way

    def ask() -> None:
        barrier.wait()
        results.append(kc.get_or_tune((1,), DT, tuner)[1])

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tuner.calls == 1 and sorted(results) == ["memory"] * 5 + ["tuned"]
    assert remote.puts == 1


def test_clear_leaves_the_fleet_s_tier_unless_asked(tmp_path):
    remote = DictTier()
    kc = cache_with(DiskCache(tmp_path), remote)
    kc.get_or_tune((1,), DT, Tuner((1,)))
    kc.get_or_tune((2,), DT, Tuner((2,)))
    assert kc.clear((1,)) == 1  # this node's memory and disk copies of one entry count once
    assert sorted(tuple(r.key) for r in remote.data.values()) == [(1,), (2,)]
    assert [tuple(e.record.key) for e in disk_entries(directory=tmp_path)] == [(2,)]
    assert kc.clear((2,), remote=True) == 1  # memory, disk and remote copies
    assert [tuple(r.key) for r in remote.data.values()] == [(1,)]
    assert disk_entries(directory=tmp_path) == []


def test_a_newer_schema_entry_on_disk_is_left_in_place(tmp_path):
    disk = DiskCache(tmp_path)
    kc = cache_with(disk)
    entry = kc.entry((1,), DT)
    path = disk.path(entry)
    path.parent.mkdir(parents=True)
    path.write_text('{"schema_version": 999, "kernel": "add"}')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert kc.get_or_tune((1,), DT, Tuner((1,)))[1] == "tuned"
    assert not any(issubclass(w.category, CacheWarning) for w in caught)  # a newer autotune's entry is no mistake
    assert path.read_text() == '{"schema_version": 999, "kernel": "add"}'  # never written over
    assert disk.path(entry.slots()[1]).exists()  # this version's winner went to the key's next slot


@pytest.mark.parametrize("how", ["memory", "disk"])
def test_force_retunes_over_an_older_winner_in_memory_or_on_disk(tmp_path, how):
    disk = DiskCache(tmp_path)
    kc = cache_with(disk)
    kc.get_or_tune((1,), DT, Tuner((1,), winner=32))
    if how == "disk":
        kc = cache_with(disk)  # a new process: nothing in memory
    tuner = Tuner((1,), winner=128)
    record, got = kc.get_or_tune((1,), DT, tuner, force=True)
    assert (got, tuner.calls, record.winner["BLOCK"]) == ("tuned", 1, 128)
