"""Storage fixes from review: a clear by name or of everything is a barrier and clears the remote tier before the
disk; oversized records are trimmed or not written; hostile entries (deep keys, lone surrogates) are refused when
parsed; `cache push` names what it could not read; the disk tier reads no mode switch; `kernel.record(key)` and a
clear by name normalise the key. Real kernels in the interpreter, real cache files, a real redis-server."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import add_and_check, add_kernel

from autotune import autotune as autotune_decorator
from autotune import clear_autotune_cache
from autotune.storage import disk_entries, journal
from autotune.storage.disk import DiskCache

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def _kernel():
    return autotune_decorator(
        space={"BLOCK": [16, 32]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning={"warmup": 0, "reps": 1, "isolate": "off"},
    )(add_kernel)


def _lookup_while_removing(patch, tier_class: type, kernel, order: list[str] | None = None) -> list[str]:
    """Make `tier_class.remove` first run a real call of `kernel` on another thread (a lookup racing the clear, after
    memory was forgotten and before that tier's entries go); `order` gets the tiers' names in the order removed."""
    order = [] if order is None else order
    real_remove = tier_class.remove

    def remove(self, *args, **kwargs):
        order.append(self.name)
        errors: list[BaseException] = []

        def call():
            try:
                add_and_check(kernel, 64)
            except BaseException as exc:  # reported by the test below
                errors.append(exc)

        racer = threading.Thread(target=call)
        racer.start()
        racer.join(120)
        assert not racer.is_alive() and errors == []
        return real_remove(self, *args, **kwargs)

    patch.setattr(tier_class, "remove", remove)
    return order


CLEARS = {"everything": {}, "name": {"kernel": "add_kernel"}, "name and key": {"kernel": "add_kernel", "key": (64,)}}


@pytest.mark.parametrize("how", list(CLEARS))
def test_a_lookup_racing_the_disk_clear_keeps_nothing_in_memory(monkeypatch, how):
    kernel = _kernel()
    add_and_check(kernel, 64)
    kernel.cache.forget()  # the winner is on disk only: a lookup reads it and would put it in memory
    with monkeypatch.context() as patch:
        _lookup_while_removing(patch, DiskCache, kernel)
        assert clear_autotune_cache(**CLEARS[how]) == 1
    assert kernel.cache.records() == {} and disk_entries("add_kernel") == []


@pytest.mark.parametrize("how", list(CLEARS))
def test_a_remote_clear_clears_redis_before_the_disk(monkeypatch, redis_server, how):
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'autotune[redis]')")
    from autotune import set_remote_cache
    from autotune.storage.redis_tier import RedisCache

    set_remote_cache(redis_server.url)
    kernel = _kernel()
    add_and_check(kernel, 64)
    kernel.cache.forget()
    with monkeypatch.context() as patch:
        order = _lookup_while_removing(patch, RedisCache, kernel, [])
        _lookup_while_removing(patch, DiskCache, kernel, order)
        clear_autotune_cache(**CLEARS[how], remote=True)
    assert order == ["remote", "disk"]
    assert kernel.cache.records() == {} and disk_entries("add_kernel") == []
    assert redis_server.client().keys("autotune:entry:*") == []


# ------------------------------------------------------------------------------------ the journal, by name


def _note_of_a_dead_process(kernel_id: str, key: tuple, dtypes: tuple, config: dict) -> None:
    """A real process enters `measuring` and exits inside it, as a crash would."""
    code = (
        f"import os, sys; sys.path.insert(0, {str(REPO)!r}); from autotune.storage import journal\n"
        f"with journal.measuring({kernel_id!r}, {key!r}, {dtypes!r}, {config!r}):\n    os._exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], env=dict(os.environ), timeout=120).returncode == 3


class Act(enum.IntEnum):
    RELU = 1


def test_a_clear_by_name_with_an_enum_key_forgets_that_key_s_crash_notes():
    from autotune import Config
    from autotune.keys import normalise_key
    from autotune.storage import KernelCache

    key = normalise_key((64, Act.RELU))
    cache = KernelCache("act_add", "src", "space", lambda c: True, identity="m:act_add", key_fields=("n", "act"))
    _note_of_a_dead_process(cache.journal_id, key, ("torch.float32",), {"BLOCK": 64})
    assert set(journal.crashed(cache.journal_id, key, ("torch.float32",))) == {Config(BLOCK=64)}
    clear_autotune_cache("act_add", key=(64, Act.RELU))
    assert journal.crashed(cache.journal_id, key, ("torch.float32",)) == {}


# ------------------------------------------------------------------------------------ oversized records


def _tuned_record(kernel):
    """A real tuning's record of `kernel` and its entry: the winner, the re-measured configs and their samples."""
    add_and_check(kernel, 64)
    ((key, dtypes), record) = next(iter(kernel.cache.records().items()))
    return record, kernel.cache.entry(key, dtypes)


def _with_trials(record, count: int, error: str | None = None):
    """`record` with `count` more trials (an exhaustive tuning of a large space), each with the samples of the
    default preset, or with `error` as its text."""
    import msgspec

    from autotune import Config, TrialStatus

    template = record.trials[0]
    extra = [
        msgspec.structs.replace(
            template,
            config=Config(BLOCK=16, A=i % 100, B=i // 100),
            samples_ms=[0.123456789 + j for j in range(10)],
            **(
                {"status": TrialStatus.COMPILE_ERROR, "error": error, "median_ms": None, "min_ms": None}
                if error
                else {}
            ),
        )
        for i in range(count)
    ]
    return msgspec.structs.replace(record, trials=[*record.trials, *extra])


def test_an_oversized_record_is_written_without_the_losers_samples_and_read_back():
    from autotune.storage.entries import MAX_ENTRY_BYTES, parse_record, record_json

    record, entry = _tuned_record(_kernel())
    big = _with_trials(record, 50_000)
    assert len(record_json(big)) > MAX_ENTRY_BYTES
    disk = DiskCache()
    assert disk.put(entry, big)
    path = disk.path(entry)
    assert path.stat().st_size <= MAX_ENTRY_BYTES
    back = disk.get(entry)
    assert back is not None and parse_record(path.read_bytes(), path) == back
    assert back.winner == record.winner and len(back.trials) == len(big.trials)
    kept = {back.winner, *back.remeasured}
    assert all(t.samples_ms for t in back.trials if t.config in kept)  # the winner's and re-measured samples stay
    assert all(t.samples_ms == [] and t.median_ms is not None for t in back.trials if t.config not in kept)


def test_a_record_too_large_even_without_samples_is_not_written_and_the_warning_says_why():
    from autotune import CacheWarning

    record, entry = _tuned_record(_kernel())
    disk = DiskCache()
    before = disk.path(entry).read_bytes()
    huge = _with_trials(record, 50_000, error="x" * 500)
    with pytest.warns(CacheWarning) as caught:
        assert disk.put(entry, huge) is False
    (message,) = [str(w.message) for w in caught]
    assert f"over the {16 << 20}-byte limit" in message and "50002 trials are too many" in message
    assert disk.path(entry).read_bytes() == before  # the readable entry stays


def test_an_oversized_record_in_redis_is_trimmed_or_refused(redis_server):
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'autotune[redis]')")
    from autotune import CacheWarning
    from autotune.storage.redis_tier import RedisCache

    record, entry = _tuned_record(_kernel())
    tier = RedisCache(redis_server.url)
    assert tier.put(entry, _with_trials(record, 50_000))
    back = tier.get(entry)
    assert back is not None and len(back.trials) == 50_002 and back.winner == record.winner
    with pytest.warns(CacheWarning, match="too many to store"):
        assert tier.put(entry, _with_trials(record, 50_000, error="x" * 500)) is False
    assert tier.get(entry) == back


# ------------------------------------------------------------------------------------ hostile entries


def run_cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=full, timeout=120
    )


def _hostile_copy(kernel, change) -> Path:
    """A real tuning's entry file of `kernel`, copied beside it under another name with `change` applied to its JSON
    object (schema-valid still); returns the copy's path."""
    import json

    add_and_check(kernel, 64)
    (entry,) = disk_entries("add_kernel")
    data = json.loads(entry.path.read_text())
    change(data)
    hostile = entry.path.parent / ("0" * 32 + ".json")
    hostile.write_text(json.dumps(data))
    return hostile


def _nest(data: dict, depth: int) -> None:
    value = 64
    for _ in range(depth):
        value = [value]
    data["key"] = [value]


def test_an_entry_whose_key_nests_too_deep_is_refused_and_breaks_nothing():
    from autotune import CacheEntryError
    from autotune.storage.entries import parse_record

    kernel = _kernel()
    hostile = _hostile_copy(kernel, lambda data: _nest(data, 950))
    with pytest.raises(CacheEntryError, match="nested deeper than 16 levels"):  # keyspec's limit on a key
        parse_record(hostile.read_bytes(), hostile)
    res = run_cli("cache", "list", env={})
    assert res.returncode == 0 and "1 unusable" in res.stdout and "RecursionError" not in res.stderr, res.stderr
    res = run_cli("cache", "show", "add_kernel", env={})
    assert "RecursionError" not in res.stderr, res.stderr
    assert clear_autotune_cache(kernel, key=(64,)) == 1  # the good entry; the hostile one is not of that key
    hostile.write_text(hostile.read_text().replace("[" * 950, "[" * 14).replace("]" * 950, "]" * 14))
    assert parse_record(hostile.read_bytes(), hostile).key  # a key within the limit is read


def test_an_entry_with_a_lone_surrogate_in_its_text_is_refused_and_push_says_so(redis_server):
    from autotune import CacheEntryError
    from autotune.storage.entries import parse_record

    kernel = _kernel()
    hostile = _hostile_copy(kernel, lambda data: data.update(kernel_id=data["kernel_id"] + "\udcff"))
    assert "\\udcff" in hostile.read_text()
    with pytest.raises(CacheEntryError, match="not valid Unicode"):
        parse_record(hostile.read_bytes(), hostile)
    res = run_cli("cache", "push", "--remote-url", redis_server.url, env={})
    assert res.returncode == 0 and "copied 1 entry" in res.stdout, res.stdout + res.stderr
    assert "UnicodeEncodeError" not in res.stderr
    assert "1 entry could not be read and is not copied" in res.stderr and "not valid Unicode" in res.stderr


def test_push_names_the_entries_it_cannot_read_and_copies_the_others(redis_server):
    import json

    kernel = _kernel()
    newer = _hostile_copy(kernel, lambda data: data.update(schema_version=99))
    corrupt = newer.with_name("1" * 32 + ".json")
    corrupt.write_text("{not json")
    res = run_cli("cache", "push", "--remote-url", redis_server.url, env={})
    assert res.returncode == 0 and "copied 1 entry" in res.stdout, res.stdout + res.stderr  # as pull: said, not fatal
    assert "2 entries could not be read and are not copied" in res.stderr, res.stderr
    assert f"{newer} has schema version 99" in res.stderr and f"{corrupt} is not valid JSON" in res.stderr
    assert len(redis_server.client().keys("autotune:entry:*")) == 1
    assert json.loads(newer.read_text())["schema_version"] == 99  # left as it was


# ------------------------------------------------------------------------------------ the disk tier reads no mode


def test_pull_over_a_corrupt_entry_reads_no_offline_switch(redis_server, monkeypatch):
    from autotune import set_remote_cache

    set_remote_cache(redis_server.url)
    add_and_check(_kernel(), 64)  # the winner in Redis and on disk
    (entry,) = disk_entries("add_kernel")
    for value in ("enabled", "1"):  # not a switch; on: neither is the disk tier's business in a pull
        entry.path.write_text("{corrupt")
        res = run_cli("cache", "pull", "--remote-url", redis_server.url, env={"AUTOTUNE_OFFLINE": value})
        assert res.returncode == 0 and "copied 1 entry" in res.stdout, res.stdout + res.stderr
        assert "OptionError" not in res.stderr and "left as it is" not in res.stderr, res.stderr
        assert "is not valid JSON" in res.stderr and "ignoring it" in res.stderr
        assert disk_entries("add_kernel")[0].record is not None  # replaced by the pulled entry, as said


# ------------------------------------------------------------------------------------ record(key) by an enum


@triton.jit
def act_kernel(x, out, n, act, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * act, mask=mask)


def test_record_finds_a_key_given_as_the_call_gave_it():
    kernel = autotune_decorator(
        space={"BLOCK": [16, 32]},
        key=["n", "act"],
        grid="(cdiv(n, $BLOCK),)",
        tuning={"warmup": 0, "reps": 1, "isolate": "off"},
    )(act_kernel)
    x, out = torch.rand(64), torch.empty(64)
    kernel(x, out, 64, Act.RELU)
    assert torch.allclose(out, x)
    record = kernel.record((64, Act.RELU))
    assert record.key == [64, "Act.RELU"] and record is kernel.record()
    assert clear_autotune_cache(kernel, key=(64, Act.RELU)) == 1
