"""Review 34 (compiled): the GPU warm-up route of a one-config autotune.compat kernel, torch_op given a kernel
instead of a torch-level wrapper, and the CUDA-graph timer's eager run before capture."""

from __future__ import annotations

import contextlib
import functools
import types

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel

import autotune
import autotune.compiled.warm_up as warm_up
from autotune import OptionError, Tuning
from autotune.compat import autotune as compat_autotune
from autotune.engine.timing import CudaEventTimer

FAST = Tuning(warmup=0, reps=1, compile_workers=0, isolate="off")


@compat_autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"], tuning=FAST)
@triton.jit
def one_config(x, y, out, n, BLOCK: tl.constexpr):
    """A module-level one-config drop-in: a sweep worker could import it by name."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def one_config_args(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n)
    return (x, torch.randn(n), torch.empty_like(x), n), {"grid": (triton.cdiv(n, 32),)}


@pytest.mark.parametrize("in_process", [None, False])
def test_warmup_of_a_one_config_compat_kernel_where_gpus_are_visible_tunes_and_stores_nothing(monkeypatch, in_process):
    """DESIGN 2e: a one-config compat key is launched untuned on every route; the GPU route (a sweep worker)
    tuned it, reported it tuned and left a disk entry."""
    monkeypatch.setattr(warm_up, "visible_gpus", lambda: 1)  # one interpreter worker stands in for a GPU's
    autotune.clear_autotune_cache(kernel=one_config.tuner)
    calls = [functools.partial(one_config_args, 100), functools.partial(one_config_args, 300)]
    report = autotune.warmup(one_config, calls, in_process=in_process)
    assert report.tuned == () and report.cached == ()
    assert [w.key for w in report.untuned] == [(100,), (300,)]
    assert list(one_config.tuner.cache.records()) == []


def _native_add():
    return autotune.autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST)(add_kernel)


@pytest.mark.parametrize("make", [_native_add, lambda: add_kernel], ids=["autotune", "triton_jit"])
def test_torch_op_given_the_kernel_itself_names_the_mistake_and_the_wrapper_it_takes(make):
    with pytest.raises(OptionError, match=r"was given the kernel add_kernel itself; it takes a torch-level wrapper"):
        autotune.torch_op("review34::given_a_kernel", make(), mutates_args=("out",))


def test_torch_op_decorating_a_kernel_is_refused_as_well():
    with pytest.raises(OptionError, match="torch-level wrapper"):
        autotune.torch_op("review34::decorated_kernel", mutates_args=())(_native_add())


class GraphCuda:
    """A stand-in for torch.cuda: a kernel launched while capturing runs nothing until the graph is replayed."""

    def __init__(self, kernel) -> None:
        self.kernel, self.capturing, self.captured = kernel, False, []

    def module(self) -> types.SimpleNamespace:
        sim = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                pass

            def record(self, stream=None) -> None:
                pass

            def query(self) -> bool:
                return False  # still asleep: the reps were queued in time

            def elapsed_time(self, end) -> float:
                return 1.0

        class Stream:
            def wait_stream(self, other) -> None:
                pass

            def synchronize(self) -> None:
                pass

        class Graph:
            def replay(self) -> None:
                for launch in sim.captured:
                    launch()

        @contextlib.contextmanager
        def graph(g, stream=None):
            sim.capturing = True
            yield
            sim.capturing = False

        cuda = types.SimpleNamespace(
            Event=Event,
            Stream=Stream,
            CUDAGraph=Graph,
            graph=graph,
            stream=lambda s: contextlib.nullcontext(),
            current_stream=Stream,
            _sleep=lambda cycles: None,
            synchronize=lambda: None,
        )
        return types.SimpleNamespace(cuda=cuda)

    def launch(self) -> None:
        if self.capturing:
            self.captured.append(self.kernel)
        else:
            self.kernel()


def test_cuda_graph_timing_runs_before_ahead_of_the_eager_launch_preceding_capture():
    """DESIGN 6: setup (restore_value, reset_to_zero) runs before every run: the eager launch on the capture stream
    ran after the last warm-up's, with a reset_to_zero semaphore that warm-up left set."""
    semaphore = {"value": 0}
    stale: list[int] = []

    def kernel() -> None:  # needs its semaphore zeroed, and leaves it set
        if semaphore["value"] != 0:
            stale.append(semaphore["value"])
        semaphore["value"] = 1

    def reset_to_zero() -> None:
        semaphore["value"] = 0

    sim = GraphCuda(kernel)
    timer = CudaEventTimer(flush_l2=False, cuda_graph=True)
    timer.torch = sim.module()
    samples = timer.measure(sim.launch, warmup=1, reps=3, before=reset_to_zero)
    assert samples == [1.0, 1.0, 1.0] and len(sim.captured) == 1
    assert stale == []


def _early_raising(configs, nargs, **kwargs):
    raise ValueError("bad early")


def _grid_of(n, meta):
    return (triton.cdiv(n, meta["BLOCK"]),)


def _compat_args(n: int) -> tuple[tuple, dict]:
    return (torch.randn(n), torch.randn(n), torch.empty(n), n), {"grid": functools.partial(_grid_of, n)}


def test_warmup_of_a_compat_kernel_raises_its_early_config_prune_error_as_itself():
    """As a launch does (and triton.autotune): the user's own ValueError, not an error naming a prune= option
    they never set."""
    configs = [triton.Config({"BLOCK": b}) for b in (32, 64)]
    kernel = compat_autotune(
        configs=configs, key=["n"], prune_configs_by={"early_config_prune": _early_raising}, tuning=FAST
    )(add_kernel)
    with pytest.raises(ValueError, match="bad early"):
        autotune.warmup(kernel, [functools.partial(_compat_args, 60)], in_process=True)


def test_torch_op_given_a_partial_names_the_plain_function_torch_needs():
    """torch reads the schema from a function's annotations and globals: a functools.partial (or a callable object)
    is named with the fix, not torch's AttributeError about '__globals__'."""

    def scaled(x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * scale

    with pytest.raises(OptionError, match=r"partial.*wrap it in a `def` with annotated tensor arguments"):
        autotune.torch_op("review34::scaled", functools.partial(scaled, scale=2.0), mutates_args=())
