"""Isolation: `Tuning(isolate="process")` compiles and measures each untried config in a worker process, so a
config that segfaults, kills its process or hangs costs that config (`crashed`, `timeout`), never the tuning or
the caller's process. `trial_timeout_s` bounds one config's compile and measurement.

`isolate="auto"` isolates when a worker can import the kernel (by module and qualified name) and the launch grid
can be sent to it, and otherwise tunes in-process with a one-time note saying why; `"off"` never isolates.
"""
from __future__ import annotations

import logging
import pickle
import threading
from typing import Any, Optional

from ..errors import AutotuneError, OptionError, warn_at_caller
from ..kernel_ref import kernel_ref
from ..record import Trial, TrialStatus
from ..space import Config
from .pool import WorkerCrashed, WorkerTimedOut, shared_worker, shutdown
from .worker import encode_call

__all__ = ["IsolatedRunner", "isolation_for", "check_isolation", "shutdown"]

logger = logging.getLogger("autotune")
_LOAD_TIMEOUT_S = 300.0      # importing torch, Triton and the kernel's module in a fresh worker
_noted: set[str] = set()
_noted_lock = threading.Lock()


def _not_isolatable(kernel: Any) -> Optional[str]:
    ref = kernel_ref(kernel.base_fn)
    if ref.module == "__main__":
        return f"{kernel.name} is defined in __main__ (a script or a notebook cell), which a worker cannot import"
    return ref.importable_reason


def check_isolation(kernel: Any) -> None:
    """At decoration: `isolate="process"` on a kernel no worker can import is an error now, not at a call."""
    if kernel.tuning.isolate == "process":
        reason = _not_isolatable(kernel)
        if reason is not None:
            raise OptionError(f"isolate='process' on {kernel.name}: {reason}. Define the kernel at the top level of "
                              "an importable module, or use isolate='auto' (tunes it in-process) or 'off'")


class IsolatedRunner:
    """Runs one tuning's trials in the shared worker, on copies of the call's arguments."""

    def __init__(self, kernel: Any, bound: Any, grid: Any) -> None:
        ref = kernel_ref(kernel.base_fn)
        self.module, self.qualname = ref.module, ref.qualname
        self.encoded = encode_call(bound.args, bound.kwargs)
        self.grid = grid
        self.tuning = kernel.tuning
        self.kernel_name = kernel.name
        self.worker, self.lock = shared_worker()
        with self.lock:
            self.worker.load(self.module, self.qualname, _LOAD_TIMEOUT_S)

    def _load(self) -> None:
        """(Re)load the kernel in the worker (a restarted worker has none); its failure is not a config's."""
        try:
            self.worker.load(self.module, self.qualname, _LOAD_TIMEOUT_S)
        except (ImportError, WorkerCrashed, WorkerTimedOut) as exc:
            raise AutotuneError(f"the tuning worker could not load {self.module}:{self.qualname}: {exc}") from None

    def trial(self, config: Config) -> Trial:
        """Compile, check and measure `config` in the worker; a crash or a hang is this config's result."""
        message = ("trial", (self.module, self.qualname), config, self.encoded, self.grid, self.tuning)
        with self.lock:
            self._load()
            try:
                reply = self.worker.request(message, self.tuning.trial_timeout_s)
            except WorkerTimedOut as exc:
                return Trial(config=config, status=TrialStatus.TIMEOUT,
                             error=f"trial_timeout_s={self.tuning.trial_timeout_s:g} passed: {exc}")
            except WorkerCrashed as exc:
                return Trial(config=config, status=TrialStatus.CRASHED, error=str(exc))
            if reply[0] == "sticky":     # the worker's device context is poisoned: start a fresh worker
                self.worker.kill()
                return Trial(config=config, status=TrialStatus.CRASHED, error=f"poisoned the device: {reply[1]}")
        if reply[0] in ("ok", "failed"):
            return Trial.model_validate(reply[1])
        raise AutotuneError(f"the tuning worker of {self.kernel_name} failed: {reply[1]}")

    def refine(self, configs: list[Config], reps: int) -> dict[Config, list[float]]:
        """Re-measure the best few interleaved in the worker; {} when it could not (they keep their samples)."""
        with self.lock:
            try:
                self._load()
                reply = self.worker.request(("refine", (self.module, self.qualname), configs, self.encoded,
                                             self.grid, self.tuning, reps),
                                            None if self.tuning.trial_timeout_s is None
                                            else self.tuning.trial_timeout_s * len(configs))
            except (WorkerTimedOut, WorkerCrashed, AutotuneError) as exc:
                logger.warning("autotune: re-measuring the best configs of %s in the worker failed (%s)",
                               self.kernel_name, exc)
                return {}
        if reply[0] != "ok":
            logger.warning("autotune: re-measuring the best configs of %s in the worker failed (%s)",
                           self.kernel_name, reply[1])
            return {}
        by_text = {c.canonical(): c for c in configs}
        return {by_text[text]: samples for text, samples in reply[1].items()}


def isolation_for(kernel: Any, bound: Any, grid: Any) -> Optional[IsolatedRunner]:
    """The runner for this tuning, or None to tune in-process (`isolate="off"`, or `"auto"` when a worker could
    not run this kernel: said once per kernel)."""
    mode = kernel.tuning.isolate
    if mode == "off":
        return None
    reason = _not_isolatable(kernel)
    if reason is None:
        try:
            pickle.dumps(grid)
        except Exception:
            reason = f"its launch grid {grid!r} cannot be sent to a worker (use the decorator's grid= or a tuple)"
    if reason is None:
        try:
            return IsolatedRunner(kernel, bound, grid)
        except (ImportError, WorkerCrashed, WorkerTimedOut) as exc:
            reason = str(exc)
    if mode == "process":
        raise OptionError(f"isolate='process' on {kernel.name}: {reason}")
    with _noted_lock:
        first = kernel.name not in _noted
        _noted.add(kernel.name)
    if first:
        warn_at_caller(f"autotune: {kernel.name} is tuned in this process, not in a worker: {reason}")
    return None
