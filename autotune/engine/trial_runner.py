"""The seam between the tuner and where trials run.

The tuner (`tuner.py`) orchestrates one key: the strategy proposes configs, the pipeline compiles them with the
runner's compiler, the runner measures each compiled one, the runner re-measures the best few, and the tuner
picks the winner. A `TrialRunner` executes those single steps somewhere: in this process on the caller's stream
(`in_process.InProcessRunner`), in a worker process (`isolation.WorkerRunner`), or, for the replay, on a
recorded landscape (`reporting.replay`). `runners.runner_for` is the one place that chooses a tuning's runner.

A new place to run trials (a Ray actor, a remote machine) is a new class with these members, built by
`runner_for` (or passed to `TuneJob` directly): the tuner does not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ..record import Trial, TrialStatus, Where
from ..space.spaces import Config
from .pipeline import Compiler


class TrialFailed(Exception):
    """A config's failure whose status the runner knows without an exception of the config's own (a worker that
    died, hung or lost its device while running it), as kept in `TrialRunner.errors`."""

    def __init__(self, status: TrialStatus, text: str) -> None:
        super().__init__(text)
        self.status = status


class TrialRunner(Protocol):
    """Runs one tuning's trials: compile (through `compiler()`), measure one config, re-measure a few, close."""

    @property
    def compile_timeout_s(self) -> float | None:
        """The pipeline's limit on one compile; None where the runner enforces its own (a worker it can kill)."""
        ...

    @property
    def where(self) -> Where:
        """Where trials run, as the record says it: "in-process", "worker process"."""
        ...

    @property
    def errors(self) -> Mapping[Config, BaseException]:
        """The exception each failed config raised, where the runner has it (in-process), for error messages."""
        ...

    def compiler(self) -> Compiler:
        """What the compile pool compiles this tuning's configs with."""
        ...

    def measure(self, config: Config) -> Trial:
        """Check (verify=) and time a compiled config. Its own failure (a crash, a hang, a wrong answer) is the
        trial's status; a mistake of the call, or a device no config can use any more, is raised."""
        ...

    def refine(self, configs: Sequence[Config], reps: int) -> dict[Config, list[float]]:
        """Re-measure `configs` interleaved, `reps` rounds of one run each; {} when they could not be. A config
        that failed on its own when run again is left out (its exception in `errors` where the runner has it; a
        `TrialFailed` where it knows only the status), and is never the winner."""
        ...

    def close(self) -> None:
        """End the tuning: put the caller's arguments back as passed, release what the runner holds."""
        ...
