"""Search over large spaces: strategies that propose configs from what the tried ones measured (`strategies`,
`model`), warm starts from other keys' winners (`warm_start`), and priors from other device kinds' records of the
same key (`prior`). The tuner runs them (`engine/tuner.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...lazy import lazy_names
from ...record import Search
from ...space.spaces import Config, SearchSpace

if TYPE_CHECKING:  # what mypy sees; at run time `__getattr__` imports them on first use
    from ...options import Tuning
    from .prior import Prior, nearest_prior, prior_from_record, prior_note
    from .strategies import STRATEGIES, LocalSearch, RandomSearch, SearchStrategy
    from .warm_start import key_distance, nearest_winners

__all__ = [
    "STRATEGIES",
    "SearchStrategy",
    "RandomSearch",
    "LocalSearch",
    "make_strategy",
    "key_distance",
    "nearest_winners",
    "Prior",
    "nearest_prior",
    "prior_from_record",
    "prior_note",
    "resolve_strategy",
    "check_strategy",
    "search_of",
]


def search_of(strategy: str, tuning: Tuning) -> Search:
    """What a record says of the search that chose its winner (`record.search`): the strategy, and `tuning`'s
    budget where it bounded the search (an exhaustive one tries every config)."""
    max_configs = None if strategy == "exhaustive" else tuning.max_configs
    return Search(strategy=strategy, max_configs=max_configs, max_seconds=tuning.max_seconds)


def check_strategy(tuning: Tuning, space: SearchSpace, space_size: int, kernel_name: str, *, prune: bool) -> str:
    """The strategy a decorated kernel tunes with, or the error that says why it cannot: raised at decoration."""
    from ...errors import OptionError, SpaceError
    from ...space.spaces import LIST_LIMIT

    strategy = resolve_strategy(tuning.strategy, space_size, tuning.max_configs, lazy=space.lazy)
    if strategy == "exhaustive" and space.lazy:
        raise SpaceError(
            f"the search space of {kernel_name} has {space_size:,} configs, over the {LIST_LIMIT:,} an "
            "exhaustive tuning lists; use Tuning(strategy='model') (or 'local', 'random') with a "
            "max_configs budget"
        )
    explicit = tuning.explicit_fields()
    if strategy == "exhaustive" and "max_configs" in explicit and tuning.max_configs < space_size:
        raise OptionError(
            f"strategy='exhaustive' on {kernel_name} tries every one of its {space_size:,} configs, more "
            f"than max_configs={tuning.max_configs}; to try at most max_configs of them use "
            "Tuning(strategy='random') or Tuning(strategy='model') (or 'local'), or drop max_configs"
        )
    if strategy == "model":
        from .model import optuna_available

        if not optuna_available():
            raise OptionError(
                f"strategy='model' on {kernel_name} uses optuna: pip install 'autotune[search]' (or "
                "choose strategy='local' or 'random')"
            )
    if prune and space.lazy:
        raise OptionError(
            f"prune= on {kernel_name} needs the configs listed, and a space of {space_size:,} configs "
            "is searched without listing it; express the pruning as .where(...) filters of the space"
        )
    if strategy != "exhaustive" and tuning.distributed == "shard":
        chosen = (
            f"strategy={strategy!r}"
            if tuning.strategy == strategy
            else f"strategy={tuning.strategy!r} (which searches this space of {space_size:,} configs with {strategy!r})"
        )
        raise OptionError(
            f"distributed='shard' on {kernel_name} splits an exhaustive tuning among ranks; with "
            f"{chosen} use distributed='rank0' (rank 0 searches, every rank launches its winner)"
        )
    return strategy


def resolve_strategy(name: str, space_size: int, max_configs: int, *, lazy: bool = False) -> str:
    """The strategy a tuning uses: `name`, or for "auto" exhaustive up to `max_configs` configs and model-based
    above (local search where optuna is not installed). A lazy space (too large to list) is never exhaustive,
    whatever `max_configs` says: "auto" searches it."""
    if name != "auto":
        return name
    if space_size <= max_configs and not lazy:
        return "exhaustive"
    from .model import optuna_available

    return "model" if optuna_available() else "local"


def make_strategy(
    name: str,
    space: SearchSpace,
    *,
    seed: int | None,
    seeds: Iterable[Config],
    budget: int,
    prior: Prior | None = None,
) -> SearchStrategy:
    """The strategy called `name` ("random", "local" or "model") over `space`; `prior` (another device kind's
    tuning of the same kernel and key) is used by "model" only, which loads optuna on first use."""
    if name == "model":
        from .model import ModelSearch

        return ModelSearch(space, seed=seed, seeds=seeds, budget=budget, prior=prior)
    from .strategies import LocalSearch, RandomSearch

    cls = {"random": RandomSearch, "local": LocalSearch}[name]
    return cls(space, seed=seed, seeds=seeds, budget=budget)


# Loaded on first use, not with the package: decorating a kernel needs `check_strategy` and `search_of` only, and a
# cache hit none of the strategies, priors or warm starts (start-up is part of the API).
_LAZY = {
    **{name: (f"{__name__}.prior", name) for name in ("Prior", "nearest_prior", "prior_from_record", "prior_note")},
    **{
        name: (f"{__name__}.strategies", name)
        for name in ("STRATEGIES", "LocalSearch", "RandomSearch", "SearchStrategy")
    },
    **{name: (f"{__name__}.warm_start", name) for name in ("key_distance", "nearest_winners")},
}
__getattr__ = lazy_names(__name__, globals(), _LAZY)
