"""Tune one key: the strategy proposes configs, the pipeline compiles them, a trial runner measures each as it is
compiled, the best few are re-measured interleaved, and the winner and the trials are returned.

The tuner knows nothing about caching, launching policy or where trials run: a `TrialRunner`
(`trial_runner.py`) executes every step that touches the kernel.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn, Protocol

from ..errors import AutotuneError, NoValidConfigError
from ..options import Tuning
from ..record import Trial, TrialStatus
from ..space.spaces import Config
from .pipeline import CompileFailed, CompileOutcome, compile_as_proposed, compile_in_order_of_completion
from .search import SearchStrategy
from .timing import summarize
from .trial_runner import TrialFailed, TrialRunner

logger = logging.getLogger("autotune")


class ProgressSink(Protocol):
    def compiled(self, config: Config) -> None: ...
    def measured(self, config: Config, median_ms: float) -> None: ...
    def failed(self, config: Config, status: TrialStatus) -> None: ...


class NoProgress:
    def compiled(self, config: Config) -> None:
        pass

    def measured(self, config: Config, median_ms: float) -> None:
        pass

    def failed(self, config: Config, status: TrialStatus) -> None:
        pass


@dataclass
class TuneJob:
    """One key to tune: the configs, how (`tuning`, `strategy`) and where its trials run (`runner`)."""

    configs: Sequence[Config]  # every config of the space, in space order ([] when a strategy proposes them)
    tuning: Tuning
    runner: TrialRunner
    kernel_name: str = "kernel"
    skip: frozenset[Config] = frozenset()  # configs pruned away: recorded as skipped
    strategy: SearchStrategy | None = None  # try only what it proposes (None: every config)
    preference: Sequence[Config] = ()  # equal timings go to the earlier config here (default: space order)
    progress: ProgressSink = NoProgress()
    measure_single: bool = False  # measure (and verify) a lone candidate too, instead of choosing it unmeasured
    whole_space: bool = True  # False for one rank's shard: its failures say nothing of the call
    clock: Callable[[], float] = time.perf_counter  # seconds, for max_seconds (replay passes its simulated clock)
    batch_size: int | None = None  # configs a strategy proposes at once (default: 2 x compile workers)
    crashed: Mapping[Config, str] = field(default_factory=dict)  # configs that ended a process: recorded, not run
    compile_errors: dict[Config, BaseException] = field(default_factory=dict, repr=False)


@dataclass
class TuneOutcome:
    winner: Config
    trials: list[Trial]
    tuning_s: float
    remeasured: list[Config] = field(default_factory=list)  # re-measured side by side, in their order (winner first)


def tune(job: TuneJob) -> TuneOutcome:
    """Compile and measure every config of `job` (or, with `job.strategy`, the configs the strategy proposes
    within the budget), refine the best, and return the winner and the trials. The runner is closed at the end."""
    started = time.perf_counter()
    try:
        outcome = _tune(job, started)
    except BaseException as exc:
        _close_under(job, exc)
        raise
    job.runner.close()
    return outcome


def _tune(job: TuneJob, started: float) -> TuneOutcome:
    if job.strategy is not None:
        trials = _search(job)
    else:
        order = _exhaustive_order(job)
        if len(order) == 1 and not job.measure_single and order[0] not in job.crashed:  # nothing to compare
            return TuneOutcome(order[0], [Trial(config=c) for c in job.configs], time.perf_counter() - started)
        trials = _try_every_config(job, order)
    winner, remeasured = _winner(job, trials)
    return TuneOutcome(winner, list(trials.values()), time.perf_counter() - started, remeasured)


def _close_under(job: TuneJob, exc: BaseException) -> None:
    """Close the runner while `exc` ends the tuning: an error of the close (a copy on a lost device) is logged
    and noted on `exc`, never raised in its place (the caller is to see what ended the tuning)."""
    try:
        job.runner.close()
    except Exception as close_error:
        text = f"closing {job.kernel_name}'s trial runner failed too: {type(close_error).__name__}: {close_error}"
        logger.warning("autotune: %s", text)
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(text)


def _exhaustive_order(job: TuneJob) -> list[Config]:
    order = [c for c in job.configs if c not in job.skip]
    if job.tuning.seed is not None:
        random.Random(job.tuning.seed).shuffle(order)
    return order


def _try_every_config(job: TuneJob, order: Sequence[Config]) -> dict[Config, Trial]:
    trials = {c: Trial(config=c) for c in job.configs}
    _record_crashed(job, trials, [c for c in order if c in job.crashed])
    order = [c for c in order if c not in job.crashed]  # neither compiled nor counted against max_seconds
    if job.tuning.max_seconds is not None:
        _run_within(job, order, trials)
    else:
        _run_batch(job, order, trials)
    return trials


def _winner(job: TuneJob, trials: dict[Config, Trial]) -> tuple[Config, list[Config]]:
    """The winner, and the configs re-measured side by side (fastest first) when the refinement decided it."""
    rank = {c: i for i, c in enumerate(job.preference or job.configs)}

    def fastest_first(t: Trial) -> tuple:  # ties: the space's order, else the config's text (never compile order)
        return t.median_ms, rank.get(t.config, len(rank)), t.config.canonical()

    ok = sorted((t for t in trials.values() if t.ok), key=fastest_first)
    if not ok:
        _raise_no_valid(job, list(trials.values()))
    refined = _refine(job, ok[: job.tuning.refine_topk])
    if refined:
        remeasured = [t.config for t in sorted(refined, key=fastest_first)]
        return remeasured[0], remeasured
    ok = [t for t in ok if t.ok]  # without those that failed when re-measured
    if not ok:
        _raise_no_valid(job, list(trials.values()))
    return ok[0].config, []


def _run_batch(job: TuneJob, configs: Sequence[Config], trials: dict[Config, Trial]) -> None:
    """Compile `configs` in the pool and measure each as soon as it is compiled, filling `trials`."""
    with compile_in_order_of_completion(
        configs, job.runner.compiler(), workers=job.tuning.compile_workers, timeout_s=job.runner.compile_timeout_s
    ) as outcomes:
        for outcome in outcomes:
            _settle(job, trials, outcome)


def _run_within(job: TuneJob, order: Sequence[Config], trials: dict[Config, Trial]) -> None:
    """An exhaustive tuning under `max_seconds`: the configs stream through the pool in `order` as a search's
    proposals do, and none is started once the budget has passed (the first always is); the configs never
    tried stay in the record as skipped, their error saying the budget ended the tuning."""
    given = 0

    def ask(n: int) -> list[Config]:
        nonlocal given
        batch = list(order[given : given + n])
        given += len(batch)
        return batch

    _measure_as_proposed(job, trials, ask)
    if given < len(order):
        note = (
            f"not tried: max_seconds={job.tuning.max_seconds:g} passed after {given} of {len(order)} configs "
            "(the best of those tried wins)"
        )
        for config in order[given:]:
            trials[config].error = note
        logger.info("%s: %s", job.kernel_name, note)


def _measure_as_proposed(
    job: TuneJob,
    trials: dict[Config, Trial],
    ask: Callable[[int], Sequence[Config]],
    *,
    limit: int | None = None,
    tell: Callable[[Config, float | None], None] | None = None,
) -> None:
    """Measure what `ask(n)` proposes until it proposes nothing, `limit` configs were proposed or `max_seconds`
    has passed (the first batch always starts), filling `trials`. The pool compiles the next proposals while
    the runner measures the current ones (`compile_as_proposed`); `tell` hears each result, failures as None."""
    tuning, start, proposed = job.tuning, job.clock(), 0
    ahead = job.batch_size or max(2, 2 * tuning.compile_workers)  # enough to keep the compile pool busy

    def propose(n: int) -> list[Config]:
        nonlocal proposed
        wanted = n if limit is None else min(n, limit - proposed)
        out_of_time = tuning.max_seconds is not None and proposed and job.clock() - start >= tuning.max_seconds
        if wanted <= 0 or out_of_time:
            return []
        batch = list(ask(wanted))
        proposed += len(batch)
        return batch

    with compile_as_proposed(
        propose,
        job.runner.compiler(),
        workers=tuning.compile_workers,
        ahead=ahead,
        timeout_s=job.runner.compile_timeout_s,
    ) as outcomes:
        for outcome in outcomes:
            trial = _settle(job, trials, outcome)
            if tell is not None:
                tell(trial.config, trial.median_ms if trial.ok else None)


def _settle(job: TuneJob, trials: dict[Config, Trial], outcome: CompileOutcome) -> Trial:
    """A config left the compile stage: record its compile failure, or have the runner measure it."""
    config = outcome.config
    if outcome.status is not TrialStatus.OK:
        trial = trials[config] = Trial(config=config, status=outcome.status, error=_compile_error_text(outcome))
        trial.compile_s = outcome.compile_s
        if outcome.error is not None:
            job.compile_errors[config] = outcome.error
    else:
        job.progress.compiled(config)
        trial = trials[config] = job.runner.measure(config)
        if trial.compile_s is None:
            trial.compile_s = outcome.compile_s
    _report(job, trial)
    return trial


def _compile_error_text(outcome: CompileOutcome) -> str | None:
    error = outcome.error
    if error is None:
        return None
    return str(error) if isinstance(error, CompileFailed) else f"{type(error).__name__}: {error}"


def _report(job: TuneJob, trial: Trial) -> None:
    if trial.ok and trial.median_ms is not None:
        job.progress.measured(trial.config, trial.median_ms)
        logger.debug("%s %s: median %.4f ms", job.kernel_name, dict(trial.config), trial.median_ms)
    else:
        job.progress.failed(trial.config, trial.status)
        logger.info("%s %s: %s %s", job.kernel_name, dict(trial.config), trial.status.value, trial.error or "")


def _search(job: TuneJob) -> dict[Config, Trial]:
    """Run what the strategy proposes until the budget (configs, seconds) is spent or it has nothing left; each
    result, failures included, is told back, so no config is tried twice."""
    trials: dict[Config, Trial] = {}
    strategy = job.strategy
    assert strategy is not None  # tune() searches only a job with a strategy
    crashed = [c for c in job.crashed if strategy.space.contains(c)]  # a note of a config not searched: not ours
    _record_crashed(job, trials, crashed)
    for config in crashed:  # told as failed before the search starts: never proposed, not counted in max_configs
        strategy.tell(config, None)
    _measure_as_proposed(job, trials, strategy.ask, limit=job.tuning.max_configs, tell=strategy.tell)
    return trials


def _record_crashed(job: TuneJob, trials: dict[Config, Trial], configs: Sequence[Config]) -> None:
    """Record `configs`, which the crash journal says ended a process measuring them, as crashed without running
    them: in the record, so the crash is not lost, and outside the budget (no other config loses its turn)."""
    for config in configs:
        trials[config] = Trial(config=config, status=TrialStatus.CRASHED, error=job.crashed[config])
        _report(job, trials[config])


def _refine(job: TuneJob, top: list[Trial]) -> list[Trial]:
    """Re-measure the best few interleaved (one rep each per round), so drift hits all of them alike; the winner
    is then the fastest of them by those rounds alone. A refined trial's samples become its rounds (its first pass
    only chose it for refinement), so a slow or fast spell during one config's first pass does not pick the
    winner, and its median is still the median of its samples. Returns the trials re-measured, [] when the first
    pass decides; one that failed when run again is failed (never the winner)."""
    if len(top) < 2 or job.tuning.refine_reps <= 0:
        return []
    rounds = job.runner.refine([t.config for t in top], job.tuning.refine_reps)
    for trial in top:  # a config that ran clean in the first pass has an error only from its re-measurement
        error = None if rounds.get(trial.config) else job.runner.errors.get(trial.config)
        if isinstance(error, TrialFailed):  # its worker died, hung or lost the device running it
            trial.status, trial.error = error.status, f"failed when re-measured: {error}"
        elif error is not None:
            trial.status = TrialStatus.RUNTIME_ERROR
            trial.error = f"failed when re-measured: {type(error).__name__}: {error}"
    refined = [t for t in top if t.ok and rounds.get(t.config)]  # none: the runner could not (first passes decide)
    for trial in refined:  # its samples are now the rounds: the record's median is what decided
        trial.samples_ms = list(rounds[trial.config])
        trial.median_ms, trial.min_ms = summarize(trial.samples_ms)
    return refined


def _raise_no_valid(job: TuneJob, trials: list[Trial]) -> NoReturn:
    """Every config failed. When they all failed with the same error, that error is what to fix (the call, the
    kernel, the environment or the space): the message leads with it and the NoValidConfigError is raised from it."""
    failed = [t for t in trials if t.status is not TrialStatus.SKIPPED]
    common = failed[0].error if job.whole_space and len(failed) > 1 and len({t.error for t in failed}) == 1 else None
    if common is None:
        raise NoValidConfigError(_no_valid_message(job.kernel_name, trials), trials)
    message = (
        f"every config of {job.kernel_name} failed with the same error: {common}\n"
        "This is not about one config: fix the call, the kernel or the environment, or the search space if "
        "none of its configs can work for this kernel (a tl.static_assert every value fails); the error above "
        "is the cause. The configs tried:\n" + "\n".join(f"  {dict(t.config)}: {t.status.value}" for t in failed)
    )
    # in process the exception itself; from a worker only its text came back: an AutotuneError carries it
    first = failed[0].config
    cause = (
        job.runner.errors.get(first)
        or job.compile_errors.get(first)
        or AutotuneError(f"{common} (raised in a worker; its text as it came back)")
    )
    compiled_none = all(t.status is TrialStatus.COMPILE_ERROR for t in failed)  # the kernel's, whatever the call
    raise NoValidConfigError(message, trials, of_the_call=not compiled_none) from cause


def _no_valid_message(kernel_name: str, trials: Sequence[Trial]) -> str:
    lines = [f"no config of {kernel_name} ran successfully; each failed:"]
    for trial in trials:
        if trial.status is TrialStatus.SKIPPED:
            continue
        lines.append(f"  {dict(trial.config)}: {trial.status.value}: {trial.error}")
    lines.append("Fix the kernel or the search space (or widen verify's tolerances) and call again.")
    return "\n".join(lines)
