"""The within-key split: when a device kind has fewer keys to tune than workers, each key's configs are dealt out
over a group of that kind's workers (candidate i to worker i % n, as distributed shard mode does), and the best
few of all of them are measured again side by side on the group's first worker, so the winner is chosen by
comparisons made on one device. Only for a space whose configs are listed (an exhaustive tuning)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from .. import codec
from ..engine.shards import merge_shards, no_valid_message
from ..errors import NoValidConfigError
from ..record import TrialStatus, TuningRecord
from ..storage.kernel_cache import KernelCache
from .slots import Slot
from .worker import ShareResult

__all__ = ["groups", "split_tune", "SplitTuning"]


def groups(slots: Sequence[Slot], keys: int) -> list[list[Slot]]:
    """`keys` groups of a kind's workers, as even as they can be (worker i joins group i % keys)."""
    return [list(slots[j::keys]) for j in range(keys)]


class SplitTuning:
    """What a split tuning did besides its record: the configs each worker measured, and where it refined."""

    def __init__(self) -> None:
        self.measured: dict[int, int] = {}  # worker index -> configs it measured (workers with none left out)
        self.busy_s: dict[int, float] = {}  # worker index -> seconds its own share (and refinement) took
        self.refined_on: int | None = None


def split_tune(
    group: Sequence[Slot],
    cache: KernelCache,
    key: tuple,
    dtypes: tuple[str, ...],
    candidates: str | None,
    topk: int,
    done: SplitTuning,
) -> TuningRecord:
    """Tune the key every worker of `group` has prepared: a share each, then the best `topk` (at least 2) of all
    shares again on the first worker. Raises NoValidConfigError when no config of any share ran."""
    started, count = time.perf_counter(), len(group)
    with ThreadPoolExecutor(count, thread_name_prefix="autotune-sweep-share") as pool:
        shares = list(pool.map(lambda i: _share(group[i], (i, count), done), range(count)))
    gathered = [{"rank": i, "trials": s.trials, "winner": s.winner} for i, s in enumerate(shares)]
    merged, measured_by = merge_shards(gathered)
    for i, slot in enumerate(group):
        configs = sum(1 for w in measured_by.values() if w == i)
        if configs:  # a worker whose share was empty (more workers than configs) measured nothing
            done.measured[slot.index] = configs
    ok = sorted((t for t in merged if t.ok), key=lambda t: t.median_ms or 0.0)
    if not ok:
        by_worker = {config: group[share].index for config, share in measured_by.items()}
        message = no_valid_message(cache.kernel_name, merged, by_worker, len(group), "sweep worker", "sweep")
        raise NoValidConfigError(message, merged)
    winner = ok[0].config
    finalists = ok[: max(2, topk)]
    if len(finalists) >= 2:
        final = _share(group[0], [dict(t.config) for t in finalists], done)
        done.refined_on = group[0].index
        remeasured = {t.config: t for t in final.trials if t.status is not TrialStatus.SKIPPED}
        merged = [remeasured.get(t.config, t) for t in merged]
        winner = final.winner if final.winner is not None else winner
    return cache.new_record(
        key, dtypes, winner=winner, trials=merged, tuning_s=time.perf_counter() - started, candidates=candidates
    )


def _share(slot: Slot, share: tuple[int, int] | list[dict], done: SplitTuning) -> ShareResult:
    """`slot`'s tuning of `share`, its seconds added to the worker's busy time in `done`."""
    started = time.perf_counter()
    try:
        return codec.from_json(slot.tune_share(share), ShareResult)
    finally:
        seconds = time.perf_counter() - started
        done.busy_s[slot.index] = done.busy_s.get(slot.index, 0.0) + seconds
