"""KernelCache and the disk cache, in one process: real files, real threads, hand-made records."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
import warnings
from pathlib import Path

import pytest
from cache_files import write_record

from autotune.errors import AutotuneError, CacheWarning
from autotune.options import cache_dir
from autotune.record import SCHEMA_VERSION, Trial, TrialStatus, TuningRecord
from autotune.space import Config
from autotune.storage import (
    KernelCache,
    clear_autotune_cache,
    device_fingerprint,
    disk_entries,
    load_record,
    runtime_versions,
    source_hash,
    stats,
)
from autotune.storage import counters as stats_mod
from autotune.storage import entries as entries_mod
from autotune.storage import files as files_mod
from autotune.storage import fingerprint as fingerprint_mod
from autotune.storage.entries import entry_id, kernel_dirname

DT = ("torch.float32", "torch.float32", "torch.float32")
BLOCKS = (32, 64, 128)


def make_record(
    key,
    dtypes=DT,
    winner=64,
    *,
    kernel="add",
    src="src-1",
    checksum="space-1",
    device=None,
    failed=1,
    tuning_s=0.25,
    timestamp=None,
) -> TuningRecord:
    triton_version, torch_version = fingerprint_mod.runtime_versions()
    trials = [
        Trial(config=Config(BLOCK=winner), status=TrialStatus.OK, median_ms=1.0, min_ms=0.9, samples_ms=[1.0, 1.1, 0.9])
    ]
    trials += [
        Trial(config=Config(BLOCK=1000 + i), status=TrialStatus.COMPILE_ERROR, error="boom") for i in range(failed)
    ]
    extra = {} if timestamp is None else {"timestamp": timestamp}
    return TuningRecord(
        kernel=kernel,
        source_hash=src,
        device=device or device_fingerprint(),
        triton_version=triton_version,
        torch_version=torch_version,
        space_checksum=checksum,
        key=list(key),
        dtypes=list(dtypes),
        winner=Config(BLOCK=winner),
        trials=trials,
        tuning_s=tuning_s,
        **extra,
    )


class Tuner:
    """A tune() callable that counts its calls and returns a record built by `make_record`."""

    def __init__(self, key, dtypes=DT, winner=64, delay=0.0, **kw):
        self.key, self.dtypes, self.winner, self.delay, self.kw = key, dtypes, winner, delay, kw
        self.calls = 0
        self.started = threading.Event()  # set once a call is under way (the key's lock is held by then)
        self._lock = threading.Lock()

    def __call__(self) -> TuningRecord:
        with self._lock:
            self.calls += 1
        self.started.set()
        if self.delay:
            time.sleep(self.delay)
        return make_record(self.key, self.dtypes, self.winner, **self.kw)


def new_cache(name="add", src="src-1", checksum="space-1", blocks=BLOCKS) -> KernelCache:
    return KernelCache(name, src, checksum, lambda cfg: cfg.get("BLOCK") in blocks)


@pytest.fixture(autouse=True)
def _fresh_stats():
    stats_mod.reset_stats()
    yield


def path_of(key, dtypes=DT, name="add") -> Path:
    return files_mod.entry_path(name, device_fingerprint(), key, dtypes)


# ---------------------------------------------------------------------------------------------- basics


def test_fingerprints():
    assert device_fingerprint() == "interpreter"  # tests run through TRITON_INTERPRET=1
    import torch
    import triton

    assert runtime_versions() == (triton.__version__, torch.__version__)


def test_source_hash_is_stable_and_ignores_decorators(tmp_path, monkeypatch):
    mod = tmp_path / "kmod_hash.py"
    body = (
        "import triton\nimport triton.language as tl\n\n"
        "{deco}def k(x, n, BLOCK: tl.constexpr):\n    tl.store(x + tl.arange(0, BLOCK), 1.0)\n"
    )
    mod.write_text(body.format(deco="@triton.jit\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    m = importlib.import_module("kmod_hash")
    h = source_hash(m.k)
    assert len(h) == 64 and h == source_hash(m.k)
    import hashlib

    plain = "def k(x, n, BLOCK: tl.constexpr):\n    tl.store(x + tl.arange(0, BLOCK), 1.0)\n"
    assert h == hashlib.sha256(plain.encode()).hexdigest()


def test_kernel_dirname_is_safe_and_injective():
    assert kernel_dirname("add") == "add"
    assert kernel_dirname("mod.add_kernel-2") == "mod.add_kernel-2"
    a, b = kernel_dirname("a/b"), kernel_dirname("a:b")
    assert a != b and "/" not in a and a.startswith("a_b-")
    assert not kernel_dirname("..").startswith(".")


def test_tune_then_memory_then_disk_in_a_new_cache():
    key = (1024,)
    kc = new_cache()
    tuner = Tuner(key)
    rec, how = kc.get_or_tune(key, DT, tuner)
    assert how == "tuned" and rec.winner == Config(BLOCK=64) and tuner.calls == 1
    rec2, how2 = kc.get_or_tune(key, DT, tuner)
    assert how2 == "memory" and rec2 is rec and tuner.calls == 1
    # A fresh cache object (a new process, as far as memory goes) reads the disk.
    kc2 = new_cache()
    rec3, how3 = kc2.get_or_tune(key, DT, tuner)
    assert how3 == "disk" and rec3.winner == rec.winner and tuner.calls == 1
    assert kc2.records() == {(key, DT): rec3}
    s = stats()["add"]
    assert s == {
        "hits": 1,
        "disk_hits": 1,
        "remote_hits": 0,
        "misses": 1,
        "tunings": 1,
        "failed_tunings": 0,
        "failed_configs": 1,
        "tuning_s": 0.25,
    }


def test_layout_and_file_contents():
    key = (1024, "x", (2, 3))
    kc = new_cache()
    kc.get_or_tune(key, DT, Tuner(key))
    d = Path(cache_dir()) / "add"
    stem = entry_id("interpreter", key, DT)
    # the entry, its lock, and who last held the lock (#12 item 12: named in a waiter's timeout warning)
    assert sorted(p.name for p in d.iterdir()) == [stem + ".json", stem + ".json.holder", stem + ".lock"]
    raw = json.loads((d / (stem + ".json")).read_text())
    assert raw["schema_version"] == SCHEMA_VERSION and raw["kernel"] == "add"
    assert raw["key"] == [1024, "x", [2, 3]] and raw["winner"] == {"BLOCK": 64}
    assert raw["device"] == "interpreter" and raw["space_checksum"] == "space-1"
    assert load_record(d / (stem + ".json")).winner == Config(BLOCK=64)
    # The list form of a key read back from disk still matches the tuple in memory.
    assert new_cache().get_or_tune(key, DT, Tuner(key))[1] == "disk"


def test_keys_and_dtypes_are_separate_entries():
    kc = new_cache()
    for key in [(1024,), (1024.5,), (None,), ("1024",)]:
        assert kc.get_or_tune(key, DT, Tuner(key))[1] == "tuned"
    other = ("torch.float16",) * 3
    assert kc.get_or_tune((1024,), other, Tuner((1024,), other))[1] == "tuned"
    assert len(list((Path(cache_dir()) / "add").glob("*.json"))) == 5
    assert stats()["add"]["tunings"] == 5


def test_threads_on_one_key_tune_once():
    key = (4096,)
    kc = new_cache()
    tuner = Tuner(key, delay=0.3)
    results, errors = [], []
    barrier = threading.Barrier(8)

    def run():
        try:
            barrier.wait()
            results.append(kc.get_or_tune(key, DT, tuner))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(results) == 8
    assert tuner.calls == 1
    assert sorted(how for _, how in results).count("tuned") == 1
    assert len({id(rec) for rec, _ in results}) == 1


def test_tune_failure_writes_nothing_and_releases_locks():
    key = (77,)
    kc = new_cache()

    def boom():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        kc.get_or_tune(key, DT, boom)
    assert not path_of(key).exists() and kc.records() == {}
    # The locks are free again: the next call (even from another thread) tunes.
    out = []
    t = threading.Thread(target=lambda: out.append(kc.get_or_tune(key, DT, Tuner(key))))
    t.start()
    t.join(10)
    assert out and out[0][1] == "tuned" and path_of(key).exists()
    assert stats()["add"]["tunings"] == 1


def test_tune_must_return_a_record():
    with pytest.raises(TypeError):
        new_cache().get_or_tune((1,), DT, lambda: "nope")


def test_recursive_tuning_of_the_same_key_is_an_error_not_a_hang():
    kc = new_cache()
    key = (5,)

    def tune():
        return kc.get_or_tune(key, DT, Tuner(key), force=True)[0]

    with pytest.raises(AutotuneError, match="already being tuned"):
        kc.get_or_tune(key, DT, tune)
    twin = new_cache()  # same kernel name, another object: same entry file, same lock

    def tune_twin():
        return twin.get_or_tune(key, DT, Tuner(key))[0]

    with pytest.raises(AutotuneError, match="already being tuned"):
        kc.get_or_tune(key, DT, tune_twin)
    assert kc.get_or_tune(key, DT, Tuner(key))[1] == "tuned"  # nothing left held


def test_force_retunes_and_replaces():
    key = (256,)
    new_cache().get_or_tune(key, DT, Tuner(key, winner=64))
    kc = new_cache()
    rec, how = kc.get_or_tune(key, DT, Tuner(key, winner=128), force=True)
    assert how == "tuned" and rec.winner == Config(BLOCK=128)
    assert load_record(path_of(key)).winner == Config(BLOCK=128)
    # force again in the same process: memory does not count either.
    assert kc.get_or_tune(key, DT, Tuner(key, winner=32), force=True)[1] == "tuned"


def test_force_takes_a_winner_produced_while_it_waited():
    key = (257,)
    kc = new_cache()
    slow = Tuner(key, winner=128, delay=1.5)
    first = threading.Thread(target=lambda: kc.get_or_tune(key, DT, slow, force=True))
    first.start()
    assert slow.started.wait(10)  # the first tuning holds the key before the second asks for it
    second = Tuner(key, winner=32)
    rec, how = kc.get_or_tune(key, DT, second, force=True)
    first.join(10)
    assert how == "memory" and rec.winner == Config(BLOCK=128) and second.calls == 0


# ---------------------------------------------------------------------------------------------- validity


@pytest.mark.parametrize("change", ["source", "checksum", "winner_not_in_space", "space_changed_keeps_winner"])
def test_a_changed_kernel_or_space_retunes_and_keeps_another_source_s_or_space_s_entry_beside(change):
    key = (512,)
    new_cache().get_or_tune(key, DT, Tuner(key, winner=64))
    kw = {"src": "src-1", "checksum": "space-1", "blocks": BLOCKS}
    if change == "source":
        kw["src"] = "src-2"
    elif change == "checksum":
        kw["checksum"] = "space-2"
    elif change == "winner_not_in_space":
        kw["blocks"] = (32, 128)  # same checksum claimed, but 64 is gone
    else:
        kw["checksum"], kw["blocks"] = "space-3", (16, 64)  # still contains 64, otherwise changed
    kc = new_cache(**kw)
    tkw = {"src": kw["src"], "checksum": kw["checksum"]}
    winner = {"winner_not_in_space": 32, "space_changed_keeps_winner": 16}.get(change, 128)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec, how = kc.get_or_tune(key, DT, Tuner(key, winner=winner, **tkw))
    assert how == "tuned"
    # Another source's or another space's entry is kept beside the new one (both kernels hit), quietly; an entry
    # whose winner the space lost (same source and space checksum) is replaced.
    assert [str(w.message) for w in caught] == []
    files = sorted(path_of(key).parent.glob("*.json"))
    kept = sorted((load_record(f).source_hash, load_record(f).space_checksum) for f in files)
    if change == "winner_not_in_space":
        assert kept == [("src-1", "space-1")]  # replaced in place, no stale file left
        assert load_record(path_of(key)).winner == rec.winner
        return
    assert kept == sorted([("src-1", "space-1"), (kw["src"], kw["checksum"])])
    old = new_cache()  # the first kernel (source and space) still hits its own entry, in a new process
    assert old.get_or_tune(key, DT, Tuner(key, winner=32))[0].winner == Config(BLOCK=64)
    assert new_cache(**kw).get_or_tune(key, DT, Tuner(key, winner=32, **tkw))[0].winner == rec.winner


def test_another_device_retunes(monkeypatch):
    key = (512,)
    new_cache().get_or_tune(key, DT, Tuner(key))
    monkeypatch.setattr(fingerprint_mod, "device_fingerprint", lambda: "NVIDIA H100 80GB HBM3 sm90")
    kc = new_cache()
    tuner = Tuner(key, device="NVIDIA H100 80GB HBM3 sm90")
    assert kc.get_or_tune(key, DT, tuner)[1] == "tuned" and tuner.calls == 1
    # Both devices keep their entry side by side.
    devices = sorted(e.record.device for e in disk_entries("add"))
    assert devices == ["NVIDIA H100 80GB HBM3 sm90", "interpreter"]


def test_entry_claiming_another_device_at_our_path_is_not_used():
    key = (512,)
    path = path_of(key)
    path.parent.mkdir(parents=True)
    path.write_text(make_record(key, device="NVIDIA A100 sm80").to_json())
    rec, how = new_cache().get_or_tune(key, DT, Tuner(key))
    assert how == "tuned" and load_record(path).device == "interpreter"


def test_another_triton_version_retunes_into_its_own_slot(monkeypatch):
    """A rolling Triton upgrade: the new version tunes the key once and keeps its entry beside the old one's, so
    neither version tunes it again (they replaced each other's entry before)."""
    key = (512,)
    new_cache().get_or_tune(key, DT, Tuner(key))
    real = runtime_versions()
    monkeypatch.setattr(fingerprint_mod, "runtime_versions", lambda: ("9.9.9", real[1]))
    tuner = Tuner(key)  # builds its record with the faked version too
    assert new_cache().get_or_tune(key, DT, tuner)[1] == "tuned" and tuner.calls == 1
    assert load_record(path_of(key)).triton_version == real[0]  # slot 0: the old version's, kept
    assert new_cache().get_or_tune(key, DT, Tuner(key))[1] == "disk"
    monkeypatch.setattr(fingerprint_mod, "runtime_versions", lambda: real)
    assert new_cache().get_or_tune(key, DT, Tuner(key))[1] == "disk"


def test_record_that_would_not_validate_warns():
    key = (9,)
    with pytest.warns(CacheWarning, match="would not be accepted"):
        rec, how = new_cache().get_or_tune(key, DT, Tuner(key, src="something-else"))
    assert how == "tuned"


# ---------------------------------------------------------------------------------------------- faults


def _good_neighbour():
    """A good entry of another key, which no fault may damage."""
    key = (999,)
    new_cache().get_or_tune(key, DT, Tuner(key, winner=128))
    return path_of(key), path_of(key).read_bytes()


def _assert_neighbour_intact(neighbour):
    path, data = neighbour
    assert path.read_bytes() == data
    assert new_cache().get_or_tune((999,), DT, Tuner((999,)))[1] == "disk"


@pytest.mark.parametrize(
    "content", [b"{not json", b"", b"\x00\xff\xfe", b"[1, 2, 3]", b'{"schema_version": 1}', "truncated"]
)
def test_corrupt_entry_warns_retunes_and_is_replaced(content):
    neighbour = _good_neighbour()
    key = (1024,)
    path = path_of(key)
    if content == "truncated":
        good = make_record(key).to_json().encode()
        content = good[: len(good) // 2]
    path.write_bytes(content)
    tuner = Tuner(key)
    with pytest.warns(CacheWarning, match=str(path.name)) as rec_warn:
        rec, how = new_cache().get_or_tune(key, DT, tuner)
    assert how == "tuned" and tuner.calls == 1 and rec.winner == Config(BLOCK=64)
    assert len([w for w in rec_warn if issubclass(w.category, CacheWarning)]) == 1  # once, not per read
    assert "replacing" in str(rec_warn[0].message)
    assert load_record(path).winner == Config(BLOCK=64)
    _assert_neighbour_intact(neighbour)


def test_warning_points_at_the_caller():
    key = (3,)
    path = path_of(key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage")
    with pytest.warns(CacheWarning) as rec_warn:
        new_cache().get_or_tune(key, DT, Tuner(key))
    assert rec_warn[0].filename == __file__


def test_older_schema_version_is_replaced():
    key = (1024,)
    path = path_of(key)
    path.parent.mkdir(parents=True)
    old = json.loads(make_record(key, winner=32).to_json())
    old["schema_version"] = 0
    path.write_text(json.dumps(old))
    with pytest.warns(CacheWarning, match="schema version 0"):
        rec, how = new_cache().get_or_tune(key, DT, Tuner(key))
    assert how == "tuned" and load_record(path).schema_version == SCHEMA_VERSION


def test_newer_schema_version_is_left_alone():
    key = (1024,)
    path = path_of(key)
    path.parent.mkdir(parents=True)
    future = json.loads(make_record(key, winner=32).to_json())
    future["schema_version"] = SCHEMA_VERSION + 1
    future["something_new"] = {"x": 1}
    path.write_text(json.dumps(future))
    before = path.read_bytes()
    kc = new_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # a newer autotune sharing the directory is no mistake
        rec, how = kc.get_or_tune(key, DT, Tuner(key))
    assert how == "tuned" and rec.winner == Config(BLOCK=64)
    assert path.read_bytes() == before  # not ours to overwrite
    assert kc.get_or_tune(key, DT, Tuner(key))[1] == "memory"
    assert new_cache().get_or_tune(key, DT, Tuner(key))[1] == "disk"  # stored in another of the key's slots


def test_unreadable_entry_warns_and_the_call_returns():
    neighbour = _good_neighbour()
    key = (1024,)
    path = path_of(key)
    path.mkdir(parents=True)  # a directory where the file should be: reading raises IsADirectoryError
    with pytest.warns(CacheWarning) as rec_warn:
        rec, how = new_cache().get_or_tune(key, DT, Tuner(key))
    messages = [str(w.message) for w in rec_warn]
    assert any("cannot read" in m and path.name in m for m in messages)
    assert any("could not write" in m and "kept in memory" in m for m in messages)
    assert how == "tuned" and rec.winner == Config(BLOCK=64)
    _assert_neighbour_intact(neighbour)


@pytest.fixture
def read_only(monkeypatch):
    """Make a directory read-only: chmod (enough for a normal user); where that is not honoured (root),
    also make every write-ish os call on a path under it fail with EROFS."""
    state = {"roots": []}

    def under(path) -> bool:
        try:
            p = os.path.abspath(os.fspath(path))
        except TypeError:
            return False
        return any(p == r or p.startswith(r + os.sep) for r in state["roots"])

    real_open, real_mkdir, real_replace, real_unlink = os.open, os.mkdir, os.replace, os.unlink

    def fake_open(path, flags, *args, **kw):
        if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real_open(path, flags, *args, **kw)

    def guard(real):
        def fake(path, *args, **kw):
            if under(path):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
            return real(path, *args, **kw)

        return fake

    def make(directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        for p in [directory, *directory.rglob("*")]:
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
        state["roots"].append(os.path.abspath(directory))
        probe = directory / ".write-probe"
        try:
            probe.touch()
        except PermissionError:
            return  # the mode is honoured: a real read-only directory
        probe.unlink()  # root (CAP_DAC_OVERRIDE) ignores modes: simulate instead
        if True:
            monkeypatch.setattr(os, "open", fake_open)
            monkeypatch.setattr(os, "mkdir", guard(real_mkdir))
            monkeypatch.setattr(os, "replace", guard(real_replace))
            monkeypatch.setattr(os, "unlink", guard(real_unlink))

    yield make
    for r in state["roots"]:
        for p in [Path(r), *Path(r).rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)


def test_read_only_cache_dir_warns_tunes_in_memory_and_keeps_entries(read_only):
    neighbour = _good_neighbour()
    read_only(Path(cache_dir()))
    key = (1024,)
    kc = new_cache()
    with pytest.warns(CacheWarning, match="in memory only") as rec_warn:
        rec, how = kc.get_or_tune(key, DT, Tuner(key))
    assert how == "tuned" and rec.winner == Config(BLOCK=64)
    assert len([w for w in rec_warn if issubclass(w.category, CacheWarning)]) == 1
    assert kc.get_or_tune(key, DT, Tuner(key))[1] == "memory"
    assert not path_of(key).exists()
    # Reading still works: the good entry is used.
    assert new_cache().get_or_tune((999,), DT, Tuner((999,)))[1] == "disk"
    assert neighbour[0].read_bytes() == neighbour[1]


def test_missing_cache_dir_under_read_only_parent(read_only, monkeypatch, tmp_path):
    parent = tmp_path / "ro-parent"
    read_only(parent)
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(parent / "cache"))
    with pytest.warns(CacheWarning, match="cannot lock"):
        rec, how = new_cache().get_or_tune((1,), DT, Tuner((1,)))
    assert how == "tuned"


def test_a_cache_dir_through_a_file_warns_once_naming_the_directory_and_the_fix(monkeypatch, tmp_path):
    """AUTOTUNE_CACHE_DIR=/some/file/sub: one warning that names the directory and AUTOTUNE_CACHE_DIR, not one per
    entry read and locked that only names an entry file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(blocker / "cache"))
    kc = new_cache()
    with pytest.warns(CacheWarning) as rec_warn:
        rec, how = kc.get_or_tune((1,), DT, Tuner((1,)))
        assert kc.get_or_tune((2,), DT, Tuner((2,)))[1] == "tuned"
    messages = [str(w.message) for w in rec_warn if issubclass(w.category, CacheWarning)]
    assert len(messages) == 1, messages
    assert (
        f"cache directory {blocker / 'cache'}" in messages[0]
        and "Point AUTOTUNE_CACHE_DIR at a writable" in messages[0]
    )
    assert how == "tuned" and kc.get_or_tune((1,), DT, Tuner((1,)))[1] == "memory"


def test_full_disk_warns_and_keeps_the_previous_entry(monkeypatch):
    key = (1024,)
    new_cache().get_or_tune(key, DT, Tuner(key, winner=64))
    before = path_of(key).read_bytes()

    def full(fd, data):
        os.write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files_mod, "write_all", full)
    kc = new_cache()
    with pytest.warns(CacheWarning, match="disk is full") as rec_warn:
        rec, how = kc.get_or_tune(key, DT, Tuner(key, winner=128), force=True)
    assert how == "tuned" and rec.winner == Config(BLOCK=128)
    assert path_of(key).name in str(rec_warn[0].message)
    assert path_of(key).read_bytes() == before  # the good entry is not lost
    assert sorted(p.name for p in path_of(key).parent.iterdir() if p.name.endswith(".tmp")) == []
    assert kc.get_or_tune(key, DT, Tuner(key))[1] == "memory"  # and this process goes on with its winner
    # A new key on the full disk: warns, returns, writes nothing.
    with pytest.warns(CacheWarning, match="disk is full"):
        assert kc.get_or_tune((2048,), DT, Tuner((2048,)))[1] == "tuned"
    assert not path_of((2048,)).exists()


def test_no_warnings_on_the_happy_path():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kc = new_cache()
        kc.get_or_tune((1,), DT, Tuner((1,)))
        new_cache().get_or_tune((1,), DT, Tuner((1,)))


# ---------------------------------------------------------------------------------------------- offline


def test_peek_and_offline_misses():
    key = (64,)
    kc = new_cache()
    assert kc.peek(key, DT) is None
    assert kc.count_offline_miss(key, DT) is True
    assert kc.count_offline_miss(key, DT) is False
    assert kc.count_offline_miss((65,), DT) is True
    assert stats()["add"]["misses"] == 3 and stats()["add"]["tunings"] == 0
    new_cache().get_or_tune(key, DT, Tuner(key, winner=128))
    rec = kc.peek(key, DT)
    assert rec is not None and rec.winner == Config(BLOCK=128)
    assert kc.peek(key, DT) is rec
    s = stats()["add"]
    assert s["disk_hits"] == 1 and s["hits"] == 1


# ---------------------------------------------------------------------------------------------- clearing


class FakeKernel:
    """Stands in for a decorated kernel: has `.cache` and `.name`."""

    def __init__(self, cache: KernelCache):
        self.cache, self.name = cache, cache.kernel_name


def _fill(kc: KernelCache, keys, dtypes_list=(DT,)):
    for key in keys:
        for dt in dtypes_list:
            kc.get_or_tune(key, dt, Tuner(key, dt, kernel=kc.kernel_name))


def test_clear_one_key_all_dtype_variants_memory_and_disk_count_once():
    kc = new_cache()
    f16 = ("torch.float16",) * 3
    _fill(kc, [(1024,), (2048,)], [DT, f16])
    assert len(kc.records()) == 4
    assert kc.clear((1024,)) == 2
    assert set(kc.records()) == {((2048,), DT), ((2048,), f16)}
    assert not path_of((1024,)).exists() and not path_of((1024,), f16).exists()
    assert path_of((2048,)).exists()
    assert kc.clear((1024,)) == 0


def test_clear_autotune_cache_forms():
    clear_autotune_cache()  # module-level kernels of other test modules keep entries in memory: start empty
    a, b = new_cache("add"), new_cache("mul")
    _fill(a, [(1,), (2,), (3,)])
    _fill(b, [(1,), (2,)])
    ka = FakeKernel(a)
    with pytest.raises(ValueError, match="kernel"):
        clear_autotune_cache(key=(1,))
    assert clear_autotune_cache(ka, (1,)) == 1  # object + key
    assert clear_autotune_cache(ka, 2) == 1  # a bare value means a 1-tuple
    assert clear_autotune_cache("mul", [1]) == 1  # name + key (list form)
    assert set(a.records()) == {((3,), DT)} and set(b.records()) == {((2,), DT)}
    assert clear_autotune_cache("add") == 1  # a whole kernel by name
    assert a.records() == {} and b.records() != {}
    _fill(a, [(7,)])
    assert clear_autotune_cache() == 2  # everything: add (7,), mul (2,)
    assert a.records() == {} and b.records() == {}
    assert disk_entries() == []
    assert clear_autotune_cache() == 0
    with pytest.raises(TypeError):
        clear_autotune_cache(42)


def test_clear_counts_memory_only_and_disk_only_entries():
    kc = new_cache()
    _fill(kc, [(1,)])
    path_of((1,)).unlink()  # memory only
    other = new_cache()
    _fill(other, [(2,)])
    other.forget()  # (2,) on disk only
    assert clear_autotune_cache(FakeKernel(kc)) == 2


def test_clear_removes_entries_of_kernels_not_loaded():
    clear_autotune_cache()  # the final count includes memory entries of other modules' live kernels
    write_record(make_record((1,), kernel="ghost_kernel"))
    write_record(make_record((2,), kernel="ghost_kernel"))
    write_record(make_record((1,), kernel="ghost/other"))
    assert sorted(e.kernel for e in disk_entries()) == ["ghost/other", "ghost_kernel", "ghost_kernel"]
    assert clear_autotune_cache("ghost_kernel", (2,)) == 1
    assert clear_autotune_cache("ghost/other") == 1
    assert [e.record.key for e in disk_entries()] == [[1]]
    assert clear_autotune_cache() == 1


def test_clear_removes_only_files_that_read_as_entries_of_what_was_asked():
    """#12 item 11 (was: a kernel's clear removed unreadable files too): a file that does not parse as an entry
    of that kernel is not known to be one, so it stays; a tuning of its key replaces it."""
    kc = new_cache()
    _fill(kc, [(1,)])
    bad = path_of((1,)).parent / ("0" * 32 + ".json")
    bad.write_bytes(b"garbage")
    assert clear_autotune_cache("add", (1,)) == 1 and bad.exists()
    assert clear_autotune_cache("add") == 0 and bad.exists()
    clear_autotune_cache()
    assert bad.exists()


def test_disk_entries_reports_bad_files():
    kc = new_cache()
    _fill(kc, [(1,)])
    (path_of((1,)).parent / ("f" * 32 + ".json")).write_bytes(b"{")
    entries = disk_entries()
    assert len(entries) == 2
    bad = [e for e in entries if e.record is None]
    assert len(bad) == 1 and "not valid JSON" in bad[0].error and bad[0].kernel == "add"


def test_offline_warning_resets_after_clear():
    kc = new_cache()
    assert kc.count_offline_miss((1,), DT) is True
    kc.clear()
    assert kc.count_offline_miss((1,), DT) is True


def test_clear_never_touches_files_that_are_not_entries():
    clear_autotune_cache()  # the count below includes memory entries of other modules' live kernels
    kc = new_cache()
    _fill(kc, [(1,)])
    root = Path(cache_dir())
    foreign = [root / "some-tool" / "config.json", root / "add" / "notes.json", root / "top.json"]
    for p in foreign:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{}")
    assert clear_autotune_cache() == 1
    assert all(p.exists() for p in foreign)
    assert [e.path.name for e in disk_entries()] == []


def test_clear_sweeps_old_temporary_files_only():
    kc = new_cache()
    _fill(kc, [(1,)])
    d = path_of((1,)).parent
    old = d / f".{'a' * 32}.json.123.deadbeef.tmp"
    new = d / f".{'b' * 32}.json.456.cafef00d.tmp"
    for p in (old, new):
        p.write_text("partial")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    assert kc.clear() == 1
    assert not old.exists() and new.exists()


def test_public_helpers_for_other_modules():
    kc = new_cache()
    rec = make_record((1,))
    assert kc.in_memory((1,), DT) is None
    kc.remember((1,), list(DT), rec)
    assert kc.in_memory((1,), DT) is rec and kc.get_or_tune((1,), DT, Tuner((1,)))[1] == "memory"
    stats_mod.count("add", disk_hits=2)
    stats_mod.count_tuning("add", rec)
    s = stats()["add"]
    assert (s["disk_hits"], s["tunings"], s["failed_configs"], s["hits"]) == (2, 1, 1, 1)
    assert stats_mod.failed_configs(rec) == 1
    with pytest.raises(ValueError):
        stats_mod.count("add", bogus=1)
    assert entries_mod.key_text((1, (2, 3))) == entries_mod.key_text([1, [2, 3]]) == "[1,[2,3]]"


# --- entry naming and reading, pinned after mutation testing --------------------------------------------------------


def test_non_finite_key_values_are_stored_and_found_again_on_disk():
    """inf is a valid key value (it equals itself); JSON has no inf, so the entry stores its text and a new
    process's lookup of the same key finds the entry."""
    import math

    key = (math.inf, (1, -math.inf))
    assert new_cache().get_or_tune(key, DT, Tuner(key))[1] == "tuned"
    stored = json.loads(path_of(key).read_text())
    assert stored["key"] == ["inf", [1, "-inf"]]
    assert entries_mod.key_text(key) == entries_mod.key_text(stored["key"]) == '["inf",[1,"-inf"]]'
    tuner = Tuner(key)
    assert new_cache().get_or_tune(key, DT, tuner)[1] == "disk" and tuner.calls == 0


def test_kernel_dirname_of_long_or_empty_names():
    long_a, long_b = "k" * 300, "k" * 299 + "j"
    a, b = kernel_dirname(long_a), kernel_dirname(long_b)
    assert len(a) <= 100 and len(b) <= 100 and a != b  # a file name stays far under the 255-byte limit
    assert kernel_dirname("") not in ("", ".") and "/" not in kernel_dirname("")


def test_is_dir_of_matches_the_kernel_and_its_module_variants_only():
    is_dir_of = entries_mod.is_dir_of
    assert is_dir_of(kernel_dirname("add"), "add")
    assert is_dir_of(kernel_dirname("add", "mod:add"), "add")
    assert not is_dir_of(kernel_dirname("add_kernel"), "add")  # a longer name is another kernel
    assert not is_dir_of(kernel_dirname("add_kernel", "mod:add_kernel"), "add")
    assert not is_dir_of("add.123", "add") and not is_dir_of("add.1234567g", "add")
    assert not is_dir_of("aXb.1234abcd", "a.b")  # '.' in a name is a dot, not any char
    assert is_dir_of("a.b.1234abcd", "a.b")


def test_a_kernel_is_named_by_its_short_name_or_its_module_qualname():
    matches, is_dir_of = entries_mod.kernel_matches, entries_mod.is_dir_of
    assert matches("add", "mod:add", "add") and matches("add", None, "add")  # the short name: every module's
    assert matches("add", "mod:add", "mod:add") and not matches("add", "other:add", "mod:add")
    assert not matches("add", None, "mod:add") and not matches("add", "mod:add", "mod.add")
    assert is_dir_of(kernel_dirname("add", "mod:add"), "mod:add")  # the directory of that kernel
    assert not is_dir_of(kernel_dirname("add", "other:add"), "mod:add") and not is_dir_of("add", "mod:add")
    assert entries_mod.short_name("pkg.mod:Cls.add") == "add" and entries_mod.short_name("add") == "add"


def test_an_empty_entry_is_reported_as_empty():
    from autotune.errors import CacheEntryError

    for data in (b"", b"  \n"):
        with pytest.raises(CacheEntryError, match=r"^the entry is empty$"):
            entries_mod.parse_record(data, "the entry")


@pytest.mark.parametrize("version", ["2", 99.0, None])
def test_an_entry_whose_schema_version_is_not_an_int_is_replaced(version):
    """Only an int schema version above ours marks an entry of a newer autotune (left in place); anything else
    is a bad entry: warned about, retuned and replaced."""
    key = (1024,)
    path = path_of(key)
    path.parent.mkdir(parents=True)
    odd = json.loads(make_record(key, winner=32).to_json())
    odd["schema_version"] = version
    path.write_text(json.dumps(odd))
    with pytest.warns(CacheWarning, match="replacing"):
        rec, how = new_cache().get_or_tune(key, DT, Tuner(key))
    assert how == "tuned" and load_record(path).winner == Config(BLOCK=64)
    assert not entries_mod.is_newer_schema(version)
    assert entries_mod.is_newer_schema(SCHEMA_VERSION + 1) and not entries_mod.is_newer_schema(SCHEMA_VERSION)


def test_an_entry_over_the_size_limit_is_not_read_and_is_replaced():
    key = (1024,)
    path = path_of(key)
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:  # sparse: no 16 MiB written
        f.truncate((16 << 20) + 1)  # DESIGN: entry reads take at most 16 MiB
    with pytest.warns(CacheWarning, match=rf"over the {16 << 20}-byte limit"):
        rec, how = new_cache().get_or_tune(key, DT, Tuner(key))
    assert how == "tuned" and load_record(path).winner == Config(BLOCK=64)


# --- DiskCache faults, pinned after mutation testing ----------------------------------------------------------------


def _disk_ref(key=(1024,)):
    from autotune.storage import EntryRef

    return EntryRef("add", None, device_fingerprint(), key, DT)


def test_a_bad_entry_is_warned_about_once_per_state_of_the_file():
    from autotune.storage import DiskCache

    disk, ref = DiskCache(), _disk_ref()
    path = disk.path(ref)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage")
    with pytest.warns(CacheWarning, match="not valid JSON"):
        assert disk.get(ref) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert disk.get(ref) is None  # the same bad file: said once
    path.write_bytes(b"garbage, still")  # the same fault in a new state of the file
    with pytest.warns(CacheWarning, match="not valid JSON"):
        assert disk.get(ref) is None


def test_a_write_refused_by_the_directory_is_one_directory_warning(read_only):
    from autotune.storage import DiskCache

    disk = DiskCache()
    Path(cache_dir()).mkdir(parents=True, exist_ok=True)
    read_only(Path(cache_dir()))
    with pytest.warns(CacheWarning) as caught:
        assert disk.put(_disk_ref((1,)), make_record((1,))) is False
        assert disk.put(_disk_ref((2,)), make_record((2,))) is False
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) == 1 and "Point AUTOTUNE_CACHE_DIR at a writable directory" in messages[0]


def test_enoent_is_the_directory_fault_only_when_the_cache_directory_is_missing(tmp_path):
    from autotune.storage import DiskCache

    there = tmp_path / "there"
    there.mkdir()
    gone = OSError(errno.ENOENT, os.strerror(errno.ENOENT), str(there / "add" / "x.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an entry's folder removed meanwhile: not the directory's
        assert DiskCache(there).warn_not_writable(gone, there / "add" / "x.json") is False
    missing = tmp_path / "missing"
    with pytest.warns(CacheWarning, match="Point AUTOTUNE_CACHE_DIR"):
        assert DiskCache(missing).warn_not_writable(gone, missing / "add" / "x.json") is True


def test_disk_entries_lists_only_entries_that_read():
    from autotune.storage import DiskCache

    disk = DiskCache()
    assert disk.put(_disk_ref((1,)), make_record((1,))) is True
    bad = disk.path(_disk_ref((2,)))
    bad.write_bytes(b"{not json")
    listed = disk.entries("add")
    assert [e.record.key for e in listed] == [[1]] and all(e.record is not None for e in listed)
