"""One config's trial inside a worker: the real tuner (`tune`) on the worker's copies of the call's arguments, with
the decorated kernel as the worker imported it (its own verify=, setup=, restore_value, grid and compile path);
or, in a compile worker, that config's compile alone."""

from __future__ import annotations

import functools
import time
from typing import Any

from ... import codec
from ...errors import DeviceError, NoValidConfigError
from ...space.spaces import Config
from ..compilers import InterpreterCompiler
from ..pipeline import InlineExecutor, compile_failure
from ..timing import make_timer
from ..tuner import ArgumentGuard, TuneJob, tune


def _job(kernel: Any, configs: list[Config], call: tuple, grid: Any, tuning: Any, precompiled: bool = False) -> TuneJob:
    bound = kernel.bind(*call)

    def prepare(config: Config) -> tuple:
        return kernel.launch_args(config, bound, grid)

    def run_config(config: Config) -> Any:
        args, kwargs, launch_grid = prepare(config)
        with kernel.launch_lock:
            return kernel.fn.run(*args, grid=launch_grid, warmup=False, **kwargs)

    # Precompiled: a compile worker compiled it; the first launch loads it from Triton's on-disk cache.
    compiler = InterpreterCompiler() if precompiled else kernel.compiler_for(prepare)
    return TuneJob(
        configs=configs,
        run_config=run_config,
        compiler=compiler,
        timer=make_timer(
            on_gpu=not kernel.interpreted,
            do_bench=kernel.do_bench,
            flush_l2=tuning.flush_l2,
            cuda_graph=tuning.cuda_graph,
        ),
        tuning=tuning,
        named_args=bound.named,
        restore_value=kernel.restore_value,
        reset_to_zero=kernel.reset_to_zero,
        setup=kernel.setup,
        verify=kernel.verify,
        synchronize=kernel.synchronize,
        kernel_name=kernel.name,
        measure_single=True,
    )


def run_trial_in_worker(
    kernel: Any, config: Config, call: tuple, grid: Any, tuning: Any, precompiled: bool = False
) -> tuple:
    """("ok", trial as a dict) or ("failed", trial as a dict) or ("sticky", error text): the context is poisoned."""
    one = tuning.replace(refine_topk=0, compile_workers=0, strategy="exhaustive")
    try:
        outcome = tune(_job(kernel, [config], call, grid, one, precompiled))
        trial = outcome.trials[0]
    except NoValidConfigError as exc:
        trial = exc.trials[0]
    except DeviceError as exc:  # the device error itself, not the in-process advice wrapped around it
        cause = exc.__cause__ or exc  # (any other sticky error, e.g. restoring arguments afterwards, is
        return ("sticky", f"{type(cause).__name__}: {cause}")  # answered "sticky" by serve())
    return ("ok" if trial.ok else "failed", codec.to_builtins(trial))


def compile_in_worker(kernel: Any, config: Config, call: tuple, grid: Any, tuning: Any) -> tuple:
    """Compile `config` only: ("ok", seconds), or ("failed", status, error text) for the config's own compile
    error; an error that is not the config's (the call, the environment) propagates to the request."""
    bound = kernel.bind(*call)
    compiler = kernel.compiler_for(lambda c: kernel.launch_args(c, bound, grid))
    executor = InlineExecutor()
    started = time.perf_counter()
    try:
        with compiler.session(executor):
            compiler.finalize(config, compiler.submit(config, executor).result())
    except Exception as exc:
        outcome = compile_failure(config, exc)  # re-raises what is not the config's own fault
        return ("failed", outcome.status.value, f"{type(exc).__name__}: {exc}")
    return ("ok", time.perf_counter() - started)


def refine_in_worker(kernel: Any, configs: list[Config], call: tuple, grid: Any, tuning: Any, reps: int) -> dict:
    """Interleaved re-measurement of the best few: {config canonical JSON: [samples]}."""
    job = _job(kernel, configs, call, grid, tuning)
    guard = ArgumentGuard(job.named_args, job.restore_value, job.reset_to_zero)
    out: dict[str, list[float]] = {c.canonical(): [] for c in configs}
    for _ in range(reps):
        for config in configs:
            out[config.canonical()] += job.timer.measure(
                functools.partial(job.run_config, config), warmup=0, reps=1, before=guard.before_run
            )
    return out
