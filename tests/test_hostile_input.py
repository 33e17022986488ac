"""Hostile cache contents found by issue 40 (items 13, 14, 18): links out of the cache, future timestamps."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest
from test_cache import DT, Tuner, new_cache, path_of

from autotune import CacheWarning, OptionError
from autotune.space import Config


@pytest.mark.parametrize("dangling", [True, False])
def test_a_kernel_directory_linked_out_of_the_cache_is_named_and_never_written_through(tmp_path, dangling):
    outside = tmp_path / "elsewhere"
    if not dangling:
        outside.mkdir()
    kernel_dir = path_of((1,)).parent
    kernel_dir.parent.mkdir(parents=True)
    kernel_dir.symlink_to(outside, target_is_directory=True)
    with pytest.warns(CacheWarning) as caught:
        rec, how = new_cache().get_or_tune((1,), DT, Tuner((1,)))
    assert how == "tuned" and rec.winner == Config(BLOCK=64)
    messages = [str(w.message) for w in caught]
    assert any(f"{kernel_dir} is a symbolic link (to {outside})" in m for m in messages), messages
    assert not any("FileExistsError" in m for m in messages), messages
    assert not outside.exists() or os.listdir(outside) == []  # nothing locked or written outside the cache


# ------------------------------------------------------------------------------ item 13: future timestamps

TEN_YEARS = 10 * 365 * 86400.0


def test_an_entry_dated_ahead_of_the_clock_is_refused_on_disk_and_one_within_the_tolerance_is_a_hit():
    from test_cache import make_record

    from autotune.storage import load_record
    from autotune.storage.entries import FUTURE_TOLERANCE_S

    path = path_of((1,))
    path.parent.mkdir(parents=True)
    path.write_text(make_record((1,), winner=32, timestamp=time.time() + TEN_YEARS).to_json())
    with pytest.warns(CacheWarning, match="ahead of this machine's clock") as caught:
        rec, how = new_cache().get_or_tune((1,), DT, Tuner((1,), winner=128))
    assert (how, rec.winner) == ("tuned", Config(BLOCK=128)), [str(w.message) for w in caught]
    assert load_record(path).winner == Config(BLOCK=128)  # replaced by this tuning
    path.write_text(make_record((2,), winner=32, timestamp=time.time() + FUTURE_TOLERANCE_S / 2).to_json())
    other = path_of((2,))
    path.rename(other)
    rec, how = new_cache().get_or_tune((2,), DT, Tuner((2,), winner=128))
    assert (how, rec.winner) == ("disk", Config(BLOCK=32))  # a clock a little ahead is not refused


def test_clear_removes_an_entry_dated_in_the_future():
    from test_cache import make_record

    from autotune import clear_autotune_cache

    path = path_of((1,))
    path.parent.mkdir(parents=True)
    path.write_text(make_record((1,), timestamp=time.time() + TEN_YEARS).to_json())
    clear_autotune_cache("add")
    assert not path.exists()


def test_push_and_pull_never_let_a_future_entry_win(redis_server, tmp_path):
    """A Redis entry stamped ten years ahead: pull does not copy it over a fresh local winner, push replaces it."""
    from cache_files import write_record
    from test_cache import make_record
    from test_redis_edges import run_cli

    from autotune.storage import EntryRef, disk_entries
    from autotune.storage.entries import record_json
    from autotune.storage.redis_tier import RedisCache

    future, fresh = make_record((1,), winner=32, timestamp=time.time() + TEN_YEARS), make_record((1,), winner=128)
    tier = RedisCache(redis_server.url)
    entry = EntryRef.of(future)
    redis_server.client().set(tier.key_of(entry.location, entry.entry_id), record_json(future))
    write_record(fresh, tmp_path / "local")
    url = ["--cache-dir", str(tmp_path / "local"), "--remote-url", redis_server.url]
    res = run_cli("cache", "pull", *url, env={})
    assert "ahead of this machine's clock" in res.stderr, (res.stdout, res.stderr)
    assert [e.record.winner for e in disk_entries(directory=tmp_path / "local")] == [fresh.winner]
    res = run_cli("cache", "push", *url, env={})
    assert res.returncode == 0 and "copied 1 entry" in res.stdout, (res.stdout, res.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert tier.get(entry).winner == fresh.winner


# ------------------------------------------------------------------------------ item 14: a write's cost


def test_a_write_lists_its_directory_at_most_once_a_minute(monkeypatch):
    """Each write listed the kernel's whole directory (the stale-.tmp sweep): O(keys) per key. Now the first write
    of a process into a directory sweeps it, later ones within SWEEP_INTERVAL_S do not (bench_key_writes.py)."""
    import subprocess
    import sys

    from test_cache import _fill

    from autotune.storage import files as files_mod

    listed: list[Path] = []
    real_sweep = files_mod.sweep_tmp
    monkeypatch.setattr(files_mod, "sweep_tmp", lambda d: (listed.append(d), real_sweep(d)))
    kc = new_cache()
    _fill(kc, [(n,) for n in range(20)])  # 20 keys: 40 atomic writes (each entry and its lock's holder file)
    assert listed == [path_of((1,)).parent]
    dead = int(subprocess.run([sys.executable, "-c", "print(__import__('os').getpid())"], capture_output=True).stdout)
    orphan = path_of((1,)).parent / f".{'a' * 32}.json.{files_mod.HOST_TAG}.{dead}.0000abcd.tmp"
    orphan.write_text("partial")
    _fill(kc, [(20,)])
    assert orphan.exists()  # left for the next sweep, within a minute
    monkeypatch.setattr(files_mod, "SWEEP_INTERVAL_S", 0.0)
    _fill(kc, [(21,)])
    assert not orphan.exists()


# ------------------------------------------------------------------------------ item 12: one qualname, two sources


def test_two_sources_of_one_kernel_both_hit_and_the_oldest_of_too_many_is_dropped():
    """A, B, A, B tuned 4 times (each evicted the other's entry); now twice, then hits, on the real disk."""
    from test_cache import make_record

    from autotune.storage import load_record
    from autotune.storage.protocol import SOURCES_PER_KEY

    def run(src: str) -> str:
        return new_cache(src=src).get_or_tune((1,), DT, Tuner((1,), src=src))[1]

    assert [run(s) for s in ("src-a", "src-b", "src-a", "src-b")] == ["tuned", "tuned", "disk", "disk"]
    directory = path_of((1,)).parent
    assert sorted(load_record(p).source_hash for p in directory.glob("*.json")) == ["src-a", "src-b"]
    assert load_record(path_of((1,))).source_hash == "src-a"  # the first in the name entries always had
    for n, src in enumerate(["src-c", "src-d", "src-e"]):  # a fifth source replaces the oldest entry
        assert run(src) == "tuned"
        if n == 0:
            old = make_record((1,), src="src-b", timestamp=1.0)  # src-b made the oldest: it goes first
            next(p for p in directory.glob("*.json") if load_record(p).source_hash == "src-b").write_text(old.to_json())
    sources = sorted(load_record(p).source_hash for p in directory.glob("*.json"))
    assert len(sources) == SOURCES_PER_KEY == 4 and sources == ["src-a", "src-c", "src-d", "src-e"]


def test_two_sources_share_a_redis_under_a_deployment_prefix(redis_server, monkeypatch):
    from autotune.storage import KernelCache
    from autotune.storage.remote_config import remote_tier

    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", redis_server.url)
    monkeypatch.setenv("AUTOTUNE_REMOTE_PREFIX", "team-a")
    tier = remote_tier()

    def run(src: str) -> str:  # a node with an empty disk: only Redis can have it
        cache = KernelCache("add", src, "space-1", lambda cfg: True, tiers=[tier])
        return cache.get_or_tune((1,), DT, Tuner((1,), src=src))[1]

    assert [run(s) for s in ("src-a", "src-b", "src-a", "src-b")] == ["tuned", "tuned", "remote", "remote"]
    keys = redis_server.client().keys("*:entry:*")
    assert len(keys) == 2 and all(k.startswith(b"team-a:entry:") for k in keys), keys
    monkeypatch.setenv("AUTOTUNE_REMOTE_PREFIX", "no spaces")
    with pytest.raises(OptionError, match="AUTOTUNE_REMOTE_PREFIX='no spaces' is not a key prefix"):
        remote_tier()


def test_push_and_pull_keep_each_sources_entry(redis_server, tmp_path):
    from cache_files import write_record
    from test_cache import make_record
    from test_redis_edges import run_cli

    from autotune.storage import disk_entries

    write_record(make_record((1,), src="src-a"), tmp_path / "a")
    write_record(make_record((1,), src="src-b"), tmp_path / "b")
    url = ["--remote-url", redis_server.url]
    for d in ("a", "b"):
        res = run_cli("cache", "push", "--cache-dir", str(tmp_path / d), *url, env={})
        assert res.returncode == 0 and "copied 1 entry" in res.stdout, (res.stdout, res.stderr)
    res = run_cli("cache", "pull", "--cache-dir", str(tmp_path / "both"), *url, env={})
    assert res.returncode == 0 and "copied 2 entries" in res.stdout, (res.stdout, res.stderr)
    assert sorted(e.record.source_hash for e in disk_entries(directory=tmp_path / "both")) == ["src-a", "src-b"]
