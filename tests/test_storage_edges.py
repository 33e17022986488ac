"""Edges of the storage layer that the rest of the suite left open (found by mutation testing of
`autotune/storage/`): real files, real threads and a real child process; records made by hand."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from cache_files import file_signature, write_record

from autotune.errors import CacheEntryError, CacheWarning
from autotune.options import cache_dir
from autotune.record import Trial, TrialStatus, TuningRecord
from autotune.space import Config
from autotune.storage import (
    DiskCache,
    EntryRef,
    KernelCache,
    StoredEntry,
    clear_autotune_cache,
    device_fingerprint,
    disk_entries,
    runtime_versions,
)
from autotune.storage import files as files_mod
from autotune.storage.entries import record_json
from autotune.storage.protocol import ANY, HeldLock

DT = ("torch.float32", "torch.float32", "torch.float32")
BLOCKS = (32, 64, 128)


def make_record(
    key: tuple, winner: int = 64, *, kernel: str = "add", src: str = "src-1", kernel_id: str | None = None
) -> TuningRecord:
    """A record of `kernel` for `key` on this device, as a tuning with `src` and space "space-1" would write it."""
    triton_version, torch_version = runtime_versions()
    trials = [
        Trial(config=Config(BLOCK=winner), status=TrialStatus.OK, median_ms=1.0, min_ms=0.9, samples_ms=[1.0, 1.1, 0.9])
    ]
    return TuningRecord(
        kernel=kernel,
        kernel_id=kernel_id,
        source_hash=src,
        device=device_fingerprint(),
        triton_version=triton_version,
        torch_version=torch_version,
        space_checksum="space-1",
        key=list(key),
        dtypes=list(DT),
        winner=Config(BLOCK=winner),
        trials=trials,
        tuning_s=0.25,
    )


class Tuner:
    """A tune() callable that counts its calls."""

    def __init__(self, key: tuple, winner: int = 64) -> None:
        self.key, self.winner, self.calls = key, winner, 0

    def __call__(self) -> TuningRecord:
        self.calls += 1
        return make_record(self.key, self.winner)


def new_cache(contains=lambda cfg: cfg.get("BLOCK") in BLOCKS, tiers=None) -> KernelCache:
    return KernelCache("add", "src-1", "space-1", contains, tiers=tiers)


# ------------------------------------------------------------------------------------------- reading files


def test_a_link_named_like_an_entry_is_never_followed_even_to_a_valid_entry(tmp_path: Path) -> None:
    """A symbolic link at an entry's path is not read (O_NOFOLLOW), not listed and not removed by a clear, even
    when it points at a valid entry elsewhere: the cache never reads or deletes through a link."""
    elsewhere = write_record(make_record((7,)), tmp_path / "elsewhere")
    link = files_mod.record_path(make_record((7,)))
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)
    tuner = Tuner((7,), winner=128)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)  # the link is warned about as "not an entry"
        record, how = new_cache().get_or_tune((7,), DT, tuner)
    assert (how, tuner.calls, record.winner) == ("tuned", 1, Config(BLOCK=128))
    # the tuning replaced the link by a regular file (os.replace onto the name); the target is untouched
    assert not link.is_symlink() and elsewhere.exists()
    assert json.loads(elsewhere.read_text())["winner"] == {"BLOCK": 64}


def test_a_link_named_like_an_entry_is_neither_listed_nor_cleared(tmp_path: Path) -> None:
    """`disk_entries` (the CLI's listing, export) and `clear_autotune_cache` see only regular files named like an
    entry: a link to a valid entry is not an entry of this cache, so it is not listed, not counted, not removed."""
    clear_autotune_cache()  # what earlier tests' kernels keep in memory counts too: start from none
    elsewhere = write_record(make_record((7,)), tmp_path / "elsewhere")
    link = files_mod.record_path(make_record((7,)))
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)
    assert disk_entries() == []
    assert clear_autotune_cache() == 0
    assert link.is_symlink() and elsewhere.exists()


def test_an_entry_of_exactly_the_size_limit_is_read_and_one_byte_more_is_not(tmp_path: Path) -> None:
    """`read_entry_bytes` reads *at most* `limit` bytes: a file of exactly `limit` bytes is read whole, one of
    `limit + 1` is refused (both the size check and the read loop's own bound)."""
    path = tmp_path / "entry.json"
    path.write_bytes(b"x" * 100)
    assert files_mod.read_entry_bytes(path, limit=100) == b"x" * 100
    with pytest.raises(CacheEntryError, match="over the 99-byte limit"):
        files_mod.read_entry_bytes(path, limit=99)


def test_hidden_directories_in_the_cache_are_not_kernel_directories() -> None:
    """A kernel's directory never starts with a dot (`kernel_dirname`), so a dot-directory in the cache (a sync
    tool's, a trash folder) is not listed or cleared, even when it holds a file that reads as an entry."""
    clear_autotune_cache()  # what earlier tests' kernels keep in memory counts too: start from none
    real = write_record(make_record((7,)))
    hidden = Path(cache_dir()) / ".stash" / real.name
    hidden.parent.mkdir()
    hidden.write_bytes(real.read_bytes())
    assert [e.path for e in disk_entries()] == [real]
    assert clear_autotune_cache() == 1
    assert hidden.exists() and not real.exists()


def test_removing_a_file_that_is_already_gone_is_not_counted(tmp_path: Path) -> None:
    """`remove_file` answers whether *this* call removed the file: one another process removed first (a clear
    racing a clear) is not counted in `clear_autotune_cache`'s total."""
    path = tmp_path / "gone.json"
    path.write_text("{}")
    assert files_mod.remove_file(path) is True
    assert files_mod.remove_file(path) is False


# ------------------------------------------------------------------------------------------- writing files


def test_a_write_fsyncs_the_temporary_file_before_renaming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`atomic_write` flushes the data of the temporary file to disk before `os.replace` puts it at the entry's
    name, so a crash after the rename cannot leave an empty or partial entry. Observed through the fds fsync is
    called on: one of them is the temporary file, while the entry's name does not yet hold the new bytes."""
    path = Path(cache_dir()) / "k" / ("0" * 32 + ".json")
    synced: list[tuple[str, bool]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), path.exists()))
        real_fsync(fd)

    monkeypatch.setattr(files_mod.os, "fsync", fsync)
    files_mod.atomic_write(path, b"new bytes")
    assert path.read_bytes() == b"new bytes"
    tmp_synced = [(name, existed) for name, existed in synced if name.endswith(".tmp")]
    assert len(tmp_synced) == 1
    name, existed = tmp_synced[0]
    assert Path(name).parent == path.parent and Path(name).name.startswith("." + path.name + ".")
    assert not existed


def test_entries_are_created_with_the_permissions_the_umask_allows() -> None:
    """An entry is created as any file the user writes (0o666 less the umask), not private to its writer (what
    `tempfile.mkstemp` would give): a cache directory shared by a group of users stays readable to all of them."""
    old = os.umask(0o022)
    try:
        path = write_record(make_record((7,)))
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


_CHILD = """
import os, sys
from pathlib import Path
from autotune.storage import files

def dies_halfway(fd, data):
    os.write(fd, data[: len(data) // 2])
    os._exit(3)          # killed mid-write: no cleanup runs

files.write_all = dies_halfway
files.atomic_write(Path(sys.argv[1]), b'{"half": "of an entry"}')
"""


def test_a_writer_killed_mid_write_leaves_debris_that_the_next_write_on_this_host_sweeps(tmp_path: Path) -> None:
    """A process killed while writing leaves its temporary file, never a half entry; its name carries this host's
    tag and the writer's pid, so the next write in that directory on this host removes it at once (the writer
    is dead), without waiting for it to age."""
    d = Path(cache_dir()) / "k"
    entry = d / ("a" * 32 + ".json")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    child = subprocess.run([sys.executable, "-c", _CHILD, str(entry)], env=env, capture_output=True, text=True)
    assert child.returncode == 3, child.stderr
    debris = [p.name for p in d.iterdir()]
    assert len(debris) == 1 and not entry.exists()
    match = re.fullmatch(r"\.a{32}\.json\.([0-9a-f]{8})\.(\d+)\.[0-9a-f]{8}\.tmp", debris[0])
    assert match is not None and match.group(1) == files_mod.HOST_TAG
    other = d / ("b" * 32 + ".json")
    files_mod.atomic_write(other, b"{}")
    assert sorted(p.name for p in d.iterdir()) == [other.name]


def test_unset_optional_fields_are_left_out_of_the_entry_file() -> None:
    """`record_json` writes no `null` for the optional fields a record leaves unset (kernel_id, candidates,
    strategy, space_size), so entries stay readable by an older autotune that does not know them."""
    data = json.loads(record_json(make_record((7,))))
    assert not {"candidates", "kernel_id", "strategy", "space_size"} & set(data)
    data = json.loads(record_json(make_record((7,), kernel_id="mod:add")))
    assert data["kernel_id"] == "mod:add"


# ------------------------------------------------------------------------------------------- locks


def test_a_waiter_with_no_lock_timeout_waits_past_the_notice_until_the_holder_releases(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With no lock timeout, a waiter logs that it is waiting (after `_LOCK_NOTICE_S`) and then waits as long as
    the holder holds the entry's lock: it gets the lock, it does not give up after the notice."""
    monkeypatch.setattr(files_mod, "_LOCK_NOTICE_S", 0.05)
    caplog.set_level(logging.INFO, logger="autotune")
    disk = DiskCache()
    entry = EntryRef("add", None, device_fingerprint(), (7,), DT)
    held = disk.lock(entry, timeout_s=None)
    assert held is not None
    noticed = threading.Event()

    class Notice(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for another process" in record.getMessage():
                noticed.set()

    handler = Notice()
    logging.getLogger("autotune").addHandler(handler)
    got: list = []
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            waiter = threading.Thread(target=lambda: got.append(disk.lock(entry, timeout_s=None)))
            waiter.start()
            assert noticed.wait(30), "the waiter never logged that it waits"
            held.release()
            waiter.join(30)
    finally:
        logging.getLogger("autotune").removeHandler(handler)
    assert not waiter.is_alive()
    assert len(got) == 1 and got[0] is not None
    got[0].release()


def test_a_lease_released_twice_is_released_once() -> None:
    """`Lease.release` is idempotent (the protocol says so): a disk lease and a memory lease released twice raise
    nothing, and the lock is free afterwards."""
    disk = DiskCache()
    entry = EntryRef("add", None, device_fingerprint(), (7,), DT)
    lease = disk.lock(entry, timeout_s=None)
    assert lease is not None
    lease.release()
    lease.release()
    assert lease.renew() is False
    again = disk.lock(entry, timeout_s=0.5)
    assert again is not None
    again.release()
    lock = threading.Lock()
    lock.acquire()
    held = HeldLock(lock)
    held.release()
    held.release()
    assert not lock.locked()


# ------------------------------------------------------------------------------------------- KernelCache


class ListingTier:
    """A persistent tier named "remote" holding nothing, that counts how often it is listed."""

    name = "remote"
    persistent = True

    def __init__(self) -> None:
        self.listed = 0
        self.puts = 0

    def get(self, entry: EntryRef) -> TuningRecord | None:
        return None

    def put(self, entry: EntryRef, record: TuningRecord) -> bool:
        self.puts += 1
        return True

    def lock(self, entry: EntryRef, *, timeout_s: float | None):
        return HeldLock(threading.Lock())

    def newer_at(self, entry: EntryRef) -> bool:
        return False

    def lease_holder(self, entry: EntryRef) -> str | None:
        return None

    def entries(self, kernel: str | None = None) -> list[StoredEntry]:
        self.listed += 1
        return []

    def remove(self, kernel=None, key=None, identity: object = ANY) -> list[StoredEntry]:
        return []


def test_tuned_records_reads_memory_then_disk_never_the_remote_tier_and_only_usable_records() -> None:
    """What a warm start seeds a new key with: memory first (its record wins over the disk's for the same key),
    then the disk's records that are usable here (one of another kernel source is not), and never a listing of
    the remote tier (a scan of the fleet's whole store on a launch's path)."""
    remote = ListingTier()
    cache = new_cache(tiers=[DiskCache(), remote])
    write_record(make_record((1,), winner=128))  # the same key as memory's, another winner
    write_record(make_record((2,), winner=32))  # usable
    write_record(make_record((3,), winner=32, src="src-old"))  # tuned for another kernel source
    cache.remember((1,), DT, make_record((1,), winner=64))
    found = {tuple(r.key): r.winner["BLOCK"] for r in cache.tuned_records()}
    assert found == {(1,): 64, (2,): 32}
    assert remote.listed == 0


def test_a_space_predicate_that_raises_on_a_stored_winner_makes_it_a_miss_not_an_error() -> None:
    """`stale_reason` asks the space whether the stored winner is still in it; a `.where` predicate that raises
    on that config (a field it does not expect) makes the entry unusable: the key is tuned, the launch does not
    fail."""
    write_record(make_record((7,), winner=64))

    def contains(cfg: Config) -> bool:
        if cfg["BLOCK"] == 64:
            raise KeyError("OTHER")
        return True

    tuner = Tuner((7,), winner=32)
    record, how = new_cache(contains=contains).get_or_tune((7,), DT, tuner)
    assert (how, tuner.calls, record.winner) == ("tuned", 1, Config(BLOCK=32))


def test_a_disk_hit_does_not_rewrite_the_entry_or_write_the_tiers_behind_it() -> None:
    """A record found on disk is kept in memory and copied only into the tiers read *before* the disk (none):
    the file is not rewritten (a write without holding the entry's lock) and the remote tier is not written."""
    path = write_record(make_record((7,)))
    before = file_signature(path)
    remote = ListingTier()
    record, how = new_cache(tiers=[DiskCache(), remote]).get_or_tune((7,), DT, Tuner((7,)))
    assert how == "disk" and record.winner == Config(BLOCK=64)
    assert file_signature(path) == before
    assert remote.puts == 0


def test_an_online_winner_is_not_kept_when_its_key_was_cleared_after_its_tuning_began() -> None:
    """`store_tuned(..., since=clears())`: a winner decided across calls (online tuning) whose key was cleared
    after the tuning began is not kept, neither in memory nor on disk (a clear is a barrier); one whose tuning
    began after the clear is."""
    cache = new_cache()
    since = cache.clears()
    assert clear_autotune_cache("add", key=(7,)) == 0
    cache.store_tuned((7,), DT, make_record((7,)), since=since)
    assert cache.in_memory((7,), DT) is None and disk_entries() == []
    cache.store_tuned((7,), DT, make_record((7,)), since=cache.clears())
    assert cache.in_memory((7,), DT) is not None and len(disk_entries()) == 1


def test_a_thread_that_waited_through_a_clear_keeps_the_winner_it_then_tunes() -> None:
    """A clear during a tuning drops that tuning's winner; a thread that was waiting for it tunes again once the
    lock is free, and *its* winner (begun after the clear) is kept: the next call is a memory hit, not a third
    tuning. (`since` is read again once the waiter holds the entry's memory lock.)"""
    cache = new_cache()
    in_first, release_first = threading.Event(), threading.Event()
    second_waits = threading.Event()
    calls: list[str] = []

    def first_tune() -> TuningRecord:
        calls.append("first")
        in_first.set()
        assert release_first.wait(30)
        return make_record((7,), winner=32)

    def second_tune() -> TuningRecord:
        calls.append("second")
        return make_record((7,), winner=128)

    real_lock = cache.memory.lock

    def lock(entry: EntryRef, *, timeout_s: float | None = None) -> HeldLock:
        if threading.current_thread().name == "second":
            second_waits.set()  # about to wait for the first thread's tuning
        return real_lock(entry, timeout_s=timeout_s)

    cache.memory.lock = lock  # type: ignore[method-assign]
    results: dict[str, tuple] = {}
    first = threading.Thread(target=lambda: results.setdefault("first", cache.get_or_tune((7,), DT, first_tune)))
    first.start()
    assert in_first.wait(30)
    second = threading.Thread(
        target=lambda: results.setdefault("second", cache.get_or_tune((7,), DT, second_tune)), name="second"
    )
    second.start()
    assert second_waits.wait(30)
    assert cache.clear(key=(7,)) == 0
    release_first.set()
    first.join(30)
    second.join(30)
    assert calls == ["first", "second"]
    assert results["second"][1] == "tuned"
    record, how = cache.get_or_tune((7,), DT, second_tune)
    assert (how, record.winner, calls) == ("memory", Config(BLOCK=128), ["first", "second"])


class CountingRemote(ListingTier):
    """A remote tier that holds nothing and counts its reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, entry: EntryRef) -> TuningRecord | None:
        self.reads += 1
        return None


def test_an_offline_miss_asks_the_remote_tier_again_only_after_a_pause() -> None:
    """`peek` (AUTOTUNE_OFFLINE): a miss asks the remote tier, and the next misses of that key within
    `_PEEK_AGAIN_S` (5 s) do not pay its round trip again; the disk is read every time."""
    remote = CountingRemote()
    cache = new_cache(tiers=[DiskCache(), remote])
    from autotune.storage.protocol import SOURCES_PER_KEY

    assert cache.peek((7,), DT) is None
    assert cache.peek((7,), DT) is None
    assert remote.reads == SOURCES_PER_KEY  # one read per kernel-source slot of the key, once
    write_record(make_record((7,)))
    found = cache.peek((7,), DT)
    assert found is not None and found.winner == Config(BLOCK=64) and remote.reads == SOURCES_PER_KEY


def test_clearing_one_kernel_object_leaves_a_same_named_kernel_of_another_module() -> None:
    """`KernelCache.clear` (clear_autotune_cache(kernel_object)) removes that kernel's entries by identity: a kernel
    of the same short name from another module keeps its entries on disk."""

    def cache_of(identity: str) -> KernelCache:
        return KernelCache("add", "src-1", "space-1", lambda cfg: True, identity=identity)

    a, b = cache_of("mod_a:add"), cache_of("mod_b:add")

    def tuner(cache: KernelCache):
        return lambda: cache.new_record((7,), DT, winner=Config(BLOCK=64), trials=[], tuning_s=0.1, candidates=None)

    a.get_or_tune((7,), DT, tuner(a))
    b.get_or_tune((7,), DT, tuner(b))
    assert sorted(e.record.kernel_id for e in disk_entries()) == ["mod_a:add", "mod_b:add"]
    assert a.clear() == 1
    assert [e.record.kernel_id for e in disk_entries()] == ["mod_b:add"]
    fresh_b = cache_of("mod_b:add")
    assert fresh_b.get_or_tune((7,), DT, tuner(fresh_b))[1] == "disk"


def test_clearing_by_short_name_warns_when_it_cleared_two_modules_kernels_and_only_then() -> None:
    """`clear_autotune_cache("add")` clears every module's `add` and warns naming them when there were several,
    counted by identity (two modules' entries on disk are two kernels); a same-named kernel loaded here with
    nothing to clear does not count."""
    write_record(make_record((7,), kernel_id="mod_a:add"))
    write_record(make_record((7,), kernel_id="mod_b:add"))
    with pytest.warns(UserWarning, match="cleared 2 kernels of that name: mod_a:add, mod_b:add"):
        assert clear_autotune_cache("add") == 2
    write_record(make_record((7,), kernel_id="mod_a:add"))
    loaded = KernelCache("add", "src-1", "space-1", lambda cfg: True, identity="mod_b:add")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert clear_autotune_cache("add") == 1
    assert len(loaded.memory) == 0


def test_a_memory_tier_answers_only_for_its_own_kernel() -> None:
    """`MemoryCache.entries` / `remove` through the `Cache` protocol: asked about another kernel (another short
    name, or another module's kernel of this name by `identity`), it lists and removes nothing."""
    from autotune.storage import MemoryCache

    mem = MemoryCache("add", "mod_a:add", "add.x")
    mem.store((7,), DT, make_record((7,), kernel_id="mod_a:add"))
    assert mem.entries("mul") == [] and mem.entries("mod_b:add") == []
    assert mem.remove("mul") == [] and mem.remove(identity="mod_b:add") == [] and mem.remove(key=(8,)) == []
    assert len(mem) == 1
    assert [e.record.key for e in mem.entries("mod_a:add")] == [[7]]
    assert len(mem.remove(identity="mod_a:add")) == 1 and len(mem) == 0


def test_key_text_reads_a_zero_dimensional_tensor_as_its_value() -> None:
    """A key value that is a numpy/torch scalar is stored as its Python value, so `key_text` (what a clear and
    `stale_reason` compare) is the same for `torch.tensor(1024)` and `1024`."""
    import torch

    from autotune.storage.entries import key_text

    assert key_text((torch.tensor(1024), torch.tensor(0.5))) == key_text((1024, 0.5)) == "[1024,0.5]"


def test_skipped_trials_are_not_failed_configs() -> None:
    """`stats()["failed_configs"]` counts trials that ran and failed, not those skipped (pruned, never run)."""
    from autotune.storage import counters

    record = make_record((7,))
    record.trials.extend(
        [
            Trial(config=Config(BLOCK=16), status=TrialStatus.SKIPPED),
            Trial(config=Config(BLOCK=8), status=TrialStatus.RUNTIME_ERROR, error="boom"),
        ]
    )
    assert counters.failed_configs(record) == 1


_CHILD_HOLDER = """
import os, sys
from pathlib import Path
from autotune.storage import files

def dies_halfway(fd, data):
    os.write(fd, data[: len(data) // 2])
    os._exit(3)          # killed while writing who holds the lock: no cleanup runs

files.write_all = dies_halfway
files.acquire_entry_lock(Path(sys.argv[1]), "add key [7]")
"""


def test_a_process_killed_while_naming_itself_lock_holder_leaves_debris_that_is_swept() -> None:
    """The holder file (`<entry>.json.holder`, who holds the lock) is written the same atomic way as an entry; a
    process killed in that write leaves a temporary file, which the next write in the directory on this host
    removes like any other dead writer's (it was never swept before: its name did not match the pattern)."""
    d = Path(cache_dir()) / "k"
    entry = d / ("a" * 32 + ".json")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    child = subprocess.run([sys.executable, "-c", _CHILD_HOLDER, str(entry)], env=env, capture_output=True, text=True)
    assert child.returncode == 3, child.stderr
    debris = [p.name for p in d.iterdir() if p.name.endswith(".tmp")]
    assert len(debris) == 1 and debris[0].startswith("." + entry.name + ".holder.")
    files_mod.atomic_write(d / ("b" * 32 + ".json"), b"{}")
    assert [p.name for p in d.iterdir() if p.name.endswith(".tmp")] == []


def test_a_tuning_where_every_config_failed_counts_the_configs_that_ran() -> None:
    """A tuning that ends in NoValidConfigError is a miss and a failed tuning, and its `failed_configs` are the
    trials that ran and failed, not those skipped; nothing is stored and the entry's locks are free again."""
    from autotune.errors import NoValidConfigError
    from autotune.storage import stats

    trials = [
        Trial(config=Config(BLOCK=32), status=TrialStatus.COMPILE_ERROR, error="boom"),
        Trial(config=Config(BLOCK=64), status=TrialStatus.RUNTIME_ERROR, error="boom"),
        Trial(config=Config(BLOCK=128), status=TrialStatus.SKIPPED),
    ]

    def tune() -> TuningRecord:
        raise NoValidConfigError("every config failed", trials)

    cache = new_cache()
    with pytest.raises(NoValidConfigError):
        cache.get_or_tune((7,), DT, tune)
    counted = stats()["add"]
    assert (counted["misses"], counted["failed_tunings"], counted["failed_configs"], counted["tunings"]) == (1, 1, 2, 0)
    assert disk_entries() == [] and cache.get_or_tune((7,), DT, Tuner((7,)))[1] == "tuned"


def test_listing_one_kernel_skips_a_record_of_another_kernel_found_in_its_directory() -> None:
    """`disk_entries(kernel)` checks each record's kernel, not only the directory it lies in: a record of `mul`
    copied into `add`'s directory is listed with everything, but not as one of `add`'s (nor cleared as one)."""
    mul = write_record(make_record((7,), kernel="mul"))
    stray = files_mod.record_path(make_record((8,)))
    stray.parent.mkdir(parents=True)
    stray.write_bytes(mul.read_bytes())
    assert sorted(e.record.kernel for e in disk_entries()) == ["mul", "mul"]
    assert disk_entries("add") == []
    assert clear_autotune_cache("add") == 0 and stray.exists()


# ------------------------------------------------------------------------------------------- slots and clears


def test_an_entry_of_another_space_in_an_earlier_slot_never_hides_this_kernels_good_entry() -> None:
    """The weaker-search rule is applied to a record this kernel could use, never to another space's in an earlier
    slot: that one made every process tune the key again (and rewrite its own slot) forever."""
    import msgspec

    from autotune.record import Search

    strong, weak = Search(strategy="exhaustive", measured=3), Search(strategy="random", max_configs=2, measured=2)
    write_record(msgspec.structs.replace(make_record((7,)), space_checksum="space-OTHER", search=weak))  # slot 0
    tuner = Tuner((7,))

    def tune() -> TuningRecord:
        return msgspec.structs.replace(tuner(), search=strong)

    hows = [
        KernelCache("add", "src-1", "space-1", lambda c: c.get("BLOCK") in BLOCKS, search=strong).get_or_tune(
            (7,), DT, tune
        )[1]
        for _ in range(3)  # three processes: a new KernelCache, memory empty
    ]
    assert hows == ["tuned", "disk", "disk"] and tuner.calls == 1


class _RemovesAfter(DiskCache):
    """A tier whose `remove` first runs `before` (what another thread or process does meanwhile)."""

    def __init__(self, *args, name: str = "disk", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.name, self.before = name, None

    def remove(self, *args, **kwargs):
        if self.before is not None:
            before, self.before = self.before, None
            before()
        return super().remove(*args, **kwargs)


def test_a_lookup_during_a_clear_keeps_nothing_once_the_clear_returns() -> None:
    """A clear is a barrier: a lookup that began while the tiers were being cleared found the old entry on disk and
    kept it in memory, which served it after the clear returned."""
    disk = _RemovesAfter()
    cache = new_cache(tiers=[disk])
    cache.get_or_tune((7,), DT, Tuner((7,), winner=64))
    cache.forget()  # memory empty: the next lookup reads the disk
    disk.before = lambda: cache.get_or_tune((7,), DT, Tuner((7,), winner=128))  # during the clear: finds 64
    assert cache.clear() == 1
    record, how = cache.get_or_tune((7,), DT, Tuner((7,), winner=128))
    assert (how, record.winner) == ("tuned", Config(BLOCK=128))


def test_a_clear_of_the_remote_tier_goes_first_so_no_lookup_copies_it_back_to_disk(tmp_path: Path) -> None:
    """A lookup copies what it finds into the tiers before it (remote to disk): clearing disk then remote let another
    process, between the two, copy the cleared winner back onto disk for every later process of the node."""
    disk, remote = DiskCache(), _RemovesAfter(tmp_path / "remote", name="remote")

    def process():
        return KernelCache("add", "src-1", "space-1", lambda c: c.get("BLOCK") in BLOCKS, tiers=[disk, remote])

    process().get_or_tune((7,), DT, Tuner((7,), winner=64))  # tuned: on disk and remote
    remote.before = lambda: process().get_or_tune((7,), DT, Tuner((7,), winner=128))  # another process, meanwhile
    process().clear(remote=True)
    assert disk.entries("add") == [] and remote.entries("add") == []
    assert process().get_or_tune((7,), DT, Tuner((7,), winner=128))[1] == "tuned"
