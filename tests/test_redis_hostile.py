"""Hostile Redis contents (issue 40, items 7 and 8) against a real redis-server: a lease with no expiry, one too
large to download, one of another type or not a holder's record is taken over at once with one warning; a live
lease is not."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("redis", reason="the redis client is not installed (pip install 'autotune[redis]')")

from test_redis_edges import caught, entry_of, lease_key  # noqa: E402

from autotune.storage.redis_tier import MAX_LEASE_BYTES, RedisCache  # noqa: E402


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        (lambda c, k: c.set(k, "x"), "has no expiry"),
        (lambda c, k: c.set(k, b"{" * (MAX_LEASE_BYTES + 1), px=600_000), f"is over {MAX_LEASE_BYTES} bytes"),
        (lambda c, k: c.hset(k, "a", "b"), "is not a string"),
        (lambda c, k: c.set(k, "not json", px=600_000), "is not a holder record"),
    ],
)
def test_a_broken_lease_is_taken_over_at_once_and_warned_once(redis_server, plant, why):
    tier = RedisCache(redis_server.url, lease_s=30)
    entry, _ = entry_of()
    client = redis_server.client()
    key = lease_key(tier, entry)
    plant(client, key)
    # a limit far past what a takeover takes: without it the call would wait out the whole limit and give up
    lease, messages = caught(lambda: tier.lock(entry, timeout_s=120))
    assert lease is not None
    try:
        assert [m for m in messages if why in m and key in m and "took it over" in m] != [], messages
        assert 0 < client.pttl(key) <= 30_000  # now a real lease, with its expiry
    finally:
        lease.release()
    plant(client, key)
    lease, messages = caught(lambda: tier.lock(entry, timeout_s=120))
    lease.release()
    assert not [m for m in messages if "took it over" in m], messages  # once per lease key and process


def test_a_live_lease_is_not_taken_over(redis_server):
    tier = RedisCache(redis_server.url, lease_s=30)
    entry, _ = entry_of()
    holder = tier.lock(entry, timeout_s=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert RedisCache(redis_server.url).lock(entry, timeout_s=0.3) is None
    finally:
        holder.release()
