"""The compile pool feeding the calling thread: overlap, completion order, timeouts, Ctrl-C."""
from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from autotune import Config, Tuning, autotune
from autotune.compilers import FunctionCompiler
from autotune.pipeline import compile_in_order_of_completion
from autotune.record import TrialStatus
from autotune.timing import WallClockTimer
from autotune.tuner import TuneJob, tune
from kernels_for_tests import add_kernel


def pool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("autotune-compile")]


class SlowCompiler(FunctionCompiler):
    """Sleeps `delays[BLOCK]` seconds per config on the pool, logging when each compile ends."""

    def __init__(self, delays: dict[int, float], events: list) -> None:
        def compile_fn(config: Config) -> None:
            time.sleep(delays[config["BLOCK"]])
            events.append(("compiled", config["BLOCK"], time.perf_counter()))

        super().__init__(compile_fn)


def job(configs, compiler, events, workers=2, **kwargs):
    def run_config(config):
        events.append(("run", config["BLOCK"], time.perf_counter()))

    return TuneJob(configs=configs, run_config=run_config, compiler=compiler, timer=WallClockTimer(),
                   tuning=Tuning(preset="fast", warmup=0, reps=1, compile_workers=workers), named_args={},
                   **kwargs)


def test_measuring_starts_before_the_last_compile_ends():
    events: list = []
    configs = [Config(BLOCK=b) for b in (1, 2, 3, 4)]
    tune(job(configs, SlowCompiler({1: 0.05, 2: 0.3, 3: 0.3, 4: 0.3}, events), events))
    first_run = min(t for kind, _, t in events if kind == "run")
    last_compile = max(t for kind, _, t in events if kind == "compiled")
    assert first_run < last_compile


def test_configs_are_measured_in_completion_order():
    events: list = []
    configs = [Config(BLOCK=b) for b in (1, 2, 3)]
    delays = {1: 0.45, 2: 0.05, 3: 0.25}
    tune(job(configs, SlowCompiler(delays, events), events, workers=3))
    measured = []
    for kind, block, _ in events:
        if kind == "run" and block not in measured:
            measured.append(block)
    assert measured == [2, 3, 1]


def test_serial_mode_compiles_and_measures_one_config_at_a_time():
    events: list = []
    configs = [Config(BLOCK=b) for b in (1, 2, 3)]
    tune(job(configs, SlowCompiler({1: 0.01, 2: 0.01, 3: 0.01}, events), events, workers=0))
    kinds = [(kind, block) for kind, block, _ in events]
    assert kinds[:2] == [("compiled", 1), ("run", 1)]
    assert kinds.index(("compiled", 2)) > kinds.index(("run", 1))
    assert not pool_threads()


def test_compile_timeout_is_recorded_and_the_rest_tune():
    events: list = []
    configs = [Config(BLOCK=b) for b in (1, 2)]
    tuning = Tuning(preset="fast", warmup=0, reps=1, compile_workers=2, compile_timeout_s=0.2)
    result = tune(TuneJob(configs=configs, run_config=lambda c: None, timer=WallClockTimer(), tuning=tuning,
                          compiler=SlowCompiler({1: 1.0, 2: 0.01}, events), named_args={}))
    statuses = {t.config["BLOCK"]: t.status for t in result.trials}
    assert statuses == {1: TrialStatus.TIMEOUT, 2: TrialStatus.OK}
    assert result.winner == Config(BLOCK=2)
    # The timed-out compile cannot be killed; its thread ends when the compile does.
    for thread in pool_threads():
        thread.join(timeout=5)
    assert not pool_threads()


def test_outcomes_iterator_directly_reports_errors_in_completion_order():
    def compile_fn(config):
        time.sleep(config["t"])
        if config["t"] == 0.1:
            raise ValueError("bad config")
        return config["t"]

    configs = [Config(t=0.2), Config(t=0.1), Config(t=0.0)]
    with compile_in_order_of_completion(configs, FunctionCompiler(compile_fn), workers=3) as outcomes:
        seen = [(o.config["t"], o.status) for o in outcomes]
    assert seen == [(0.0, TrialStatus.OK), (0.1, TrialStatus.COMPILE_ERROR), (0.2, TrialStatus.OK)]
    assert not pool_threads()


def test_ctrl_c_mid_tune_cancels_the_pool_leaves_no_thread_and_no_record():
    events: list = []
    calls = []

    def setup(**_):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    add = autotune(space={"BLOCK": (16, 32, 64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)", setup=setup,
                   tuning=Tuning(preset="fast", warmup=0, reps=3, compile_workers=2))(add_kernel)
    add.compiler_factory = lambda tuned, prepare: SlowCompiler({16: 0.01, 32: 0.5, 64: 0.5, 128: 0.5}, events)
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    with pytest.raises(KeyboardInterrupt):
        add(x, y, out, 64)
    assert not pool_threads()
    assert add.cache_info()["entries"] == 0
    cache_dir = os.environ["AUTOTUNE_CACHE_DIR"]
    stored = [f for _, _, files in os.walk(cache_dir) for f in files if f.endswith(".json")]
    assert stored == []
    # Configs still queued when Ctrl-C came were never compiled.
    assert len([e for e in events if e[0] == "compiled"]) < 4
