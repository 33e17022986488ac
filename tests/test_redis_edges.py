"""Edges of the Redis tier found by mutation testing, against a real redis-server: the lease's compare-and-set (an
expired holder neither extends nor deletes its successor's lease; a released lease is not renewed; a renewal Redis
cannot answer keeps the lease; renewal and release go through during the pause after an outage), a waiter that times
out or waits without a limit, warnings once per outage and once per message, the pause after an outage and `ping`
ending it, the 16 MB limit's boundary, entries of a newer schema, listings that stay within the kernel asked (and a
connection lost during one is warned), clears by kernel identity, a clear Redis refuses or times out during,
credentials out of messages (a URL the client cannot split is an OptionError), the settings from the environment and
from `set_remote_cache` reaching the tier, `unix://` sockets, and the CLI's `list --remote --json`, `clear
--remote`, `push` and `pull`. Skipped, with the reason, only where no redis-server can be found."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("redis", reason="the redis client is not installed (pip install 'autotune[redis]')")

import msgspec  # noqa: E402
from cache_files import write_record  # noqa: E402
from test_cache import DT, Tuner, make_record  # noqa: E402

from autotune import CacheWarning, OptionError, clear_autotune_cache, set_remote_cache  # noqa: E402
from autotune.record import SCHEMA_VERSION  # noqa: E402
from autotune.storage import EntryRef, KernelCache, disk_entries  # noqa: E402
from autotune.storage.entries import MAX_ENTRY_BYTES, record_json  # noqa: E402
from autotune.storage.redis_tier import RedisCache  # noqa: E402
from autotune.storage.remote_config import clear_remote_settings, remote_tier  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def caught(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """(what fn returned, the CacheWarnings it raised, as text)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in seen if issubclass(w.category, CacheWarning)]


def run_cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=full, timeout=120
    )


def entry_of(key: tuple = (1,), **kw: Any) -> tuple[EntryRef, Any]:
    record = make_record(key, **kw)
    return EntryRef.of(record), record


def lease_key(tier: RedisCache, entry: EntryRef) -> str:
    return tier.key_of(entry.location, entry.entry_id, "lease")


def pause_until_back(client: Any) -> None:
    """Block until a CLIENT PAUSE set by the test is over (the test's own client waits like every other)."""
    client.set("autotune-test:after-pause", "1")


def put_in_backoff(tier: RedisCache, client: Any, entry: EntryRef) -> None:
    """Make `tier` leave Redis alone after a timed-out command while Redis itself stays up: CLIENT PAUSE for far
    longer than the tier's timeout, one read that times out, then wait for the pause to end."""
    client.client_pause(3000)
    _, messages = caught(lambda: tier.get(entry))
    assert any("unreachable" in m for m in messages), messages
    pause_until_back(client)


# ---------------------------------------------------------------------------------------------- the lease


def test_a_held_lease_is_renewed_to_a_full_lease(redis_server):
    tier = RedisCache(redis_server.url, lease_s=30)
    entry, _ = entry_of()
    lease = tier.lock(entry, timeout_s=1)
    client = redis_server.client()
    try:
        client.pexpire(lease_key(tier, entry), 5000)
        assert lease.renew() is True
        assert client.pttl(lease_key(tier, entry)) > 5000
    finally:
        lease.release()
    assert client.exists(lease_key(tier, entry)) == 0


def test_a_released_lease_is_not_renewed_nor_reported_lost(redis_server, caplog):
    tier = RedisCache(redis_server.url, lease_s=30)
    entry, _ = entry_of()
    lease = tier.lock(entry, timeout_s=1)
    lease.release()
    with caplog.at_level(logging.WARNING, logger="autotune"):
        assert lease.renew() is True  # nothing to renew: done, not lost
    assert "expired" not in caplog.text
    assert redis_server.client().exists(lease_key(tier, entry)) == 0


def test_a_holder_whose_lease_expired_neither_extends_nor_deletes_its_successor_s(redis_server):
    node_a, node_b = RedisCache(redis_server.url, lease_s=30), RedisCache(redis_server.url, lease_s=30)
    entry, _ = entry_of()
    client = redis_server.client()
    first = node_a.lock(entry, timeout_s=1)
    client.delete(lease_key(node_a, entry))  # as if it expired while node a stalled
    second = node_b.lock(entry, timeout_s=1)
    assert second is not None
    theirs = client.get(lease_key(node_b, entry))
    client.pexpire(lease_key(node_b, entry), 5000)
    try:
        assert first.renew() is False
        assert first.renew() is False  # lost stays lost
        assert client.pttl(lease_key(node_b, entry)) <= 5000  # not extended by a's renewal
        first.release()
        assert client.get(lease_key(node_b, entry)) == theirs  # nor deleted by a's release
    finally:
        second.release()
    assert client.exists(lease_key(node_b, entry)) == 0


def test_a_renewal_redis_cannot_answer_keeps_the_lease(redis_server):
    tier = RedisCache(redis_server.url, lease_s=30, timeout_s=0.5)
    entry, _ = entry_of()
    lease = tier.lock(entry, timeout_s=1)
    redis_server.stop()
    assert lease.renew() is True  # cannot tell: go on tuning
    lease.release()  # never raises; the lease expires by itself


def test_renewal_and_release_go_through_while_the_tier_leaves_redis_alone(redis_server):
    tier = RedisCache(redis_server.url, lease_s=30, timeout_s=0.2)
    entry, record = entry_of()
    client = redis_server.client()
    client.set(tier.key_of(entry.location, entry.entry_id), record_json(record))
    lease = tier.lock(entry, timeout_s=1)
    put_in_backoff(tier, client, entry)
    assert tier.get(entry) is None  # left alone: the entry is not read
    client.pexpire(lease_key(tier, entry), 5000)
    assert lease.renew() is True
    assert client.pttl(lease_key(tier, entry)) > 5000  # renewed all the same
    lease.release()
    assert client.exists(lease_key(tier, entry)) == 0  # and released


def test_a_waiter_gives_up_after_its_timeout_naming_the_holder(redis_server):
    holder, waiter = RedisCache(redis_server.url), RedisCache(redis_server.url)
    entry, _ = entry_of()
    lease = holder.lock(entry, timeout_s=1)
    got: list = []
    try:
        thread = threading.Thread(
            target=lambda: got.append(caught(lambda: waiter.lock(entry, timeout_s=0.3))), daemon=True
        )
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "the waiter did not give up after its timeout"
    finally:
        lease.release()
    result, messages = got[0]
    assert result is None
    assert any(
        f"pid {os.getpid()} on host {socket.gethostname()}" in m and "AUTOTUNE_LOCK_TIMEOUT_S" in m for m in messages
    ), messages


def test_a_waiter_without_a_timeout_waits_for_the_release(redis_server):
    holder, waiter = RedisCache(redis_server.url), RedisCache(redis_server.url)
    entry, _ = entry_of()
    lease = holder.lock(entry, timeout_s=1)
    got: list = []
    thread = threading.Thread(target=lambda: got.append(waiter.lock(entry, timeout_s=None)), daemon=True)
    thread.start()
    try:
        thread.join(0.5)
        assert thread.is_alive() and got == []  # still waiting: the lease is held
    finally:
        lease.release()
    thread.join(60)
    assert not thread.is_alive() and got[0] is not None
    got[0].release()


# ---------------------------------------------------------------------------------------------- faults


def test_each_outage_warns_once_and_a_later_outage_warns_again(redis_server):
    tier = RedisCache(redis_server.url, timeout_s=0.5, retry_s=0.001)
    entry, _ = entry_of()
    redis_server.stop()
    # Each get asks Redis (the pause after a failure, retry_s, is over by the next): a second failure of the same
    # outage is not warned again.
    _, first = caught(lambda: (tier.get(entry), time.sleep(0.01), tier.get(entry)))
    redis_server.start()
    time.sleep(0.01)
    _, back = caught(lambda: tier.get(entry))
    redis_server.stop()
    _, second = caught(lambda: tier.get(entry))
    assert [len(first), len(back), len(second)] == [1, 0, 1], (first, back, second)


def test_after_an_outage_redis_is_left_alone_until_ping_answers(redis_server):
    tier = RedisCache(redis_server.url, timeout_s=0.5)  # 30 s of leaving Redis alone after a failure
    entry, record = entry_of()
    redis_server.stop()
    _, messages = caught(lambda: tier.get(entry))
    assert len(messages) == 1
    redis_server.start()
    redis_server.client().set(tier.key_of(entry.location, entry.entry_id), record_json(record))
    assert tier.get(entry) is None  # within the pause: not asked
    assert tier.ping() is None  # answers: the pause ends
    assert tier.get(entry) == record


def test_a_refusal_of_the_same_kind_warns_once(redis_server):
    tier = RedisCache(redis_server.url)
    client = redis_server.client()
    client.config_set("maxmemory", "1")  # full: every write is refused (OOM)
    client.config_set("maxmemory-policy", "noeviction")
    try:
        (ok1, ok2), messages = caught(lambda: (tier.put(*entry_of((1,))), tier.put(*entry_of((2,)))))
    finally:
        client.config_set("maxmemory", "0")
    assert (ok1, ok2) == (False, False)
    assert len(messages) == 1 and "maxmemory" in messages[0], messages


# ---------------------------------------------------------------------------------------------- reading


def test_a_record_of_exactly_the_size_limit_is_read(redis_server):
    tier = RedisCache(redis_server.url)
    entry, record = entry_of()
    data = record_json(record)
    padded = data + b" " * (MAX_ENTRY_BYTES - len(data))  # JSON allows trailing white space
    assert len(padded) == MAX_ENTRY_BYTES
    redis_server.client().set(tier.key_of(entry.location, entry.entry_id), padded)
    got, messages = caught(lambda: tier.get(entry))
    assert got == record and messages == []
    redis_server.client().append(tier.key_of(entry.location, entry.entry_id), b" ")  # one byte over
    got, messages = caught(lambda: tier.get(entry))
    assert got is None and any("limit" in m for m in messages), messages


def test_an_entry_of_a_newer_schema_is_left_in_place_and_one_of_an_older_refused(redis_server):
    tier = RedisCache(redis_server.url)
    entry, record = entry_of()
    key = tier.key_of(entry.location, entry.entry_id)
    client = redis_server.client()
    client.set(key, json.dumps({"schema_version": SCHEMA_VERSION + 1, "kernel": "add"}))
    got, messages = caught(lambda: tier.get(entry))
    assert got is None and messages == []  # a newer autotune sharing the server is no fault: its entry stays
    assert tier.newer_at(entry)  # so slot_for skips it; a put there (every slot newer) refuses, warned
    with pytest.warns(CacheWarning, match="written by a newer autotune"):
        assert tier.put(entry, record) is False
    assert json.loads(client.get(key))["schema_version"] == SCHEMA_VERSION + 1
    client.set(key, json.dumps({"schema_version": 0, "kernel": "add"}))
    got, messages = caught(lambda: tier.get(entry))
    assert got is None and len(messages) == 1 and "refused a record from Redis" in messages[0], messages
    assert "newer" not in messages[0]


# ---------------------------------------------------------------------------------------------- listing, clearing


def test_a_kernel_s_listing_reads_no_key_of_a_kernel_whose_name_it_prefixes(redis_server):
    tier = RedisCache(redis_server.url)
    entry, record = entry_of()
    client = redis_server.client()
    client.set(tier.key_of(entry.location, entry.entry_id), record_json(record))
    client.hset("autotune:entry:add_more:" + "0" * 32, "junk", "1")  # another kernel's key, not a string
    entries, messages = caught(lambda: tier.entries("add"))
    assert [e.record for e in entries] == [record] and messages == []


def test_a_record_of_another_kernel_under_a_kernel_s_prefix_is_not_listed_as_that_kernel(redis_server):
    tier = RedisCache(redis_server.url)
    entry, record = entry_of()
    stray = make_record((2,), kernel="mul")
    redis_server.client().set(tier.key_of(entry.location, "f" * 32), record_json(stray))
    redis_server.client().set(tier.key_of(entry.location, entry.entry_id), record_json(record))
    assert [e.record for e in tier.entries("add")] == [record]
    assert sorted(e.record.kernel for e in tier.entries()) == ["add", "mul"]


def test_a_skipped_key_is_one_warning(redis_server):
    tier = RedisCache(redis_server.url)
    stray = "autotune:entry:add:" + "0" * 32
    redis_server.client().hset(stray, "junk", "1")
    entries, messages = caught(lambda: tier.entries("add"))
    assert entries == [] and len(messages) == 1 and stray in messages[0] and "WRONGTYPE" in messages[0], messages


def test_a_connection_lost_during_a_listing_is_warned_not_a_silently_short_listing(redis_server):
    tier = RedisCache(redis_server.url)
    client = redis_server.client()
    for key, pad in (((1,), 0), ((2,), 200_000)):
        entry, record = entry_of(key)
        client.set(tier.key_of(entry.location, entry.entry_id), record_json(record) + b" " * pad)
    # Redis drops a client whose reply outgrows 64 KB: the listing's scan answers, reading the big entry ends it.
    client.config_set("client-output-buffer-limit", "normal 65536 0 0")
    entries, messages = caught(lambda: tier.entries())
    assert len(entries) < 2
    assert len(messages) == 1 and "unreachable" in messages[0] and "the listing of" in messages[0], messages
    assert f"stopped after {len(entries)} of its entries" in messages[0]


def identity_caches() -> tuple[KernelCache, KernelCache]:
    """Two kernels named `add` in two modules (m1, m2)."""
    return tuple(
        KernelCache("add", "src-1", "space-1", lambda cfg: True, identity=ident)  # type: ignore[return-value]
        for ident in ("m1:add", "m2:add")
    )


def test_clearing_one_module_s_kernel_leaves_the_other_s_entries_in_redis(redis_server):
    set_remote_cache(redis_server.url)
    m1, m2 = identity_caches()
    for kc, ident in ((m1, "m1:add"), (m2, "m2:add")):
        kc.get_or_tune((1,), DT, lambda ident=ident: msgspec.structs.replace(make_record((1,)), kernel_id=ident))
    assert len(redis_server.client().keys("autotune:entry:*")) == 2
    assert m1.clear(remote=True) == 1
    assert [e.record.kernel_id for e in remote_tier().entries()] == ["m2:add"]


def test_a_clear_by_identity_alone_removes_that_kernel_s_entries_and_nothing_else(redis_server):
    tier = RedisCache(redis_server.url)
    client = redis_server.client()
    for ident in ("m1:add", "m2:add"):
        record = msgspec.structs.replace(make_record((1,)), kernel_id=ident)
        entry = EntryRef.of(record)
        client.set(tier.key_of(entry.location, entry.entry_id), record_json(record))
    stray = "autotune:entry:add:" + "0" * 32
    client.set(stray, b"not a record")
    removed, problem = tier.remove_now(identity="m1:add")
    assert problem is None and [e.record.kernel_id for e in removed] == ["m1:add"]
    assert [e.record.kernel_id for e in tier.entries()] == ["m2:add"] and client.exists(stray)


def no_delete_user(redis_server: Any) -> str:
    """The URL of a Redis user who may read and write but not delete (DEL, UNLINK): a clear it runs is refused."""
    redis_server.client().acl_setuser(
        "nodel", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"], commands=["+@all", "-del", "-unlink"]
    )
    return f"redis://nodel:pw@127.0.0.1:{redis_server.port}/0"


def test_a_clear_redis_refuses_says_so_and_the_cli_exits_1(redis_server, tmp_path):
    set_remote_cache(redis_server.url)
    new = KernelCache("add", "src-1", "space-1", lambda cfg: True)
    new.get_or_tune((1,), DT, Tuner((1,)))
    url = no_delete_user(redis_server)
    tier = RedisCache(url)
    removed, problem = tier.remove_now("add")
    assert removed == [] and problem is not None and "NoPermissionError" in problem, problem
    res = run_cli("cache", "clear", "--remote", "--remote-url", url, "--cache-dir", str(tmp_path), env={})
    assert res.returncode == 1, res.stdout + res.stderr
    assert "failed during the clear" in res.stderr and "0 entries were removed" in res.stderr, res.stderr
    assert len(redis_server.client().keys("autotune:entry:*")) == 1


def test_a_clear_that_times_out_deleting_says_why_and_what_it_removed(redis_server):
    tier = RedisCache(redis_server.url, timeout_s=0.2)
    client = redis_server.client()
    for key in ((1,), (2,)):
        entry, record = entry_of(key)
        client.set(tier.key_of(entry.location, entry.entry_id), record_json(record))
    client.client_pause(3000, all=False)  # writes wait (DEL times out), reads go on
    try:
        removed, problem = tier.remove_now("add")
    finally:
        pause_until_back(client)
    assert removed == [] and problem is not None and "unreachable" in problem, problem


# ---------------------------------------------------------------------------------------------- credentials


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0?PASSWORD=hunter2",
        "redis://user:hunt@er2@127.0.0.1:1/0",
        "http://user:hunter2@cache.internal:6379/0",
        "http://cache:6379/0?password=hunter2",
        "redis://:hunter2@[::1:6379/0",
    ],
)
def test_a_password_never_reaches_a_message_or_the_shown_url(url):
    try:
        shown = repr(RedisCache(url))
    except OptionError as exc:
        shown = str(exc)
    try:
        set_remote_cache(url)
    except OptionError as exc:
        shown += str(exc)
    assert "hunter2" not in shown and "er2@" not in shown, shown


def test_a_url_the_client_cannot_split_is_an_option_error_at_configuration(monkeypatch, tmp_path):
    url = "redis://:hunter2@[::1:6379/0"  # an IPv6 address with its bracket left open
    with pytest.raises(OptionError, match=r"^set_remote_cache: 'redis://\*\*\*@\[::1:6379/0' is not a Redis URL"):
        set_remote_cache(url)
    clear_remote_settings()
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", url)
    with pytest.raises(OptionError, match="^AUTOTUNE_REMOTE_CACHE: .* is not a Redis URL"):
        KernelCache("add", "src-1", "space-1", lambda cfg: True)  # at decoration
    res = run_cli("cache", "list", "--remote", "--remote-url", url, "--cache-dir", str(tmp_path), env={})
    assert res.returncode == 2 and res.stderr.startswith("autotune cache list: --remote-url: "), res.stderr
    assert "hunter2" not in res.stderr and "Traceback" not in res.stderr


# ---------------------------------------------------------------------------------------------- settings


def test_set_remote_cache_none_turns_off_the_tier_the_environment_names(redis_server, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", redis_server.url)
    assert remote_tier() is not None
    set_remote_cache(None)
    assert remote_tier() is None
    clear_remote_settings()
    assert remote_tier() is not None  # the environment decides again


def test_set_remote_cache_wins_over_the_environment(redis_server, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", "redis://127.0.0.1:1/0")
    set_remote_cache(redis_server.url)
    assert remote_tier().url == redis_server.url


def test_an_empty_or_padded_environment_url(redis_server, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", "")
    assert remote_tier() is None  # set but empty: none
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", f"  {redis_server.url}\n")
    assert remote_tier().url == redis_server.url


@pytest.mark.parametrize(
    "name", ["AUTOTUNE_REMOTE_CACHE_TTL_S", "AUTOTUNE_REMOTE_CACHE_TIMEOUT_S", "AUTOTUNE_REMOTE_CACHE_LEASE_S"]
)
@pytest.mark.parametrize("raw", ["0.0001", "inf", "abc", "0"])
def test_an_environment_setting_out_of_range_is_an_option_error_naming_it(name, raw, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", "redis://127.0.0.1:1/0")
    monkeypatch.setenv(name, raw)
    with pytest.raises(OptionError, match=f"^AUTOTUNE_REMOTE_CACHE_[A-Z_]+={raw!r}") as info:
        remote_tier()
    assert name in str(info.value)


@pytest.mark.parametrize("option", ["ttl_s", "timeout_s", "lease_s"])
@pytest.mark.parametrize("value", [0, 0.0009, "30", float("nan")])
def test_a_set_remote_cache_setting_out_of_range_is_an_option_error_naming_it(option, value):
    with pytest.raises(OptionError, match=f"^set_remote_cache: {option}="):
        set_remote_cache("redis://127.0.0.1:1/0", **{option: value})


def test_one_millisecond_is_the_shortest_setting_accepted(monkeypatch):
    set_remote_cache("redis://127.0.0.1:1/0", ttl_s=0.001, timeout_s=0.001, lease_s=0.001)
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE_TTL_S", "0.001")
    clear_remote_settings()
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", "redis://127.0.0.1:1/0")
    assert remote_tier().ttl_s == 0.001


def pttls(redis_server: Any, tier: RedisCache) -> tuple[int, int]:
    """(the PTTL of an entry `tier` writes, the PTTL of a lease it takes), in ms."""
    entry, record = entry_of()
    lease = tier.lock(entry, timeout_s=1)
    try:
        assert tier.put(entry, record)
        client = redis_server.client()
        return client.pttl(tier.key_of(entry.location, entry.entry_id)), client.pttl(lease_key(tier, entry))
    finally:
        lease.release()


def test_the_environment_s_settings_reach_the_tier(redis_server, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", redis_server.url)
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE_TTL_S", "100")
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE_TIMEOUT_S", "2.5")
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE_LEASE_S", "45")
    tier = remote_tier()
    entry_ttl, lease_ttl = pttls(redis_server, tier)
    assert 90_000 < entry_ttl <= 100_000 and 40_000 < lease_ttl <= 45_000
    assert tier.timeout_s == 2.5


def test_set_remote_cache_s_settings_reach_the_tier_and_other_settings_are_another_tier(redis_server):
    set_remote_cache(redis_server.url, ttl_s=100, timeout_s=2.5, lease_s=45)
    tier = remote_tier()
    assert tier is remote_tier()  # one client per settings
    entry_ttl, lease_ttl = pttls(redis_server, tier)
    assert 90_000 < entry_ttl <= 100_000 and 40_000 < lease_ttl <= 45_000
    assert tier.timeout_s == 2.5
    set_remote_cache(redis_server.url)
    entry_ttl, lease_ttl = pttls(redis_server, remote_tier())
    assert entry_ttl == -1 and 25_000 < lease_ttl <= 30_000  # the defaults: no TTL, a 30 s lease
    assert remote_tier().timeout_s == 1.0


def test_a_password_given_to_set_remote_cache_or_the_environment_is_used(tmp_path, monkeypatch):
    from redis_process import RedisProcess, redis_server_path

    if redis_server_path() is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    server = RedisProcess(tmp_path / "redis", password="s3cret")
    try:
        set_remote_cache(server.url, password="s3cret")
        (_, how), messages = caught(
            lambda: KernelCache("add", "src-1", "space-1", lambda cfg: True).get_or_tune((1,), DT, Tuner((1,)))
        )
        assert how == "tuned" and messages == [] and len(server.client().keys("autotune:entry:*")) == 1
        env = {"AUTOTUNE_REMOTE_CACHE_PASSWORD": "s3cret", "AUTOTUNE_CACHE_DIR": str(tmp_path / "cli")}
        res = run_cli("cache", "list", "--remote", "--remote-url", server.url, env=env)  # --remote-url too
        assert res.returncode == 0 and "1 entry in" in res.stdout, res.stderr
    finally:
        server.stop()


def test_a_unix_socket_url_reaches_redis(tmp_path, monkeypatch):
    from redis_process import redis_server_path

    if redis_server_path() is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen(
        [
            redis_server_path(),
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)
        set_remote_cache(f"unix://{sock}")
        (_, how), messages = caught(
            lambda: KernelCache("add", "src-1", "space-1", lambda cfg: True).get_or_tune((1,), DT, Tuner((1,)))
        )
        assert how == "tuned" and messages == []
        assert [e.record.key for e in remote_tier().entries()] == [[1]]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_tls_url_is_accepted_at_configuration():
    set_remote_cache("rediss://127.0.0.1:6380/0")
    assert remote_tier().url == "rediss://127.0.0.1:6380/0"


# ---------------------------------------------------------------------------------------------- the CLI


def test_list_remote_json_names_each_entry_s_redis_key_and_kernel(redis_server, tmp_path):
    record = msgspec.structs.replace(make_record((1,)), kernel_id="m1:add")
    write_record(record, tmp_path / "node")
    env = {"AUTOTUNE_CACHE_DIR": str(tmp_path / "node"), "AUTOTUNE_REMOTE_CACHE": redis_server.url}
    assert run_cli("cache", "push", env=env).returncode == 0
    data = json.loads(run_cli("cache", "list", "--remote", "--json", env=env).stdout)
    assert [(d["kernel"], d["kernel_id"]) for d in data] == [("add", "m1:add")]
    assert redis_server.client().exists(data[0]["key"]) and data[0]["key"].startswith("autotune:entry:")
    res = run_cli("cache", "list", "--remote", "--json", "--kernel", "mul", env=env)
    assert res.returncode == 1 and json.loads(res.stdout) == []  # JSON: an empty list (exit 1: nothing matched)


def test_list_remote_shows_entries_in_key_order(redis_server, tmp_path):
    for n in range(8, 0, -1):
        write_record(make_record((n,)), tmp_path / "node")
    env = {"AUTOTUNE_CACHE_DIR": str(tmp_path / "node"), "AUTOTUNE_REMOTE_CACHE": redis_server.url}
    assert run_cli("cache", "push", env=env).returncode == 0
    res = run_cli("cache", "list", "--remote", env=env)
    rows = [line.split() for line in res.stdout.splitlines()[2:10]]
    assert [row[1] for row in rows] == [f"[{n}]" for n in range(1, 9)], res.stdout


def test_clear_remote_of_an_empty_redis_is_done_not_an_error(redis_server, tmp_path):
    res = run_cli("cache", "clear", "--remote", "--remote-url", redis_server.url, "--cache-dir", str(tmp_path), env={})
    assert res.returncode == 0 and "removed 0 entries (all kernels)" in res.stdout, res.stdout + res.stderr


def test_push_and_pull_say_where_they_copied_and_leave_no_lease(redis_server, tmp_path):
    write_record(make_record((1,)), tmp_path / "a")
    url = ["--remote-url", redis_server.url]
    res = run_cli("cache", "push", "--cache-dir", str(tmp_path / "a"), *url, env={})
    assert res.returncode == 0 and f"push: copied 1 entry to {redis_server.url}" in res.stdout, res.stderr
    res = run_cli("cache", "pull", "--cache-dir", str(tmp_path / "b"), *url, env={})
    assert res.returncode == 0 and f"pull: copied 1 entry from {redis_server.url}" in res.stdout, res.stderr
    assert redis_server.client().keys("autotune:lease:*") == []


def test_push_and_pull_never_replace_a_newer_entry(redis_server, tmp_path):
    old, new = make_record((1,), winner=32, timestamp=1000.0), make_record((1,), winner=128, timestamp=2000.0)
    write_record(old, tmp_path / "old")
    write_record(new, tmp_path / "new")
    url = ["--remote-url", redis_server.url]
    assert run_cli("cache", "push", "--cache-dir", str(tmp_path / "new"), *url, env={}).returncode == 0
    res = run_cli("cache", "push", "--cache-dir", str(tmp_path / "old"), *url, env={})
    assert res.returncode == 0 and "copied 0 entries" in res.stdout and "1 already there" in res.stdout, res.stdout
    assert [e.record.winner for e in RedisCache(redis_server.url).entries()] == [new.winner]
    res = run_cli("cache", "pull", "--cache-dir", str(tmp_path / "old"), *url, env={})
    assert res.returncode == 0 and "copied 1 entry" in res.stdout, res.stdout
    assert [e.record.winner for e in disk_entries(directory=tmp_path / "old")] == [new.winner]


def test_push_waits_for_a_node_tuning_the_entry(redis_server, tmp_path):
    record = make_record((1,))
    write_record(record, tmp_path / "node")
    node = RedisCache(redis_server.url)
    lease = node.lock(EntryRef.of(record), timeout_s=1)
    client = redis_server.client()
    entry_key = node.key_of(EntryRef.of(record).location, EntryRef.of(record).entry_id)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotune",
            "cache",
            "push",
            "--cache-dir",
            str(tmp_path / "node"),
            "--remote-url",
            redis_server.url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        assert client.exists(entry_key) == 0  # not written under another node's lease
    finally:
        lease.release()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "copied 1 entry" in out, err
    assert client.exists(entry_key) == 1


def test_push_leaves_an_entry_whose_lease_stays_held_past_lock_timeout_uncopied_and_says_so(redis_server, tmp_path):
    record = make_record((1,))
    write_record(record, tmp_path / "node")
    node = RedisCache(redis_server.url)
    lease = node.lock(EntryRef.of(record), timeout_s=1)  # another node tuning the entry, for longer
    entry_key = node.key_of(EntryRef.of(record).location, EntryRef.of(record).entry_id)
    try:
        res = run_cli(
            "cache",
            "push",
            "--lock-timeout",
            "0.3",
            "--cache-dir",
            str(tmp_path / "node"),
            "--remote-url",
            redis_server.url,
            env={},
        )
        assert res.returncode == 1, res.stdout + res.stderr
        assert "push: copied 0 entries" in res.stdout, res.stdout
        assert "1 entry could not be copied" in res.stderr and "Redis lease" in res.stderr, res.stderr
        assert "for over 0.3 s" in res.stderr and "run the command again" in res.stderr, res.stderr
        assert "AUTOTUNE_LOCK_TIMEOUT_S" not in res.stderr and "--lock-timeout" in res.stderr, res.stderr  # its knob
        assert redis_server.client().exists(entry_key) == 0  # nothing written under its lease
        assert lease is not None and lease.renew()  # and the holder's lease is untouched
    finally:
        assert lease is not None
        lease.release()
    res = run_cli(
        "cache",
        "push",
        "--lock-timeout",
        "0.3",
        "--cache-dir",
        str(tmp_path / "node"),
        "--remote-url",
        redis_server.url,
        env={},
    )
    assert res.returncode == 0 and "copied 1 entry" in res.stdout, res.stdout + res.stderr


def test_pull_leaves_an_entry_whose_disk_lock_stays_held_uncopied(redis_server, tmp_path):
    from autotune.storage import DiskCache

    record = make_record((1,))
    write_record(record, tmp_path / "source")
    url = ["--remote-url", redis_server.url]
    assert run_cli("cache", "push", "--cache-dir", str(tmp_path / "source"), *url, env={}).returncode == 0
    held = DiskCache(tmp_path / "node").lock(EntryRef.of(record), timeout_s=1)  # this process tunes it
    try:
        res = run_cli("cache", "pull", "--lock-timeout", "0.3", "--cache-dir", str(tmp_path / "node"), *url, env={})
        assert res.returncode == 1 and "1 entry could not be copied" in res.stderr, res.stdout + res.stderr
        assert "their lock" in res.stderr or "its lock" in res.stderr, res.stderr
        assert "AUTOTUNE_LOCK_TIMEOUT_S" not in res.stderr and "--lock-timeout" in res.stderr, res.stderr
        assert disk_entries(directory=tmp_path / "node") == []
    finally:
        assert held is not None
        held.release()
    res = run_cli("cache", "pull", "--lock-timeout", "0.3", "--cache-dir", str(tmp_path / "node"), *url, env={})
    assert res.returncode == 0 and "copied 1 entry" in res.stdout, res.stdout + res.stderr
    assert [e.record.winner for e in disk_entries(directory=tmp_path / "node")] == [record.winner]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_push_refuses_a_lock_timeout_that_is_not_a_positive_number_of_seconds(redis_server, tmp_path, value):
    res = run_cli(
        "cache",
        "push",
        f"--lock-timeout={value}",
        "--cache-dir",
        str(tmp_path),
        "--remote-url",
        redis_server.url,
        env={},
    )
    assert res.returncode == 2 and "--lock-timeout" in res.stderr, res.stderr


def test_push_and_pull_of_a_kernel_that_matches_nothing_name_where_they_looked(redis_server, tmp_path):
    url = ["--remote-url", redis_server.url]
    (tmp_path / "a").mkdir()
    res = run_cli("cache", "push", "--kernel", "add", "--cache-dir", str(tmp_path / "a"), *url, env={})
    assert res.returncode == 1 and f"no entries for kernel 'add' in {tmp_path / 'a'}," in res.stderr, res.stderr
    res = run_cli("cache", "pull", "--kernel", "add", "--cache-dir", str(tmp_path / "a"), *url, env={})
    assert res.returncode == 1 and f"no entries for kernel 'add' in {redis_server.url}," in res.stderr, res.stderr


def test_pull_of_a_kernel_whose_only_entry_is_unreadable_says_why_nothing_matched(redis_server, tmp_path):
    entry, _ = entry_of()
    key = RedisCache(redis_server.url).key_of(entry.location, entry.entry_id)
    redis_server.client().set(key, b"not a record")
    res = run_cli(
        "cache", "pull", "--kernel", "add", "--cache-dir", str(tmp_path), "--remote-url", redis_server.url, env={}
    )
    assert res.returncode == 1 and "no entries for kernel 'add'" in res.stderr, res.stderr
    assert f"refused a record from Redis (Redis key {key} is not valid JSON" in res.stderr, res.stderr


def test_pull_says_which_entries_it_skipped_and_copies_the_rest(redis_server, tmp_path):
    tier = RedisCache(redis_server.url)
    entry, record = entry_of((1,))
    client = redis_server.client()
    client.set(tier.key_of(entry.location, entry.entry_id), record_json(record))
    bad = tier.key_of(entry.location, "0" * 32)
    client.set(bad, b"not a record")
    res = run_cli("cache", "pull", "--cache-dir", str(tmp_path), "--remote-url", redis_server.url, env={})
    assert res.returncode == 0 and "copied 1 entry" in res.stdout, res.stdout + res.stderr
    assert f"autotune cache pull: refused a record from Redis (Redis key {bad}" in res.stderr, res.stderr
    assert len(disk_entries(directory=tmp_path)) == 1


def test_a_control_character_in_why_redis_cannot_be_reached_is_escaped(tmp_path):
    res = run_cli(
        "cache",
        "list",
        "--remote",
        "--remote-url",
        "redis://bad\x1bhost.invalid:6379/0",
        "--cache-dir",
        str(tmp_path),
        env={"AUTOTUNE_REMOTE_CACHE_TIMEOUT_S": "2"},
    )
    assert res.returncode == 2 and "\x1b" not in res.stderr and "\\x1b" in res.stderr, res.stderr


def test_clear_autotune_cache_warns_when_redis_refuses_the_clear(redis_server):
    set_remote_cache(no_delete_user(redis_server))
    KernelCache("add", "src-1", "space-1", lambda cfg: True).get_or_tune((1,), DT, Tuner((1,)))
    removed, messages = caught(lambda: clear_autotune_cache(remote=True))
    assert removed == 1  # memory and disk
    assert any("could not clear the Redis cache" in m and "NoPermissionError" in m for m in messages), messages
