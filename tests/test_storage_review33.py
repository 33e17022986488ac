"""Review 33 of the cache layer: pid namespaces, one slot per kernel version, clearing Redis, holder files,
clear counts, a sweep's lock check."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import msgspec
import pytest
from cache_files import write_record
from test_cache import DT, Tuner, make_record, new_cache

from autotune.errors import CacheWarning
from autotune.record import SCHEMA_VERSION
from autotune.storage import DiskCache, EntryRef, disk_entries
from autotune.storage import fingerprint as fingerprint_mod
from autotune.storage.entries import record_json
from autotune.storage.files import holder_path, lock_holder, lock_path
from autotune.storage.kernel_cache import KernelCache, slot_for
from autotune.storage.redis_tier import RedisCache

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    return env


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


needs_unshare = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _unshare_works(),
    reason="needs `unshare --pid --fork --mount-proc` (Linux, root or user namespaces) to run a process in another "
    "pid namespace",
)


def _in_other_pid_namespace(code: str) -> str:
    """Run `code` in a fresh pid namespace (a container sharing this host's name and cache); its stdout."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", textwrap.dedent(code)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _started(code: str) -> subprocess.Popen:
    """A process of this namespace running `code`, which prints one line once under way and then waits for its
    stdin to close."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def _finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(input="", timeout=120)
    assert proc.returncode == 0, err
    return out


# ------------------------------------------------------------------------- 1. another pid namespace, same host


@needs_unshare
def test_a_live_measurement_of_another_pid_namespace_is_not_read_as_a_crash():
    measurer = _started(
        """
        import sys
        from autotune.storage import journal
        with journal.measuring("m:k", (1024,), ("torch.float32",), {"BLOCK": 64}):
            print("ready", flush=True)
            sys.stdin.read()
        print("measured")
        """
    )
    try:
        seen = _in_other_pid_namespace(
            """
            import json
            from autotune.storage import journal
            crashed = journal.crashed("m:k", (1024,), ("torch.float32",))
            print(json.dumps({"crashed": len(crashed), "crashes": len(journal.crashes()), "forgot": journal.forget()}))
            """
        )
    finally:
        out = _finish(measurer)
    assert json.loads(seen) == {"crashed": 0, "crashes": 0, "forgot": 0}
    assert "measured" in out


@needs_unshare
def test_a_container_restarted_with_the_host_name_finds_the_crash_of_the_one_before():
    """A container whose measurement ended it (here: a process in its own pid namespace killed while measuring),
    restarted with the same host name and cache volume (a new pid namespace): the note is a crash, and a clear
    removes it. Each namespace's process is judged by its note's lock, which ends with the process."""
    died = subprocess.run(
        [
            "unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
            "import os\nfrom autotune.storage import journal\n"
            "with journal.measuring('m:k', (1024,), ('torch.float32',), {'BLOCK': 128}):\n    os._exit(9)",
        ],
        env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert died.returncode == 9, died.stderr
    seen = _in_other_pid_namespace(
        """
        import json
        from autotune.storage import journal
        crashed = journal.crashed("m:k", (1024,), ("torch.float32",))
        print(json.dumps({"crashed": [dict(c) for c in crashed], "forgot": journal.forget("m:k")}))
        """
    )
    assert json.loads(seen) == {"crashed": [{"BLOCK": 128}], "forgot": 1}


@needs_unshare
def test_a_write_in_flight_of_another_pid_namespace_is_not_swept():
    writer = _started(
        """
        import os, sys
        from pathlib import Path
        from autotune.storage import files
        target = Path(os.environ["AUTOTUNE_CACHE_DIR"]) / "add" / ("0" * 32 + ".json")
        real = os.replace
        def replace_later(src, dst):  # the write is in flight (a slow fsync, a large entry) until stdin closes
            print("ready", flush=True)
            sys.stdin.read()
            real(src, dst)
        files.os.replace = replace_later
        files.atomic_write(target, b"{}")
        print("written", target.read_bytes().decode())
        """
    )
    try:
        left = _in_other_pid_namespace(
            """
            import os
            from pathlib import Path
            from autotune.storage import files
            d = Path(os.environ["AUTOTUNE_CACHE_DIR"]) / "add"
            files.sweep_tmp(d)
            print(len([n for n in os.listdir(d) if n.endswith(".tmp")]))
            """
        )
    finally:
        out = _finish(writer)
    assert left.strip() == "1"
    assert "written {}" in out


def test_an_old_note_without_a_namespace_of_a_dead_process_is_still_a_crash(tmp_path):
    from autotune.storage import journal

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with journal.measuring("m:k", (8,), ("torch.float32",), {"BLOCK": 32}):
        (path,) = (Path(os.environ["AUTOTUNE_CACHE_DIR"]) / ".journal").glob("*.json")
        note = msgspec.json.decode(path.read_bytes())
        note.pop("pidns", None)  # written before notes named their namespace
        note["pid"], note["start"] = dead.pid, None
        kept = path.with_name(path.name.replace(f".{os.getpid()}.", f".{dead.pid}."))
        kept.write_bytes(msgspec.json.encode(note))
    assert list(journal.crashed("m:k", (8,), ("torch.float32",))) == [{"BLOCK": 32}]


# ------------------------------------------------------------------------- 2. one slot per kernel version


def _process(monkeypatch, triton: str, objective: str | None = None) -> str:
    """How a fresh process of one version (Triton `triton`, Tuning.objective `objective`) gets key (1024,)."""
    torch_version = fingerprint_mod.runtime_versions()[1]
    monkeypatch.setattr(fingerprint_mod, "runtime_versions", lambda: (triton, torch_version))
    monkeypatch.setattr(fingerprint_mod, "triton_version", lambda: triton)
    cache = KernelCache("add", "src-1", "space-1", lambda c: True, objective=objective)

    def tune():
        record = make_record((1024,))
        return msgspec.structs.replace(record, objective=objective) if objective else record

    return cache.get_or_tune((1024,), DT, tune)[1]


def test_two_triton_versions_of_a_kernel_keep_their_own_entries(monkeypatch):
    assert [_process(monkeypatch, "3.1.0"), _process(monkeypatch, "3.2.0")] == ["tuned", "tuned"]
    assert [_process(monkeypatch, "3.1.0"), _process(monkeypatch, "3.2.0")] == ["disk", "disk"]
    assert sorted(e.record.triton_version for e in disk_entries()) == ["3.1.0", "3.2.0"]


def test_two_objectives_of_a_kernel_keep_their_own_entries(monkeypatch):
    assert [_process(monkeypatch, "3.1.0"), _process(monkeypatch, "3.1.0", "sum")] == ["tuned", "tuned"]
    assert [_process(monkeypatch, "3.1.0"), _process(monkeypatch, "3.1.0", "sum")] == ["disk", "disk"]


def test_pull_copies_the_fleet_s_entry_beside_a_newer_local_one_of_another_triton(redis_server):
    good = make_record((1024,), timestamp=time.time() - 3600)  # this node's Triton, tuned an hour ago
    old_triton = msgspec.structs.replace(make_record((1024,), winner=32), triton_version="0.0.old")  # just now
    remote = RedisCache(redis_server.url)
    entry = EntryRef.of(good)
    lease = remote.lock(entry, timeout_s=5)
    assert lease is not None
    remote.put(entry, good)
    lease.release()
    write_record(old_triton)
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "cache", "pull", "--remote-url", redis_server.url],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "copied 1 entry" in done.stdout
    assert sorted((e.record.triton_version, e.record.winner["BLOCK"]) for e in disk_entries()) == sorted(
        [(good.triton_version, 64), ("0.0.old", 32)]
    )


# ------------------------------------------------------------------------- 3. clear --remote of everything


def test_clear_remote_of_everything_reports_the_stray_keys_it_deleted_without_warning(redis_server):
    client = redis_server.client()
    remote = RedisCache(redis_server.url)
    record = make_record((4,))
    entry = EntryRef.of(record)
    lease = remote.lock(entry, timeout_s=5)
    assert lease is not None
    remote.put(entry, record)
    lease.release()
    client.set("autotune:entry:add:abc", "not json")
    client.hset("autotune:entry:add:def", "a", "b")
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "cache", "clear", "--remote", "--remote-url", redis_server.url],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "removed 1 entry (all kernels) and 2 other keys" in done.stdout
    assert "skipped" not in done.stderr and "refused" not in done.stderr, done.stderr
    assert list(client.scan_iter(match="autotune:entry:*")) == []


# ------------------------------------------------------------------------- 4. a holder file's "since"


@pytest.mark.parametrize("since", [1e300, 1e18, -5.0])
def test_a_holder_file_with_a_time_out_of_range_names_no_holder(since):
    cache = new_cache()
    path = DiskCache().path(cache.entry((1024,), DT))
    path.parent.mkdir(parents=True)
    holder_path(path).write_text(json.dumps({"pid": 1, "host": "h", "since": since}))
    assert lock_holder(path) is None


# ------------------------------------------------------------------------- 5. clear counts an entry once


def test_clear_counts_an_entry_kept_in_another_slot_once():
    cache = new_cache()
    slot0 = DiskCache().path(cache.entry((1024,), DT))
    slot0.parent.mkdir(parents=True)
    newer = json.loads(record_json(make_record((1024,))))
    newer["schema_version"] = SCHEMA_VERSION + 1  # a newer autotune's: left alone, so the winner goes to slot 1
    slot0.write_text(json.dumps(newer))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        assert cache.get_or_tune((1024,), DT, Tuner((1024,)))[1] == "tuned"
    assert len(list(slot0.parent.glob("*.json"))) == 2
    assert cache.clear((1024,)) == 1


def test_clear_counts_an_entry_of_a_cache_with_a_device_once():
    cache = KernelCache("add", "src-1", "space-1", lambda c: True, device="sm_90 H200")
    cache.get_or_tune((1024,), DT, Tuner((1024,), device="sm_90 H200"))
    assert [e.record.device for e in disk_entries()] == ["sm_90 H200"]
    assert cache.clear((1024,)) == 1


def test_clear_counts_one_key_on_two_devices_twice():
    """A shared cache holding a key tuned on two device kinds: two entries removed, two counted."""
    for device in ("sm_90 H200", "sm_80 A100"):
        KernelCache("add", "src-1", "space-1", lambda c: True, device=device).get_or_tune(
            (1024,), DT, Tuner((1024,), device=device)
        )
    assert sorted(e.record.device for e in disk_entries()) == ["sm_80 A100", "sm_90 H200"]
    assert KernelCache("add", "src-1", "space-1", lambda c: True).clear((1024,)) == 2
    assert disk_entries() == []


# ------------------------------------------------------------------------- 6. a sweep's lock check


def test_lease_holder_is_a_bare_check(caplog):
    disk = DiskCache()
    entry = EntryRef("add", None, "interpreter", (1024,), ("torch.float32",))
    path = disk.path(entry)
    path.parent.mkdir(parents=True)
    caplog.set_level(logging.INFO, logger="autotune")
    assert disk.lease_holder(entry) is None
    assert not holder_path(path).exists()  # a free lock: nothing written in the holder's name
    holder = _started(
        f"""
        import sys, filelock
        lock = filelock.FileLock({str(lock_path(path))!r})
        lock.acquire()
        print("ready", flush=True)
        sys.stdin.read()
        """
    )
    try:
        assert disk.lease_holder(entry) == "another process"
    finally:
        _finish(holder)
    assert not [r for r in caplog.records if "waiting" in r.getMessage()]


def test_a_full_key_evicts_its_own_sources_oldest_version_before_another_sources_entry():
    """Four slots: another source's entry (the other half of a rolling deploy, the oldest) and this source's
    versions of four prune= results: the fifth version replaces this source's oldest, never the other source's."""
    disk = DiskCache()
    base = make_record((1024,))
    entry = EntryRef.of(base)
    other = msgspec.structs.replace(base, source_hash="deploy-B", timestamp=time.time() - 100)
    disk.put(slot_for(disk, entry, other), other)
    for i in range(4):
        ours = msgspec.structs.replace(base, candidates=f"cand{i}", timestamp=time.time() - 50 + i)
        disk.put(slot_for(disk, entry, ours), ours)
    held = [disk.get(slot) for slot in entry.slots()]
    assert sorted((r.source_hash, r.candidates) for r in held if r is not None) == sorted(
        [("deploy-B", base.candidates), *((base.source_hash, f"cand{i}") for i in (1, 2, 3))]
    )


def test_a_file_system_without_flock_still_gets_the_crash_journal(monkeypatch, tmp_path):
    """flock refused (Lustre's noflock, some FUSE or network mounts): the note is still written during the
    measurement and removed after it, leaving no empty file."""
    import errno
    import fcntl

    from autotune.storage import journal

    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    notes = Path(os.environ["AUTOTUNE_CACHE_DIR"]) / ".journal"
    for _ in range(3):
        with journal.measuring("m:k", (1024,), ("torch.float32",), {"BLOCK": 64}):
            assert len([p for p in notes.iterdir() if p.stat().st_size]) == 1  # a readable note
    assert list(notes.iterdir()) == []


def test_inherited_notes_hold_no_descriptor(tmp_path):
    """A sweep actor inheriting its dead predecessor's notes (`keep_notes`): no descriptor (and so no lock, which
    would make a note of another pid namespace look alive) is left open per note."""
    from autotune.storage import journal

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    note = journal.Note(
        kernel="m:k", key="[1024]", dtypes=["torch.float32"], config={"BLOCK": 64}, pid=dead.pid, start=None,
        boot=None, host=socket.gethostname(), since=time.time(), pidns=None,
    )  # fmt: skip
    before = len(os.listdir("/proc/self/fd"))
    journal.keep_notes([(f"n{i}.json", note) for i in range(20)], os.environ["AUTOTUNE_CACHE_DIR"])
    assert len(os.listdir("/proc/self/fd")) == before
    assert len(list((Path(os.environ["AUTOTUNE_CACHE_DIR"]) / ".journal").iterdir())) == 20
