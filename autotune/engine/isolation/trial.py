"""A worker's side of the `WorkerRunner`'s requests: compile one config, measure one config, re-measure a few,
each with an `InProcessRunner` over the worker's copies of the call's arguments and the decorated kernel as the
worker imported it (its own verify=, setup=, restore_value, grid and compile path). For a set of calls
(`Tuning.objective`) a `MultiCallRunner` over one such runner per call measures them all. A worker never tunes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from ... import codec
from ...errors import DeviceError, device_error_text
from ...options import Objective, Tuning
from ...record import Trial, TrialStatus
from ...space.spaces import Config
from ..in_process import InProcessRunner
from ..multi_call import MultiCallRunner, runners_for_calls
from ..pipeline import Compiler, InlineExecutor, compile_failure
from ..runners import in_process_runner
from ..trial_runner import TrialRunner
from ..tunable_kernel import TunableKernel


def _set_runner(
    kernel: TunableKernel,
    calls: list[tuple],
    grids: list,
    tuning: Tuning,
    objective: Objective | None,
    precompiled: bool = False,
    verify: bool = True,
    on_call: Callable[[int], Any] | None = None,
    noted: Callable[[Config], Any] | None = None,
) -> TrialRunner:
    """The runner of one call (`objective` None), or of a set of calls: one runner per call, combined."""

    def runner(call: tuple, grid: Any) -> InProcessRunner:
        bound = kernel.bind(*call)  # "direct": not the drop-in's run_trial, whose Triton hooks run in the caller
        return in_process_runner(
            kernel, bound, grid, noted, tuning=tuning, launch="direct", precompiled=precompiled, verify=verify
        )

    if objective is None:
        return runner(calls[0], grids[0])
    return MultiCallRunner(runners_for_calls(zip(calls, grids), lambda pair: runner(*pair)), objective, on_call)


def _compile(compiler: Compiler, config: Config) -> tuple[TrialStatus, str | None, float]:
    """(ok, None, seconds), or the config's own compile failure; an error that is not the config's (the call,
    the environment) propagates to the request."""
    executor = InlineExecutor()
    started = time.perf_counter()
    try:
        with compiler.session(executor):
            compiler.finalize(config, compiler.submit(config, executor).result())
    except Exception as exc:
        outcome = compile_failure(config, exc)  # re-raises what is not the config's own fault
        return outcome.status, f"{type(exc).__name__}: {exc}", time.perf_counter() - started
    return TrialStatus.OK, None, time.perf_counter() - started


def run_trial_in_worker(
    kernel: TunableKernel,
    config: Config,
    calls: list[tuple],
    grids: list,
    tuning: Tuning,
    precompiled: bool = False,
    objective: Objective | None = None,
    on_call: Callable[[int], Any] | None = None,
) -> tuple:
    """("ok", trial as a dict) or ("failed", trial as a dict) or ("sticky", error text): the context is poisoned.
    A set of calls is measured call by call (`on_call` told each call's index first), the trial combined."""
    runner = _set_runner(kernel, calls, grids, tuning, objective, precompiled, on_call=on_call)
    try:
        status, error, compile_s = _compile(runner.compiler(), config)
        if status is not TrialStatus.OK:
            trial = Trial(config=config, status=status, error=error)
        else:
            if objective is None and on_call is not None:
                on_call(0)  # compiled: measuring the one call (a set's runner says each call itself)
            trial = runner.measure(config)
        trial.compile_s = compile_s
    except DeviceError as exc:  # any other sticky error (restoring arguments afterwards) is answered by serve()
        return ("sticky", device_error_text(exc))
    finally:
        runner.close()
    return ("ok" if trial.ok else "failed", codec.to_builtins(trial))


def compile_in_worker(kernel: TunableKernel, config: Config, calls: list[tuple], grid: Any) -> tuple:
    """Compile `config` only, with the first call's shapes (all a compile worker is sent): ("ok", seconds), or
    ("failed", status, error text) for the config's own compile error; an error that is not the config's (the
    call, the environment) propagates to the request."""
    bound = kernel.bind(*calls[0])
    compiler = kernel.compiler_for(lambda c: kernel.launch_args(c, bound, grid))
    status, error, seconds = _compile(compiler, config)
    if status is not TrialStatus.OK:
        return ("failed", status.value, error)
    return ("ok", seconds)


def refine_in_worker(
    kernel: TunableKernel,
    configs: list[Config],
    calls: list[tuple],
    grids: list,
    tuning: Tuning,
    reps: int,
    objective: Objective | None = None,
    on_config: Callable[[int], Any] | None = None,
) -> tuple[dict, dict]:
    """Interleaved re-measurement of the best few (on every call of a set): ({config canonical JSON: [samples]},
    {config canonical JSON: its error's text} for those that failed on their own when run again).
    `on_config` is told each config's index in `configs` before each of its runs: a crash or a hang is its own."""
    index = {config: i for i, config in enumerate(configs)}

    def noted(config: Config) -> contextlib.AbstractContextManager[None]:  # the parent keeps the note, not a journal
        if on_config is not None:
            on_config(index[config])
        return contextlib.nullcontext()

    runner = _set_runner(kernel, calls, grids, tuning, objective, precompiled=True, verify=False, noted=noted)
    try:
        rounds = runner.refine(configs, reps)
        failed = {c.canonical(): f"{type(e).__name__}: {e}" for c, e in runner.errors.items() if c not in rounds}
    finally:
        runner.close()
    return {config.canonical(): samples for config, samples in rounds.items()}, failed
