"""Reading Redis against a real redis-server: a listing Redis stops answering during is reported by `cache pull` and
`cache list --remote` (exit 1, how many were read), a clear removes an entry dated in the future, and a value that
grows after its size was checked is still read bounded. Skipped, with the reason, where no redis-server is found."""

from __future__ import annotations

import os
import signal
import time
import warnings
from typing import Any

import pytest

pytest.importorskip("redis", reason="the redis client is not installed (pip install 'autotune[redis]')")

from test_cache import make_record  # noqa: E402

from autotune import CacheWarning, clear_autotune_cache, set_remote_cache  # noqa: E402
from autotune.cli import main  # noqa: E402
from autotune.storage import EntryRef, disk_entries  # noqa: E402
from autotune.storage.entries import MAX_ENTRY_BYTES, record_json  # noqa: E402
from autotune.storage.redis_tier import RedisCache  # noqa: E402


def store(server: Any, *keys: tuple, **kw: Any) -> list[str]:
    """Write an entry of kernel "add" for each key straight into Redis; their Redis keys."""
    tier, client, names = RedisCache(server.url), server.client(), []
    for key in keys:
        record = make_record(key, **kw)
        entry = EntryRef.of(record)
        names.append(tier.key_of(entry.location, entry.entry_id))
        client.set(names[-1], record_json(record))
    return names


def stop_server_before_read(monkeypatch: pytest.MonkeyPatch, server: Any, reads: int) -> None:
    """SIGSTOP the redis-server just before the entry read number `reads + 1`: it answers nothing after that."""
    real, done = RedisCache._read, []

    def read(self: RedisCache, key: str, **kw: Any) -> Any:
        if len(done) == reads:
            os.kill(server.proc.pid, signal.SIGSTOP)
        done.append(key)
        return real(self, key, **kw)

    monkeypatch.setattr(RedisCache, "_read", read)


@pytest.fixture
def stoppable(redis_server, monkeypatch):
    """The redis-server, continued after the test if it stopped it; the CLI's commands time out after 3 s (a loaded
    machine's stall is shorter; the stopped server never answers)."""
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE_TIMEOUT_S", "3")
    yield redis_server
    os.kill(redis_server.proc.pid, signal.SIGCONT)


def test_a_pull_redis_stops_answering_during_exits_1_saying_how_many_entries_it_read(stoppable, monkeypatch, capsys):
    store(stoppable, (1,), (2,), (3,))
    stop_server_before_read(monkeypatch, stoppable, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        status = main(["cache", "pull", "--remote-url", stoppable.url])
    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert "copied 2 entries" in out
    assert f"the Redis cache at {stoppable.url} stopped answering (TimeoutError" in err, err
    assert "after listing 2 entries" in err, err
    assert "2 copied, the rest were not read" in err and "AUTOTUNE_REMOTE_CACHE_TIMEOUT_S" in err, err
    assert len(disk_entries()) == 2  # what was read before Redis stopped is kept


@pytest.mark.parametrize("as_json", [False, True])
def test_a_remote_list_redis_stops_answering_during_exits_1_after_what_it_read(stoppable, monkeypatch, capsys, as_json):
    store(stoppable, (1,), (2,), (3,))
    stop_server_before_read(monkeypatch, stoppable, 1)
    status = main(["cache", "list", "--remote", "--remote-url", stoppable.url, *(["--json"] if as_json else [])])
    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert "stopped answering (TimeoutError" in err and "after listing 1 entry;" in err, err
    assert "the rest were not read" in err and "run `autotune cache list --remote` again" in err, err
    assert ('"kernel": "add"' if as_json else "1 entry in") in out, out


def test_a_clear_removes_a_redis_entry_dated_in_the_future_as_the_disk_clear_does(redis_server, capsys):
    future = time.time() + 30 * 86400
    first, second = store(redis_server, (1,), (2,), timestamp=future)
    set_remote_cache(redis_server.url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert clear_autotune_cache("add", (1,), remote=True) == 1
    assert not [w for w in caught if "ignoring it" in str(w.message)], [str(w.message) for w in caught]
    client = redis_server.client()
    assert client.exists(first) == 0 and client.exists(second) == 1
    status = main(["cache", "clear", "--remote", "--remote-url", redis_server.url, "--kernel", "add"])
    out, err = capsys.readouterr()
    assert status == 0 and "removed 1 entry" in out, out + err
    assert client.exists(second) == 0


def test_a_value_that_grows_after_its_size_was_checked_is_read_bounded_and_refused(redis_server):
    (name,) = store(redis_server, (1,))
    tier, client = RedisCache(redis_server.url), redis_server.client()
    real_strlen = tier.client.strlen

    def strlen_then_grow(key: str) -> int:
        size = real_strlen(key)
        client.setrange(key, 64 << 20, b"x")  # 64 MB, made server-side after the size was read
        return size

    tier.client.strlen = strlen_then_grow
    traffic = client.info("stats")["total_net_output_bytes"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tier.get(EntryRef.of(make_record((1,)))) is None
    assert client.info("stats")["total_net_output_bytes"] - traffic < MAX_ENTRY_BYTES + (1 << 20)
    assert any(name in str(w.message) and "limit" in str(w.message) for w in caught), [str(w.message) for w in caught]
