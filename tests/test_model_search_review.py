"""The model search's use of optuna: it leaves the user's optuna logging alone, and a config TPE draws again while
it is in flight is told its result once measured, not a failure."""

from __future__ import annotations

import logging

import pytest

from autotune import CartesianSpace, Config
from autotune.engine.search import make_strategy

_FAILED = 1e30  # what the model search tells TPE for a failed config


class _Records(logging.Handler):
    """Keeps every record that reaches it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _model_search_to_the_end(space: CartesianSpace, budget: int) -> None:
    strategy = make_strategy("model", space, seed=0, seeds=(), budget=budget)
    while batch := strategy.ask(4):
        for config in batch:
            strategy.tell(config, float(sum(config.values())))


def test_a_model_search_logs_nothing_and_leaves_the_user_s_optuna_logging_as_set():
    """The model search's own studies log no INFO record, and a user's study made after it in the same process
    still logs its INFO lines: optuna's verbosity, which the user owns, is not changed. (Records, not stderr: optuna's
    own handler keeps the stderr of whichever test first used it.)"""
    optuna = pytest.importorskip("optuna")
    before = optuna.logging.get_verbosity()
    records = _Records()
    logging.getLogger("optuna").addHandler(records)
    try:
        optuna.logging.set_verbosity(optuna.logging.INFO)  # the user's choice
        _model_search_to_the_end(CartesianSpace(A=range(6), B=range(6)), budget=24)
        assert [r.getMessage() for r in records.records] == []
        assert optuna.logging.get_verbosity() == optuna.logging.INFO

        study = optuna.create_study()  # the user's own study
        study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
        messages = [r.getMessage() for r in records.records if r.levelno == logging.INFO]
        assert any(m.startswith("A new study created") for m in messages)
        assert sum(m.startswith("Trial ") and " finished with value" in m for m in messages) == 2
    finally:
        logging.getLogger("optuna").removeHandler(records)
        optuna.logging.set_verbosity(before)


def test_a_config_drawn_again_while_in_flight_is_told_its_result_not_a_failure():
    """A batch as large as a tiny space makes TPE draw configs already in the batch. Those draws stay open trials
    while the config is in flight (none is told a failure, which would mark the region TPE chose as bad), and
    each is told the config's time once it is measured."""
    optuna = pytest.importorskip("optuna")
    space = CartesianSpace(A=[1, 2], B=[1, 2, 3])
    strategy = make_strategy("model", space, seed=0, seeds=(), budget=6)
    batch = strategy.ask(6)
    trials = strategy._study.trials
    assert len(trials) > 6  # some draws repeated a config in flight
    assert not any(t.state == optuna.trial.TrialState.COMPLETE and t.value == _FAILED for t in trials)
    for config in batch:
        strategy.tell(config, float(config["A"] + config["B"]))
    trials = strategy._study.trials
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for trial in trials:  # TPE chooses an index into each axis's values
        config = Config(A=[1, 2][trial.params["A"]], B=[1, 2, 3][trial.params["B"]])
        assert trial.value == strategy.results[config]
