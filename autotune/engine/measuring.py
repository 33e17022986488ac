"""One measurement at a time per device in a process: the lock every tuning's trials hold while they measure.

Two threads tuning different keys or kernels would each time the other's kernels too (on a GPU, their streams
share the SMs), so each trial's measurement holds its device's lock (`InProcessRunner`); compiles do not. Loaded on
a cache miss too (a hit through the disk), so it imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ..fork_safety import reset_in_forked_child

__all__ = ["measuring", "measuring_suspended"]

# Reentrant: a setup=, verify= or do_bench= hook may tune another kernel on the measuring thread, and a tuning
# begun under a hold lets go of it while it waits or tunes (`measuring_suspended`).
_measuring_registry = threading.Lock()
_measuring_locks: dict[int | None, threading.RLock] = {}
_held = threading.local()  # .depth: {lock: how many holds this thread has of it}


@reset_in_forked_child
def _free_measuring_locks_in_child() -> None:
    """A thread measuring at a fork does not exist in the child: every device's lock starts free there (a hold of
    the forking thread's own is released on the lock it took, which the child no longer hands out)."""
    global _measuring_registry, _measuring_locks
    _measuring_registry, _measuring_locks = threading.Lock(), {}


def _current_device() -> int | None:
    """The CUDA device this thread measures on (its current device), None without CUDA (the interpreter, a CPU):
    read without initialising CUDA, which a GPU tuning did before its first measurement."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return int(torch.cuda.current_device())


def _held_depths() -> dict[Any, int]:
    depth: dict[Any, int] | None = getattr(_held, "depth", None)
    if depth is None:
        depth = _held.depth = {}
    return depth


@contextlib.contextmanager
def measuring() -> Iterator[None]:
    """Hold the measuring lock of the device this thread measures on: no other thread of this process measures on
    it meanwhile."""
    device = _current_device()
    with _measuring_registry:
        lock = _measuring_locks.get(device)
        if lock is None:
            lock = _measuring_locks[device] = threading.RLock()
    depth = _held_depths()
    lock.acquire()
    depth[lock] = depth.get(lock, 0) + 1
    try:
        yield
    finally:
        depth[lock] -= 1
        lock.release()


@contextlib.contextmanager
def measuring_suspended() -> Iterator[None]:
    """Let go of this thread's measuring holds meanwhile: a tuning begun inside a hook's measurement (a setup= that
    launches an autotuned kernel) may wait for another thread's tuning of its key, which waits for these locks.
    Its own trials take the lock again; the measurement around it is spoiled by it anyway."""
    depth = _held_depths()
    held = [(lock, n) for lock, n in depth.items() if n]
    for lock, n in held:
        for _ in range(n):
            lock.release()
        depth[lock] = 0
    try:
        yield
    finally:
        _take_back(held, depth)


def _take_back(held: list[tuple[Any, int]], depth: dict[Any, int]) -> None:
    """Re-take every hold `measuring_suspended` let go, even through Ctrl-C during the wait (raised once all are
    back: the `measuring` blocks around still release what they hold)."""
    interrupted: BaseException | None = None
    for lock, n in held:
        for _ in range(n):
            while True:
                try:
                    lock.acquire()
                    break
                except BaseException as exc:  # KeyboardInterrupt while waiting: re-raised below
                    interrupted = interrupted or exc
        depth[lock] = n
    if interrupted is not None:
        raise interrupted
