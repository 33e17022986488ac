"""One config for a set of calls (`Tuning(objective="geomean" | "max")`): a `TrialRunner` over one runner per call.

Each config is measured on every call, and its trial's times are the objective of the per-call times: the
geometric mean (good on average, relative to each shape's own speed) or the max (the best worst case). The
per-call medians are kept on the trial (`Trial.calls_ms`). The tuner is unchanged: it ranks and refines these
combined trials as it ranks any.

The compile pool compiles with the first call's compiler. A call that Triton's JIT specializes differently
(another dtype, an integer argument divisible by 16 on one call and not on another, a different constexpr)
compiles its own variant at its first, untimed, checked run: correct, only not in the pool.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import OptionError
from ..options import Objective
from ..record import Trial, TrialStatus, Where
from ..space.spaces import Config, configs_checksum

if TYPE_CHECKING:  # not at import: warmup and sweep import check_objective, and a cache hit loads no pipeline
    from .pipeline import Compiler
    from .trial_runner import TrialRunner

__all__ = [
    "MultiCallRunner",
    "check_objective",
    "combine",
    "common_candidates",
    "describe_call",
    "in_call_order",
    "runners_for_calls",
]

_Call = TypeVar("_Call")


def check_objective(kernel_name: str, own: Objective | None, given: Objective | None, where: str) -> None:
    """Refuse a tuning= whose objective is not the kernel's own: the kernel would never serve its entries (an entry
    is served only to the objective it was tuned for)."""
    if given != own:
        raise OptionError(
            f"{where}: tuning= has objective={given!r}, but {kernel_name} is decorated with objective={own!r}, and "
            f"an entry serves only the objective it was tuned for, so {kernel_name} would never launch what this "
            f"tunes; give tuning=Tuning(..., objective={own!r}), or decorate {kernel_name} with "
            f"tuning=Tuning(objective={given!r})"
        )


def describe_call(named: Mapping[str, Any]) -> str:
    """A call's shapes as the record shows them: each tensor's shape and each integer ("x[1024, 64], n=1024")."""
    parts = []
    for name, value in named.items():
        shape = getattr(value, "shape", None)
        if shape is not None:
            parts.append(f"{name}[{', '.join(str(d) for d in shape)}]")
        elif isinstance(value, int) and not isinstance(value, bool):
            parts.append(f"{name}={value}")
    return ", ".join(parts)


def in_call_order(described: Sequence[str]) -> list[int]:
    """The canonical order of a set's calls (indices into `described`, each call's `describe_call`): by their
    shapes, ties in the given order. Ranks that give the same set in other orders then tune it alike: one
    `record.calls`, and each rank's trials' `calls_ms` filed under the same calls."""
    return sorted(range(len(described)), key=described.__getitem__)


def common_candidates(
    kernel_name: str, configs: Sequence[Config], kept: Sequence[Sequence[Config]], described: Sequence[str]
) -> tuple[list[Config], str]:
    """The candidates of a set of calls: the configs prune= kept (`kept`, per call) for every call, in the order it
    kept them for the first, and their checksum in the space's (`configs`) order, whatever the calls' order. Each
    candidate is measured on every call and the winner launches for each: one left out for any call is none."""
    common = set(kept[0]).intersection(*kept[1:])
    if not common:
        shown = "; ".join(f"{d or 'call ' + str(i)}: {len(k)}" for i, (d, k) in enumerate(zip(described, kept)))
        raise OptionError(
            f"prune= on {kernel_name} keeps no config for every call of this set (configs kept per call: "
            f"{shown[:400]}), and Tuning(objective=...) tunes one config that every call launches: make prune= "
            "keep at least one config that fits all of them, or tune these calls apart (a key= that puts them in "
            "different keys)"
        )
    return [c for c in kept[0] if c in common], configs_checksum(c for c in configs if c in common)


# The least time a call counts for in a geometric mean: a call too quick for the timer (0 ms: a clock's resolution,
# a do_bench= stand-in) would make every config's mean 0, and the other calls would decide nothing.
GEOMEAN_FLOOR_MS = 1e-6


def combine(objective: Objective, times: Sequence[float]) -> float:
    """The objective of one config's per-call times: their geometric mean (each time at least GEOMEAN_FLOOR_MS,
    so a 0 ms call leaves the ranking to the others), or their max."""
    if objective == "max":
        return max(times)
    return math.exp(sum(math.log(max(t, GEOMEAN_FLOOR_MS)) for t in times) / len(times))


def runners_for_calls(calls: Iterable[_Call], runner_for: Callable[[_Call], TrialRunner]) -> list[TrialRunner]:
    """One runner per call; when building one fails, those built so far are closed (their calls get their
    arguments back) before the error is raised."""
    runners: list[TrialRunner] = []
    try:
        for call in calls:
            runners.append(runner_for(call))
    except BaseException:
        for runner in runners:
            runner.close()
        raise
    return runners


class MultiCallRunner:
    """Measures each config on every call's runner and combines the times by `objective`. `on_call(index)` is
    told before each call's measurement (a worker tells its parent which call a crash or a hang is on)."""

    def __init__(
        self, runners: Sequence[TrialRunner], objective: Objective, on_call: Callable[[int], Any] | None = None
    ) -> None:
        if not runners:
            raise ValueError("a multi-call tuning needs at least one call")
        self.runners = list(runners)
        self.objective = objective
        self.on_call = on_call

    @property
    def compile_timeout_s(self) -> float | None:
        return self.runners[0].compile_timeout_s

    @property
    def where(self) -> Where:
        return self.runners[0].where

    @property
    def errors(self) -> Mapping[Config, BaseException]:
        found: dict[Config, BaseException] = {}
        for runner in self.runners:
            found.update(runner.errors)
        return found

    def compiler(self) -> Compiler:
        return self.runners[0].compiler()

    def measure(self, config: Config) -> Trial:
        per_call = []
        for index, runner in enumerate(self.runners):
            if self.on_call is not None:
                self.on_call(index)
            trial = runner.measure(config)
            if not trial.ok:  # a config that fails on one call cannot serve them all
                if trial.error is not None and len(self.runners) > 1:
                    trial.error = f"on call {index}: {trial.error}"
                return trial
            per_call.append(trial)
        medians = [float(t.median_ms or 0.0) for t in per_call]
        rounds = min(len(t.samples_ms) for t in per_call)
        ranked = [sorted(t.samples_ms) for t in per_call]  # rank by rank: the i-th fastest of each call together
        return Trial(
            config=config,
            status=TrialStatus.OK,
            median_ms=combine(self.objective, medians),
            min_ms=combine(self.objective, [float(t.min_ms or 0.0) for t in per_call]),
            samples_ms=[combine(self.objective, [samples[i] for samples in ranked]) for i in range(rounds)],
            calls_ms=medians,
        )

    def refine(self, configs: Sequence[Config], reps: int) -> dict[Config, list[float]]:
        """Each round re-measures every config on every call (one run each, interleaved), and a config's round is
        the objective of its per-call times in that round. A config that fails on any call is left out."""
        rounds: dict[Config, list[float]] = {c: [] for c in configs}
        for _ in range(reps):
            alive = [c for c in configs if c in rounds]
            per_call = [runner.refine(alive, 1) for runner in self.runners]
            for config in alive:
                if all(times.get(config) for times in per_call):
                    rounds[config].append(combine(self.objective, [statistics.median(t[config]) for t in per_call]))
                else:
                    del rounds[config]
        return rounds

    def close(self) -> None:
        errors = []
        for runner in self.runners:
            try:
                runner.close()
            except BaseException as exc:  # every call's arguments are put back before the first failure is raised
                errors.append(exc)
        if errors:
            raise errors[0]
