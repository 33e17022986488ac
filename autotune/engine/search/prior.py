"""Transfer across device kinds: another device's tuning of the same kernel, key and space, used as a prior.

A `Prior` is that device's measured configs, fastest first. The model search (`model.ModelSearch`) proposes its
best distinct configs first; what they measure here decides whether the search goes on from them (the final climb
starts from the best config measured, theirs or not). The device's name is never looked at: two GPUs of one
vendor can disagree, two of different vendors can agree. The cache lookup (`storage.kernel_cache`) and the replay
(`autotune replay --prior`) both make one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...record import PriorNote, TuningRecord
from ...space.spaces import Config
from .warm_start import dtypes_distance, key_distance

__all__ = ["Prior", "prior_from_record", "nearest_prior", "prior_note"]


@dataclass(frozen=True)
class Prior:
    """Configs measured on another device kind, fastest first (`times_ms` in the same order), with the device
    they were measured on and where they came from (a cache tier and key, or a landscape's path)."""

    configs_ranked: tuple[Config, ...]
    times_ms: tuple[float, ...]
    device: str
    source: str

    @classmethod
    def from_times(cls, times: Iterable[tuple[Config, float | None]], device: str, source: str) -> Prior:
        """A prior from (config, time in ms or None for a failure) pairs; failures and non-finite times are left
        out, duplicates keep their first time."""
        seen: dict[Config, float] = {}
        for config, ms in times:
            if ms is not None and math.isfinite(ms) and ms > 0 and config not in seen:
                seen[config] = float(ms)
        ranked = sorted(seen.items(), key=lambda item: item[1])
        return cls(tuple(c for c, _ in ranked), tuple(ms for _, ms in ranked), device, source)

    def rank_of(self, config: Config) -> int | None:
        """`config`'s 1-based position in this prior's order (1: its fastest), None where it never ran."""
        try:
            return self.configs_ranked.index(config) + 1
        except ValueError:
            return None

    def __len__(self) -> int:
        return len(self.configs_ranked)


def prior_from_record(record: TuningRecord, source: str) -> Prior:
    """The prior a stored record gives: its trials that ran, fastest first."""
    return Prior.from_times(
        ((t.config, t.median_ms) for t in record.trials if t.ok), device=record.device, source=source
    )


def nearest_prior(
    key: Sequence[Any], dtypes: Sequence[Any] | None, found: Iterable[tuple[str, TuningRecord]]
) -> Prior | None:
    """The prior for (key, dtypes) among other device kinds' records ((tier name, record) pairs): the record of
    the nearest key (`warm_start.key_distance`, plus the dtypes' distance), the one with more trials that ran
    first among equals; None where no record's key compares."""
    want = None if dtypes is None else [str(d) for d in dtypes]
    best: tuple[float, int, str, TuningRecord] | None = None
    for tier, record in found:
        ran = sum(1 for t in record.trials if t.ok)
        distance = key_distance(list(key), record.key) + (0.0 if want is None else dtypes_distance(want, record.dtypes))
        if math.isfinite(distance) and ran and (best is None or (distance, -ran) < (best[0], best[1])):
            best = (distance, -ran, tier, record)
    if best is None:
        return None
    _, _, tier, record = best
    return prior_from_record(record, source=f"{tier} entry of key {record.key} {list(record.dtypes)}")


def prior_note(prior: Prior | None, winner: Config) -> PriorNote | None:
    """What the record keeps of the prior a search started from: its device, its source, the winner's rank."""
    if prior is None:
        return None
    return PriorNote(device=prior.device, source=prior.source, winner_rank=prior.rank_of(winner))
