"""The Redis tier against a real redis-server: processes on 'different machines' (their own disk caches) share
one Redis, a SIGKILLed lease holder is taken over, Redis stopping mid-run costs one warning, TTL, clear, hostile
records, the CLI. Skipped, with the reason, only where no redis-server can be found."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("redis", reason="the redis client is not installed (pip install 'autotune[redis]')")

from test_cache import DT, Tuner, make_record  # noqa: E402

import autotune  # noqa: E402
from autotune import CacheWarning, OptionError, clear_autotune_cache, set_remote_cache, stats  # noqa: E402
from autotune.record import SCHEMA_VERSION  # noqa: E402
from autotune.storage import KernelCache, disk_entries  # noqa: E402
from autotune.storage.remote_config import clear_remote_settings, remote_tier  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent("""
    import json, os, random, sys, time
    from pathlib import Path

    work, tag, delay = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    from autotune.storage import KernelCache, device_fingerprint, runtime_versions, stats
    from autotune.record import Trial, TuningRecord
    from autotune.space import Config

    DT = ("torch.float32",)
    SPACE = [16, 32, 64, 128]
    kc = KernelCache("vadd", "src-hash", "space-sum", lambda cfg: cfg.get("BLOCK") in SPACE)
    while not (work / "go").exists():
        time.sleep(0.005)

    def tune():
        with open(work / "tunings.log", "a") as f:
            f.write(f"{tag}\\n")
        (work / f"tuning-{tag}").write_text(repr(time.time()))   # when this node began tuning
        if delay == "gate":  # tune until the test says so
            deadline = time.monotonic() + 300
            while not (work / "finish").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            time.sleep(float(delay))
        winner = random.Random(os.getpid()).choice(SPACE)
        tv, pv = runtime_versions()
        trials = [Trial(config=Config(BLOCK=b), status="ok", median_ms=1.0 if b == winner else 2.0, min_ms=1.0,
                        samples_ms=[1.0]) for b in SPACE]
        return TuningRecord(kernel="vadd", source_hash="src-hash", device=device_fingerprint(), triton_version=tv,
                            torch_version=pv, space_checksum="space-sum", key=[1024], dtypes=list(DT),
                            winner=Config(BLOCK=winner), trials=trials, tuning_s=1.0)

    rec, how = kc.get_or_tune((1024,), DT, tune)
    print(json.dumps({"tag": tag, "how": how, "winner": rec.winner["BLOCK"], "stats": stats()["vadd"]}))
""")


def spawn(work: Path, tag: str, url: str, delay: float | str, **env_extra: str) -> subprocess.Popen:
    """A node tuning the key for `delay` seconds, or with delay="gate" until the file work/finish exists."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(
        AUTOTUNE_CACHE_DIR=str(work / f"disk-{tag}"), AUTOTUNE_REMOTE_CACHE=url, TRITON_INTERPRET="1", **env_extra
    )
    return subprocess.Popen(
        [sys.executable, str(work / "worker.py"), str(work), tag, str(delay)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(proc: subprocess.Popen, timeout: float = 180) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def commands(server, name: str) -> int:
    """How many `name` commands (lowercase, e.g. "set") the Redis server has run since it started."""
    return int(server.client().info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


def wait_until(what: str, ready, proc: subprocess.Popen | None = None) -> None:
    """Poll `ready()` (a gate, not a timing: the bound is only there so a broken run fails instead of hanging)."""
    deadline = time.monotonic() + 120
    while not ready():
        assert proc is None or proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


@pytest.fixture
def work(tmp_path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    (d / "worker.py").write_text(WORKER)
    return d


def new_cache() -> KernelCache:
    return KernelCache("add", "src-1", "space-1", lambda cfg: cfg.get("BLOCK") in (32, 64, 128))


# ---------------------------------------------------------------------------------------------- the fleet


def test_two_nodes_with_their_own_disks_tune_a_key_once(work, redis_server):
    procs = [spawn(work, tag, redis_server.url, delay=1.5) for tag in ("a", "b")]
    (work / "go").touch()
    results = sorted((finish(p) for p in procs), key=lambda r: r["how"])
    assert (work / "tunings.log").read_text().count("\n") == 1
    assert [r["how"] for r in results] == ["remote", "tuned"]
    assert results[0]["winner"] == results[1]["winner"]
    assert results[0]["stats"]["remote_hits"] == 1
    # The node that read Redis has the winner on its own disk now.
    for tag in ("a", "b"):
        assert len(disk_entries(directory=work / f"disk-{tag}")) == 1


def test_a_lease_is_renewed_while_its_holder_tunes_longer_than_the_lease(work, redis_server):
    """The holder tunes until its 3 s lease was renewed three times (every 1 s: past the lease's first expiry) and
    the waiter asked for the lease again after that; the waiter never took it over, and reads the holder's
    record."""
    lease = {"AUTOTUNE_REMOTE_CACHE_LEASE_S": "3"}
    procs = [spawn(work, tag, redis_server.url, delay="gate", **lease) for tag in ("a", "b")]
    (work / "go").touch()
    wait_until("a node takes the lease", lambda: any(work.glob("tuning-*")))
    wait_until("three renewals", lambda: commands(redis_server, "eval") >= 3)  # a renewal is one EVAL
    asked = commands(redis_server, "set")  # the lease's SET NX: the holder's once, then the waiter's attempts
    wait_until("the waiter asks again", lambda: commands(redis_server, "set") > asked)
    (work / "finish").touch()
    results = sorted((finish(p) for p in procs), key=lambda r: r["how"])
    assert [r["how"] for r in results] == ["remote", "tuned"]
    assert (work / "tunings.log").read_text().count("\n") == 1  # the waiter never took the lease over


def test_a_sigkilled_lease_holder_is_taken_over(work, redis_server):
    lease = {"AUTOTUNE_REMOTE_CACHE_LEASE_S": "3"}
    holder = spawn(work, "a", redis_server.url, delay="gate", **lease)
    (work / "go").touch()
    wait_until("a takes the lease", (work / "tuning-a").exists, holder)
    asked = commands(redis_server, "set")  # a's SET NX of the lease
    waiter = spawn(work, "b", redis_server.url, delay=0.1, **lease)
    wait_until("b asks for the lease a holds", lambda: commands(redis_server, "set") > asked, waiter)
    assert waiter.poll() is None and not (work / "tuning-b").exists()  # b is waiting on a's lease
    killed_at = time.time()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    result = finish(waiter)
    assert result["how"] == "tuned"
    assert (work / "tunings.log").read_text().split() == ["a", "b"]
    # b began tuning only once a was dead: a waiter that did not wait for the live lease (a lease any node can
    # take) also tunes once, after a, and passed the checks above.
    assert float((work / "tuning-b").read_text()) >= killed_at
    assert len(redis_server.client().keys("autotune:entry:*")) == 1


def test_a_record_tuned_on_one_node_is_read_by_a_decorated_kernel_elsewhere(tmp_path, monkeypatch, redis_server):
    set_remote_cache(redis_server.url)
    first = new_cache()
    record, how = first.get_or_tune((1,), DT, Tuner((1,)))
    assert how == "tuned"
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "other-node"))
    second = new_cache()
    tuner = Tuner((1,), winner=128)
    got, how = second.get_or_tune((1,), DT, tuner)
    assert (how, tuner.calls, got.winner) == ("remote", 0, record.winner)
    assert len(disk_entries()) == 1


# ---------------------------------------------------------------------------------------------- faults


def test_redis_stopped_mid_run_warns_once_and_launches_go_on(redis_server, monkeypatch):
    from test_cache_e2e import call, load_kernel  # call() checks the output against x + y

    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", redis_server.url)
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE_TIMEOUT_S", "0.5")
    vadd = load_kernel(Path(os.environ["AUTOTUNE_CACHE_DIR"]).parent)
    call(vadd, 256)
    assert len(redis_server.client().keys("autotune:entry:*")) == 1
    redis_server.stop()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(vadd, 100)
        call(vadd, 300)
    unreachable = [w for w in caught if issubclass(w.category, CacheWarning) and "unreachable" in str(w.message)]
    assert len(unreachable) == 1, [str(w.message) for w in caught]
    assert sorted(tuple(e.record.key) for e in disk_entries()) == [(100,), (256,), (300,)]


def test_hostile_records_in_redis_are_refused(redis_server):
    set_remote_cache(redis_server.url)
    kc = new_cache()
    entry = kc.entry((1,), DT)
    key = remote_tier().key_of(entry.location, entry.entry_id)
    client = redis_server.client()
    for payload, expect in [
        (b"\x80\x04pickle", "refused"),
        (b'{"schema_version": %d}' % SCHEMA_VERSION, "refused"),
        (b"[" * 100000, "refused"),
        (b"x" * (17 << 20), "limit"),
    ]:
        client.set(key, payload)
        kc.forget()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            record, how = kc.get_or_tune((1,), DT, Tuner((1,)), force=True)
        assert how == "tuned"
        assert any(issubclass(w.category, CacheWarning) and expect in str(w.message) for w in caught), payload[:20]
        assert json.loads(client.get(key))["winner"] == record.winner  # replaced by the good record
    newer = json.dumps({"schema_version": SCHEMA_VERSION + 1, "kernel": "add"}).encode()
    client.set(key, newer)
    kc.forget()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert kc.get_or_tune((1,), DT, Tuner((1,)), force=True)[1] == "tuned"
    assert client.get(key) == newer  # a newer autotune's entry stays


def test_configuration_errors_are_raised_early(monkeypatch):
    pytest.importorskip("triton")
    with pytest.raises(OptionError, match="not a Redis URL"):
        set_remote_cache("http://cache:6379")
    with pytest.raises(OptionError, match="at least 0.001"):
        set_remote_cache("redis://127.0.0.1:6379/0", ttl_s=-1)
    # a redis:// URL that the client cannot parse blames where it came from: the call, or the environment
    with pytest.raises(OptionError, match=r"^set_remote_cache: 'redis://localhost:notaport/0' is not a Redis URL"):
        set_remote_cache("redis://localhost:notaport/0")
    clear_remote_settings()
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", "redis://localhost:notaport/0")
    with pytest.raises(OptionError, match=r"^AUTOTUNE_REMOTE_CACHE: 'redis://localhost:notaport/0' is not a Redis"):
        new_cache()
    monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE", "cache:6379")
    with pytest.raises(OptionError, match="AUTOTUNE_REMOTE_CACHE"):
        new_cache()  # at decoration, not at a launch


# ---------------------------------------------------------------------------------------------- TTL, clear, CLI


def test_ttl_expires_entries(redis_server):
    set_remote_cache(redis_server.url, ttl_s=1.0)
    new_cache().get_or_tune((1,), DT, Tuner((1,)))
    client = redis_server.client()
    (key,) = client.keys("autotune:entry:*")
    assert 0 < client.pttl(key) <= 1000
    deadline = time.monotonic() + 30
    while client.exists(key):
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_clear_keeps_the_fleet_s_entries_unless_remote(redis_server):
    set_remote_cache(redis_server.url)
    kc = new_cache()
    kc.get_or_tune((1,), DT, Tuner((1,)))
    kc.get_or_tune((2,), DT, Tuner((2,)))
    client = redis_server.client()
    assert clear_autotune_cache("add", key=(1,)) == 1
    assert len(client.keys("autotune:entry:*")) == 2 and len(disk_entries()) == 1
    assert clear_autotune_cache("add", key=(1,), remote=True) == 1
    assert kc.clear(remote=True) == 1  # memory, disk and Redis: one entry
    assert client.keys("autotune:entry:*") == [] and disk_entries() == []


def run_cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=full, timeout=120
    )


def test_cli_lists_pushes_pulls_and_clears_the_remote_tier(tmp_path, redis_server):
    from cache_files import write_record

    write_record(make_record((1,)), tmp_path / "node-a")
    write_record(make_record((2,)), tmp_path / "node-a")
    a = {"AUTOTUNE_CACHE_DIR": str(tmp_path / "node-a"), "AUTOTUNE_REMOTE_CACHE": redis_server.url}
    b = {"AUTOTUNE_CACHE_DIR": str(tmp_path / "node-b")}
    res = run_cli("cache", "push", env=a)
    assert res.returncode == 0 and "copied 2 entries" in res.stdout, res.stderr
    assert "already there" in run_cli("cache", "push", env=a).stdout
    res = run_cli("cache", "list", "--remote", "--remote-url", redis_server.url, env=b)
    assert res.returncode == 0 and "2 entries in redis://127.0.0.1" in res.stdout, res.stderr
    res = run_cli("cache", "list", "--remote", "--kernel", "ad", "--remote-url", redis_server.url, env=b)
    assert res.returncode == 1 and "no entries for kernel 'ad' in redis://" in res.stderr, res.stderr
    res = run_cli("cache", "pull", "--kernel", "add", "--remote-url", redis_server.url, env=b)
    assert res.returncode == 0 and "copied 2 entries" in res.stdout, res.stderr
    assert len(disk_entries(directory=tmp_path / "node-b")) == 2
    res = run_cli("cache", "clear", "--remote", "--kernel", "add", "--key", "1", env=a)
    assert res.returncode == 0 and "removed 1 entry" in res.stdout, res.stderr
    assert len(redis_server.client().keys("autotune:entry:*")) == 1
    redis_server.stop()
    res = run_cli("cache", "list", "--remote", env=a)
    assert res.returncode == 2 and "cannot reach the Redis cache" in res.stderr
    res = run_cli("cache", "list", "--remote", env=b)
    assert res.returncode == 2 and "AUTOTUNE_REMOTE_CACHE" in res.stderr


def test_cli_picks_one_module_s_kernel_of_a_shared_name_in_redis(tmp_path, redis_server):
    """`--kernel module:qualname` in list --remote, push, pull and clear --remote: that kernel alone; the short name
    every module's; the listing names each by its kernel_id where two share a name."""
    import msgspec
    from cache_files import write_record

    for kernel_id, winner in (("m1:add", 32), ("m2:add", 128)):
        write_record(
            msgspec.structs.replace(make_record((1,), winner=winner), kernel_id=kernel_id), tmp_path / "node-a"
        )
    a = {"AUTOTUNE_CACHE_DIR": str(tmp_path / "node-a"), "AUTOTUNE_REMOTE_CACHE": redis_server.url}
    b = {"AUTOTUNE_CACHE_DIR": str(tmp_path / "node-b"), "AUTOTUNE_REMOTE_CACHE": redis_server.url}
    res = run_cli("cache", "push", "--kernel", "m2:add", env=a)
    assert res.returncode == 0 and "copied 1 entry" in res.stdout, res.stderr
    assert run_cli("cache", "push", "--kernel", "add", env=a).stdout.startswith("push: copied 1 entry")
    res = run_cli("cache", "list", "--remote", env=b)
    assert res.returncode == 0, res.stderr
    assert [line.split()[0] for line in res.stdout.splitlines()[2:4]] == ["m1:add", "m2:add"]
    data = json.loads(run_cli("cache", "list", "--remote", "--kernel", "m1:add", "--json", env=b).stdout)
    assert [(d["kernel_id"], d["record"]["winner"]) for d in data] == [("m1:add", {"BLOCK": 32})]
    res = run_cli("cache", "list", "--remote", "--kernel", "m3:add", env=b)
    assert res.returncode == 1 and "no entries for kernel 'm3:add'" in res.stderr
    res = run_cli("cache", "pull", "--kernel", "m1:add", env=b)
    assert res.returncode == 0 and "copied 1 entry" in res.stdout, res.stderr
    assert [e.record.kernel_id for e in disk_entries(directory=tmp_path / "node-b")] == ["m1:add"]
    res = run_cli("cache", "clear", "--remote", "--kernel", "m1:add", env=a)
    assert res.returncode == 0 and "removed 1 entry (kernel 'm1:add')" in res.stdout, res.stderr
    set_remote_cache(redis_server.url)
    assert [e.record.kernel_id for e in remote_tier().entries("add")] == ["m2:add"]


def test_stats_count_remote_hits(redis_server, monkeypatch, tmp_path):
    set_remote_cache(redis_server.url)
    new_cache().get_or_tune((1,), DT, Tuner((1,)))
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "elsewhere"))
    new_cache().get_or_tune((1,), DT, Tuner((1,)))
    assert stats()["add"]["remote_hits"] == 1 and stats()["add"]["tunings"] == 1
    assert autotune.set_remote_cache is set_remote_cache


def test_a_slow_or_full_redis_costs_a_warning_not_a_failed_or_blocked_launch(redis_server):
    set_remote_cache(redis_server.url, timeout_s=0.3)
    client = redis_server.client()
    client.config_set("maxmemory", "1")  # full: every write is refused (OOM)
    client.config_set("maxmemory-policy", "noeviction")
    kc = new_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record, how = kc.get_or_tune((1,), DT, Tuner((1,)))
    assert how == "tuned" and len(disk_entries()) == 1
    assert any(issubclass(w.category, CacheWarning) and "maxmemory" in str(w.message) for w in caught)
    client.config_set("maxmemory", "0")
    other = new_cache()
    # Slow: nothing answers for two minutes (not even CLIENT UNPAUSE: the fixture stops the paused server). The
    # pause ends after `paused_until`, as it starts after it is asked for.
    paused_until = time.monotonic() + 120
    client.client_pause(120_000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert other.get_or_tune((2,), DT, Tuner((2,)))[1] == "tuned"
    assert time.monotonic() < paused_until  # it did not wait for Redis to answer: a command timed out (0.3 s)
    assert any(issubclass(w.category, CacheWarning) and "unreachable" in str(w.message) for w in caught)


def test_settings_that_would_break_a_launch_are_refused_and_secrets_stay_out_of_messages(redis_server):
    from autotune.storage.redis_tier import RedisCache

    for bad in ({"ttl_s": float("inf")}, {"lease_s": float("inf")}, {"ttl_s": 0.0001}):
        with pytest.raises(OptionError):
            set_remote_cache(redis_server.url, **bad)
    shown = RedisCache("redis://user:hunter2@127.0.0.1:1/0?password=hunter2&db=0").url
    assert "hunter2" not in shown and "127.0.0.1:1" in shown


def test_an_oversized_value_is_refused_without_downloading_it(redis_server):
    set_remote_cache(redis_server.url)
    kc = new_cache()
    entry = kc.entry((1,), DT)
    key = remote_tier().key_of(entry.location, entry.entry_id)
    client = redis_server.client()
    client.setrange(key, 64 << 20, b"x")  # 64 MB of zeros, made server-side
    traffic = client.info("stats")["total_net_output_bytes"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert kc.get_or_tune((1,), DT, Tuner((1,)))[1] == "tuned"
    assert any("limit" in str(w.message) for w in caught)
    assert client.info("stats")["total_net_output_bytes"] - traffic < 1 << 20  # never sent to us


def test_clearing_everything_remotely_also_removes_unreadable_entries(redis_server, tmp_path):
    set_remote_cache(redis_server.url)
    client = redis_server.client()
    client.set("autotune:entry:add:" + "0" * 32, b"not a record")
    new_cache().get_or_tune((1,), DT, Tuner((1,)))
    assert len(client.keys("autotune:entry:*")) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clear_autotune_cache(remote=True)
    assert client.keys("autotune:entry:*") == []


def test_push_and_pull_of_a_kernel_that_matches_nothing_exit_1_naming_it_and_the_close_one(
    tmp_path, redis_server, capsys
):
    """`push`/`pull --kernel K` where K matches nothing: exit 1 with the kernel and "Did you mean", as `cache list`
    does, not "copied 0 entries"; so do `list --remote`/`clear --remote`. Unfiltered, an empty source is exit 0."""
    from cache_files import write_record

    from autotune import cli

    node_a, node_b = tmp_path / "node-a", tmp_path / "node-b"
    url = ["--remote-url", redis_server.url]
    assert cli.main(["cache", "pull", "--cache-dir", str(node_b), *url]) == 0  # nothing anywhere: fine
    assert "copied 0 entries" in capsys.readouterr().out
    write_record(make_record((1,), kernel="add_kernel"), node_a)
    for command, where in (("push", node_a), ("pull", node_b)):
        if command == "pull":
            assert cli.main(["cache", "push", "--cache-dir", str(node_a), *url]) == 0
            capsys.readouterr()
        assert cli.main(["cache", command, "--kernel", "add_kernl", "--cache-dir", str(where), *url]) == 1
        out = capsys.readouterr()
        assert "copied" not in out.out, out.out
        assert f"autotune cache {command}: no entries for kernel 'add_kernl'" in out.err
        assert out.err.rstrip().endswith(". Did you mean 'add_kernel'?"), out.err
    assert disk_entries(directory=node_b) == []
    for args in (["list", "--remote"], ["clear", "--remote"]):
        assert cli.main(["cache", *args, "--kernel", "add_kernl", "--cache-dir", str(node_a), *url]) == 1
        assert capsys.readouterr().err.rstrip().endswith(". Did you mean 'add_kernel'?"), args
    assert cli.main(["cache", "pull", "--kernel", "add_kernel", "--cache-dir", str(node_b), *url]) == 0
    assert "copied 1 entry" in capsys.readouterr().out and len(disk_entries(directory=node_b)) == 1
