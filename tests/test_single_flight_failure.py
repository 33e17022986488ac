"""Single flight when a tuning fails, and the crash journal's notes kept until the record holding them is stored.

A key whose every config fails is tuned once for the threads that waited on that tuning: they raise its verdict
instead of tuning it again in turn; a call after the failure tunes anew. The notes of configs that ended a process
are dropped only once a persistent tier holds the record (a full disk keeps them for the next process)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
from kernels_for_tests import add_kernel

from autotune import CacheWarning, Config, CrashWarning, NoValidConfigError, TrialStatus, Tuning, autotune, stats
from autotune.storage import files as files_mod
from autotune.storage import journal
from autotune.storage.kernel_cache import KernelCache

TESTS = Path(__file__).parent
THREADS = 6
FAST = Tuning(warmup=0, reps=1, refine_topk=0, compile_workers=0)


class Gate:
    """A setup= hook that holds the first tuning until every other caller thread waits for the key's lock (its
    stack is in the memory tier's lock), so the waiters are really waiting on that tuning. It counts the tunings
    (the distinct threads that ran setup= in each round)."""

    def __init__(self) -> None:
        self.callers: list[int] = []
        self.tuners: list[int] = []
        self.opened = threading.Event()

    def __call__(self, **named) -> None:
        me = threading.get_ident()
        if me not in self.tuners:
            self.tuners.append(me)
        if not self.opened.is_set():
            self._until_the_others_wait(me)
            self.opened.set()

    def _until_the_others_wait(self, me: int) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            frames = sys._current_frames()
            others = [ident for ident in self.callers if ident not in (me, 0)]
            if len(others) == THREADS - 1 and all(_waits_in_memory_lock(frames.get(i)) for i in others):
                return
            time.sleep(0.01)
        raise AssertionError("the other threads never waited for the key's lock")


def _waits_in_memory_lock(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.endswith(os.path.join("storage", "memory.py")):
            return True
        frame = frame.f_back
    return False


def _failing_add(gate: Gate, blocks: tuple = (48, 0)):
    """A real add kernel whose every config fails in the interpreter, each its own way (48: tl.arange needs a power
    of 2; 0: the grid divides by it); with (48, 96) both fail with one error, which the call may cause."""
    return autotune(space={"BLOCK": blocks}, key=["n"], grid="(cdiv(n, $BLOCK),)", setup=gate, tuning=FAST)(add_kernel)


def _on_threads(call) -> None:
    """`call(i)` on THREADS threads at once, joined."""
    threads = [threading.Thread(target=call, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads)


def _call_together(kernel, gate: Gate, n: int) -> list[BaseException | None]:
    barrier = threading.Barrier(THREADS)
    raised: list[BaseException | None] = [None] * THREADS

    gate.callers[:] = [0] * THREADS

    def call(i: int) -> None:
        x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
        gate.callers[i] = threading.get_ident()
        barrier.wait()
        try:
            kernel(x, y, out, n)
        except BaseException as exc:
            raised[i] = exc

    _on_threads(call)
    return raised


def test_threads_waiting_on_a_tuning_whose_every_config_failed_raise_its_error_and_a_later_call_tunes_again():
    gate = Gate()
    kernel = _failing_add(gate)
    raised = _call_together(kernel, gate, 64)

    assert all(isinstance(exc, NoValidConfigError) for exc in raised), raised
    assert len(gate.tuners) == 1  # one thread tuned; the others waited for it and took its verdict
    assert stats()["add_kernel"]["failed_tunings"] == 1
    messages = {str(exc) for exc in raised}
    assert len(messages) == 1 and "{'BLOCK': 48}" in messages.pop()
    original = raised[gate.callers.index(gate.tuners[0])]
    shared = [exc for exc in raised if exc is not original]
    assert len(shared) == THREADS - 1  # each waiter's is a fresh one chained to the tuner's, with its trials
    assert all(exc.__cause__ is original and len(exc.trials) == 2 for exc in shared)

    gate.tuners.clear()
    with pytest.raises(NoValidConfigError):  # no negative cache: a call after the failure tunes anew
        kernel(torch.randn(64), torch.randn(64), torch.empty(64), 64)
    assert len(gate.tuners) == 1 and stats()["add_kernel"]["failed_tunings"] == 2


def test_configs_failing_alike_when_run_may_be_the_call_s_fault_so_each_waiting_thread_tunes_itself():
    """Every config failing with one run error (`NoValidConfigError.of_the_call`) may come from the tuning thread's
    arguments (another call of the key may succeed): it is not handed to the threads that waited."""
    gate = Gate()
    raised = _call_together(_failing_add(gate, blocks=(48, 96)), gate, 64)
    assert all(isinstance(exc, NoValidConfigError) and exc.of_the_call for exc in raised), raised
    assert len(gate.tuners) == THREADS and stats()["add_kernel"]["failed_tunings"] == THREADS


def _race_on_the_cache(tune, **call_kwargs) -> tuple[list[BaseException | None], list[int]]:
    """THREADS threads call `get_or_tune` of one key of a real cache (disk tier) together, with `call_kwargs[i]`
    for thread i; the first tuning waits until the others wait for the key's lock. (what each raised, the threads
    that ran `tune`)."""
    from autotune.storage.disk import DiskCache

    cache = KernelCache("k", "src", "space", lambda c: True, identity="m:k", tiers=[DiskCache()])
    barrier, gate = threading.Barrier(THREADS), Gate()
    gate.callers[:] = [0] * THREADS
    tuners: list[int] = []
    raised: list[BaseException | None] = [None] * THREADS

    def tuning():
        tuners.append(threading.get_ident())
        gate()
        return tune()

    def call(i: int) -> None:
        gate.callers[i] = threading.get_ident()
        barrier.wait()
        try:
            cache.get_or_tune((1,), ("torch.float32",), tuning, **{k: v[i] for k, v in call_kwargs.items()})
        except BaseException as exc:
            raised[i] = exc

    _on_threads(call)
    return raised, tuners


def test_an_error_that_is_not_a_verdict_on_the_configs_is_not_handed_to_the_waiting_threads():
    """Only a verdict on the configs is shared: an error of the tuning thread's own (here a RuntimeError of its
    tune()) leaves each waiting thread to tune the key itself."""

    def tune():
        raise RuntimeError("this thread's own failure")

    raised, tuners = _race_on_the_cache(tune)
    assert all(isinstance(exc, RuntimeError) for exc in raised), raised
    assert len(tuners) == THREADS


def test_forced_waiters_take_the_verdict_and_waiters_whose_prune_kept_other_configs_tune_themselves():
    """force= takes what a tuning produced while the call waited (a winner, or now a failure); a waiter tuning
    other candidates (what prune= kept for its call) is not judged by another candidate set's failure."""

    def tune():
        raise NoValidConfigError("every config failed", [])

    raised, tuners = _race_on_the_cache(tune, force=[True] * THREADS)
    assert all(isinstance(exc, NoValidConfigError) for exc in raised) and len(tuners) == 1
    half = THREADS // 2
    raised, tuners = _race_on_the_cache(tune, candidates=["a"] * half + ["b"] * (THREADS - half))
    assert all(isinstance(exc, NoValidConfigError) for exc in raised)
    assert len(tuners) == 2  # one tuning per candidate set


def _note_of_a_dead_process(kernel_id: str, key: tuple, dtypes: tuple, config: dict) -> None:
    """A real process enters `measuring` and exits inside it, as a crash would."""
    code = (
        f"import os, sys; sys.path.insert(0, {str(TESTS.parent)!r}); from autotune.storage import journal\n"
        f"with journal.measuring({kernel_id!r}, {key!r}, {dtypes!r}, {config!r}):\n    os._exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], env=dict(os.environ), timeout=120).returncode == 3


def _noted_add(n: int):
    kernel = autotune(space={"BLOCK": (32, 64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST)(add_kernel)
    args = (torch.randn(n), torch.randn(n), torch.empty(n), n)
    key, dtypes = kernel.key_of(kernel.bind(args, {}))
    _note_of_a_dead_process(kernel.identity, key, dtypes, {"BLOCK": 32})
    assert set(journal.crashed(kernel.identity, key, dtypes)) == {Config(BLOCK=32)}
    return kernel, args, key, dtypes


def test_a_store_that_fails_keeps_the_crash_notes_for_the_next_process(monkeypatch):
    kernel, args, key, dtypes = _noted_add(300)

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files_mod, "write_all", full)  # the disk is full: the entry is not written
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CrashWarning)
        with pytest.warns(CacheWarning, match="disk is full"):
            kernel(*args)
    assert kernel.record(key).trial_for(Config(BLOCK=32)).status is TrialStatus.CRASHED
    entries = [p for p in Path(os.environ["AUTOTUNE_CACHE_DIR"]).rglob(f"*{files_mod.ENTRY_SUFFIX}")]
    assert [p for p in entries if ".journal" not in p.parts] == []  # no entry holds the record
    assert set(journal.crashed(kernel.identity, key, dtypes)) == {Config(BLOCK=32)}  # the next process skips it


def test_a_stored_record_drops_the_crash_notes_it_holds():
    kernel, args, key, dtypes = _noted_add(200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CrashWarning)
        kernel(*args)
    torch.testing.assert_close(args[2], args[0] + args[1])
    assert kernel.record(key).trial_for(Config(BLOCK=32)).status is TrialStatus.CRASHED
    assert journal.crashed(kernel.identity, key, dtypes) == {}
    assert not any((Path(os.environ["AUTOTUNE_CACHE_DIR"]) / ".journal").iterdir())
