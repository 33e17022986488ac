"""Model-based search: optuna's TPE sampler (a surrogate model of good and bad configs) through its ask/tell
interface, then a local climb around the best config for the last 30% of the budget. The model explores; the end
of the budget refines.

The climb first moves its start into each other combination of the space's small axes (the fewest-valued ones,
at most 8 combinations), and steps the moved configs along the largest axis. A basin behind two values that are
each slow on average is out of a one-step climb's reach, and TPE's quantile split steers away from it. A late
model result that beats every config moved so far, in a new combination, is moved too.

A prior (`prior.Prior`: another device kind's tuning of the same kernel and key) proposes 2 of its best configs
first. Its other seeds follow only when one of those 2 beats the median of the search's own first configs, so a
wrong prior costs 2 configs. TPE is not told the seeds that measured well, so they cannot become its whole good set.

Why optuna: a well-kept optimiser with a seeded sampler that handles categorical axes and batches
(`constant_liar`), and takes configs found elsewhere (`add_trial`). It is the optional extra `autotune[search]`;
without it "model" is refused with that advice, and "auto" uses the local search.

Constraints: a config outside the space (a `.where` filter refuses it) is told as failed and redrawn; a failed
config is told a value worse than any measured, so the model avoids its region; a config proposed twice is told
its known result, once measured (a config drawn again while in flight stays an open trial until then).
Once the filter has refused over `_DRAWS` draws per draw it kept (plus `_SPARSE_SLACK`), the space is sparse:
each config then gets one draw, a refused one closed as FAIL (TPE ignores it), then a random valid config. TPE's
work per draw grows with its trials, and 20 told refusals per config made a 0.1% filter's search over 10x slower than
a dense space's; the replayed landscapes stay under 10 per draw kept, so their searches are unchanged.

Every rule and number here was chosen by replaying recorded landscapes: the figures, and the variants tried and
dropped, are in bench/README.md.
"""

from __future__ import annotations

import itertools
import logging
import statistics
import threading
import warnings
from collections.abc import Iterable
from typing import Any

from ...config import value_identity
from ...errors import OptionError
from ...space.spaces import Config, SearchSpace, UnionSpace
from .prior import Prior
from .strategies import LocalSearch, SearchStrategy

__all__ = ["ModelSearch", "optuna_available"]

_FAILED = 1e30  # what a failed config is told: worse than any time, so TPE's quantile split calls it bad
_LOCAL_SHARE = 0.3  # the end of the budget (30%) refines the best config with a local search
_DRAWS = 20  # proposals redrawn per config before falling back to a random valid config
_SPARSE_SLACK = 5  # kept draws counted in advance before a space is judged sparse (a start of refusals is not)
_HELD_AFTER = 8  # the search's own configs measured before the prior's seeds are judged for telling TPE
_PRIOR_APART = 2  # a prior's seeds differ from each other in at least this many fields (distinct basins)
_PROBE = 2  # the prior's seeds proposed at once; the others only once one of these beats the search's own median
_PROBE_AFTER = 4  # the search's own configs measured before the first seeds are judged
_SMALL_COMBOS = 8  # the small axes: the fewest-valued ones, as many as make at most this many combinations


class _QuietOptuna(logging.Filter):
    """Drops optuna's INFO and DEBUG records logged while this thread is inside the model search's own optuna calls
    (`with _QUIET:`), so autotune's studies print nothing; the user's own studies log as the user set optuna up,
    whose verbosity is left alone. Added to each of optuna's loggers: a record is filtered where it is logged."""

    def __init__(self) -> None:
        super().__init__()
        self._inside = threading.local()
        self._lock = threading.Lock()
        self._seen = -1  # how many loggers existed when the filter was last added to optuna's

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not getattr(self._inside, "depth", 0)

    def install(self) -> None:
        """Add the filter to every optuna logger that exists (once each); cheap when no logger was made since."""
        loggers = logging.Logger.manager.loggerDict
        if len(loggers) == self._seen:
            return
        with self._lock:
            for name, logger in list(loggers.items()):
                if (name == "optuna" or name.startswith("optuna.")) and isinstance(logger, logging.Logger):
                    if self not in logger.filters:
                        logger.addFilter(self)
            self._seen = len(loggers)

    def __enter__(self) -> None:
        self.install()  # an optuna module imported since (its logger made at import) is covered too
        self._inside.depth = getattr(self._inside, "depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        self._inside.depth -= 1


_QUIET = _QuietOptuna()


def optuna_available() -> bool:
    """Whether the `search` extra (optuna) is installed (found, not imported: decorating stays cheap)."""
    import importlib.util

    return importlib.util.find_spec("optuna") is not None


class ModelSearch(SearchStrategy):
    """TPE over the space's axes (each one categorical), then local search around its best config."""

    name = "model"

    def __init__(self, space: SearchSpace, *, prior: Prior | None = None, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        try:
            import optuna
        except ImportError as exc:
            installed = optuna_available()  # found, yet it does not import: a broken install, not a missing one
            raise OptionError(
                f"strategy='model' uses optuna, which is installed but fails to import ({exc}): repair it (pip "
                "install --force-reinstall optuna), or choose strategy='local' or 'random'"
                if installed
                else "strategy='model' uses optuna: pip install 'autotune[search]' (or choose strategy='local' or "
                "'random')"
            ) from None
        self._optuna = optuna
        self._axes = _axes_of(space)
        self._small = _small_axes(self._axes)
        # TPE chooses an index into each axis's values (one past the end: the field left out, for a union part that
        # lacks it), so values optuna cannot tell apart (0 and False, tuples) stay distinct choices.
        self._optional = _optional_fields(space, self._axes)
        self.prior = prior
        chosen = self._seeds_from(prior) if prior is not None else []
        self.prior_seeds = chosen[:_PROBE]  # the prior's seeds proposed (the first ones, and later the others)
        self._unprobed = chosen[_PROBE:]  # the others, until the first ones are judged
        self._seeds.extend(self.prior_seeds)
        self._held: dict[Config, float | None] = {}  # the prior's seeds measured, not yet told to TPE
        self._held_done = False
        self.random_start = max(4, min(64, self.budget // 4))  # TPE's random configs before it proposes: a quarter
        self._dists: dict[str, optuna.distributions.BaseDistribution] = {
            name: optuna.distributions.CategoricalDistribution(tuple(range(len(values) + (name in self._optional))))
            for name, values in self._axes.items()
        }
        with warnings.catch_warnings():  # multivariate and constant_liar are marked experimental by optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = _fixed_space_tpe(
                optuna,
                self._dists,
                seed=self.rng.randrange(2**31),
                n_startup_trials=self.random_start,
                multivariate=True,
                constant_liar=True,
            )
        with _QUIET:
            self._study = optuna.create_study(direction="minimize", sampler=sampler)
        self._pending: dict[Config, Any] = {}  # config -> its open optuna trial
        self._redrawn: dict[Config, list[Any]] = {}  # an in-flight config -> the open trials that drew it again
        self._refused = 0  # TPE's draws that the space's filter refused
        self._kept = 0  # and those it kept
        self._sparse = False  # the filter refused over `_DRAWS` draws per draw kept: one draw per config, for good
        self._local = LocalSearch(
            space, seed=self.rng.randrange(2**31), budget=self.budget, start=0, restarts_early=False
        )
        self._local_started = False
        self._model_phase: frozenset[Config] = frozenset()  # the configs proposed before the climb began
        self._moved_from: list[Config] = []  # the configs the climb moved across the small axes
        self._switches: list[Config] = []  # the climb's next proposals: its start moved across the small axes, stepped

    def _tell_held(self) -> None:
        """Once 8 of the search's own configs have measured, tell TPE the prior's seeds that measured worse than
        their best quarter (a wrong prior's seeds show where not to look; a right prior's best ones stay untold).
        Seeds whose median is no better than the own configs' are a prior no better than random: all are told."""
        others = self._own_times()
        if len(others) < _HELD_AFTER:
            return
        threshold = others[len(others) // 4]
        seeds = sorted(ms for ms in self._held.values() if ms is not None)
        no_better = not seeds or seeds[len(seeds) // 2] >= others[len(others) // 2]
        for config, value in self._held.items():
            if no_better or value is None or value >= threshold:
                self._add_trial(config, value)
        self._held = {}
        self._held_done = True

    def _own_times(self) -> list[float]:
        """The medians of the configs measured that are not the prior's seeds, fastest first."""
        return sorted(ms for c, ms in self.results.items() if c not in self.prior_seeds and ms is not None)

    def _seeds_from(self, prior: Prior) -> list[Config]:
        """The prior's best configs in the space, each `_PRIOR_APART` fields from the others: a tenth of the
        budget, at least 2 and at most 16."""
        count = max(2, min(16, self.budget // 10))
        chosen: list[Config] = []
        for config in prior.configs_ranked:
            if len(chosen) >= count:
                break
            if config in self._seeds or self._params(config) is None or not self.space.contains(config):
                continue
            if all(_fields_apart(config, other) >= _PRIOR_APART for other in chosen):
                chosen.append(config)
        return chosen

    def _judge_probe(self) -> None:
        """Once the first seeds and `_PROBE_AFTER` own configs have measured, propose the other seeds next when
        one of the first beat the own configs' median; else drop them (a wrong prior)."""
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
        """Whether the climb also moves `best`: a model-phase config whose result came after the climb began, in a
        combination of the small axes that no moved config had. A union part's config lacking an axis never moves
        (`_switched` has nothing for it)."""
        if best.keys() != self._axes.keys():
            return False
        return best in self._model_phase and all(
            any(best[name] != moved.get(name) for name in self._small) for moved in self._moved_from
        )

    def _switched(self, config: Config, room: int) -> list[Config]:
        """`config` moved into each other combination of the small axes, untried, then the moved configs' steps
        where all fit in three quarters of `room` (the configs the climb has left). None when the moved configs
        alone would take more than half of it: a small budget needs its climb more."""
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
        """The untried configs a step from `configs` along each one's `_step_axis`, other than `besides`: a moved
        config's value there may be fast only with the small axes it left."""
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
        """The axis of the most values; where `config`'s value there is a power of two already, the largest other
        integer axis whose value is not one."""
        largest = by_size[0]
        if _integer(self._axes[largest]) and _power_of_two(config[largest]):
            for name in by_size[1:]:
                values = self._axes[name]
                if name not in self._small and len(values) > 1 and _integer(values) and not _power_of_two(config[name]):
                    return name
        return largest

    def _draw(self, batch: list[Config]) -> Config | None:
        """TPE's next config that is in the space and new; after `_DRAWS` draws that are not (one refused draw, in
        a sparse space: see the module's docstring), a random one."""
        with _QUIET:
            for _ in range(_DRAWS):
                trial = self._study.ask()
                config = self._config_of(
                    {name: trial.suggest_categorical(name, c.choices) for name, c in self._dists.items()}
                )
                if not self.space.contains(config):
                    self._refused += 1
                    self._sparse = self._sparse or self._refused > _DRAWS * (self._kept + _SPARSE_SLACK)
                    if self._sparse:  # closed, not told: TPE ignores it, and the study stays small
                        self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
                        break
                    self._study.tell(trial, _FAILED)
                    continue
                self._kept += 1
                if config in self.results:  # measured: told its known result
                    known = self.results[config]
                    self._study.tell(trial, known if known is not None else _FAILED)
                elif config in self.tried or config in batch:  # in flight (batch: this proposal's draws so far)
                    self._redrawn.setdefault(config, []).append(trial)  # told its result once measured
                else:
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
        with _QUIET:
            if self._held and not self._held_done and (trial is not None or config not in self.prior_seeds):
                self._tell_held()
            if self._unprobed:
                self._judge_probe()
            told = trial is not None or config not in self.prior_seeds
            if trial is not None:
                self._study.tell(trial, value if value is not None else _FAILED)
            elif config in self.prior_seeds:  # measured after the judgement (a right prior's later seed): untold
                if not self._held_done:
                    self._held[config] = value
            else:  # a warm-start seed or a local-phase config: the model learns of it
                self._add_trial(config, value)
            self._tell_redrawn(config, value, told)

    def _tell_redrawn(self, config: Config, value: float | None, told: bool) -> None:
        """Close the trials that drew `config` again while it was in flight: told its result where TPE learns of
        it (a good region TPE chose is not marked bad), else (a prior's seed held back) closed as failed, which
        TPE ignores."""
        for trial in self._redrawn.pop(config, []):
            if told:
                self._study.tell(trial, value if value is not None else _FAILED)
            else:
                self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)

    def _add_trial(self, config: Config, value: float | None) -> None:
        """Tell TPE of `config`, measured outside its draws (`value` None: failed); one its axes cannot describe
        is not told."""
        params = self._params(config)
        if params is not None:
            self._study.add_trial(
                self._optuna.trial.create_trial(
                    params=params, distributions=self._dists, value=value if value is not None else _FAILED
                )
            )

    def _params(self, config: Config) -> dict[str, int] | None:
        """`config` as TPE's choices (an index into each axis, one past the end where the field is left out), or
        None when it has a field or value the axes lack."""
        if not config.keys() <= self._axes.keys():
            return None
        params: dict[str, int] = {}
        for name, values in self._axes.items():
            if name not in config:
                if name not in self._optional:
                    return None
                params[name] = len(values)
                continue
            wanted = value_identity(config[name])
            found = [i for i, v in enumerate(values) if value_identity(v) == wanted]
            if not found:
                return None
            params[name] = found[0]
        return params

    def _config_of(self, params: dict[str, int]) -> Config:
        return Config({name: self._axes[name][i] for name, i in params.items() if i < len(self._axes[name])})


def _fixed_space_tpe(optuna: Any, dists: dict[str, Any], **options: Any) -> Any:
    """optuna's TPE sampler over a search space known in advance. Its own re-derives the space at every ask from
    each trial since the oldest one in flight (a search with many in flight or many refused draws spent most of
    its time there); every trial here has the same distributions, so the answer is the same."""
    space = {name: dist for name, dist in sorted(dists.items()) if not dist.single()}

    class FixedSpaceTPE(optuna.samplers.TPESampler):
        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return dict(space)

    return FixedSpaceTPE(**options)


def _axes_of(space: SearchSpace) -> dict[str, tuple]:
    """Each field's values over `space`, without listing a lazy space: a Cartesian space's own axes, a union's
    parts merged, a listed part (a FixedSpace) enumerated. The merge may combine values into configs the space
    lacks: the model's draw checks `contains`."""
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
                if all(value_identity(v) != value_identity(k) for k in known):  # 1, 1.0 and True are three values
                    known.append(v)
    return {name: tuple(v) for name, v in values.items()}


def _fields_apart(a: Config, b: Config) -> int:
    """In how many fields two configs differ, a field only one of them has counting as a difference."""
    return sum(1 for k in a.keys() | b.keys() if k not in a or k not in b or a[k] != b[k])


def _optional_fields(space: SearchSpace, axes: dict[str, tuple]) -> frozenset[str]:
    """The fields some union part (or some config of a listed part) leaves out."""
    optional: set[str] = set()
    for part in _parts(space):
        part_axes = getattr(part, "axes", None)
        if isinstance(part_axes, dict):
            optional |= axes.keys() - part_axes.keys()
        else:
            for config in part.configs():
                optional |= axes.keys() - config.keys()
    return frozenset(optional)


def _small_axes(axes: dict[str, tuple]) -> list[str]:
    """The fewest-valued axes of two values or more, as many as make at most `_SMALL_COMBOS` combinations."""
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
    sizes favour them), else the adjacent value."""
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
