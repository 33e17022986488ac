"""One config's trial inside the worker: the real tuner (`tune`) on copies of the call's arguments, with the
decorated kernel as the worker imported it (its own verify=, setup=, restore_value, grid and compile path)."""
from __future__ import annotations

from typing import Any

from ..errors import DeviceError, NoValidConfigError
from ..space import Config
from ..timing import make_timer
from ..tuner import ArgumentGuard, TuneJob, tune
from .worker import decode_call


def _job(kernel: Any, configs: list[Config], call: tuple, grid: Any, tuning: Any) -> TuneJob:
    bound = kernel.bind(*call)

    def prepare(config: Config) -> tuple:
        return kernel.launch_args(config, bound, grid)

    def run_config(config: Config) -> Any:
        args, kwargs, launch_grid = prepare(config)
        with kernel.launch_lock:
            return kernel.fn.run(*args, grid=launch_grid, warmup=False, **kwargs)

    return TuneJob(configs=configs, run_config=run_config, compiler=kernel.compiler_for(prepare),
                   timer=make_timer(on_gpu=not kernel.interpreted, do_bench=kernel.do_bench,
                                    flush_l2=tuning.flush_l2, cuda_graph=tuning.cuda_graph),
                   tuning=tuning, named_args=bound.named, restore_value=kernel.restore_value,
                   reset_to_zero=kernel.reset_to_zero, setup=kernel.setup, verify=kernel.verify,
                   synchronize=kernel.synchronize, kernel_name=kernel.name, measure_single=True)


def run_trial_in_worker(kernel: Any, config: Config, encoded: dict, grid: Any, tuning: Any) -> tuple:
    """("ok", trial as a dict) or ("failed", trial as a dict) or ("sticky", error text): the context is poisoned."""
    if kernel is None:
        return ("error", "the kernel is not loaded in the worker")
    call = decode_call(encoded)
    one = tuning.model_copy(update={"refine_topk": 0, "compile_workers": 0, "strategy": "exhaustive"})
    try:
        outcome = tune(_job(kernel, [config], call, grid, one))
        trial = outcome.trials[0]
    except NoValidConfigError as exc:
        trial = exc.trials[0]
    except DeviceError as exc:
        return ("sticky", str(exc))
    return ("ok" if trial.ok else "failed", trial.model_dump(mode="json"))


def refine_in_worker(kernel: Any, configs: list[Config], encoded: dict, grid: Any, tuning: Any,
                     reps: int) -> dict:
    """Interleaved re-measurement of the best few: {config canonical JSON: [samples]}."""
    if kernel is None:
        raise RuntimeError("the kernel is not loaded in the worker")
    job = _job(kernel, configs, decode_call(encoded), grid, tuning)
    guard = ArgumentGuard(job.named_args, job.restore_value, job.reset_to_zero)
    out: dict[str, list[float]] = {c.canonical(): [] for c in configs}
    for _ in range(reps):
        for config in configs:
            out[config.canonical()] += job.timer.measure(lambda c=config: job.run_config(c), warmup=0, reps=1,
                                                         before=guard.before_run)
    return out
