"""Shard mode of distributed tuning, as plain data: which configs each rank measures, and how the ranks'
trials merge back into one record that is the same on every rank."""

from __future__ import annotations

from collections.abc import Sequence

from ..record import Trial, TrialStatus
from ..space.spaces import Config

__all__ = ["shard", "merge_shards", "shard_winner", "no_valid_message"]


def shard(candidates: Sequence[Config], rank: int, world_size: int) -> list[Config]:
    """The candidates rank `rank` measures: candidate i goes to rank i % world_size.

    Why round-robin rather than blocks: spaces list similar configs next to each other (the last axis
    varies fastest), so dealing them out gives each rank a similar mix of cheap and costly configs.
    """
    return list(candidates[rank::world_size])


def merge_shards(gathered: list[dict]) -> tuple[list[Trial], dict[Config, int]]:
    """One trial per config, in space order: the one a rank measured (the lowest such rank, should two
    ranks have measured the same config), else the skipped placeholder. Same input, same output on
    every rank."""
    order: list[Config] = []
    chosen: dict[Config, Trial] = {}
    measured_by: dict[Config, int] = {}
    for payload in sorted(gathered, key=lambda p: p["rank"]):
        for trial in payload["trials"] or ():
            config = trial.config
            if config not in chosen:
                order.append(config)
                chosen[config] = trial
            if trial.status is not TrialStatus.SKIPPED and config not in measured_by:
                chosen[config] = trial
                measured_by[config] = payload["rank"]
    return [chosen[c] for c in order], measured_by


def shard_winner(merged: list[Trial], gathered: list[dict]) -> Config:
    """The agreed winner: the fastest by median of the ranks' own winners (each decided on its rank by its
    interleaved re-measurement), not of every merged trial, since a config its rank did not re-measure was never
    compared side by side with that rank's best. Ties: the first in space order. `merged` holds an ok trial."""
    winners = {p["winner"] for p in gathered if p.get("winner") is not None}
    ok = [t for t in merged if t.ok]
    finalists = [t for t in ok if t.config in winners] or ok
    return min(finalists, key=lambda t: t.median_ms if t.median_ms is not None else float("inf")).config


def no_valid_message(
    kernel: str, trials: list[Trial], measured_by: dict[Config, int], world: int, who: str = "rank", then: str = "call"
) -> str:
    """The error of a tuning shared out where no config ran: every failure, with the `who` (a rank, a sweep
    worker) that saw it."""
    lines = [f"no config of {kernel} ran successfully on any of the {world} {who}s; each failed:"]
    for trial in trials:
        if trial.status is TrialStatus.SKIPPED:
            continue
        seen_by = measured_by.get(trial.config, "?")
        lines.append(f"  {dict(trial.config)} ({who} {seen_by}): {trial.status.value}: {trial.error}")
    lines.append(f"Fix the kernel or the search space (or widen verify's tolerances) and {then} again.")
    return "\n".join(lines)
