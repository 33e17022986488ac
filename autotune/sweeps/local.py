"""The local executor: one worker process per visible GPU (or per requested slot on the CPU), started with
multiprocessing's `spawn`, each pinned to its device and spoken to over a private pipe.

Requests are ("prepare", maker) and ("tune",); answers ("ok", value) or ("error", text). A worker that dies
(killed from outside, a crash outside the kernel's isolation) is noticed by the driver at once (the process is
gone) and raises `WorkerLost` there; a worker exits when its driver is gone.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from ..storage import journal
from .scratch import claim_worker_dir, release_worker_dir, remove_abandoned_worker_dirs
from .slots import JobFailed, Slot, WorkerLost, env_of_worker, start_together
from .worker import KeyInfo, Maker, MakerSet, Share, SweepWorker, WorkerSpec

__all__ = ["LocalExecutor", "LocalWorker", "measuring_at_death", "visible_gpus", "while_measuring"]

_START_TIMEOUT_S = 300.0  # a fresh interpreter importing torch, Triton and the kernel's module


def visible_gpus() -> int:
    """GPUs this process can use: none under TRITON_INTERPRET=1 or without CUDA."""
    from ..storage.fingerprint import interpreting

    if interpreting():
        return 0
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


class LocalExecutor:
    """`workers` processes (default: one per visible GPU, else 1); worker i gets `worker_env[i % len]` added to
    its environment and, on a GPU machine, GPU i % count as its current device."""

    name = "local"

    def __init__(self, spec: WorkerSpec, workers: int | None, worker_env: Sequence[Mapping[str, str]] = ()) -> None:
        self.spec, self.gpus = spec, visible_gpus()
        self.count = workers or max(1, self.gpus)
        self.worker_env = list(worker_env)
        self.slots: list[LocalWorker] = []

    def start(self) -> list[Slot]:
        remove_abandoned_worker_dirs()
        for i in range(self.count):
            env = env_of_worker(self.worker_env, i)
            worker = LocalWorker(i, self.spec, env, i % self.gpus if self.gpus else None)
            self.slots.append(worker)
            worker.directory = claim_worker_dir(
                tidy=False
            )  # the slot's, kept for its replacement workers (crash journal)
        start_together(self.slots)
        return list(self.slots)

    def stop(self) -> None:
        for slot in self.slots:
            slot.retire()
            if slot.directory:
                release_worker_dir(slot.directory)
        remove_abandoned_worker_dirs()  # the stopped workers' private caches (killed, they cannot)


class LocalWorker:
    """The driver's handle on one worker process (`Slot`)."""

    def __init__(self, index: int, spec: WorkerSpec, env: dict[str, str], cuda_device: int | None) -> None:
        self.index, self.spec, self.env, self.cuda_device = index, spec, env, cuda_device
        self.kind = ""
        self.directory = ""  # its private cache directory, the driver's: a replacement worker finds its journal
        self.process: Any = None
        self.conn: Connection | None = None
        self.retired = False  # the sweep is over: no new worker starts (a slot's thread may restart one late)
        self._lock = threading.Lock()  # launch and stop: the slot's thread restarts while Ctrl-C stops

    def launch(self) -> None:
        with self._lock:
            if self.retired:
                raise WorkerLost(f"sweep worker {self.index} is stopped: the sweep is over")
            self._launch()

    def _launch(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self.process = context.Process(
            target=serve,
            args=(child, self.spec, self.env, os.getpid(), self.cuda_device, self.directory or None),
            name=f"autotune-sweep-worker-{self.index}",
        )
        self.process.start()
        child.close()
        self.conn = parent

    def wait_ready(self) -> None:
        try:
            self.kind = self._reply(_START_TIMEOUT_S)
        except WorkerLost as exc:
            if self.process is None or self.process.exitcode != 1:  # killed, or slow: the guard is not the cause
                raise
            raise WorkerLost(
                f"{exc}, its error above on stderr. If it is multiprocessing's 'An attempt has been made to start a "
                "new process before the current process has finished its bootstrapping phase', the script calls "
                "sweep() (or autotune.warmup()) at its top level: call it under `if __name__ == '__main__':` (a "
                "worker process imports the script's module again, as multiprocessing's spawn does)"
            ) from None

    def restart(self) -> None:
        self.stop()
        self.launch()
        self.wait_ready()

    def prepare(self, maker: Maker | MakerSet) -> KeyInfo:
        return self._call(("prepare", maker))

    def tune(self) -> bytes:
        return self._call(("tune",))

    def tune_share(self, share: Share) -> bytes:
        return self._call(("share", share))

    def stop(self) -> None:
        with self._lock:
            process, conn = self.process, self.conn
            self.process = self.conn = None
        if process is not None and process.is_alive():
            process.kill()
        if process is not None and process.pid is not None:
            process.join(10)
        if conn is not None:
            conn.close()

    def retire(self) -> None:
        with self._lock:
            self.retired = True
        self.stop()

    def _call(self, request: tuple) -> Any:
        conn, process = self.conn, self.process
        if conn is None or process is None:
            raise WorkerLost(f"sweep worker {self.index} is stopped")
        try:
            conn.send(request)
        except (OSError, EOFError) as exc:  # BrokenPipeError: the worker is gone; or our end closed by `stop`
            if process.exitcode is not None or not process.is_alive():
                raise self._died(process) from None
            raise WorkerLost(f"sweep worker {self.index} ({self.kind}) is gone ({exc})") from exc
        except Exception as exc:  # pickling the maker: the job's own problem
            raise JobFailed(
                f"the argument maker cannot be sent to a worker process ({type(exc).__name__}: {exc}): makers must "
                "be picklable (a module-level function, or functools.partial of one)"
            ) from exc
        return self._reply(None)

    def _reply(self, timeout_s: float | None) -> Any:
        conn, process = self.conn, self.process  # `stop` (Ctrl-C, from the main thread) clears them under us
        if conn is None or process is None:
            raise WorkerLost(f"sweep worker {self.index} is stopped")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while not conn.poll(0.1):
                if not process.is_alive():
                    raise self._died(process)
                if deadline is not None and time.monotonic() > deadline:
                    raise WorkerLost(f"sweep worker {self.index} did not start within {timeout_s:g} s")
            status, value = conn.recv()
        except (EOFError, OSError) as exc:  # its end closed (the process is gone, or going), or ours by `stop`
            process.join(1)
            if process.exitcode is not None:
                raise self._died(process) from None
            raise WorkerLost(f"sweep worker {self.index} ({self.kind}) closed its pipe ({exc!r})") from exc
        if status == "error":
            raise JobFailed(value)
        return value

    def _died(self, process: Any) -> WorkerLost:
        """The WorkerLost of this slot's ended worker `process`, naming the config it was measuring in its own
        process (isolate="off") where its crash journal in the slot's directory has it."""
        text = f"sweep worker {self.index} ({self.kind or 'starting'}) died: {_exit_text(process)}"
        config = measuring_at_death(self.directory, process.pid)
        return WorkerLost(text if config is None else f"{text}, {while_measuring(config)}", config)


def measuring_at_death(directory: str, pid: int | None) -> dict[str, Any] | None:
    """The config process `pid` was measuring in-process as it ended, as its crash journal in the cache
    `directory` notes it (`storage.journal`); None when no note of it is there (it died between measurements)."""
    notes = [] if pid is None or not directory else journal.notes_in(directory, pid)
    return notes[0][1].config if notes else None


def while_measuring(config: dict[str, Any]) -> str:
    """How a lost worker's error names the config that ended it (`measuring_at_death`)."""
    return f"while measuring config {config} in its own process (not isolated)"


def _exit_text(process: Any) -> str:
    process.join(1)
    code = process.exitcode
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


# ------------------------------------------------------------------------------------------ the worker process


def serve(
    conn: Connection,
    spec: WorkerSpec,
    env: dict[str, str],
    parent: int,
    cuda_device: int | None,
    directory: str | None = None,
) -> None:
    """The worker process: start a SweepWorker (in the slot's `directory`), then answer the driver's requests until
    its pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it stops every worker
    os.environ.update(env)
    _exit_with(parent)
    try:
        if cuda_device is not None:
            import torch

            torch.cuda.set_device(cuda_device)
        worker = SweepWorker(spec, directory)
        conn.send(("ok", worker.fingerprint()))
    except Exception as exc:
        conn.send(("error", f"the sweep worker could not start: {type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        except Exception as exc:  # the maker could not be unpickled here (its module is not importable)
            conn.send(("error", f"the argument maker could not be loaded in the worker: {type(exc).__name__}: {exc}"))
            continue
        try:
            if request[0] == "prepare":
                result: Any = worker.prepare(request[1])
            elif request[0] == "share":
                result = worker.tune_share(request[1])
            else:
                result = worker.tune()
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        else:
            conn.send(("ok", result))


def _exit_with(parent: int) -> None:
    """Exit when the driver is gone (killed included): a worker never outlives its sweep."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="autotune-sweep-watchdog", daemon=True).start()
