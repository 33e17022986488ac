"""What the driver sees of one worker, whatever runs it (a local process, a Ray actor): the `Slot` protocol and
the two ways a request to it can fail."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..errors import AutotuneError
from .worker import KeyInfo, Maker, MakerSet, Share

__all__ = ["Slot", "Executor", "WorkerLost", "JobFailed", "env_of_worker", "start_together"]


class WorkerLost(AutotuneError):
    """The worker died (killed from outside, out of memory, its node lost) or its pipe or actor is gone: the job it
    ran is retried once on another worker, and the worker replaced. A worker that hangs is waited for: a config
    that hangs is bounded by the trial limit of isolation, the sweep's default (`trial_timeout_s`, else 30 s).
    `config`: the config the worker was measuring in its own process as it died, where its crash journal says."""

    def __init__(self, message: str, config: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.config = config


class JobFailed(AutotuneError):
    """The worker raised (the maker failed, no config of the key ran): the job's own failure, not retried."""


class Slot(Protocol):
    """One worker of a sweep. `kind` is its device fingerprint, known once started."""

    index: int
    kind: str

    def prepare(self, maker: Maker | MakerSet) -> KeyInfo: ...
    def tune(self) -> bytes: ...
    def tune_share(self, share: Share) -> bytes: ...
    def restart(self) -> None: ...
    def stop(self) -> None: ...


class Executor(Protocol):
    """Starts a sweep's workers and stops them all (also on Ctrl-C)."""

    name: str

    def start(self) -> list[Slot]: ...
    def stop(self) -> None: ...


class _Starting(Protocol):
    def launch(self) -> None: ...
    def wait_ready(self) -> None: ...


def env_of_worker(worker_env: Sequence[Mapping[str, str]], index: int) -> dict[str, str]:
    """Worker `index`'s own environment variables: `worker_env` cycling (none when it is empty)."""
    return dict(worker_env[index % len(worker_env)]) if worker_env else {}


def start_together(workers: Sequence[_Starting]) -> None:
    """Launch every worker, then wait for each: they import torch and Triton in parallel."""
    for worker in workers:
        worker.launch()
    for worker in workers:
        worker.wait_ready()
