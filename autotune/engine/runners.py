"""The one place that chooses where a tuning's trials run: in a worker process when isolation applies to this
call, or set of calls (`isolation.isolation_for`), else in this process on the caller's stream. It also builds the
`InProcessRunner` of a decorated kernel, for the caller and for an isolation worker (`isolation/trial.py`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..kernel.call import BoundCall
from ..options import Objective, Tuning
from ..space.spaces import Config
from .compilers import NoCompile
from .in_process import CallGuards, InProcessRunner
from .isolation import isolation_for
from .multi_call import MultiCallRunner, runners_for_calls
from .timing import make_timer
from .trial_runner import TrialRunner
from .tunable_kernel import TunableKernel

# How a trial launches a config: through the kernel's `run_trial` seam (the drop-in runs Triton's pre/post hooks
# there), or "direct": `kernel.fn.run(...)` under `kernel.launch_lock`, as an isolation worker launches.
LaunchPath = Literal["run_trial", "direct"]


def in_process_runner(
    kernel: TunableKernel,
    bound: BoundCall,
    grid: Any,
    noted: Callable[[Config], Any] | None = None,
    *,
    tuning: Tuning | None = None,
    launch: LaunchPath = "run_trial",
    precompiled: bool = False,
    verify: bool = True,
) -> InProcessRunner:
    """Trials of `kernel` on `bound` on the calling thread, guarded as the kernel was decorated. `tuning` defaults
    to the kernel's; `precompiled`: a compile worker compiled each config, so the first launch loads it from
    Triton's on-disk cache (no compiler here); `verify=False` skips the kernel's verify= (re-measuring)."""

    def prepare(config: Config) -> tuple:
        return kernel.launch_args(config, bound, grid)

    def run_trial(config: Config) -> Any:
        args, kwargs, launch_grid = prepare(config)
        return kernel.run_trial(config, args, kwargs, launch_grid)

    def run_direct(config: Config) -> Any:
        args, kwargs, launch_grid = prepare(config)
        with kernel.launch_lock:
            return kernel.fn.run(*args, grid=launch_grid, warmup=False, **kwargs)

    tuning = kernel.tuning if tuning is None else tuning
    return InProcessRunner(
        run_config=run_trial if launch == "run_trial" else run_direct,
        compiler=NoCompile() if precompiled else kernel.compiler_for(prepare),
        timer=make_timer(
            on_gpu=not kernel.interpreted,
            do_bench=kernel.do_bench,
            flush_l2=tuning.flush_l2,
            cuda_graph=tuning.cuda_graph,
        ),
        tuning=tuning,
        named_args=bound.named,
        guards=CallGuards(kernel.restore_value, kernel.reset_to_zero, kernel.setup, kernel.verify if verify else None),
        synchronize=kernel.synchronize,
        kernel_name=kernel.name,
        **({} if noted is None else {"noted": noted}),
    )


def runner_for(
    kernel: TunableKernel, bound: BoundCall, grid: Any, noted: Callable[[Config], Any] | None = None
) -> TrialRunner:
    """The runner for one tuning of `kernel` on this call; `noted` is the crash journal's note around each
    in-process measurement (a worker's crash costs only its config: nothing to note)."""
    isolated = isolation_for(kernel, [(bound, grid)])  # None: this process (isolation off, or "auto" could not)
    return isolated if isolated is not None else in_process_runner(kernel, bound, grid, noted)


def multi_call_runner(
    kernel: TunableKernel,
    calls: Sequence[tuple[BoundCall, Any]],
    objective: Objective,
    noted: Callable[[Config], Any] | None = None,
) -> TrialRunner:
    """One config measured on every (bound call, grid) of `calls`, combined by `objective`: in the worker, which
    holds every call's copies, when isolation applies to the set, else in this process (one runner per call)."""
    isolated = isolation_for(kernel, calls, objective)
    if isolated is not None:
        return isolated
    runners = runners_for_calls(calls, lambda call: in_process_runner(kernel, call[0], call[1], noted))
    return MultiCallRunner(runners, objective)
