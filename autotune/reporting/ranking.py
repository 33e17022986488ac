"""How a record's trials rank: fastest first by median, failures last, and each one's time over the winner's."""

from __future__ import annotations

import math

from ..record import Trial, TrialStatus, TuningRecord

__all__ = [
    "is_ok",
    "median_of",
    "ranked",
    "remeasured",
    "reference_ms",
    "ratio",
    "format_ratio",
    "outcome_counts",
    "format_counts",
]


def is_ok(trial: Trial) -> bool:
    """A trial that ran and has a finite median."""
    return trial.status is TrialStatus.OK and trial.median_ms is not None and math.isfinite(trial.median_ms)


def median_of(trial: Trial) -> float:
    """The median of a trial that ran (`ok`, or `is_ok`): the tuner sets it with the OK status."""
    assert trial.median_ms is not None, f"{trial.config} has no median (status {trial.status.value})"
    return trial.median_ms


def outcome_counts(record: TuningRecord) -> tuple[int, int, int]:
    """(measured ok, failed, skipped): a skipped config (removed by prune=, not tried by a search or a time
    budget, the lone config of a one-config space) is not a failure."""
    ok = sum(1 for t in record.trials if is_ok(t))
    skipped = sum(1 for t in record.trials if t.status is TrialStatus.SKIPPED)
    return ok, len(record.trials) - ok - skipped, skipped


def format_counts(record: TuningRecord) -> str:
    """`4 trials, 2 ok, 0 failed, 2 skipped` (the skipped part only when there are some)."""
    ok, failed, skipped = outcome_counts(record)
    return f"{len(record.trials)} trials, {ok} ok, {failed} failed" + (f", {skipped} skipped" if skipped else "")


def ranked(record: TuningRecord) -> list[tuple[int | None, Trial]]:
    """Trials ranked as the tuning decided: the winner first (rank 1), then the other configs re-measured side by
    side, in the order of that re-measurement, then the others fastest first by their median, failures (and OK
    trials without a median) last. A record that does not say what it re-measured (an entry from before it was
    kept, a sweep's split tuning, a `shard` tuning) still ranks its winner first: its median may be a
    re-measurement's, slower than another config's first pass.

    Returns `(rank, trial)` pairs; rank is 1-based for measured trials and None for failures.
    The sort is stable, so failures keep the record's order.
    """
    decided = [record.winner, *(c for c in record.remeasured or () if c != record.winner)]
    order = {config: i for i, config in enumerate(decided)}
    ok = sorted((t for t in record.trials if is_ok(t)), key=lambda t: (order.get(t.config, len(order)), median_of(t)))
    bad = [t for t in record.trials if not is_ok(t)]
    return [(i + 1, t) for i, t in enumerate(ok)] + [(None, t) for t in bad]


def remeasured(record: TuningRecord, trial: Trial) -> bool:
    """Whether `trial` was among the configs re-measured side by side (its median is from that re-measurement)."""
    return trial.config in (record.remeasured or ())


def reference_ms(record: TuningRecord) -> float | None:
    """The median every ratio is taken against: the winner's, else the fastest OK trial's."""
    winner = record.winner_trial
    if winner is not None and is_ok(winner):
        return winner.median_ms
    medians = [t.median_ms for t in record.trials if is_ok(t)]
    return min(medians) if medians else None  # type: ignore[type-var]


def ratio(trial: Trial, reference: float | None) -> float | None:
    """The trial's median over `reference` (the winner's), or None without a time."""
    if not is_ok(trial) or not reference:
        return None
    return trial.median_ms / reference  # type: ignore[operator]


def format_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}"


# --------------------------------------------------------------------------------------------
