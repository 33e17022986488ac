"""Model-based search: optuna's TPE sampler (a surrogate model of good and bad configs) through its ask/tell
interface, then a local search around the best config for the end of the budget (one that keeps its climb while
results are in flight: the model has explored, the end of the budget refines).

Why optuna: a well-kept optimiser with a seeded, dependency-light sampler that handles categorical axes and
batches (`constant_liar`), and lets configs found elsewhere (seeds, the local phase) be told to the model
(`add_trial`). It is the optional extra `autotune[search]`; without it "model" is refused with that advice and
"auto" uses the local search.

Constraints: a config TPE proposes outside the space (a `.where` filter refuses it) is told as failed and
redrawn; a failed config is told with a value worse than any measured, so the model learns to avoid its
region; a config proposed twice is told its known result without being measured again.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from ...errors import OptionError
from ...space.spaces import Config, SearchSpace, UnionSpace
from .strategies import LocalSearch, SearchStrategy

__all__ = ["ModelSearch", "optuna_available"]

_FAILED = 1e30  # what a failed config is told: worse than any time, so TPE's quantile split calls it bad
_LOCAL_SHARE = 0.25  # the last quarter of the budget refines the best config with a local search
_DRAWS = 20  # proposals redrawn per config before falling back to a random valid config


def optuna_available() -> bool:
    """Whether the `search` extra (optuna) is installed."""
    import importlib.util

    return importlib.util.find_spec("optuna") is not None


class ModelSearch(SearchStrategy):
    """TPE over the space's axes (each one categorical), then local search around its best config."""

    name = "model"

    def __init__(self, space: SearchSpace, **kwargs: Any) -> None:
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
        self._dists: dict[str, optuna.distributions.BaseDistribution] = {
            name: optuna.distributions.CategoricalDistribution(values) for name, values in self._axes.items()
        }

    def _propose(self, n: int) -> Iterable[Config]:
        if len(self.tried) >= self.budget * (1 - _LOCAL_SHARE) and self.best is not None:
            if not self._local_started:  # the climb starts from everything measured so far
                self._local_started = True
                self._local.tried, self._local.results = self.tried, self.results
                self._local.start_climb(self.results)
            return self._local._propose(n)
        out: list[Config] = []
        for _ in range(n):
            config = self._draw(out)
            if config is None:
                break
            out.append(config)
        return out

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
        if trial is not None:
            self._study.tell(trial, value if value is not None else _FAILED)
        elif config.keys() == self._axes.keys():  # a seed or a local-phase config: the model learns of it too
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


def _parts(space: SearchSpace) -> list[SearchSpace]:
    """The leaves of a union of spaces (the space itself when it is not a union)."""
    if isinstance(space, UnionSpace):
        return [leaf for part in space.parts for leaf in _parts(part)]
    return [space]
