"""The parent's side of isolation: one worker process, started once and reused across configs, keys and kernels
while this process lives; killed (its whole process group) and started again when a config hangs or kills it."""
from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Optional

__all__ = ["Worker", "WorkerCrashed", "WorkerTimedOut", "shared_worker", "shutdown"]

logger = logging.getLogger("autotune")


class WorkerCrashed(Exception):
    """The worker died while answering (a signal, os._exit, a poisoned device)."""


class WorkerTimedOut(Exception):
    """The worker did not answer in time; it was killed."""


class Worker:
    """A `python -m autotune.isolation` worker process and the socket to it."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self.conn: Optional[Connection] = None
        self.loaded: set[tuple[str, str]] = set()
        self.starts = 0

    def start(self) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)     # what this process can import
        main_thread = "1" if threading.current_thread() is threading.main_thread() else "0"
        self.proc = subprocess.Popen([sys.executable, "-m", "autotune.isolation", str(theirs.fileno()),
                                      str(os.getpid()), main_thread], pass_fds=[theirs.fileno()],
                                     start_new_session=True, env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.loaded = set()
        self.starts += 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(self, message: tuple, timeout_s: Optional[float]) -> Any:
        """Send `message` and wait for the answer, at most `timeout_s` (None: as long as it takes)."""
        if not self.alive:
            self.start()
        assert self.conn is not None
        try:
            self.conn.send(message)
            if not self.conn.poll(timeout_s):
                self.kill()
                raise WorkerTimedOut(f"no answer in {timeout_s:g} s; the worker was killed")
            return self.conn.recv()
        except (EOFError, ConnectionError, OSError) as exc:
            code = self.proc.wait(timeout=30) if self.proc is not None else None
            self.kill()
            raise WorkerCrashed(_death(code, exc)) from None
        except BaseException:   # Ctrl-C mid-request: its answer would be read as the next one's; start afresh
            self.kill()
            raise

    def load(self, module: str, qualname: str, timeout_s: Optional[float]) -> None:
        """Import the kernel in the worker once per worker life."""
        if (module, qualname) in self.loaded and self.alive:
            return
        reply = self.request(("load", module, qualname), timeout_s)
        if reply[0] != "ok":
            raise ImportError(f"the worker cannot import {module}:{qualname}: {reply[1]}")
        self.loaded.add((module, qualname))

    def kill(self) -> None:
        """Kill the worker's whole process group and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn, self.loaded = None, None, set()

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not."""
        if self.alive and self.conn is not None:
            try:
                self.conn.send(("exit",))
                self.proc.wait(timeout=5)
            except Exception:
                pass
        self.kill()


def _death(code: Optional[int], exc: BaseException) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker was killed by {name}"
    if code is not None:
        return f"the worker exited with status {code}"
    return f"the worker's connection broke ({type(exc).__name__}: {exc})"


_LOCK = threading.Lock()
_WORKER: Optional[Worker] = None


def shared_worker() -> tuple[Worker, threading.Lock]:
    """The process's worker (started on first use) and the lock that serialises its requests."""
    global _WORKER
    with _LOCK:
        if _WORKER is None:
            _WORKER = Worker()
        return _WORKER, _REQUESTS


_REQUESTS = threading.Lock()


@atexit.register
def shutdown() -> None:
    """Stop the worker (at exit, and for tests that check nothing is left behind)."""
    global _WORKER
    with _LOCK:
        worker, _WORKER = _WORKER, None
    if worker is not None:
        worker.close()
