"""The tuning of one key of an `@autotune` kernel: what a cache miss runs, from the cache's call to the record.

`KernelCache.get_or_tune` calls `tune_key` once per key, under the key's locks. It chooses what to try (every
config prune= kept, or a search strategy seeded with the nearest keys' winners and, for `model`, another device
kind's record as a prior), where to run the trials (`runners.runner_for`: this process or a worker), runs the
engine's `tune()` with the crash journal's notes, and builds the record the cache stores (which then drops those
notes: `KernelCache.forget_crashes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msgspec import structs

from ..engine.search import make_strategy, nearest_prior, nearest_winners, prior_note
from ..kernel.call import BoundCall
from ..kernel.occupancy import FIELD as OCCUPANCY
from ..record import Trial, TrialStatus, TuningRecord
from ..space.spaces import Config, as_space

if TYPE_CHECKING:
    from ..engine.progress import TuningProgress
    from ..engine.search.strategies import SearchStrategy
    from ..engine.trial_runner import TrialRunner
    from .autotuned import Autotuned

__all__ = ["KeyTuning", "Select", "search_strategy", "tune_key", "unrecorded_crashes", "with_lowering"]

Select = Callable[[list[Config]], Sequence[Config]]


@dataclass(frozen=True)
class KeyTuning:
    """One tuning of a key: the call it is measured on and what prune= kept for it."""

    key: tuple
    dtypes: tuple[str, ...]
    bound: BoundCall
    grid: Any
    kept: Sequence[Config]  # the configs prune= kept for this call, in its order (every config without prune=)
    candidates: str | None  # the checksum of the kept configs; None without prune=
    force: bool = False  # AUTOTUNE_FORCE or force=: configs the crash journal noted are tried again
    select: Select | None = None  # one shard of a key tuned by several processes: the configs this one tunes
    calls: Sequence[tuple[BoundCall, Any]] = ()  # a Tuning.objective tuning: every (call, grid), `bound` first
    described: list[str] | None = None  # those calls as the record lists them


def tune_key(kernel: Autotuned, job: KeyTuning) -> TuningRecord:
    """Tune `job.key` and return its record (printed by AUTOTUNE_PRINT). With `job.select` (a shard), tune only
    the configs it keeps, record the others as skipped and measure even a lone one: the shards' records are
    merged and reported afterwards."""
    from ..engine.tuner import TuneJob, tune
    from ..reporting.lines import emit

    strategy = search_strategy(kernel, job.key, job.kept, job.dtypes) if kernel.strategy != "exhaustive" else None
    configs, skip = _configs_and_skipped(kernel, job, searched=strategy is not None)
    searched = _searched_size(kernel, job.kept)
    noted, noted_crashed = kernel.cache.crash_journal(job.key, job.dtypes, force=job.force)
    runner = _trial_runner(kernel, job, noted)  # a shard too: its subset is `skip`
    in_process = runner.where == "in-process"
    crashed = noted_crashed if in_process else {}  # a worker may try them: a crash costs only itself
    kernel.cache.warn_crashes(
        job.key, job.dtypes, _candidates(kernel, job.kept, noted_crashed), isolated=not in_process
    )
    total = len(configs) - len(skip) if strategy is None else min(kernel.tuning.max_configs, searched)
    if strategy is not None:  # the crashed candidates are recorded besides the budget
        total = min(total + sum(1 for c in crashed if strategy.space.contains(c)), searched)
    progress = _progress(kernel, job.key, total, None if strategy is None else searched)
    tune_job = TuneJob(
        configs=configs,
        tuning=kernel.tuning,
        runner=runner,
        kernel_name=kernel.name,
        skip=skip,
        strategy=strategy,
        preference=job.kept,
        progress=progress,
        measure_single=job.select is not None or kernel.verify is not None,
        whole_space=job.select is None,
        crashed=crashed,
    )
    with progress:
        outcome = tune(tune_job)
    if job.select is not None or not unrecorded_crashes(kernel, noted_crashed, outcome.trials):
        # The crashes noted are in the record now: under get_or_tune, dropped once a persistent tier holds it.
        kernel.cache.forget_crashes(job.key, job.dtypes)
    record = kernel.cache.new_record(
        job.key,
        job.dtypes,
        winner=outcome.winner,
        trials=with_lowering(kernel, outcome.trials),
        tuning_s=outcome.tuning_s,
        candidates=job.candidates,
        strategy=None if strategy is None else kernel.strategy,
        space_size=None if strategy is None else searched,
        prior=prior_note(getattr(strategy, "prior", None), outcome.winner),
        where=runner.where,
        remeasured=outcome.remeasured,
        calls=job.described,
    )
    if job.select is None:
        emit(record, cache_hit=False)
    return record


def search_strategy(kernel: Autotuned, key: tuple, kept: Sequence[Config], dtypes: tuple | None) -> SearchStrategy:
    """The strategy that searches this key: over the space (or the configs prune= kept), seeded with the winners
    of the kernel's nearest tuned keys (the same key with other `dtypes` included), and for "model" with
    `Tuning(transfer=True)`, the nearest key's record tuned on another device kind as its prior."""
    space = kernel.space if not _pruned(kernel, kept) else as_space(list(kept))
    seeds = nearest_winners(key, kernel.cache.tuned_records(), dtypes=dtypes)
    transfer = kernel.strategy == "model" and kernel.tuning.transfer  # only the model search uses a prior
    prior = nearest_prior(key, dtypes, kernel.cache.prior_records()) if transfer else None
    tuning = kernel.tuning
    return make_strategy(kernel.strategy, space, seed=tuning.seed, seeds=seeds, budget=tuning.max_configs, prior=prior)


def with_lowering(kernel: Autotuned, trials: list[Trial]) -> list[Trial]:
    """The trials with what each config's occupancy became on this process's target (`Trial.lowered`)."""
    if OCCUPANCY not in kernel.static_options and OCCUPANCY not in kernel.space.fields():
        return trials
    lowered = [kernel.lowered(t.config) for t in trials]
    return [t if lw is None else structs.replace(t, lowered=lw) for t, lw in zip(trials, lowered)]


def _candidates(kernel: Autotuned, kept: Sequence[Config], crashed: dict[Config, str]) -> dict[Config, str]:
    """The configs of `crashed` this call could try (prune= kept them): those worth a warning."""
    if not _pruned(kernel, kept):
        return {c: why for c, why in crashed.items() if kernel.space.contains(c)}
    kept_set = set(kept)
    return {c: why for c, why in crashed.items() if c in kept_set}


def unrecorded_crashes(kernel: Autotuned, crashed: Mapping[Config, str], trials: Sequence[Trial]) -> list[Config]:
    """The configs of `crashed` (noted as having ended a process) of the kernel's space that `trials` do not hold
    as tried: a search that never proposed one, prune= that did not keep it. Their notes must stay, or the crash
    is lost and a later tuning of the key runs the config in-process again."""
    held = {t.config for t in trials if t.status is not TrialStatus.SKIPPED}
    return [c for c in crashed if c not in held and kernel.space.contains(c)]


def _pruned(kernel: Autotuned, kept: Sequence[Config]) -> bool:
    return kernel.configs is not None and len(kept) != len(kernel.configs)


def _searched_size(kernel: Autotuned, kept: Sequence[Config]) -> int:
    """The size of what a search searches: the configs prune= kept, else the space."""
    return len(kept) if _pruned(kernel, kept) else kernel.space_size


def _configs_and_skipped(kernel: Autotuned, job: KeyTuning, searched: bool) -> tuple[list[Config], frozenset[Config]]:
    """(the configs, [] when a search strategy proposes them; the configs to record as skipped: those prune= did
    not keep, and with `job.select` those it did not choose)."""
    configs = [] if searched else list(kernel.configs or [])
    kept = set(job.kept)
    skip = frozenset(c for c in configs if c not in kept)
    if job.select is not None:
        mine = set(job.select([c for c in configs if c not in skip]))
        skip = frozenset(c for c in configs if c not in mine)
    return configs, skip


def _trial_runner(kernel: Autotuned, job: KeyTuning, noted: Callable[[Config], Any] | None) -> TrialRunner:
    from ..engine.runners import multi_call_runner, runner_for

    if job.calls:
        return multi_call_runner(kernel, job.calls, kernel.tuning.objective or "geomean", noted)
    return runner_for(kernel, job.bound, job.grid, noted)


def _progress(kernel: Autotuned, key: tuple, total: int, searched: int | None) -> TuningProgress:
    from ..engine.progress import TuningProgress

    if searched is None:
        return TuningProgress(kernel.name, key, total)
    return TuningProgress(kernel.name, key, total, strategy=kernel.strategy, space_size=searched)
