"""One measurement at a time per device in a process: two threads tuning different keys (or kernels) at once never
measure together (each would time the other's kernels too); compiles may overlap, measurements may not. Every
interval a tuning measures in (a setup= call, a do_bench= call) is recorded; with the lock no two threads'
intervals overlap, and the sleeps inside them make an overlap certain without it. Real kernels, interpreted."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time

import pytest
import torch
from kernels_for_tests import add_and_check, add_kernel, calling_thread

from autotune import autotune

SPACE = {"BLOCK": [16, 32, 64]}
TUNING = {"warmup": 1, "reps": 2, "refine_topk": 2, "refine_reps": 2, "isolate": "off", "compile_workers": 2}
INSIDE_S = 0.01  # a sleep inside each measured interval: what makes two unserialised measurements overlap


class Intervals:
    """(thread, start, end) of every setup= and do_bench= call, on the clock all threads share."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()

    def timed(self, call):
        start = time.monotonic()
        try:
            return call()
        finally:
            time.sleep(INSIDE_S)
            with self.lock:
                self.seen.append((threading.current_thread().name, start, time.monotonic()))

    def setup(self, **named) -> None:
        self.timed(lambda: None)

    def do_bench(self, fn) -> float:
        start = time.perf_counter()
        self.timed(fn)
        return (time.perf_counter() - start) * 1e3

    def overlapping(self) -> list[tuple]:
        """Pairs of intervals of two different threads that overlap in time."""
        return [
            (a, b)
            for i, a in enumerate(self.seen)
            for b in self.seen[i + 1 :]
            if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]
        ]


def _tuned(intervals: Intervals):
    return autotune(
        space=SPACE,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        setup=intervals.setup,
        do_bench=intervals.do_bench,
        tuning=TUNING,
    )(add_kernel)


def _together(calls: list) -> list[BaseException]:
    """Run each (kernel, n) tuning on its own thread, all released at once; what they raised."""
    barrier = threading.Barrier(len(calls))
    errors: list[BaseException] = []

    def call(kernel, n: int) -> None:
        try:
            barrier.wait(30)
            add_and_check(kernel, n)
        except BaseException as exc:  # asserted by the test
            errors.append(exc)

    threads = [threading.Thread(target=call, args=c, name=f"tuner-{i}") for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a tuning thread hung"
    return errors


@pytest.mark.parametrize("kernels", ["two keys of one kernel", "two kernels"])
def test_two_threads_tuning_at_once_never_measure_at_the_same_time(kernels: str) -> None:
    intervals = Intervals()
    first = _tuned(intervals)
    second = first if kernels == "two keys of one kernel" else _tuned(intervals)
    assert _together([(first, 64), (second, 96)]) == []
    assert first.record(key=(64,)) is not None and second.record(key=(96,)) is not None
    threads = {name for name, _, _ in intervals.seen}
    assert threads == {"tuner-0", "tuner-1"}  # both tuned here, each measured several intervals
    assert intervals.overlapping() == []


def test_a_hook_tuning_another_kernel_on_the_measuring_thread_does_not_deadlock() -> None:
    """The lock is reentrant: a setup= that launches another autotuned kernel (a new key: a nested tuning on the
    measuring thread) measures under the hold it is already inside."""
    inner = autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=TUNING)(add_kernel)

    def setup(**named) -> None:
        add_and_check(inner, 32)

    outer = autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", setup=setup, tuning=TUNING)(add_kernel)
    errors: list[BaseException] = []
    thread = calling_thread(outer, 64, errors)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the nested tuning deadlocked on the measuring lock"
    assert errors == []
    assert inner.record(key=(32,)) is not None


def _waits_for_the_measuring_lock(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "measuring" and frame.f_code.co_filename.endswith(
            os.path.join("engine", "measuring.py")
        ):
            return True
        frame = frame.f_back
    return False


def _tune_k2(k2, how: str) -> None:
    """Tune `k2` for n=32: by launching it, or as a set of calls (`tune_calls`, what `autotune.warmup` runs)."""
    if how == "launch":
        add_and_check(k2, 32)
        return
    x = torch.ones(32)
    k2.tune_calls([(k2.bind((x, x, torch.empty_like(x), 32), {}), None)])


@pytest.mark.parametrize("how", ["launch", "tune_calls"])
def test_a_hook_tuning_a_key_another_thread_is_tuning_waits_for_it_without_deadlock(how: str) -> None:
    """Thread A's setup= (inside A's measurement) tunes K2's key while thread B is tuning it and waits for the
    measuring lock A holds: A's tuning of K2 lets go of that hold while it waits for B's (`measuring_suspended`)."""
    tuning = dict(TUNING, objective="geomean") if how == "tune_calls" else TUNING
    key = None if how == "tune_calls" else ["n"]
    k2 = autotune(space=SPACE, key=key, grid="(cdiv(n, $BLOCK),)", tuning=tuning)(add_kernel)
    errors: list[BaseException] = []
    b = threading.Thread(target=_recording(errors, _tune_k2), args=(k2, how), name="B", daemon=True)

    def setup(**named) -> None:
        if threading.current_thread().name == "A" and b.ident is None:
            b.start()  # B takes K2's key lock, then waits for the measuring lock this thread holds
            deadline = time.monotonic() + 60
            while not _waits_for_the_measuring_lock(b) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _waits_for_the_measuring_lock(b)
            _tune_k2(k2, how)  # B's key: this thread waits for B's tuning

    k1 = autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", setup=setup, tuning=TUNING)(add_kernel)
    a = calling_thread(k1, 64, errors, name="A")
    a.daemon = True  # a deadlock fails the test instead of hanging the run at exit
    a.start()
    a.join(120)
    b.join(60)
    assert not a.is_alive() and not b.is_alive(), "the two tunings deadlocked on the measuring lock"
    assert errors == []
    assert k1.record(key=(64,)) is not None and len(k2.cache.records()) == 1


def _recording(errors: list, fn):
    def call(*args) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # asserted by the test
            errors.append(exc)

    return call


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="needs fork")
def test_a_child_forked_while_another_thread_measures_can_tune() -> None:
    """The thread holding the measuring lock at the fork does not exist in the child: the lock starts free there."""
    gate, entered = threading.Event(), threading.Event()

    def setup(**named) -> None:  # inside a measurement: the lock is held until the test lets go
        entered.set()
        assert gate.wait(120)

    held = autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", setup=setup, tuning=TUNING)(add_kernel)
    other = autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=TUNING)(add_kernel)
    errors: list[BaseException] = []
    holder = calling_thread(held, 64, errors)
    holder.start()
    ctx = multiprocessing.get_context("fork")
    try:
        assert entered.wait(60)
        child = ctx.Process(target=add_and_check, args=(other, 48))
        child.start()
        child.join(60)
        alive = child.is_alive()
        if alive:
            child.kill()
        assert not alive, "the forked child hung waiting for the measuring lock its parent's thread held"
        assert child.exitcode == 0
    finally:
        gate.set()
        holder.join(60)
    assert errors == [] and not holder.is_alive()
    x = torch.arange(8, dtype=torch.float32)  # the parent still tunes after the fork
    out = torch.empty_like(x)
    other(x, x, out, 8)
    assert torch.equal(out, 2 * x)
