"""Search strategies: which configs to try next, given what the tried ones measured. Plain data and a seeded
`random.Random`; no GPU, no timing. The tuner asks a strategy for batches (`ask`), compiles and measures them
in its pipeline, and tells it each result (`tell`: a median in ms, or None for a config that failed).

A strategy never proposes a config twice, nor one outside the space; `seeds` (a warm start: the winners of
the kernel's nearest other keys) are proposed first.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from ...space.spaces import Config, SearchSpace

__all__ = ["SearchStrategy", "RandomSearch", "LocalSearch", "STRATEGIES"]


class SearchStrategy(ABC):
    """What every strategy shares: the tried set, the results, the seeds, the best so far. A strategy says
    which configs to try next in `_propose`."""

    name = "base"

    def __init__(
        self, space: SearchSpace, *, seed: int | None = None, seeds: Iterable[Config] = (), budget: int = 256
    ) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.budget = budget
        self.tried: set[Config] = set()
        self.results: dict[Config, float | None] = {}
        self._seeds = [c for c in dict.fromkeys(seeds) if space.contains(c)]

    @property
    def in_flight(self) -> int:
        """Configs proposed whose results have not been told yet (compiling or waiting to be measured)."""
        return len(self.tried) - len(self.results)

    @property
    def best(self) -> tuple[Config, float] | None:
        """The fastest config told so far and its median."""
        ok = [(c, ms) for c, ms in self.results.items() if ms is not None]
        return min(ok, key=lambda item: item[1]) if ok else None

    def ask(self, n: int) -> list[Config]:
        """Up to `n` configs not tried yet (fewer, or none, when the strategy has nothing left to propose)."""
        out: list[Config] = []
        while self._seeds and len(out) < n:
            config = self._seeds.pop(0)
            if config not in self.tried:
                out.append(config)
                self.tried.add(config)
        for config in self._propose(n - len(out)) if len(out) < n else ():
            if config not in self.tried and len(out) < n:
                out.append(config)
                self.tried.add(config)
        return out

    def tell(self, config: Config, median_ms: float | None) -> None:
        """The result of `config`: its median time, or None when it failed (it is not proposed again)."""
        self.tried.add(config)
        self.results[config] = median_ms if median_ms is not None and math.isfinite(median_ms) else None

    @abstractmethod
    def _propose(self, n: int) -> Iterable[Config]:
        """Up to `n` configs to try next (the base class drops those already tried)."""

    def _random_untried(self, n: int, tries_per_config: int = 50) -> list[Config]:
        """Up to `n` untried configs drawn at random; where draws keep finding tried ones (most of a small space
        is tried), a listed space's untried configs are drawn from directly, so none is left out. A listed space
        with fewer untried configs than `n` is asked for only those: none left, no draw at all."""
        if not self.space.lazy:
            n = min(n, len(self.space) - sum(1 for c in self.tried if self.space.contains(c)))
            if n <= 0:
                return []
        out: list[Config] = []
        for _ in range(n * tries_per_config):
            if len(out) >= n:
                break
            config = self.space.sample(self.rng)
            if config not in self.tried and config not in out:
                out.append(config)
        if len(out) < n and not self.space.lazy:
            left = [c for c in self.space.configs() if c not in self.tried and c not in out]
            out += self.rng.sample(left, min(n - len(out), len(left)))
        return out


class RandomSearch(SearchStrategy):
    """Uniformly random configs of the space: the baseline every other strategy is compared with."""

    name = "random"

    def _propose(self, n: int) -> Iterable[Config]:
        return self._random_untried(n)


class LocalSearch(SearchStrategy):
    """Hill climbing by coordinate steps: from the best config of the current climb, try its neighbours (one
    axis, one step); when none of them is left untried, restart from a random config. The first climb starts
    from the seeds, else from `start` random configs.

    `restarts_early=False` (the model search's final climb) never restarts while results are in flight: when
    the best config's neighbours are all proposed it proposes the untried neighbours of the climb's next best
    configs, then random configs, and its best stays the centre. The default restarts (forgetting the climb) as
    soon as they are all proposed: alone, without a model's exploration, the restarts are its exploration."""

    name = "local"

    def __init__(self, *args: Any, start: int = 8, restarts_early: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start = start
        self.restarts_early = restarts_early
        self._climb: dict[Config, float | None] = {}  # results since the last restart
        self._neighbours: dict[Config, list[Config]] = {}  # a centre's neighbours (a FixedSpace's are a scan)
        self._exhausted: set[Config] = set()  # centres with no untried neighbour left, for good

    def tell(self, config: Config, median_ms: float | None) -> None:
        super().tell(config, median_ms)
        self._climb[config] = self.results[config]

    def take_over(self, tried: set[Config], results: dict[Config, float | None]) -> None:
        """Climb from another strategy's configs, handing over the end of its budget: its tried set and results
        become this climb's (shared, so what it tells is seen here)."""
        self.tried, self.results = tried, results
        self._climb = dict(results)

    def next_steps(self, n: int) -> list[Config]:
        """Up to `n` configs the climb would try next, for the strategy that handed over to propose (and mark)."""
        return list(self._propose(n))

    def note(self, config: Config, value: float | None) -> None:
        """A result told to the strategy that handed over (it keeps the shared results up to date)."""
        self._climb[config] = value

    def _propose(self, n: int) -> Iterable[Config]:
        if n <= 0:
            return []
        ok = sorted(((ms, c) for c, ms in self._climb.items() if ms is not None), key=lambda item: item[0])
        if not ok:
            return (
                self._random_untried(n) if len(self.tried) < self.start or not self._climb else self._random_untried(1)
            )
        frontier = self._untried_neighbours(ok[0][1], n)
        if frontier:
            return frontier
        if self.in_flight and not self.restarts_early:  # its neighbours measure: work around the next best
            for _, centre in ok[1:]:
                if centre in self._exhausted:
                    continue
                frontier += self._untried_neighbours(centre, n - len(frontier), besides=frontier)
                if len(frontier) >= n:
                    break
            return frontier or self._random_untried(n)
        self._climb = {}  # a local optimum: restart elsewhere
        return self._random_untried(1)

    def _untried_neighbours(self, centre: Config, n: int, besides: Iterable[Config] = ()) -> list[Config]:
        """Up to `n` of `centre`'s untried neighbours, in a seeded random order."""
        if centre not in self._neighbours:
            self._neighbours[centre] = self.space.neighbours(centre)
        taken = set(besides)
        frontier = [c for c in self._neighbours[centre] if c not in self.tried and c not in taken]
        if not frontier and not taken:
            self._exhausted.add(centre)
        self.rng.shuffle(frontier)
        return frontier[:n]


STRATEGIES = ("exhaustive", "random", "local", "model")
