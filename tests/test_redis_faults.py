"""The Redis tier's faults against a real redis-server: a mistyped URL option is an OptionError at decoration, any
client failure is a warning and a miss, a key of another type does not hide the entries after it, an explicit
clear tries Redis now and says when it cannot, a refused password names the setting to fix, `push` reports what it
could not copy. Skipped, with the reason, only where no redis-server can be found."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("redis", reason="the redis client is not installed (pip install 'autotune[redis]')")

from cache_files import write_record  # noqa: E402
from test_cache import DT, Tuner, make_record  # noqa: E402

from autotune import CacheWarning, OptionError, clear_autotune_cache, set_remote_cache  # noqa: E402
from autotune.storage import KernelCache, disk_entries  # noqa: E402
from autotune.storage.remote_config import remote_tier  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def new_cache() -> KernelCache:
    return KernelCache("add", "src-1", "space-1", lambda cfg: cfg.get("BLOCK") in (32, 64, 128))


def run_cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=full, timeout=120
    )


def caught_cache_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


# ---------------------------------------------------------------------------------------------- configuration


def test_an_unknown_url_option_is_an_option_error_at_decoration_not_a_type_error_at_launch(redis_server, monkeypatch):
    url = redis_server.url + "?socket_timeot=2"  # a typo of socket_timeout
    with pytest.raises(OptionError, match=r"^set_remote_cache: .*'socket_timeot'.*Did you mean 'socket_timeout'"):
        set_remote_cache(url)
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", url)
    with pytest.raises(OptionError, match=r"^AUTOTUNE_REMOTE_CACHE: .*'socket_timeot'"):
        new_cache()  # decoration
    res = run_cli("cache", "list", "--remote", env={})
    assert res.returncode == 2 and "'socket_timeot'" in res.stderr and "Traceback" not in res.stderr, res.stderr
    res = run_cli("cache", "list", "--remote", "--remote-url", url, env={})
    assert res.returncode == 2 and res.stderr.startswith("autotune cache list: --remote-url: "), res.stderr


def test_a_failure_the_client_raises_as_no_redis_error_is_a_warning_and_a_miss(redis_server):
    # Accepted when the tier is made, it fails inside the client at the first connection (AttributeError).
    url = redis_server.url + "?socket_keepalive_options=x"
    set_remote_cache(url)
    (record, how), messages = caught_cache_warnings(lambda: new_cache().get_or_tune((1,), DT, Tuner((1,))))
    assert how == "tuned" and len(disk_entries()) == 1
    assert len(messages) == 1 and "AttributeError" in messages[0], messages
    _, messages = caught_cache_warnings(lambda: new_cache().get_or_tune((2,), DT, Tuner((2,))))
    assert messages == []  # once per outage
    res = run_cli("cache", "list", "--remote", "--remote-url", url, env={})
    assert res.returncode == 2 and "AttributeError" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_refused_password_names_the_setting_to_fix(tmp_path, monkeypatch):
    from redis_process import RedisProcess, redis_server_path

    if redis_server_path() is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    server = RedisProcess(tmp_path / "redis", password="s3cret")
    try:
        for password in (None, "wrong"):
            set_remote_cache(server.url, password=password)
            (_, how), messages = caught_cache_warnings(
                lambda: new_cache().get_or_tune((1,), DT, Tuner((1,)), force=True)
            )
            assert how == "tuned"
            assert len(messages) == 1 and "refused the credentials" in messages[0], messages
            assert "AUTOTUNE_REMOTE_CACHE_PASSWORD" in messages[0] and "unreachable" not in messages[0]
        env = {"AUTOTUNE_REMOTE_CACHE": server.url, "AUTOTUNE_REMOTE_CACHE_PASSWORD": "wrong"}
        res = run_cli("cache", "list", "--remote", env=env)
        assert res.returncode == 2 and "AUTOTUNE_REMOTE_CACHE_PASSWORD" in res.stderr, res.stderr
        res = run_cli("cache", "list", "--remote", env={**env, "AUTOTUNE_REMOTE_CACHE_PASSWORD": "s3cret"})
        assert res.returncode == 0 and "no entries in" in res.stdout, res.stderr  # nothing got in
    finally:
        server.stop()


@pytest.mark.parametrize("command", ["list", "push", "clear"])
def test_a_bad_remote_url_option_is_blamed_on_the_option(command):
    extra = ["--remote"] if command in ("list", "clear") else []
    res = run_cli("cache", command, *extra, "--remote-url", "http://cache.internal:6379", env={})
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(
        f"autotune cache {command}: --remote-url: 'http://cache.internal:6379' is not a Redis URL"
    ), res.stderr


# ---------------------------------------------------------------------------------------------- listing, clearing


def test_a_key_of_another_type_is_skipped_and_hides_no_entry(redis_server, tmp_path):
    set_remote_cache(redis_server.url)
    kc = new_cache()
    for key in ((1,), (2,)):
        kc.get_or_tune(key, DT, Tuner(key))
    client = redis_server.client()
    stray = "autotune:entry:add:00000000"  # sorted before both entries
    client.hset(stray, "junk", "1")
    entries, messages = caught_cache_warnings(lambda: remote_tier().entries("add"))
    assert sorted(tuple(e.record.key) for e in entries) == [(1,), (2,)]
    assert any(stray in m and "WRONGTYPE" in m for m in messages), messages
    env = {"AUTOTUNE_REMOTE_CACHE": redis_server.url, "AUTOTUNE_CACHE_DIR": str(tmp_path / "other")}
    res = run_cli("cache", "list", "--remote", env=env)
    assert res.returncode == 0 and "2 entries in" in res.stdout, res.stdout + res.stderr
    res = run_cli("cache", "clear", "--remote", "--kernel", "add", "--key", "1", env=env)
    assert res.returncode == 0 and "removed 1 entry" in res.stdout, res.stdout + res.stderr
    assert clear_autotune_cache("add", remote=True) == 2  # (1,) in memory and on disk, (2,) too
    assert [k.decode() for k in client.keys("autotune:entry:*")] == [stray]
    clear_autotune_cache(remote=True)  # everything: the stray key too
    assert client.keys("autotune:entry:*") == []


def test_an_explicit_clear_tries_redis_now_even_within_the_pause_after_an_outage(redis_server):
    set_remote_cache(redis_server.url, timeout_s=0.5)
    new_cache().get_or_tune((1,), DT, Tuner((1,)))
    client = redis_server.client()
    saved = {k: client.get(k) for k in client.keys("autotune:entry:*")}
    redis_server.stop()
    _, messages = caught_cache_warnings(lambda: new_cache().get_or_tune((2,), DT, Tuner((2,))))
    assert any("unreachable" in m for m in messages), messages  # Redis is now left alone for 30 s
    removed, messages = caught_cache_warnings(lambda: clear_autotune_cache("add", key=(2,), remote=True))
    assert removed == 1  # memory and disk
    assert any("could not clear the Redis cache" in m and "stay" in m for m in messages), messages
    redis_server.start()  # back, same port, within the pause
    client = redis_server.client()
    for key, value in saved.items():
        client.set(key, value)
    _, messages = caught_cache_warnings(lambda: clear_autotune_cache(remote=True))
    assert client.keys("autotune:entry:*") == [] and messages == []


def test_a_clear_key_is_matched_in_redis_as_the_call_stored_it(redis_server):
    import triton.language as tl

    set_remote_cache(redis_server.url)
    stored = ("triton.language.core.dtype:fp32",)  # what KeyBuilder makes of tl.float32
    new_cache().get_or_tune(stored, DT, Tuner(stored))
    assert clear_autotune_cache("add", key=(tl.float32,), remote=True) == 1
    assert redis_server.client().keys("autotune:entry:*") == []


# ---------------------------------------------------------------------------------------------- push, pull


def test_push_to_a_full_redis_says_what_it_could_not_copy_and_exits_1(redis_server, tmp_path):
    write_record(make_record((1,)), tmp_path / "node")
    write_record(make_record((2,)), tmp_path / "node")
    client = redis_server.client()
    client.config_set("maxmemory", "1")  # full: every write is refused (OOM)
    client.config_set("maxmemory-policy", "noeviction")
    res = run_cli("cache", "push", "--cache-dir", str(tmp_path / "node"), "--remote-url", redis_server.url, env={})
    assert res.returncode == 1, res.stdout + res.stderr
    assert "copied 0 entries" in res.stdout
    assert "2 entries could not be copied (" in res.stderr and "maxmemory" in res.stderr, res.stderr
    client.config_set("maxmemory", "0")
    res = run_cli("cache", "push", "--cache-dir", str(tmp_path / "node"), "--remote-url", redis_server.url, env={})
    assert res.returncode == 0 and "copied 2 entries" in res.stdout, res.stdout + res.stderr
