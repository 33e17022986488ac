"""The model search on a lazy space whose filter keeps about 0.1% of the product: TPE's draws are nearly all
refused, and the search stops telling them to the study once the filter is known to refuse most of them (each told
draw made TPE's next ones slower), so the study stays about as small as the configs proposed."""

from __future__ import annotations

import pytest

from autotune import CartesianSpace, Config
from autotune.engine.search import make_strategy


def _sparse_space() -> CartesianSpace:
    """131,072 configs before filtering (lazy); the filter keeps the 165 with A + B + C < 9 (0.13%)."""
    return CartesianSpace(A=range(64), B=range(64), C=range(32)).where("$A + $B + $C < 9")


def _time_of(config: Config) -> float:
    return 1.0 + (config["A"] - 3) ** 2 + config["B"] + 0.5 * config["C"]


def test_the_model_search_of_a_sparse_lazy_space_keeps_its_study_small():
    """A budget of 64 configs, 8 in flight as in the tuner's pipeline: every config proposed is in the space and
    new, the whole budget is proposed, and the study holds at most 4 trials per config: about 100 refused draws told
    before the space is judged sparse, then at most a draw and a fallback per config (it held 758: each config's 20
    refused draws were told to TPE before the random valid fallback)."""
    optuna = pytest.importorskip("optuna")
    space = _sparse_space()
    assert space.lazy
    budget = 64
    strategy = make_strategy("model", space, seed=0, seeds=(), budget=budget)
    proposed: list[Config] = []
    in_flight: list[Config] = []
    while True:
        batch = strategy.ask(min(8 - len(in_flight), budget - len(proposed)))  # the tuner stops at the budget
        proposed += batch
        in_flight += batch
        if not in_flight:
            break
        config = in_flight.pop(0)
        strategy.tell(config, _time_of(config))

    assert len(proposed) == budget and len(set(proposed)) == budget
    assert all(space.contains(c) for c in proposed)
    assert strategy.best is not None and strategy.best[0] in proposed
    trials = strategy._study.trials
    assert len(trials) <= 4 * budget, f"{len(trials)} study trials for {budget} configs"
    assert all(t.state is not optuna.trial.TrialState.RUNNING for t in trials)  # every trial ended
