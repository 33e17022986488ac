"""The cache never crashes, hangs or reaches outside its directory, whatever is in it (#12 items 9-11, 14, 15)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from test_cache import DT, Tuner, _fill, make_record, new_cache, path_of

from autotune import CacheWarning, clear_autotune_cache
from autotune.errors import CacheEntryError
from autotune.space import Config
from autotune.storage import disk_entries, load_record
from autotune.storage import files as files_mod


def _tune_once_with_warning(key=(1,)):
    with pytest.warns(CacheWarning) as caught:
        rec, how = new_cache().get_or_tune(key, DT, Tuner(key))
    return rec, how, [str(w.message) for w in caught]


def test_deeply_nested_entry_is_a_warning_and_a_miss_everywhere():
    path = path_of((1,))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"[" * 2000)  # ~2 KB: RecursionError in json before the fix
    rec, how, messages = _tune_once_with_warning()
    assert how == "tuned" and rec.winner == Config(BLOCK=64)
    assert any("nests too deeply" in m or "not valid JSON" in m for m in messages)
    path.write_bytes(b"[" * 2000)
    bad = [e for e in disk_entries() if e.record is None]  # `autotune cache list/show` read through here
    assert len(bad) == 1 and bad[0].error
    assert clear_autotune_cache("add") == 0 and path.exists()  # not an entry: stays, nothing raised


def test_fifo_entry_does_not_block_the_launch():
    path = path_of((1,))
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    result: dict = {}

    def call() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result["rec"], result["how"] = new_cache().get_or_tune((1,), DT, Tuner((1,)))
            result["messages"] = [str(w.message) for w in caught]

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(60)  # generous: the call must end, not be fast
    assert not worker.is_alive(), "reading a FIFO entry blocked the call"
    assert result["how"] == "tuned" and any("not a regular file" in m for m in result["messages"])


def test_symlink_to_dev_zero_is_not_followed():
    path = path_of((1,))
    path.parent.mkdir(parents=True)
    path.symlink_to("/dev/zero")
    rec, how, messages = _tune_once_with_warning()
    assert how == "tuned" and any("symbolic link" in m for m in messages)
    assert not path.is_symlink() and load_record(path).winner == Config(BLOCK=64)  # replaced by a real entry


def test_oversized_entry_is_refused_without_reading_it_whole():
    path = path_of((1,))
    path.parent.mkdir(parents=True)
    path.write_bytes(b" " * 4096 + b"{}")
    with pytest.raises(CacheEntryError, match="over the 1024-byte limit"):
        files_mod.read_entry_bytes(path, limit=1024)


def test_clear_does_not_follow_a_symlinked_directory_out_of_the_cache(tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    victim = outside / ("a" * 32 + ".json")
    victim.write_text(make_record((1,)).to_json())
    root = Path(os.environ["AUTOTUNE_CACHE_DIR"])
    root.mkdir(parents=True, exist_ok=True)
    (root / "add").symlink_to(outside, target_is_directory=True)
    assert clear_autotune_cache("add") == 0
    clear_autotune_cache()  # its count includes memory entries of kernels other tests keep alive
    assert victim.exists()


def test_clear_of_a_kernel_leaves_another_kernels_entry_in_its_directory():
    _fill(new_cache(), [(1,)])
    stranger = path_of((1,)).parent / ("b" * 32 + ".json")
    stranger.write_text(make_record((2,), kernel="other").to_json())
    assert clear_autotune_cache("add") == 1
    assert stranger.exists()


@pytest.mark.parametrize(
    "field,value",
    [
        ("timestamp", "NaN"),
        ("timestamp", "Infinity"),
        ("tuning_s", "-Infinity"),
        ("timestamp", "-1"),
        ("tuning_s", "1e999"),
        ("timestamp", '"soon"'),
    ],
)
def test_non_finite_or_negative_numbers_make_an_entry_invalid(field, value):
    path = path_of((1,))
    path.parent.mkdir(parents=True)
    text = make_record((1,)).to_json()
    obj = json.loads(text)
    obj[field] = 0.0
    path.write_text(json.dumps(obj).replace(f'"{field}": 0.0', f'"{field}": {value}'))
    with pytest.raises(CacheEntryError):
        load_record(path)
    rec, how, messages = _tune_once_with_warning()
    assert how == "tuned"
    assert all(e.record is not None for e in disk_entries())  # `cache show` never meets the bad number


def test_a_write_sweeps_temporary_files_of_dead_writers_of_this_host(monkeypatch):
    monkeypatch.setattr(files_mod, "SWEEP_INTERVAL_S", 0.0)  # every write sweeps (at most once a minute by default)
    kc = new_cache()
    _fill(kc, [(1,)])
    d = path_of((1,)).parent
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    host = files_mod.HOST_TAG
    orphans = [d / f".{'a' * 32}.json.{host}.{dead_pid}.{i:08x}.tmp" for i in range(8)]
    live = d / f".{'c' * 32}.json.{host}.{os.getpid()}.0000abcd.tmp"  # a writer still at work: stays
    other_host = d / f".{'d' * 32}.json.0badcafe.{dead_pid}.0000abcd.tmp"  # another host's: only age tells
    for p in (*orphans, live, other_host):
        p.write_text("partial")
    kc.get_or_tune((2,), DT, Tuner((2,)))  # a write into that directory
    assert not any(p.exists() for p in orphans)
    assert live.exists() and other_host.exists()


def test_force_retunes_even_when_the_entry_is_dated_in_the_future():
    """#12 item 13: a clock skewed ahead on a shared file system must not pin an entry against FORCE."""
    import time

    path = path_of((1,))
    path.parent.mkdir(parents=True)
    future = make_record((1,), winner=32, timestamp=time.time() + 10 * 365 * 86400)
    path.write_text(future.to_json())
    tuner = Tuner((1,), winner=128)
    rec, how = new_cache(blocks=(32, 64, 128)).get_or_tune((1,), DT, tuner, force=True)
    assert (how, tuner.calls, rec.winner) == ("tuned", 1, Config(BLOCK=128))
    assert load_record(path).winner == Config(BLOCK=128)


def test_a_waiter_behind_a_stopped_lock_holder_warns_naming_it_and_tunes_in_memory():
    """#12 item 12: a holder stopped with SIGSTOP must not block a waiter forever."""
    import signal
    import socket

    child_code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_cache import DT, Tuner, new_cache\n"
        "class Slow(Tuner):\n"
        "    def __call__(self):\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(300)\n"
        "        return super().__call__()\n"
        "new_cache().get_or_tune((1,), DT, Slow((1,)))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", child_code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"  # it holds the key's lock and is tuning
        os.kill(child.pid, signal.SIGSTOP)
        with pytest.warns(
            CacheWarning,
            match=rf"pid {child.pid} on host {socket.gethostname()}.*Not writing .* to "
            r"disk this time \(a tuning keeps its winner in memory\)",
        ):
            rec, how = new_cache().get_or_tune((1,), DT, Tuner((1,)), lock_timeout_s=1.0)
        assert how == "tuned" and rec.winner == Config(BLOCK=64)
        assert not path_of((1,)).exists()  # the holder's entry to write, not ours
    finally:
        child.kill()
        child.wait(30)


def test_lock_timeout_from_the_environment_is_checked(monkeypatch):
    from autotune import OptionError
    from autotune.options import lock_timeout_s

    monkeypatch.setenv("AUTOTUNE_LOCK_TIMEOUT_S", "2.5")
    assert lock_timeout_s() == 2.5
    monkeypatch.setenv("AUTOTUNE_LOCK_TIMEOUT_S", "soon")
    with pytest.raises(OptionError, match="AUTOTUNE_LOCK_TIMEOUT_S='soon'"):
        lock_timeout_s()
