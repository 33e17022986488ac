"""A small executor of daemon threads for compiles: a compile the pipeline abandoned (past `compile_timeout_s`) or
an online tuning's background compiles never hold the process at exit.

`concurrent.futures.ThreadPoolExecutor` joins its workers when the interpreter exits, so one compile that hangs
kept the process alive for as long as it hung. This pool's threads are daemons; `shutdown(wait=True)` still joins
them, so a tuning that ends normally waits for its compiles as before. Only public `Future` methods are used (the
internals of `concurrent.futures` differ across Python 3.10-3.13). Pools made with `cancel_at_exit=True` (online
tuning) have their queued, not yet started compiles cancelled when the interpreter exits, instead of run.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from typing import Any

from ..errors import AutotuneError
from ..fork_safety import reset_in_forked_child

__all__ = ["DaemonThreadPool", "exiting"]

_WorkItem = tuple[Future, Callable[..., Any], tuple, dict]

_exiting = threading.Event()
_cancel_at_exit: weakref.WeakSet[DaemonThreadPool] = weakref.WeakSet()
_pools: weakref.WeakSet[DaemonThreadPool] = weakref.WeakSet()


def exiting() -> bool:
    """True once the interpreter has begun to exit (this module's atexit handler ran): start no new compile."""
    return _exiting.is_set()


def _cancel(future: Future) -> None:
    """Cancel a future no worker has taken, and tell its waiters (`concurrent.futures.wait` counts a cancelled
    future as done only once `set_running_or_notify_cancel` has been called on it)."""
    if future.cancel():
        future.set_running_or_notify_cancel()


class DaemonThreadPool(Executor):
    """Up to `max_workers` daemon threads named `<name_prefix>_<n>`, started as work arrives; with `idle_timeout_s`
    a thread with nothing to do for that long ends (a long-lived shared pool holds no idle threads)."""

    def __init__(
        self, max_workers: int, name_prefix: str, *, idle_timeout_s: float | None = None, cancel_at_exit: bool = False
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self.max_workers = max_workers
        self._prefix = name_prefix
        self._idle_timeout_s = idle_timeout_s
        self._cond = threading.Condition()
        self._queue: collections.deque[_WorkItem] = collections.deque()
        self._threads: set[threading.Thread] = set()  # the threads counted against max_workers
        self._running: dict[Future, threading.Thread] = {}
        self._idle = 0
        self._shutdown = False
        self._numbers = itertools.count()
        if cancel_at_exit:
            _cancel_at_exit.add(self)
        _pools.add(self)

    def _after_fork(self) -> None:
        """In a forked child: this pool's threads did not survive the fork, so the pool is shut down there (its
        lock free, nothing queued; a submit raises). Its owners (a tuning in flight, an online tuner) make new ones."""
        self._cond = threading.Condition()
        self._queue = collections.deque()
        self._threads, self._running, self._idle, self._shutdown = set(), {}, 0, True

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Queue `fn(*args, **kwargs)`; a new thread starts when no idle one can take it and the cap allows."""
        future: Future = Future()
        with self._cond:
            if self._shutdown:
                raise AutotuneError(
                    "cannot submit to a compile pool that was shut down (the interpreter is exiting, or this is a "
                    "forked child, where the pool's threads do not exist): no config's failure; tune again from a "
                    "process that is not exiting"
                )
            self._queue.append((future, fn, args, kwargs))
            self._grow()
            self._cond.notify()
        return future

    def _grow(self) -> None:
        """Start a thread when queued work outnumbers the idle threads and the cap allows (lock held)."""
        if len(self._queue) > self._idle and len(self._threads) < self.max_workers:
            thread = threading.Thread(target=self._work, name=f"{self._prefix}_{next(self._numbers)}", daemon=True)
            self._threads.add(thread)
            thread.start()

    def abandon(self, future: Future) -> None:
        """The caller stopped waiting for `future` (a compile past its timeout): its thread no longer counts against
        `max_workers`, is not joined by `shutdown`, and ends when the compile does; another may take its place."""
        with self._cond:
            thread = self._running.get(future)
            if thread is not None and thread in self._threads:
                self._threads.discard(thread)
                if not self._shutdown:
                    self._grow()

    def cancel(self, futures: Iterable[Future]) -> None:
        """Cancel those of `futures` still queued here (running ones finish); for a caller sharing the pool."""
        targets = set(futures)
        with self._cond:
            removed = [item for item in self._queue if item[0] in targets]
            if removed:
                self._queue = collections.deque(item for item in self._queue if item[0] not in targets)
        for future, *_ in removed:
            _cancel(future)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Accept no more work; `cancel_futures` drops what is queued; `wait` joins the threads (daemons otherwise:
        a compile still running never holds the process at exit)."""
        with self._cond:
            self._shutdown = True
            removed = list(self._queue) if cancel_futures else []
            if cancel_futures:
                self._queue.clear()
            threads = list(self._threads)
            self._cond.notify_all()
        for future, *_ in removed:
            _cancel(future)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                while not self._queue and not self._shutdown:
                    self._idle += 1
                    woken = self._cond.wait(self._idle_timeout_s)
                    self._idle -= 1
                    if not woken and not self._queue:  # idle for idle_timeout_s: this thread ends
                        break
                if not self._queue:  # shut down and drained, or idle too long
                    self._threads.discard(me)
                    return
                future, fn, args, kwargs = self._queue.popleft()
                self._running[future] = me
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - the future carries it to the consumer
                    future.set_exception(exc)
                    del exc
                else:
                    future.set_result(result)
                    del result
            with self._cond:
                self._running.pop(future, None)
                if me not in self._threads:  # abandoned: a replacement was allowed to start
                    return
            del future, fn, args, kwargs


@reset_in_forked_child
def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._after_fork()


@atexit.register
def _cancel_queued_at_exit() -> None:
    """At exit, the queued compiles of online tunings are cancelled rather than run (their results have no use)."""
    _exiting.set()
    for pool in list(_cancel_at_exit):
        pool.shutdown(wait=False, cancel_futures=True)
