"""This process's tuning counters, per kernel name: what `autotune.stats()` and `kernel.cache_info()` show."""

from __future__ import annotations

import threading

from ..fork_safety import reset_in_forked_child
from ..record import TrialStatus, TuningRecord

__all__ = ["STAT_FIELDS", "count", "count_hit", "count_tuning", "failed_configs", "stats", "reset_stats", "register"]

STAT_FIELDS = ("hits", "disk_hits", "remote_hits", "misses", "tunings", "failed_tunings", "failed_configs", "tuning_s")
_LOCK = threading.Lock()
_STATS: dict[str, dict[str, float]] = {}


@reset_in_forked_child
def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()  # a thread counting at the fork does not exist in the child


def _new_stats() -> dict[str, float]:
    return {name: (0.0 if name == "tuning_s" else 0) for name in STAT_FIELDS}


def _bump(kernel_name: str, **increments: float) -> None:
    with _LOCK:
        counters = _STATS.setdefault(kernel_name, _new_stats())
        for name, inc in increments.items():
            counters[name] += inc


def count(kernel_name: str, **increments: float) -> None:
    """Add to this process's counters of a kernel (`hits=1`, `disk_hits=1`, ...): for code that finds a
    record outside `KernelCache.get_or_tune` (e.g. a rank that received its winner from rank 0)."""
    unknown = set(increments) - set(STAT_FIELDS)
    if unknown:
        raise ValueError(f"unknown counters {sorted(unknown)}; counters: {list(STAT_FIELDS)}")
    _bump(kernel_name, **increments)


def count_hit(kernel_name: str) -> None:
    """Count one memory hit: the decorated kernel's hot path, kept to one locked increment."""
    with _LOCK:
        counters = _STATS.get(kernel_name)
        if counters is None:
            counters = _STATS[kernel_name] = _new_stats()
        counters["hits"] += 1


def failed_configs(record: TuningRecord) -> int:
    """How many trials of `record` failed: not "ok", and not "skipped" (pruned or a lone candidate, never run);
    what `stats()["failed_configs"]` adds up."""
    return sum(1 for t in record.trials if t.status not in (TrialStatus.OK, TrialStatus.SKIPPED))


def count_tuning(kernel_name: str, record: TuningRecord) -> None:
    """Count one tuning that produced `record`: misses, tunings, failed_configs and tuning_s."""
    _bump(kernel_name, misses=1, tunings=1, failed_configs=failed_configs(record), tuning_s=float(record.tuning_s))


def stats() -> dict[str, dict[str, float]]:
    """Counters of this process, per kernel name: hits (memory), disk_hits, remote_hits, misses (tuned, tried to
    tune, or missed offline), tunings (that found a winner), failed_tunings (where every config failed),
    failed_configs (trials neither "ok" nor "skipped" in this process's tunings) and tuning_s."""
    with _LOCK:
        return {name: dict(counters) for name, counters in _STATS.items()}


def reset_stats() -> None:
    """Zero every counter of `stats()` (kernels stay listed)."""
    with _LOCK:
        for name in _STATS:
            _STATS[name] = _new_stats()


def register(kernel_name: str) -> None:
    """List a kernel in `stats()` with zero counters (a decorated kernel, before its first call)."""
    with _LOCK:
        _STATS.setdefault(kernel_name, _new_stats())
