"""A process forked (multiprocessing's "fork" start method) while another of its threads tunes, or after it tuned
online, has only the forking thread: the locks those threads held start free in the child, and the child tunes its
own keys (DESIGN.md section 7). Linux only (fork); each child is killed if it hangs."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from kernels_for_tests import add_and_check, add_kernel, calling_thread

import autotune
from autotune import Tuning
from autotune import autotune as autotune_decorator
from autotune.engine.compilers import FunctionCompiler

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="needs fork")

HELD_N = 96


def _child(kernel, n: int, calling: Path, queue) -> None:
    calling.touch()
    add_and_check(kernel, n)
    queue.put((dict(kernel.best_config), autotune.stats()["add_kernel"]))


def _in_forked_child(kernel, n: int, calling: Path, while_waiting=None) -> tuple:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(kernel, n, calling, queue))
    child.start()
    try:
        if while_waiting is not None:
            while not calling.exists() and child.is_alive():
                time.sleep(0.01)
            while_waiting()
        child.join(60)
        assert not child.is_alive(), f"the forked child hung calling the kernel on n={n}"
        assert child.exitcode == 0
        return queue.get(timeout=10)
    finally:
        if child.is_alive():
            child.kill()


def test_a_child_forked_while_a_thread_tunes_tunes_its_own_keys_and_waits_for_the_parents(tmp_path):
    gate, entered = threading.Event(), threading.Event()

    def setup(**named):
        if named["n"] == HELD_N:  # the parent's thread holds this key's locks until the test lets it go
            entered.set()
            assert gate.wait(120)

    kernel = autotune_decorator(
        space={"BLOCK": [16, 32]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        setup=setup,
        tuning={"warmup": 0, "reps": 1, "isolate": "off"},
    )(add_kernel)
    add_and_check(kernel, 64)  # the parent tuned once: its compile threads came and went
    errors: list[BaseException] = []
    tuner = calling_thread(kernel, HELD_N, errors)  # what it raises is asserted below
    tuner.start()
    try:
        assert entered.wait(60)
        _, new_key = _in_forked_child(kernel, 128, tmp_path / "calling-128")
        assert new_key["tunings"] == 2  # the parent's first tuning, and the child's own
        # The key the parent's thread is tuning: the child waits for the parent's entry lock, then reads its winner.
        winner, same_key = _in_forked_child(kernel, HELD_N, tmp_path / "calling-held", while_waiting=gate.set)
    finally:
        gate.set()
        tuner.join(60)
    assert not tuner.is_alive() and errors == []
    assert same_key["tunings"] == 1 and same_key["disk_hits"] == 1
    assert winner == dict(kernel.cache.in_memory((HELD_N,), ("torch.float32",) * 3).winner)


def test_a_child_forked_after_online_tuning_tunes_online(tmp_path):
    kernel = autotune_decorator(
        space={"BLOCK": [16, 32]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(warmup=0, reps=1, mode="online", isolate="off"),
    )(add_kernel)
    kernel.compiler_factory = lambda tuned, prepare: FunctionCompiler(lambda config: None)  # compiles on the pool
    for _ in range(200):  # decided online: the shared pool's threads are idle now
        add_and_check(kernel, 64)
        if kernel.cache.in_memory((64,), ("torch.float32",) * 3) is not None:
            break
        time.sleep(0.02)
    assert any(t.name.startswith("autotune-compile-online") for t in threading.enumerate())
    assert kernel.cache.in_memory((64,), ("torch.float32",) * 3) is not None

    def child(queue) -> None:
        for _ in range(200):  # the background compiles must run in the child for a decision
            add_and_check(kernel, 128)
            if kernel.cache.in_memory((128,), ("torch.float32",) * 3) is not None:
                queue.put("decided")
                return
            time.sleep(0.02)
        queue.put("never decided")

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    try:
        proc.join(60)
        assert not proc.is_alive()
        assert queue.get(timeout=10) == "decided"
    finally:
        if proc.is_alive():
            proc.kill()


def test_a_child_forked_while_a_thread_agrees_across_ranks_can_agree_itself():
    """The lock that keeps one cross-rank agreement at a time per process is held for the whole agreement: a child
    forked meanwhile would wait for it for ever (its holder did not survive the fork)."""
    from autotune.modes import distributed

    held, release = threading.Event(), threading.Event()

    def agreeing() -> None:
        with distributed._AGREE_LOCK:
            held.set()
            release.wait(60)

    thread = threading.Thread(target=agreeing)
    thread.start()
    held.wait(60)
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 when it can take the lock
            os._exit(0 if distributed._AGREE_LOCK.acquire(timeout=10) else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        thread.join()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
