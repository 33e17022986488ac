"""Model-based search: optuna's TPE sampler (a surrogate model of good and bad configs) through its ask/tell
interface, then a local search around the best config for the last 30% of the budget (one that keeps its climb
while results are in flight: the model has explored, the end of the budget refines). 30% rather than 25% since the
climb's first proposals are moves (below; their figures were measured at 25%): over 320 replayed seeds at 2%,
convolution A4000 ended 285 runs within 1.05 of the best instead of 217 and A100 45 instead of 36, with as many
within 1.25 (310 against 311, 181 against 180); pnpoly 231 within 1.05 against 238, GEMM unchanged.

The final climb first moves its start (the best config measured) into each other combination of the space's
small axes (its fewest-valued axes, as many as make at most 8 combinations: the three binary axes of the
convolution landscapes), then climbs one step at a time. A basin behind two such values at once, each slow on
average, is out of a one-step climb's reach, and TPE's quantile split steers away from it (convolution A4000's
`read_only=0, use_shmem=0`): over 320 replayed seeds it put 185 runs within 1.05 of the best instead of 160, for
at most 7 of the climb's configs (convolution A100, whose needle the climb finds late: 42 runs instead of 48). Then
it steps the moved configs along the largest axis, on an integer axis to the nearest power of two each side:
A4000's basin also needs a `block_size_x` of 32, 64, 128 or 256, and a start at 96 moves to 3x but steps into the
basin (301 runs of 320 within 1.25; 273 with ±1 steps, 241 without steps). Where that value is a power of two
already, the step is along the largest other integer axis whose value is not one (`tile_size_y=3`, which the basin
never has: 307 runs, convolution A100 a run or two fewer). When the moved configs would take more
than half of the climb's share, the climb goes without them; the steps go where all of them fit in three quarters.
The climb begins with 16 of the model's configs in flight: when one of them measures better than every config
moved so far, in a combination of the small axes none of those had, it is moved and stepped too, within the
configs left (A4000: 311 runs of 320 within 1.25, and seeds 0-79 all of them; A100 within noise).

Why optuna: a well-kept optimiser with a seeded, dependency-light sampler that handles categorical axes and
batches (`constant_liar`), and lets configs found elsewhere (seeds, the local phase) be told to the model
(`add_trial`). It is the optional extra `autotune[search]`; without it "model" is refused with that advice and
"auto" uses the local search.

A prior (`prior.Prior`: another device kind's tuning of the same kernel and key) adds its best configs, each at
least two fields from the others, to the first proposals (a tenth of the budget). They are measured, and the final
climb starts from everything measured, them included. TPE is told only those that measured worse than the best
quarter of the search's own first 8 configs (all of them when their median is no better than those configs':
a prior no better than random): told, a right prior's good seeds became TPE's whole good set and held
it in their basin (convolution A100 with A4000's prior: 1.48x the best in 18 of 20 runs, against 1.13 without a
prior; the prior's whole ranking told as trials: median 1.24), while a wrong prior's bad seeds teach it where not
to look (pnpoly with its ranking reversed: 1.001 / 1.073 told, 1.023 / 1.151 untold, 1.007 / 1.160 without a
prior). Only the first 2 seeds are proposed at once; the others follow once one of those 2 measured faster than the
median of the search's own first 4 configs, and are dropped otherwise, so a wrong prior costs 2 configs, not 8:
over 160 replayed seeds convolution A4000 with A100's ranking reversed ended 154 runs within 1.25 of the best
(144 with all 8 seeds at once; 155 without a prior), and convolution A100 with A4000's ranking reversed 184 of 320
(167 with all 8; 180 without a prior).

Constraints: a config TPE proposes outside the space (a `.where` filter refuses it) is told as failed and
redrawn; a failed config is told with a value worse than any measured, so the model learns to avoid its
region; a config proposed twice is told its known result without being measured again.
"""

from __future__ import annotations

import itertools
import statistics
import warnings
from collections.abc import Iterable
from typing import Any

from ...errors import OptionError
from ...space.spaces import Config, SearchSpace, UnionSpace
from .prior import Prior
from .strategies import LocalSearch, SearchStrategy

__all__ = ["ModelSearch", "optuna_available"]

_FAILED = 1e30  # what a failed config is told: worse than any time, so TPE's quantile split calls it bad
_LOCAL_SHARE = 0.3  # the end of the budget (30%) refines the best config with a local search
_DRAWS = 20  # proposals redrawn per config before falling back to a random valid config
_HELD_AFTER = 8  # the search's own configs measured before the prior's seeds are judged for telling TPE
_PRIOR_APART = 2  # a prior's seeds differ from each other in at least this many fields (distinct basins)
_PROBE = 2  # the prior's seeds proposed at once; the others only once one of these beats the search's own median
_PROBE_AFTER = 4  # the search's own configs measured before the first seeds are judged
_SMALL_COMBOS = 8  # the small axes: the fewest-valued ones, as many as make at most this many combinations


def optuna_available() -> bool:
    """Whether the `search` extra (optuna) is installed."""
    import importlib.util

    return importlib.util.find_spec("optuna") is not None


class ModelSearch(SearchStrategy):
    """TPE over the space's axes (each one categorical), then local search around its best config."""

    name = "model"

    def __init__(self, space: SearchSpace, *, prior: Prior | None = None, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        try:
            import optuna
        except ImportError:
            raise OptionError(
                "strategy='model' uses optuna: pip install 'autotune[search]' (or choose strategy='local' or 'random')"
            ) from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self._axes = _axes_of(space)
        self._small = _small_axes(self._axes)
        self.prior = prior
        chosen = self._seeds_from(prior) if prior is not None else []
        self.prior_seeds = chosen[:_PROBE]  # the prior's seeds proposed (the first ones, and later the others)
        self._unprobed = chosen[_PROBE:]  # the others, until the first ones are judged
        self._seeds.extend(self.prior_seeds)
        self._held: dict[Config, float | None] = {}  # the prior's seeds measured, not yet told to TPE
        self._held_done = False
        startup = max(8, min(64, self.budget // 4))  # random configs before the model proposes
        with warnings.catch_warnings():  # multivariate and constant_liar are marked experimental by optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=self.rng.randrange(2**31), n_startup_trials=startup, multivariate=True, constant_liar=True
            )
        self._study = optuna.create_study(direction="minimize", sampler=sampler)
        self._pending: dict[Config, Any] = {}  # config -> its open optuna trial
        self._local = LocalSearch(
            space, seed=self.rng.randrange(2**31), budget=self.budget, start=0, restarts_early=False
        )
        self._local_started = False
        self._model_phase: frozenset[Config] = frozenset()  # the configs proposed before the climb began
        self._moved_from: list[Config] = []  # the configs the climb moved across the small axes
        self._switches: list[Config] = []  # the climb's next proposals: its start moved across the small axes, stepped
        self._dists: dict[str, optuna.distributions.BaseDistribution] = {
            name: optuna.distributions.CategoricalDistribution(values) for name, values in self._axes.items()
        }

    def _tell_held(self) -> None:
        """Tell TPE the prior's seeds that measured worse than the best quarter of the search's other configs, once
        8 of those have measured: a wrong prior's seeds teach the model where not to look, a right prior's best
        seeds stay untold so they cannot become the model's whole good set. Seeds whose median is no better than
        the other configs' are a prior no better than random: all of them are told, as random configs would be.
        Seeds measured later stay untold (told by the same rule, A4000 with A100's prior over 80 replayed seeds
        ended at worst 1.175 instead of 1.037)."""
        others = self._own_times()
        if len(others) < _HELD_AFTER:
            return
        threshold = others[len(others) // 4]
        seeds = sorted(ms for ms in self._held.values() if ms is not None)
        no_better = not seeds or seeds[len(seeds) // 2] >= others[len(others) // 2]
        for config, value in self._held.items():
            if no_better or value is None or value >= threshold:
                self._study.add_trial(
                    self._optuna.trial.create_trial(
                        params=dict(config), distributions=self._dists, value=value if value is not None else _FAILED
                    )
                )
        self._held = {}
        self._held_done = True

    def _own_times(self) -> list[float]:
        """The medians of the configs measured that are not the prior's seeds, fastest first."""
        return sorted(ms for c, ms in self.results.items() if c not in self.prior_seeds and ms is not None)

    def _seeds_from(self, prior: Prior) -> list[Config]:
        """The prior's best configs in the space, each `_PRIOR_APART` fields from the others, proposed first after
        the warm start's: a tenth of the budget, at least 2 and at most 16 (8 for a budget of 87)."""
        count = max(2, min(16, self.budget // 10))
        chosen: list[Config] = []
        for config in prior.configs_ranked:
            if len(chosen) >= count:
                break
            if config in self._seeds or config.keys() != self._axes.keys() or not self.space.contains(config):
                continue
            if all(sum(1 for k in config if config[k] != other[k]) >= _PRIOR_APART for other in chosen):
                chosen.append(config)
        return chosen

    def _judge_probe(self) -> None:
        """Once the prior's first seeds and `_PROBE_AFTER` of the search's own configs have measured, propose its
        other seeds next when one of the first beat the median of the own ones; else drop them (a wrong prior)."""
        if not all(c in self.results for c in self.prior_seeds):
            return
        own = self._own_times()
        if len(own) < _PROBE_AFTER:
            return
        probed = [ms for c in self.prior_seeds if (ms := self.results[c]) is not None]
        if probed and min(probed) < statistics.median(own):
            self._seeds[:0] = self._unprobed
            self.prior_seeds = self.prior_seeds + self._unprobed
        self._unprobed = []

    def _propose(self, n: int) -> Iterable[Config]:
        if len(self.tried) >= self.budget * (1 - _LOCAL_SHARE) and self.best is not None:
            if not self._local_started:  # the climb starts from everything measured so far
                self._local_started = True
                self._model_phase = frozenset(self.tried)
                self._local.take_over(self.tried, self.results)
                self._moved_from = [self.best[0]]
                self._switches = self._switched(self.best[0], room=int(self.budget * _LOCAL_SHARE))
            best = self.best[0]
            if self._moves_again(best):
                self._moved_from.append(best)
                again = self._switched(best, room=self.budget - len(self.tried))
                self._switches = [c for c in again if c not in self._switches] + self._switches
            first, self._switches = self._switches[:n], self._switches[n:]
            return first + [c for c in self._local.next_steps(n - len(first)) if c not in first]
        out: list[Config] = []
        for _ in range(n):
            config = self._draw(out)
            if config is None:
                break
            out.append(config)
        return out

    def _moves_again(self, best: Config) -> bool:
        """Whether the climb also moves `best`: a config of the model's phase whose result came after the climb
        began (16 are in flight then) and beat every config the climb has moved, in a combination of the small axes
        none of them had."""
        return best in self._model_phase and all(
            any(best[name] != moved[name] for name in self._small) for moved in self._moved_from
        )

    def _switched(self, config: Config, room: int) -> list[Config]:
        """`config` moved into each other combination of the small axes that the space holds and no run has tried
        (a basin a one-step climb cannot reach when the values it needs are slow on average), then the moved
        configs' steps along the largest axis, where they fit in three quarters of `room` (the configs the climb
        has left). None when the moved configs alone would take more than half of it, where the climb needs its
        configs more (a budget of 14)."""
        if config.keys() != self._axes.keys():
            return []
        combos = itertools.product(*(self._axes[name] for name in self._small))
        moved = [config.replace(**dict(zip(self._small, combo))) for combo in combos]
        moved = [c for c in moved if c != config and self.space.contains(c)]
        untried = [c for c in moved if c not in self.tried]
        if len(untried) > room // 2:
            return []
        stepped = self._stepped(moved, besides=untried)
        return untried + stepped if len(untried) + len(stepped) <= room * 3 // 4 else untried

    def _stepped(self, configs: list[Config], besides: list[Config]) -> list[Config]:
        """The untried configs a step from `configs`, other than `besides`, along `_step_axis` (convolution's
        `block_size_x`: a moved config whose value there is fast only with the small axes it left is a step from one
        fast with the new ones)."""
        by_size = sorted(self._axes, key=lambda name: -len(self._axes[name]))  # stable: the first largest first
        out: list[Config] = []
        for config in configs:
            axis = self._step_axis(config, by_size)
            for value in _steps(self._axes[axis], config[axis]):
                near = config.replace(**{axis: value})
                if self.space.contains(near) and near not in self.tried and near not in besides + out:
                    out.append(near)
        return out

    def _step_axis(self, config: Config, by_size: list[str]) -> str:
        """The axis of the most values (`by_size[0]`); where `config`'s value there is a power of two already, the
        largest other integer axis whose value is not one (convolution's `tile_size_y=3`, which A4000's basin never
        has)."""
        largest = by_size[0]
        if _integer(self._axes[largest]) and _power_of_two(config[largest]):
            for name in by_size[1:]:
                values = self._axes[name]
                if name not in self._small and len(values) > 1 and _integer(values) and not _power_of_two(config[name]):
                    return name
        return largest

    def _draw(self, batch: list[Config]) -> Config | None:
        for _ in range(_DRAWS):
            trial = self._study.ask()
            config = Config({name: trial.suggest_categorical(name, values) for name, values in self._axes.items()})
            if not self.space.contains(config):
                self._study.tell(trial, _FAILED)
                continue
            if config in self.tried or config in batch:  # batch: this proposal's draws and fallbacks so far
                known = self.results.get(config)
                self._study.tell(trial, known if known is not None else _FAILED)
                continue
            self._pending[config] = trial
            return config
        fallback = [c for c in self._random_untried(len(batch) + 1) if c not in batch]  # not one already in the batch
        return fallback[0] if fallback else None

    def tell(self, config: Config, median_ms: float | None) -> None:
        super().tell(config, median_ms)
        value = self.results[config]
        if self._local_started:
            self._local.note(config, value)
        trial = self._pending.pop(config, None)
        if self._held and not self._held_done and (trial is not None or config not in self.prior_seeds):
            self._tell_held()
        if self._unprobed:
            self._judge_probe()
        if trial is not None:
            self._study.tell(trial, value if value is not None else _FAILED)
        elif config in self.prior_seeds:  # one measured after the judgement (a right prior's later seed) stays untold
            if not self._held_done:
                self._held[config] = value
        elif config.keys() == self._axes.keys():  # a warm-start seed or a local-phase config: the model learns of it
            self._study.add_trial(
                self._optuna.trial.create_trial(
                    params=dict(config), distributions=self._dists, value=value if value is not None else _FAILED
                )
            )


def _axes_of(space: SearchSpace) -> dict[str, tuple]:
    """Each field's values over `space`, without listing a lazy space: a Cartesian space's own axes, a union's
    parts merged (recursively), and only a listed (small) part, such as a FixedSpace, enumerated. A value seen in
    one part only may combine into configs the space lacks: the model's draw checks `contains`."""
    values: dict[str, list] = {}
    for part in _parts(space):
        axes = getattr(part, "axes", None)
        if isinstance(axes, dict):
            found = {name: list(v) for name, v in axes.items()}
        else:
            found = {}
            for config in part.configs():  # a non-lazy part: listed at most LIST_LIMIT configs
                for name, value in config.items():
                    found.setdefault(name, []).append(value)
        for name, vs in found.items():
            known = values.setdefault(name, [])
            for v in vs:
                if v not in known:
                    known.append(v)
    return {name: tuple(v) for name, v in values.items()}


def _small_axes(axes: dict[str, tuple]) -> list[str]:
    """The fewest-valued axes of two values or more, as many as make at most `_SMALL_COMBOS` combinations (the three
    binary axes of the convolution landscapes; pnpoly's `use_method` alone)."""
    small: list[str] = []
    combos = 1
    for name, values in sorted(axes.items(), key=lambda item: len(item[1])):
        if len(values) < 2:
            continue
        if combos * len(values) > _SMALL_COMBOS:
            break
        small.append(name)
        combos *= len(values)
    return small


def _steps(values: tuple, value: Any) -> list:
    """The values either side of `value` on an axis: on an integer axis the nearest power of two each side (block
    sizes favour them: convolution A4000's fast `block_size_x` are 32 to 256, and a start at 96 or 176 is two or
    more ±1 steps from them), else the adjacent value."""
    if _integer(values):
        ordered = sorted(values)
        i = ordered.index(value)
        below = [v for v in ordered[:i] if _power_of_two(v)] or ordered[i - 1 : i]
        above = [v for v in ordered[i + 1 :] if _power_of_two(v)] or ordered[i + 1 : i + 2]
        return below[-1:] + above[:1]
    i = values.index(value)
    return [values[j] for j in (i - 1, i + 1) if 0 <= j < len(values)]


def _integer(values: tuple) -> bool:
    return all(type(v) is int for v in values)  # not bool, whose values are 0 and 1


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _parts(space: SearchSpace) -> list[SearchSpace]:
    """The leaves of a union of spaces (the space itself when it is not a union)."""
    if isinstance(space, UnionSpace):
        return [leaf for part in space.parts for leaf in _parts(part)]
    return [space]
