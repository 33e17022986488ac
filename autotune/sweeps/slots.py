"""What the driver sees of one worker, whatever runs it (a local process, a Ray actor): the `Slot` protocol and
the two ways a request to it can fail."""

from __future__ import annotations

from typing import Protocol

from ..errors import AutotuneError
from .worker import KeyInfo, Maker, MakerSet, Share

__all__ = ["Slot", "Executor", "WorkerLost", "JobFailed"]


class WorkerLost(AutotuneError):
    """The worker died (killed from outside, out of memory, its node lost) or stopped answering: the job it ran is
    retried once on another worker, and the worker replaced."""


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
