"""The crash journal's configs in a search and under prune= and isolation: a noted crash is recorded without using
up the budget, its note stays until a record holds it, and the warning says what happens to the config."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch
import triton
import triton.language as tl

from autotune import Config, CrashWarning, TrialStatus, Tuning, autotune
from autotune.decorator.tune_key import search_strategy
from autotune.storage import journal

TESTS = Path(__file__).parent
SPACE = [{"BLOCK": 16}, {"BLOCK": 32}, {"BLOCK": 64}, {"BLOCK": 128}]
FAST = dict(compile_workers=0, warmup=0, reps=1, refine_topk=0)


def _add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


searched_add = autotune(
    space=SPACE,
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    tuning=Tuning(strategy="random", max_configs=1, seed=3, **FAST),
)(triton.jit(_add))
timed_add = autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(max_seconds=1e-9, **FAST))(
    triton.jit(_add)
)
KEEP = {"blocks": (16, 32, 64, 128)}  # what pruned_add's prune= keeps: a test changes it between tunings
pruned_add = autotune(
    space=SPACE,
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    prune=lambda configs, named: [c for c in configs if c["BLOCK"] in KEEP["blocks"]],
    tuning=Tuning(**FAST),
)(triton.jit(_add))


def _call(kernel, n: int):
    args = (torch.rand(n), torch.rand(n), torch.empty(n), n)
    key, dtypes = kernel.key_of(kernel.bind(args, {}))
    return args, key, dtypes


def _note_of_a_dead_process(kernel_id: str, key: tuple, dtypes: tuple, config: dict) -> None:
    """A real process enters `measuring` and exits inside it, as a crash would."""
    code = (
        f"import os, sys; sys.path.insert(0, {str(TESTS.parent)!r}); from autotune.storage import journal\n"
        f"with journal.measuring({kernel_id!r}, {key!r}, {dtypes!r}, {config!r}):\n    os._exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], env=dict(os.environ), timeout=120).returncode == 3


def _run(kernel, args) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(*args)
    assert torch.allclose(args[2], args[0] + args[1])
    return [str(w.message) for w in caught if issubclass(w.category, CrashWarning)]


def test_a_search_records_a_noted_crash_and_still_tries_max_configs_others():
    args, key, dtypes = _call(searched_add, 100)
    (first,) = search_strategy(searched_add, key, searched_add.configs, dtypes).ask(1)  # what the search tries first
    _note_of_a_dead_process(searched_add.identity, key, dtypes, dict(first))
    assert len(_run(searched_add, args)) == 1  # raised NoValidConfigError: the crashed config used the one try
    trials = searched_add.record(key).trials
    assert [t.status for t in trials if t.config == first] == [TrialStatus.CRASHED]
    assert [t.status for t in trials if t.config != first] == [TrialStatus.OK]  # max_configs=1 other config ran
    assert journal.crashed(searched_add.identity, key, dtypes) == {}  # the record holds it: the note is dropped


def test_noted_crashes_do_not_use_up_an_exhaustive_tuning_s_max_seconds():
    args, key, dtypes = _call(timed_add, 100)
    for block in (16, 32):  # the first configs in space order: the first batch started
        _note_of_a_dead_process(timed_add.identity, key, dtypes, {"BLOCK": block})
    _run(timed_add, args)  # raised NoValidConfigError: the budget passed while "trying" the crashed configs
    record = timed_add.record(key)
    assert [record.trial_for(Config(BLOCK=b)).status for b in (16, 32)] == [TrialStatus.CRASHED] * 2
    assert any(t.ok for t in record.trials)


def test_a_noted_crash_prune_did_not_keep_stays_noted_and_is_recorded_when_it_is_kept(monkeypatch):
    args, key, dtypes = _call(pruned_add, 100)
    _note_of_a_dead_process(pruned_add.identity, key, dtypes, {"BLOCK": 16})
    monkeypatch.setitem(KEEP, "blocks", (32, 64))
    assert _run(pruned_add, args) == []  # not a candidate: nothing to warn of, nothing recorded
    assert pruned_add.record(key).trial_for(Config(BLOCK=16)).status is TrialStatus.SKIPPED
    assert set(journal.crashed(pruned_add.identity, key, dtypes)) == {Config(BLOCK=16)}  # was dropped: crash lost

    monkeypatch.setitem(KEEP, "blocks", (16, 32, 64, 128))  # other candidates: the entry is tuned again
    pruned_add.cache.forget(key)  # memory only (a memory hit runs no prune=), as a new process
    assert len(_run(pruned_add, args)) == 1
    assert pruned_add.record(key).trial_for(Config(BLOCK=16)).status is TrialStatus.CRASHED  # was run: ok
    assert journal.crashed(pruned_add.identity, key, dtypes) == {}


def test_the_crash_warning_under_isolation_says_the_config_is_tried_again_in_a_worker():
    sys.path.insert(0, str(TESTS))
    from isolation_kernels import plain_mul

    args, key, dtypes = _call(plain_mul, 100)
    _note_of_a_dead_process(plain_mul.identity, key, dtypes, {"BLOCK": 32})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain_mul(*args)
    (message,) = [str(w.message) for w in caught if issubclass(w.category, CrashWarning)]
    assert "tried again there" in message and "worker process" in message, message
    assert "recorded as crashed" not in message and "not tried again" not in message, message
    assert plain_mul.record(key).where != "in-process"
    assert plain_mul.record(key).trial_for(Config(BLOCK=32)).status is TrialStatus.OK  # run again in the worker


def _decided_online_after_a_crash_of(kernel, config: dict):
    """Note `config` as having crashed a process at n=512, then call `kernel` (online) until the key is decided:
    (its record, the CrashWarnings given, (key, dtypes))."""
    _, key, dtypes = _call(kernel, 512)
    _note_of_a_dead_process(kernel.identity, key, dtypes, config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(1000):
            kernel(*_call(kernel, 512)[0])
            if kernel.cache.in_memory(key, dtypes) is not None:
                break
    return kernel.record(key), [w for w in caught if issubclass(w.category, CrashWarning)], (key, dtypes)


ONLINE_KEEP = {"blocks": (32, 64)}
online_add = autotune(
    space=SPACE[:3],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    prune=lambda configs, named: [c for c in configs if c["BLOCK"] in ONLINE_KEEP["blocks"]],
    tuning=Tuning(mode="online", reps=2, compile_workers=0, warmup=0),
)(triton.jit(_add))


def test_online_keeps_the_note_of_a_crashed_config_prune_did_not_keep_and_does_not_warn_of_it():
    """Online mode as tune_key: a noted config that prune= left out of this call's candidates is neither warned of
    as "recorded as crashed" nor forgotten when the session decides (a later tuning that keeps it must know)."""
    record, crash_warnings, (key, dtypes) = _decided_online_after_a_crash_of(online_add, {"BLOCK": 16})
    assert record is not None and Config(BLOCK=16) not in {t.config for t in record.trials}
    assert not crash_warnings
    assert list(journal.crashed(online_add.identity, key, dtypes)) == [Config(BLOCK=16)]


fallback_add = autotune(
    space=SPACE[:3],
    key=["n"],
    grid="(cdiv(n, $BLOCK),)",
    fallback={"BLOCK": 256},
    tuning=Tuning(mode="online", reps=2, compile_workers=0, warmup=0),
)(triton.jit(_add))


def test_online_does_not_say_a_crashed_fallback_outside_the_space_is_recorded():
    """A noted `fallback=` outside the space is never launched and never in the record: no warning claims it is
    "recorded as crashed"."""
    record, crash_warnings, _ = _decided_online_after_a_crash_of(fallback_add, {"BLOCK": 256})
    assert record is not None and Config(BLOCK=256) not in {t.config for t in record.trials}
    assert not crash_warnings
