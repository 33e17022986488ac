"""The parent's side of isolation: worker processes, started once and reused across configs, keys and kernels
while this process lives; killed (its whole process group) and started again when a config hangs or kills it.

One measuring worker (`shared_worker`: trials are measured one at a time, as in-process) and, with
`compile_workers=N`, up to N compile workers (`compile_workers`) that compile the next configs meanwhile."""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from ...errors import WorkerShutdownError
from ...fork_safety import reset_in_forked_child
from .call_copies import copies_bytes

__all__ = ["Worker", "WorkerCrashed", "WorkerTimedOut", "WorkerPool", "shared_worker", "compile_workers", "shutdown"]

logger = logging.getLogger("autotune")
# The most tunings' call arguments one worker keeps at once, and their bytes together (the newest always stays)
HELD_CALLS_MAX = 4
HELD_CALLS_MAX_BYTES = 1 << 30


class WorkerCrashed(Exception):
    """The worker died while answering (a signal, os._exit, a poisoned device). `signal_number`: the signal that
    killed it, when one did."""

    def __init__(self, message: str, signal_number: int | None = None) -> None:
        super().__init__(message)
        self.signal_number = signal_number


class WorkerTimedOut(Exception):
    """The worker did not answer in time; it was killed."""


STOPPED = (
    "autotune's worker processes were stopped (autotune.isolation.shutdown(), or this process exiting) while "
    "a tuning was using them; nothing was stored for it, and no config is to blame: call the kernel again to "
    "tune it"
)


class Worker:
    """A `python -m autotune.engine.isolation` worker process and the socket to it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.loaded: set[tuple[str, str, str, str | None]] = set()
        # the tunings whose call arguments (one call, or a set) the worker holds, least recently used first, and
        # the bytes of each one's copies: concurrent tunings each keep theirs (`send_call`), within HELD_CALLS_*
        self.held: collections.OrderedDict[str, int] = collections.OrderedDict()
        self.starts = 0
        self.stopped = False  # closed by shutdown(): never started again (a runner still holding it gets an error)
        self.aborted = False  # killed by `abort` from another thread: never started again; the pool drops it
        self._guard = threading.Lock()  # `proc` as `abort` (another thread) sees it: started, or killed and reaped

    def start(self) -> None:
        with self._guard:  # `abort` kills a process started before it; one after it is never started
            if self.stopped:
                raise WorkerShutdownError(STOPPED)
            if self.aborted:
                raise WorkerCrashed("the worker was stopped: the tuning that used it ended")
            self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(importable_path())  # what this process can import
        main_thread = "1" if threading.current_thread() is threading.main_thread() else "0"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.engine.isolation", str(theirs.fileno()), str(os.getpid()), main_thread],
            pass_fds=[theirs.fileno()],
            start_new_session=True,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.loaded, self.held = set(), collections.OrderedDict()
        self.starts += 1

    @property
    def call_token(self) -> str | None:
        """The tuning whose call arguments the worker got or used last (None: it holds none)."""
        return next(reversed(self.held), None)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(
        self,
        message: tuple,
        timeout_s: float | None,
        on_note: Callable[[Any], Any] | None = None,
        until_note_s: float | None = None,
    ) -> Any:
        """Send `message` and wait for the answer, at most `timeout_s` (None: as long as it takes). With `on_note`,
        the worker's ("note", what) messages before the answer are handed to it. The first note leaves what is left
        of `timeout_s` since the request (a trial's compile and its measurement are one trial); each later note
        starts a new `timeout_s` (a trial on a set of calls: each call timed as one trial is; a re-measurement: each
        run). `until_note_s`, when given, is the limit before the first note instead (a trial's compile in the
        worker). The worker must be running (`load` starts it): one started here would hold no kernel and no call."""
        if self.stopped:
            raise WorkerShutdownError(STOPPED)
        if not self.alive or self.conn is None:
            raise WorkerCrashed("the worker is not running (it died before the request)")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s  # the first note's part ends then
        limit = until_note_s if until_note_s is not None and on_note is not None else timeout_s
        said, noted = f"{limit or 0:g} s", False  # the limit now, as a timeout says it (never None when it passes)
        try:
            self.conn.send(message)
            while True:
                if not self.conn.poll(limit):
                    self.kill()
                    raise WorkerTimedOut(f"no answer in {said}; the worker was killed")
                reply = self.conn.recv()
                if on_note is None or not (isinstance(reply, tuple) and reply[:1] == ("note",)):
                    return reply
                if not noted and deadline is not None:
                    limit, said = max(0.0, deadline - time.monotonic()), f"{timeout_s:g} s since the request"
                else:
                    limit, said = timeout_s, f"{timeout_s:g} s"
                noted = True
                on_note(reply[1])
        except (EOFError, ConnectionError, OSError) as exc:
            proc = self.proc  # read once: shutdown() on another thread may kill() it and set None meanwhile
            try:  # the broken socket usually means it died: its status says how
                code = proc.wait(timeout=10) if proc is not None else None
            except subprocess.TimeoutExpired:
                code = None
            self.kill()
            if self.stopped:  # shutdown() closed it under this request: not the config's doing
                raise WorkerShutdownError(STOPPED) from None
            raise WorkerCrashed(_death(code, exc), -code if code is not None and code < 0 else None) from None
        except BaseException:  # Ctrl-C mid-request: its answer would be read as the next one's; start afresh
            self.kill()
            raise

    def load(self, ref: tuple[str, str, str, str | None], recipe: bytes | None, timeout_s: float | None) -> None:
        """Import the kernel `ref` names in the worker (rebuilt from `recipe` when given), once per worker life."""
        if ref in self.loaded and self.alive:
            return
        if not self.alive:
            self.start()
        reply = self.request(("load", ref, recipe, importable_path()), timeout_s)  # sys.path as it is now
        if reply[0] != "ok":
            raise ImportError(f"the worker cannot import {ref[0]}:{ref[1]}: {reply[1]}")
        self.loaded.add(ref)

    def send_call(
        self, token: str, encoded: list, cuda_device: int | None, timeout_s: float | None, grids: list | None = None
    ) -> None:
        """Give the worker a tuning's arguments once (`encoded`: each call's, one call or a set) and the caller's
        current GPU; requests then name them by `token`. The worker keeps the calls of the last few tunings that
        fit in HELD_CALLS_MAX_BYTES (the newest always), so tunings taking turns in it do not re-send theirs.
        `grids` (the calls' launch grids) travel along so that one the worker cannot load fails here, not a trial."""
        if token in self.held and self.alive:
            self.held.move_to_end(token)
            return
        size = copies_bytes(encoded)
        keep = list(self.held)
        while keep and (len(keep) >= HELD_CALLS_MAX or size + sum(self.held[t] for t in keep) > HELD_CALLS_MAX_BYTES):
            keep.pop(0)  # the least recently used goes first
        reply = self.request(("call", token, encoded, cuda_device, keep, grids or []), timeout_s)
        self.held = collections.OrderedDict((t, self.held[t]) for t in keep)  # the worker dropped the others
        if reply[0] != "ok":
            raise RuntimeError(f"the worker could not rebuild the call's arguments or its launch grid: {reply[1]}")
        self.held[token] = size

    def drop_call(self, token: str, timeout_s: float | None) -> None:
        """Have the worker free its copies of `token`'s call arguments (that tuning ended): they would otherwise
        stay until later tunings push them out. A worker that does not answer is killed."""
        if token not in self.held or not self.alive:
            return
        keep = [t for t in self.held if t != token]
        try:
            reply = self.request(("keep", keep), timeout_s)
            if reply[0] != "ok":
                raise RuntimeError(f"the worker could not free a call's arguments: {reply[1]}")
            self.held.pop(token, None)
        except (WorkerCrashed, WorkerTimedOut, RuntimeError):
            self.kill()

    def kill(self) -> None:
        """Kill the worker's whole process group and reap it."""
        with self._guard:
            if self.proc is not None and self.proc.poll() is None:
                _kill_group(self.proc.pid)
                self.proc.wait()
            if self.conn is not None:
                self.conn.close()
            self.proc, self.conn, self.loaded, self.held = None, None, set(), collections.OrderedDict()

    def abort(self) -> None:
        """Kill the worker's process group from another thread than the one using it, which may be waiting in
        `request`: the socket stays open under that thread, which gets end-of-file at once (a `WorkerCrashed`)
        and reaps the process itself. The worker is never started again and its pool drops it when it is
        given back. Why: Ctrl-C (or any error) ends a tuning while a compile worker hangs, and the pipeline
        waits for its pool threads (`WorkerCompiler.session`)."""
        with self._guard:
            self.aborted = True
            if self.proc is not None and self.proc.poll() is None:
                _kill_group(self.proc.pid)

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not. A closed worker is not started again."""
        self.stopped = True
        proc = self.proc  # read once: abort() or kill() on another thread may set None meanwhile
        if self.alive and proc is not None and self.conn is not None:
            try:
                self.conn.send(("exit",))
                proc.wait(timeout=5)
            except Exception:
                pass
        self.kill()


def importable_path() -> list[str]:
    """The entries of sys.path that import uses: non-empty strings (import skips anything else on it, such as a
    pathlib.Path a program appended, which would break joining them into a worker's PYTHONPATH)."""
    return [p for p in sys.path if isinstance(p, str) and p]


def _kill_group(pid: int) -> None:
    """SIGKILL a worker's process group (its pid: the worker leads a session of its own)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _death(code: int | None, exc: BaseException) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker was killed by {name}"
    if code is not None:
        return f"the worker exited with status {code}"
    return f"the worker's connection broke ({type(exc).__name__}: {exc})"


class WorkerPool:
    """Workers lent one at a time, started as needed up to the size asked (the compile workers)."""

    def __init__(self) -> None:
        self.workers: list[Worker] = []
        self._idle: list[Worker] = []
        self._available = threading.Condition()
        self._ended: dict[str, float | None] = {}  # tokens of ended tunings a busy worker held -> drop's timeout

    @contextlib.contextmanager
    def borrow(self, size: int) -> Iterator[Worker]:
        """An idle worker, or a new one while fewer than `size` exist, else wait for one to be given back."""
        with self._available:
            self._drop_aborted()
            while not self._idle and len(self.workers) >= max(1, size):
                self._available.wait()
                self._drop_aborted()
            if self._idle:
                worker = self._idle.pop()
            else:
                worker = Worker()
                self.workers.append(worker)
        try:
            yield worker
        finally:
            self._drop_ended(worker)
            with self._available:
                if not worker.aborted:
                    self._idle.append(worker)
                elif worker in self.workers:  # a fresh one takes its place when one is needed
                    self.workers.remove(worker)
                self._available.notify()

    def drop_call(self, token: str, timeout_s: float | None) -> None:
        """Have the idle workers that hold `token`'s arguments free them (its tuning ended): a compile worker's are
        full-size allocations on the device (uninitialised), held until its next tuning otherwise."""
        with self._available:
            holding = [w for w in self._idle if token in w.held]
            self._idle = [w for w in self._idle if w not in holding]
            if any(token in w.held for w in self.workers if w not in holding):  # busy: dropped when given back
                self._ended[token] = timeout_s
        try:
            for worker in holding:
                worker.drop_call(token, timeout_s)
        finally:
            with self._available:
                self._idle.extend(w for w in holding if not w.aborted)
                self._available.notify_all()

    def _drop_ended(self, worker: Worker) -> None:
        """A worker given back frees the calls of tunings that ended while it was busy (`drop_call`)."""
        with self._available:
            ended = [(t, self._ended[t]) for t in worker.held if t in self._ended]
        for token, timeout_s in ended:
            worker.drop_call(token, timeout_s)
        if ended:
            with self._available:
                self._ended = {t: s for t, s in self._ended.items() if any(t in w.held for w in self.workers)}

    def _drop_aborted(self) -> None:
        """Forget the workers `Worker.abort` killed (never started again); the caller holds `_available`."""
        self.workers = [w for w in self.workers if not w.aborted]
        self._idle = [w for w in self._idle if not w.aborted]

    def close(self) -> None:
        with self._available:
            workers, self.workers, self._idle = self.workers, [], []
        for worker in workers:
            worker.close()


# The process's workers outlive one tuning on purpose: a worker's start costs the imports of torch and Triton,
# and it keeps every kernel it loaded, so later keys and kernels tune without paying that again. They are
# stopped at exit and by shutdown(), and die with this process (PR_SET_PDEATHSIG and a watchdog).
_LOCK = threading.Lock()
_WORKER: Worker | None = None
_COMPILE_POOL: WorkerPool | None = None


def shared_worker() -> tuple[Worker, threading.Lock]:
    """The process's measuring worker (started on first use) and the lock that serialises its requests."""
    global _WORKER
    with _LOCK:
        if _WORKER is None:
            _WORKER = Worker()
        return _WORKER, _REQUESTS


def compile_workers() -> WorkerPool:
    """The process's compile workers (started as the tunings ask for them)."""
    global _COMPILE_POOL
    with _LOCK:
        if _COMPILE_POOL is None:
            _COMPILE_POOL = WorkerPool()
        return _COMPILE_POOL


_REQUESTS = threading.Lock()


@reset_in_forked_child
def _after_fork_in_child() -> None:
    """A forked child shares nothing with its parent's workers: their sockets answer the parent, and a parent thread
    waiting on one held `_REQUESTS` forever in the child. The child starts its own workers when it tunes, and never
    stops the parent's (the objects are dropped, their processes left alone)."""
    global _LOCK, _REQUESTS, _WORKER, _COMPILE_POOL
    _LOCK, _REQUESTS, _WORKER, _COMPILE_POOL = threading.Lock(), threading.Lock(), None, None


@atexit.register
def shutdown() -> None:
    """Stop every worker (at exit, and for tests that check nothing is left behind)."""
    global _WORKER, _COMPILE_POOL
    with _LOCK:
        worker, _WORKER = _WORKER, None
        pool, _COMPILE_POOL = _COMPILE_POOL, None
    if worker is not None:
        worker.close()
    if pool is not None:
        pool.close()
