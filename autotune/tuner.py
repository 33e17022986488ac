"""Tune one key: run the compile->measure pipeline over the configs, refine the best, pick the winner.

The tuner knows nothing about caching or launching policy: it is given a function that launches one config
and returns the trials and the winner. Argument safety (restore_value, reset_to_zero, setup, verify) lives
here because it wraps every trial run.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from .errors import (
    AutotuneError,
    DeviceError,
    FailureKind,
    NoValidConfigError,
    VerificationError,
    classify,
    warn_verification_failed,
)
from .options import Tuning
from .pipeline import CompileFailed, Compiler, compile_as_proposed, compile_in_order_of_completion
from .record import Trial, TrialStatus
from .reference import Reference, check_verified
from .space import Config
from .timing import Timer, summarize

logger = logging.getLogger("autotune")


class ArgumentGuard:
    """Snapshots the `restore_value` and `reset_to_zero` tensors so every trial, and the final launch,
    sees the caller's arguments exactly as passed."""

    def __init__(
        self,
        named_args: Mapping[str, Any],
        restore_value: Sequence[str],
        reset_to_zero: Sequence[str],
        poisoned_outputs: Sequence[str] = (),
    ) -> None:
        self.named_args = named_args
        self.restore_value = [n for n in restore_value if named_args.get(n) is not None]
        self.reset_to_zero = [n for n in reset_to_zero if named_args.get(n) is not None]
        guarded = {*self.restore_value, *self.reset_to_zero}
        # Outputs checked by a Reference are filled with a sentinel before each checked run, so a config that
        # leaves part of an output unwritten cannot pass on the previous trial's values; restored at the end.
        self.poisoned = [n for n in poisoned_outputs if named_args.get(n) is not None and n not in guarded]
        self._snapshots = {n: named_args[n].clone() for n in {*guarded, *self.poisoned}}

    def poison_outputs(self) -> None:
        """Fill the checked outputs with NaN (floats) or the dtype's largest value (integers)."""
        import torch

        for name in self.poisoned:
            tensor = self.named_args[name]
            if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
                tensor.fill_(float("nan"))
            elif tensor.dtype != torch.bool:
                tensor.fill_(torch.iinfo(tensor.dtype).max)

    def before_run(self) -> None:
        """Restore `restore_value` arguments and zero `reset_to_zero` ones, before each trial run."""
        for name in self.restore_value:
            self.named_args[name].copy_(self._snapshots[name])
        for name in self.reset_to_zero:
            self.named_args[name].zero_()

    def restore_all(self) -> None:
        """Put every guarded argument back as the caller passed it."""
        for name, snapshot in self._snapshots.items():
            self.named_args[name].copy_(snapshot)


class ProgressSink(Protocol):
    def compiled(self, config: Config) -> None: ...
    def measured(self, config: Config, median_ms: float) -> None: ...
    def failed(self, config: Config, status: TrialStatus) -> None: ...


class _NoProgress:
    def compiled(self, config: Config) -> None:
        pass

    def measured(self, config: Config, median_ms: float) -> None:
        pass

    def failed(self, config: Config, status: TrialStatus) -> None:
        pass


@dataclass
class TuneJob:
    """Everything needed to tune one key."""

    configs: Sequence[Config]  # every config of the space, in space order
    run_config: Callable[[Config], Any]  # launches one config once on the caller's stream
    compiler: Compiler
    timer: Timer
    tuning: Tuning
    named_args: Mapping[str, Any]
    skip: frozenset = frozenset()  # configs pruned away: recorded as skipped
    restore_value: Sequence[str] = ()
    reset_to_zero: Sequence[str] = ()
    setup: Callable[..., Any] | None = None
    verify: Callable[..., Any] | Reference | None = None
    synchronize: Callable[[], None] = lambda: None
    progress: ProgressSink = field(default_factory=_NoProgress)
    kernel_name: str = "kernel"
    measure_single: bool = False  # measure a lone candidate too (its timing is compared elsewhere)
    whole_space: bool = True  # False for one rank's shard: its failures say nothing of the call
    preference: Sequence[Config] = ()  # equal timings go to the earlier config here (default: space order)
    strategy: Any | None = None  # a search.SearchStrategy: try only what it proposes (None: every config)
    clock: Callable[[], float] = time.perf_counter  # seconds, for max_seconds (replay passes its simulated clock)
    batch_size: int | None = None  # configs a strategy proposes at once (default: 2 x compile workers)
    isolated: Any | None = None  # an isolation.IsolatedRunner: every trial runs in the worker
    errors: dict = field(default_factory=dict, repr=False)  # config -> the exception it failed with, this tuning
    # A context around each in-process measurement of a config (the crash journal, storage/journal.py, notes it
    # so the next process knows which config ended this one) and the configs known to have ended a process
    # (recorded crashed, never run again): given by the caller, who knows the cache.
    noted: Callable[[Config], contextlib.AbstractContextManager] = lambda config: contextlib.nullcontext()
    crashed: Mapping[Config, str] = field(default_factory=dict)


@dataclass
class TuneOutcome:
    winner: Config
    trials: list[Trial]
    tuning_s: float
    remeasured: list[Config] = field(default_factory=list)  # re-measured side by side, in their order (winner first)


def tune(job: TuneJob) -> TuneOutcome:
    """Compile and measure every config of `job` (or, with `job.strategy`, the configs the strategy proposes
    within the budget), refine the best, and return the winner and the trials."""
    started = time.perf_counter()
    checked = job.verify.outputs if isinstance(job.verify, Reference) else ()
    guard = ArgumentGuard(job.named_args, job.restore_value, job.reset_to_zero, checked)
    try:
        expected = job.verify.expected(job.named_args) if isinstance(job.verify, Reference) else None
        if job.strategy is not None:
            trials = _search(job, guard, expected)
        else:
            trials = {c: Trial(config=c) for c in job.configs}
            order = [c for c in job.configs if c not in job.skip]
            if job.tuning.seed is not None:
                random.Random(job.tuning.seed).shuffle(order)
            if len(order) == 1 and job.verify is None and not job.measure_single:
                # One candidate: nothing to compare, so nothing to measure (as triton.autotune does).
                return TuneOutcome(order[0], list(trials.values()), time.perf_counter() - started)
            if job.tuning.max_seconds is not None:
                _run_within(job, order, trials, guard, expected)
            else:
                _run_batch(job, order, trials, guard, expected)
        rank = {c: i for i, c in enumerate(job.preference or job.configs)}

        def fastest_first(t: Trial) -> tuple:
            return t.median_ms, rank.get(t.config, len(rank))

        ok = sorted((t for t in trials.values() if t.ok), key=fastest_first)
        if not ok:
            _raise_no_valid(job, list(trials.values()))
        top = ok[: job.tuning.refine_topk]
        remeasured = [t.config for t in sorted(top, key=fastest_first)] if _refine(job, top, guard) else []
        winner = remeasured[0] if remeasured else ok[0].config
        return TuneOutcome(winner, list(trials.values()), time.perf_counter() - started, remeasured)
    finally:
        guard.restore_all()


def _run_batch(
    job: TuneJob, configs: Sequence[Config], trials: dict[Config, Trial], guard: ArgumentGuard, expected: dict | None
) -> None:
    """Compile `configs` in the pool and measure each as soon as it is compiled, filling `trials`."""
    with compile_in_order_of_completion(
        configs, job.compiler, workers=job.tuning.compile_workers, timeout_s=_compile_timeout(job)
    ) as outcomes:
        for outcome in outcomes:
            _settle(job, trials, outcome, guard, expected)


def _run_within(
    job: TuneJob, order: Sequence[Config], trials: dict[Config, Trial], guard: ArgumentGuard, expected: dict | None
) -> None:
    """An exhaustive tuning under `max_seconds`: the configs stream through the pool in `order` as a search's
    proposals do, and none is started once the budget has passed (the first always is); the configs never
    tried stay in the record as skipped, their error saying the budget ended the tuning."""
    given = 0

    def ask(n: int) -> list[Config]:
        nonlocal given
        batch = list(order[given : given + n])
        given += len(batch)
        return batch

    _measure_as_proposed(job, trials, guard, expected, ask)
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
    guard: ArgumentGuard,
    expected: dict | None,
    ask: Callable[[int], Sequence[Config]],
    *,
    limit: int | None = None,
    tell: Callable[[Config, float | None], None] | None = None,
) -> None:
    """Measure what `ask(n)` proposes until it proposes nothing, `limit` configs were proposed or `max_seconds`
    has passed (the first batch always starts), filling `trials`. The pool compiles the next proposals while
    the caller measures the current ones (`compile_as_proposed`); `tell` hears each result, failures as None."""
    tuning, start, proposed = job.tuning, job.clock(), 0
    ahead = job.batch_size or max(2, 2 * tuning.compile_workers)  # enough to keep the compile pool busy

    def propose(n: int) -> list[Config]:
        nonlocal proposed
        wanted = n if limit is None else min(n, limit - proposed)
        if wanted <= 0 or (tuning.max_seconds is not None and proposed and job.clock() - start >= tuning.max_seconds):
            return []
        batch = list(ask(wanted))
        proposed += len(batch)
        return batch

    with compile_as_proposed(
        propose, job.compiler, workers=tuning.compile_workers, ahead=ahead, timeout_s=_compile_timeout(job)
    ) as outcomes:
        for outcome in outcomes:
            trial = _settle(job, trials, outcome, guard, expected)
            if tell is not None:
                tell(trial.config, trial.median_ms if trial.ok else None)


def _compile_timeout(job: TuneJob) -> float | None:
    """The pipeline's limit on one compile; none under isolation, where the compile worker's request has it
    (and kills a worker that passes it, which a thread's compile cannot be)."""
    return None if job.isolated is not None else job.tuning.compile_timeout_s


def _settle(
    job: TuneJob, trials: dict[Config, Trial], outcome: Any, guard: ArgumentGuard, expected: dict | None
) -> Trial:
    """A config left the compile stage: record its compile failure, or measure it (in the worker, isolated)."""
    config = outcome.config
    if outcome.status is TrialStatus.OK and job.isolated is not None:  # a crash or a hang is this config's result
        trial = trials[config] = job.isolated.trial(config)
        if isinstance(outcome.result, float):  # a compile worker compiled it: its seconds there
            trial.compile_s = outcome.result
        if trial.ok:
            job.progress.compiled(config)
            job.progress.measured(config, trial.median_ms)
        else:
            job.progress.failed(config, trial.status)
        return trial
    trial = trials.setdefault(config, Trial(config=config))
    trial.compile_s = outcome.compile_s
    if outcome.status is not TrialStatus.OK:
        _fail(job, trial, outcome.status, outcome.error)
    elif config in job.crashed:  # it ended a process that measured it: not run again
        _fail(job, trial, TrialStatus.CRASHED, None)
        trial.error = job.crashed[config]
    else:
        job.progress.compiled(config)
        _measure(job, trial, guard, expected)
    return trial


def _search(job: TuneJob, guard: ArgumentGuard, expected: dict | None) -> dict[Config, Trial]:
    """Run what the strategy proposes until the budget (configs, seconds) is spent or it has nothing left; each
    result, failures included, is told back, so no config is tried twice."""
    trials: dict[Config, Trial] = {}
    assert job.strategy is not None  # tune() searches only a job with a strategy
    _measure_as_proposed(
        job, trials, guard, expected, job.strategy.ask, limit=job.tuning.max_configs, tell=job.strategy.tell
    )
    return trials


def _measure(job: TuneJob, trial: Trial, guard: ArgumentGuard, expected: dict | None) -> None:
    """Run and time one config in this process, noted in the crash journal while it runs."""
    with job.noted(trial.config):
        _run_and_time(job, trial, guard, expected)


def _run_and_time(job: TuneJob, trial: Trial, guard: ArgumentGuard, expected: dict | None) -> None:
    config, named = trial.config, job.named_args

    def before() -> None:
        guard.before_run()
        if job.setup is not None:
            job.setup(**named)

    try:
        before()
        if job.verify is not None:
            guard.poison_outputs()
        job.run_config(config)  # the checked run: output as one untuned launch would leave it
        if job.verify is not None:
            job.synchronize()
            check_verified(job.verify, named, expected)
    except VerificationError as exc:
        warn_verification_failed(job.kernel_name, config, exc)
        _fail(job, trial, TrialStatus.VERIFY_FAILED, exc)
        return
    except Exception as exc:
        _fail_or_raise(job, trial, exc, "run")
        return
    try:
        samples = job.timer.measure(
            lambda: job.run_config(config), warmup=job.tuning.warmup, reps=job.tuning.reps, before=before
        )
    except Exception as exc:
        _fail_or_raise(job, trial, exc, "measure")
        return
    trial.samples_ms = samples
    trial.median_ms, trial.min_ms = summarize(samples)
    trial.status = TrialStatus.OK
    trial.error = None
    job.progress.measured(config, trial.median_ms)
    logger.debug("%s %s: median %.4f ms", job.kernel_name, dict(config), trial.median_ms)


def _refine(job: TuneJob, top: list[Trial], guard: ArgumentGuard) -> bool:
    """Re-measure the best few interleaved (one rep each per round), so drift hits all of them alike; the winner
    is then the fastest of them by those rounds alone. A refined trial's samples become its rounds (its first pass
    only chose it for refinement), so a slow or fast spell during one config's first pass does not pick the winner,
    and its median is still the median of its samples. False when nothing was re-measured (the first pass decides)."""
    if len(top) < 2 or job.tuning.refine_reps <= 0:
        return False
    if job.isolated is not None:
        rounds = job.isolated.refine([t.config for t in top], job.tuning.refine_reps)
    else:
        rounds = {t.config: [] for t in top}
        for _ in range(job.tuning.refine_reps):
            for trial in top:
                rounds[trial.config] += job.timer.measure(
                    functools.partial(job.run_config, trial.config), warmup=0, reps=1, before=guard.before_run
                )
    if not all(rounds.get(t.config) for t in top):  # the worker could not re-measure them: first-pass medians decide
        return False
    for trial in top:  # its samples are now the rounds: the record's median is what decided
        trial.samples_ms = list(rounds[trial.config])
        trial.median_ms, trial.min_ms = summarize(trial.samples_ms)
    return True


def _fail_or_raise(job: TuneJob, trial: Trial, exc: Exception, stage: str) -> None:
    """Record a config's own failure and go on; abort on a poisoned device; raise a mistake of the call."""
    kind = classify(exc, stage)
    if kind is FailureKind.CONFIG:
        _fail(job, trial, TrialStatus.RUNTIME_ERROR, exc)
    elif kind is FailureKind.OUT_OF_RESOURCES:
        _fail(job, trial, TrialStatus.OUT_OF_RESOURCES, exc)
    elif kind is FailureKind.STICKY_DEVICE:
        raise DeviceError(
            f"{job.kernel_name} config {dict(trial.config)} left the GPU unusable "
            f"({type(exc).__name__}: {exc}); every later launch in this process would fail, so the "
            "tuning stops here. Tune with Tuning(isolate='process') (the kernel defined at the top level of "
            "an importable module), where such a config costs only itself; or fix that config or "
            "prune= it away, then tune again in a fresh process."
        ) from exc
    else:
        raise exc


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
    cause = job.errors.get(failed[0].config) or AutotuneError(
        f"{common} (raised in a worker; its text as it came back)"
    )
    raise NoValidConfigError(message, trials) from cause


def _fail(job: TuneJob, trial: Trial, status: TrialStatus, error: BaseException | None) -> None:
    if error is not None:
        job.errors[trial.config] = error
    trial.status = status
    trial.error = (
        None
        if error is None
        else str(error)
        if isinstance(error, CompileFailed)
        else f"{type(error).__name__}: {error}"
    )
    job.progress.failed(trial.config, status)
    logger.info("%s %s: %s %s", job.kernel_name, dict(trial.config), status.value, trial.error or "")


def _no_valid_message(kernel_name: str, trials: Any) -> str:
    lines = [f"no config of {kernel_name} ran successfully; each failed:"]
    for trial in trials:
        if trial.status is TrialStatus.SKIPPED:
            continue
        lines.append(f"  {dict(trial.config)}: {trial.status.value}: {trial.error}")
    lines.append("Fix the kernel or the search space (or widen verify's tolerances) and call again.")
    return "\n".join(lines)
