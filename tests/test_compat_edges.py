"""Edges of `autotune.compat` that mutation testing found unpinned: each test fails when one small change to
compat.py / compat_options.py / compat_timing.py is made (a condition dropped, a default changed, a call removed),
and where Triton defines the behaviour it runs `triton.autotune` on the same kernel and calls, side by side.

Triton's default benchmarker needs a GPU, so both decorators get `Bench`, a do_bench that runs the config and
reports a fixed time per BLOCK (32 wins); nothing here depends on a measured time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
import triton.testing
from kernels_for_tests import add_kernel, record_launches, scale_2d_kernel
from triton.runtime.errors import AutotunerError

import autotune.compat as compat
from autotune import Tuning, clear_autotune_cache
from autotune.errors import OptionError, SpaceError

TIMES = {16: 3.0, 32: 1.0, 64: 2.0}  # ms per BLOCK: 32 wins, then 64, then 16
F32 = ("torch.float32",) * 3
BOTH = pytest.mark.parametrize("decorate", [triton.autotune, compat.autotune], ids=["triton", "compat"])
Decorate = Callable[..., Callable[[Any], Any]]


def benchmarks_one_pruned_config(decorate: Decorate) -> bool:
    """Whether `decorate` benchmarks a key that pruning leaves one config: Triton up to 3.7 does (its `run`
    benchmarks whatever `prune_configs` returns), Triton 3.8 on launches that config unmeasured (triton-lang/triton
    #10413), as an autotuner given one config always did; compat behaves as 3.8 on every Triton."""
    major, minor = (int(part) for part in triton.__version__.split(".")[:2])
    return decorate is triton.autotune and (major, minor) < (3, 8)


class Bench:
    """A Triton do_bench(kernel_call, quantiles): runs the config once and reports TIMES for the BLOCK its
    config's pre_hook announced; counts its calls."""

    def __init__(self, result: Callable[[float], Any] = lambda t: [t, 0.9 * t, 1.1 * t]) -> None:
        self.block: int | None = None
        self.calls = 0
        self.result = result

    def hook(self, nargs: dict[str, Any]) -> None:
        self.block = nargs["BLOCK"]

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any) -> Any:
        kernel_call()
        self.calls += 1
        assert self.block is not None
        return self.result(TIMES[self.block])


def configs(bench: Bench, blocks: tuple[int, ...] = (16, 32, 64)) -> list[triton.Config]:
    return [triton.Config({"BLOCK": b}, num_warps=4, pre_hook=bench.hook) for b in blocks]


def grid(meta: dict[str, Any]) -> tuple[int]:
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


def tensors(n: int = 100) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.arange(n, dtype=torch.float32), torch.ones(n), torch.zeros(n)


def launch(kernel: Any, n: int = 100, **kwargs: Any) -> torch.Tensor:
    """kernel[grid](x, y, out, n) with a fresh out, checked to be x + y; returns out."""
    x, y, out = tensors(n)
    kernel[grid](x, y, out, n, **kwargs)
    torch.testing.assert_close(out, x + y)
    return out


@triton.jit
def _copy_with_unused(x, n, D: tl.constexpr):
    offs = tl.arange(0, 16)
    tl.store(x + offs, tl.load(x + offs) + D * 0)


@BOTH
def test_every_config_of_a_list_longer_than_the_default_budget_is_measured(decorate: Decorate) -> None:
    """Triton measures every config it is given: 300 are 300 measurements, not a search of 256, and the one the
    do_bench reports fastest wins (here the first: each later call reports a little slower)."""
    measured: list[int] = []

    def do_bench(kernel_call: Callable[[], Any], quantiles: Any) -> list[float]:
        kernel_call()
        measured.append(1)
        return [1.0 + len(measured) * 1e-3] * 3

    given = [triton.Config({"D": d}) for d in range(300)]
    kernel = decorate(configs=given, key=["n"], do_bench=do_bench)(_copy_with_unused)
    kernel[(1,)](torch.ones(16), 16)
    assert len(measured) == 300 and len(kernel.configs_timings) == 300
    assert kernel.best_config is given[0]


def test_each_configs_pre_hook_runs_before_its_compile_is_made() -> None:
    """On a GPU Triton compiles a config in its first run, after the config's pre_hook, and specializes on what the
    hook set (a TensorDescriptor's block_shape, in Triton's tutorials). compat compiles ahead, in a pool: it runs
    the hook as each config's compile arguments are made. The compiler is the seam (the interpreter compiles
    nothing): each compile sees the block its own config's hook announced."""
    from autotune.engine.compilers import FunctionCompiler

    announced: dict[str, int] = {}
    seen: list[tuple[int, int]] = []

    def announce(nargs: dict[str, Any]) -> None:
        announced["block"] = nargs["BLOCK"]

    def compile_fn(prepare: Callable[[Any], tuple], config: Any) -> None:
        prepare(config)
        seen.append((config["BLOCK"], announced["block"]))

    given = [triton.Config({"BLOCK": b}, pre_hook=announce) for b in (16, 32, 64)]
    kernel = compat.autotune(configs=given, key=["n"], tuning={"compile_workers": 1})(add_kernel)
    kernel.tuner.compiler_factory = lambda tuned, prepare: FunctionCompiler(lambda config: compile_fn(prepare, config))
    launch(kernel)
    assert sorted(seen) == [(16, 16), (32, 32), (64, 64)]


# ------------------------------------------------------------------------------------------------ pruning
@BOTH
def test_a_perf_model_without_top_k_keeps_every_config(decorate: Decorate) -> None:
    """Triton's top_k defaults to 1.0, the fraction "all": a perf model alone orders configs, it prunes none."""
    bench = Bench()
    kernel = decorate(
        configs=configs(bench), key=["n"], do_bench=bench, prune_configs_by={"perf_model": lambda **kw: -kw["BLOCK"]}
    )(add_kernel)
    launch(kernel)
    assert bench.calls == 3 and kernel.best_config.kwargs == {"BLOCK": 32}


@BOTH
@pytest.mark.parametrize("top_k", [3, 5, 1.0])
def test_a_perf_model_is_not_called_when_top_k_keeps_every_config(decorate: Decorate, top_k: Any) -> None:
    """Triton estimates only when there is something to cut (`len(pruned) > top_k`)."""
    bench, estimated = Bench(), []
    kernel = decorate(
        configs=configs(bench),
        key=["n"],
        do_bench=bench,
        prune_configs_by={"perf_model": lambda **kw: estimated.append(kw["BLOCK"]) or 0.0, "top_k": top_k},
    )(add_kernel)
    launch(kernel)
    assert estimated == [] and bench.calls == 3


@BOTH
def test_the_perf_model_gets_keyword_arguments_grid_and_warmup_of_the_call(decorate: Decorate) -> None:
    """`perf_model(**nargs, **kwargs, **config.all_kwargs())`: an argument passed by keyword reaches it too."""
    bench, seen = Bench(), []

    def perf_model(**kwargs: Any) -> float:
        seen.append(kwargs)
        return float(kwargs["BLOCK"])

    kernel = decorate(
        configs=configs(bench), key=["n"], do_bench=bench, prune_configs_by={"perf_model": perf_model, "top_k": 2}
    )(add_kernel)
    x, y, out = tensors()
    kernel[grid](x, y, out=out, n=100)
    assert len(seen) == 3 and all(
        s["n"] == 100 and s["out"] is out and s["grid"] is grid and s["warmup"] is False for s in seen
    )
    assert bench.calls == 2 and kernel.best_config.kwargs == {"BLOCK": 32}


@BOTH
def test_an_early_config_prune_returning_none_is_triton_s_error(decorate: Decorate) -> None:
    """Triton tests `not pruned_configs`: None is "no config", an AutotunerError, not a TypeError of list(None)."""
    kernel = decorate(
        configs=configs(Bench()), key=["n"], prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: None}
    )(add_kernel)
    with pytest.raises(AutotunerError, match="No valid autotuner configs after pruning"):
        launch(kernel)


@BOTH
def test_warmup_gives_early_config_prune_the_positional_arguments(decorate: Decorate) -> None:
    """`Autotuner.warmup(*args)` prunes with `nargs` of those arguments, as a launch does."""
    seen = []

    def prune(configs: list[Any], nargs: dict[str, Any], **kwargs: Any) -> list[Any]:
        seen.append((sorted(nargs), nargs["n"], sorted(kwargs)))
        return configs[1:]

    kernel = decorate(configs=configs(Bench()), key=["n"], prune_configs_by={"early_config_prune": prune})(add_kernel)
    x, y, out = tensors()
    assert len(kernel.warmup(x, y, out, 100, grid=grid)) == 2
    assert seen == [(["n", "out", "x", "y"], 100, ["grid"])]


@BOTH
def test_a_later_key_pruned_to_one_config_leaves_configs_timings_and_the_hooks_alone(decorate: Decorate) -> None:
    """Pruned to one config, Triton launches it without benchmarking: no pre_hook(reset_only=True), no extra zeroing,
    and `configs_timings` still shows the last tuning that benchmarked (Triton 3.6 and 3.7 benchmark that one)."""
    bench, resets = Bench(), []

    def prune(configs: list[Any], nargs: dict[str, Any], **kwargs: Any) -> list[Any]:
        return configs if kwargs["n"] == 100 else configs[2:]

    kernel = decorate(
        configs=configs(bench),
        key=["n"],
        do_bench=bench,
        pre_hook=lambda nargs, reset_only=False: resets.append(reset_only) if reset_only else None,
        prune_configs_by={"early_config_prune": prune},
    )(add_kernel)
    x, y, out = tensors()
    kernel[grid](x, y, out, n=100)
    timings = dict(kernel.configs_timings)
    assert len(timings) == 3 and resets == [True]
    x, y, out = tensors(50)
    kernel[grid](x, y, out, n=50)
    torch.testing.assert_close(out, x + y)
    if benchmarks_one_pruned_config(decorate):
        assert kernel.best_config.kwargs == {"BLOCK": 64} and bench.calls == 4
        assert list(kernel.configs_timings) == [kernel.configs[2]] and resets == [True, True]
    else:
        assert kernel.best_config.kwargs == {"BLOCK": 64} and bench.calls == 3
        assert kernel.configs_timings == timings and resets == [True]
    assert kernel.cache[(50, *F32)] is kernel.configs[2]


# ------------------------------------------------------------------------------------------------ the cache dict
@BOTH
def test_a_tuned_entry_replaced_in_the_cache_dict_is_launched_without_tuning(decorate: Decorate) -> None:
    """The caller overwrites the entry the tuning made: Triton launches what the dict says."""
    bench = Bench()
    cfgs = configs(bench)
    kernel = decorate(configs=cfgs, key=["n"], do_bench=bench, cache_results=False)(add_kernel)
    launch(kernel)
    assert kernel.best_config is cfgs[1] and bench.calls == 3
    kernel.cache[(100, *F32)] = cfgs[2]
    launch(kernel)
    assert kernel.best_config is cfgs[2] and bench.calls == 3
    if decorate is compat.autotune:  # the engine's view agrees (native config of the launch)
        assert kernel.tuner.best_config["BLOCK"] == 64


@BOTH
def test_cache_entries_outlive_a_configs_assignment(decorate: Decorate) -> None:
    """`configs` assigned later: a key already in `cache` launches its entry untuned, even a config no longer
    listed; a new key tunes among the new configs."""
    bench = Bench()
    cfgs = configs(bench)
    kernel = decorate(configs=cfgs, key=["n"], do_bench=bench, cache_results=False)(add_kernel)
    launch(kernel)
    assert kernel.best_config is cfgs[1]
    kernel.configs = [cfgs[0], cfgs[2]]
    launch(kernel)
    assert kernel.best_config is cfgs[1] and bench.calls == 3
    launch(kernel, n=50)
    assert kernel.best_config is cfgs[2] and bench.calls == 5


@BOTH
@pytest.mark.parametrize("entry", ["tuned", "pinned"])
def test_a_warmup_of_a_key_in_the_cache_dict_runs_its_configs_pre_hook_and_compiles_it_only(
    decorate: Decorate, entry: str
) -> None:
    """run(warmup=True) on a key in `cache` (tuned, or pinned by the caller): Triton calls that config's pre_hook
    and compiles it, no other config, nothing tuned, nothing launched."""
    bench, hooked = Bench(), []

    def hook(nargs: dict[str, Any]) -> None:
        hooked.append(nargs["BLOCK"])
        bench.hook(nargs)

    cfgs = [triton.Config({"BLOCK": b}, pre_hook=hook) for b in (16, 32, 64)]
    kernel = decorate(configs=cfgs, key=["n"], do_bench=bench)(add_kernel)
    if entry == "tuned":
        launch(kernel)
    else:
        kernel.cache[(100, *F32)] = cfgs[2]
    expected = 32 if entry == "tuned" else 64
    calls = bench.calls
    hooked.clear()
    launches = record_launches(kernel, "BLOCK", "warmup")
    x, y, out = tensors()
    kernel.run(x, y, out, 100, grid=grid, warmup=True)
    assert launches == [(expected, True)] and hooked == [expected]
    assert bench.calls == calls and out.abs().sum().item() == 0.0 and kernel.best_config is cfgs[expected // 32]


def test_a_warmup_of_a_key_stored_on_disk_compiles_the_stored_winner_only() -> None:
    """run(warmup=True) in a process that has the key on disk only (a second decoration stands in for it): the
    stored winner is compiled, no other config, nothing tuned or launched."""
    first_bench = Bench()
    first = compat.autotune(configs=configs(first_bench), key=["n"], do_bench=first_bench)(add_kernel)
    launch(first)
    bench = Bench()
    second = compat.autotune(configs=configs(bench), key=["n"], do_bench=bench)(add_kernel)
    launches = record_launches(second, "BLOCK", "warmup")
    x, y, out = tensors()
    second.run(x, y, out, 100, grid=grid, warmup=True)
    assert launches == [(32, True)] and bench.calls == 0 and out.abs().sum().item() == 0.0


def test_a_clear_keeps_a_tuned_key_the_caller_overwrote_in_the_cache_dict() -> None:
    """`clear_autotune_cache` drops the entries compat filed; one the caller wrote over a filed key is theirs."""
    bench = Bench()
    cfgs = configs(bench)
    kernel = compat.autotune(configs=cfgs, key=["n"], do_bench=bench)(add_kernel)
    launch(kernel)
    launch(kernel, n=50)
    kernel.cache[(50, *F32)] = cfgs[0]
    clear_autotune_cache(kernel)
    assert kernel.cache == {(50, *F32): cfgs[0]}
    launch(kernel, n=50)
    assert kernel.best_config is cfgs[0] and bench.calls == 6


def test_a_disk_hit_sets_configs_timings_but_not_bench_time() -> None:
    """Triton's bench_time is the time of a benchmark this process ran; a winner read from disk ran none."""
    first_bench = Bench()
    launch(compat.autotune(configs=configs(first_bench), key=["n"], do_bench=first_bench)(add_kernel))
    bench = Bench()
    second = compat.autotune(configs=configs(bench), key=["n"], do_bench=bench)(add_kernel)
    launch(second)
    assert bench.calls == 0 and second.best_config.kwargs == {"BLOCK": 32}
    assert second.bench_time is None and len(second.configs_timings) == 3


def test_a_misspelt_top_k_is_refused_when_decorating() -> None:
    """Triton would ignore prune_configs_by={'topk': 2} and benchmark every config; compat names the option."""
    with pytest.raises(OptionError, match="no option 'topk'.*Did you mean 'top_k'"):
        compat.autotune(
            configs=configs(Bench()), key=["n"], prune_configs_by={"perf_model": lambda **kw: 0.0, "topk": 2}
        )(add_kernel)


# ------------------------------------------------------------------------------------------------ configs
@BOTH
def test_equal_configs_with_one_bound_method_as_pre_hook_are_one_config(decorate: Decorate) -> None:
    """Triton's Config equality compares pre_hooks with `==`: `bench.hook` read twice is two bound-method objects
    but one hook, so the equal configs are one entry of `configs_timings` (compat refused them, comparing the
    hooks by identity)."""
    bench = Bench()
    cfgs = configs(bench, (16, 32, 32, 64))
    kernel = decorate(configs=cfgs, key=["n"], do_bench=bench)(add_kernel)
    launch(kernel)
    assert len(kernel.configs_timings) == 3 and kernel.best_config.kwargs == {"BLOCK": 32}


def test_configs_equal_but_for_their_pre_hook_are_refused_when_decorating() -> None:
    """A winner is cached by value, so two configs told apart only by their pre_hook cannot both be tuned."""
    cfgs = [
        triton.Config({"BLOCK": 16}),
        triton.Config({"BLOCK": 32}),
        triton.Config({"BLOCK": 32}, pre_hook=lambda nargs: None),
    ]
    with pytest.raises(SpaceError, match=r"configs\[2\].*equals an earlier config except for its pre_hook"):
        compat.autotune(configs=cfgs, key=["n"])(add_kernel)


@triton.jit
def add_with_unused_kernel(x, y, out, n, BLOCK: tl.constexpr, UNUSED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@BOTH
def test_a_key_naming_a_value_of_triton_heuristics_below_is_skipped(decorate: Decorate) -> None:
    """autotune over triton.heuristics: a key name the heuristics set is not passed by the call, so Triton skips
    it (as a config's meta-parameter) and the key is the call's n and dtypes."""
    bench = Bench()
    kernel = decorate(configs=configs(bench), key=["n", "UNUSED"], do_bench=bench)(
        triton.heuristics({"UNUSED": lambda args: args["n"] % 7})(add_with_unused_kernel)
    )
    launch(kernel)
    assert list(kernel.cache) == [(100, *F32)] and kernel.best_config.kwargs == {"BLOCK": 32}


# ------------------------------------------------------------------------------------------------ hooks
@BOTH
def test_the_reset_only_pre_hook_sees_keyword_arguments_grid_and_the_winner(decorate: Decorate) -> None:
    """After benchmarking Triton calls pre_hook({**nargs, **kwargs, **best.all_kwargs()}, reset_only=True)."""
    bench, reset = Bench(), []
    kernel = decorate(
        configs=configs(bench),
        key=["n"],
        do_bench=bench,
        pre_hook=lambda nargs, reset_only=False: reset.append(dict(nargs)) if reset_only else None,
    )(add_kernel)
    x, y, out = tensors()
    kernel[grid](x, y, out=out, n=100)
    assert len(reset) == 1
    assert reset[0]["out"] is out and reset[0]["n"] == 100 and reset[0]["grid"] is grid
    assert reset[0]["BLOCK"] == 32 and reset[0]["num_warps"] == 4


@BOTH
def test_hooks_around_a_trial_see_grid_and_warmup(decorate: Decorate) -> None:
    """Triton's kernel_call passes {**nargs, **meta, **config.all_kwargs()} to the hooks; meta holds grid= and
    warmup= from `kernel[grid]`."""
    bench, seen = Bench(), []
    kernel = decorate(
        configs=configs(bench),
        key=["n"],
        do_bench=bench,
        post_hook=lambda nargs, exception: seen.append((nargs["grid"], nargs["warmup"], nargs["n"])),
    )(add_kernel)
    launch(kernel)
    assert seen and set(seen) == {(grid, False, 100)}


@BOTH
def test_pre_hook_gets_reset_only_as_a_keyword_after_benchmarking_only(decorate: Decorate) -> None:
    """Triton calls `pre_hook(nargs)` around each run and `pre_hook(nargs, reset_only=True)` once after the
    benchmark: a hook taking **kwargs sees no reset_only in the runs."""
    bench, forms = Bench(), []
    kernel = decorate(
        configs=configs(bench),
        key=["n"],
        do_bench=bench,
        pre_hook=lambda nargs, *args, **kwargs: forms.append((args, kwargs)),
    )(add_kernel)
    launch(kernel)
    assert forms[-1] == ((), {"reset_only": True})
    assert len(forms) >= 4 and set(map(repr, forms[:-1])) == {"((), {})"}


@BOTH
def test_reset_to_zero_is_zeroed_before_each_run_and_the_final_launch(decorate: Decorate) -> None:
    """reset_to_zero without a user pre_hook: the counter holds exactly one launch's effect after tuning."""
    bench = Bench()

    @triton.jit
    def count_kernel(x, counts, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(counts + offs, tl.load(counts + offs, mask=mask) + tl.load(x + offs, mask=mask), mask=mask)

    kernel = decorate(configs=configs(bench), key=["n"], do_bench=bench, reset_to_zero=["counts"])(count_kernel)
    x, counts = torch.arange(100, dtype=torch.float32), torch.full((100,), 7.0)
    kernel[grid](x, counts, 100)
    torch.testing.assert_close(counts, x)


@BOTH
def test_nargs_holds_the_calls_positional_arguments_while_it_runs_and_none_after(decorate: Decorate) -> None:
    """Triton's `Autotuner.nargs`: the positional arguments by name, set for the whole call (a do_bench or a hook
    may read it off the kernel), None once the kernel is launched."""
    bench, seen = Bench(), []

    def do_bench(kernel_call: Callable[[], Any], quantiles: Any) -> Any:
        seen.append(kernel.nargs)
        return bench(kernel_call, quantiles)

    def hook(nargs: dict[str, Any]) -> None:
        seen.append(kernel.nargs)
        bench.hook(nargs)

    cfgs = [triton.Config({"BLOCK": b}, pre_hook=hook) for b in (16, 32, 64)]
    kernel = decorate(configs=cfgs, key=["n"], do_bench=do_bench)(add_kernel)
    x, y, out = tensors()
    kernel[grid](x, y, out, n=100)
    torch.testing.assert_close(out, x + y)
    assert len(seen) >= 7 and kernel.nargs is None  # three benchmarks, their config hooks, the final launch's
    assert all(s is not None and s.keys() == {"x", "y", "out"} and s["x"] is x and s["out"] is out for s in seen)


# ------------------------------------------------------------------------------------------------ printing
@BOTH
def test_triton_print_autotuning_summarises_a_benchmark_only(decorate: Decorate, monkeypatch: Any, capsys: Any) -> None:
    """TRITON_PRINT_AUTOTUNING's summary follows a tuning that benchmarked: not a hit, not a key pruned to one
    (which Triton 3.6 and 3.7 benchmark, and so summarise)."""
    from triton import knobs

    monkeypatch.setattr(knobs.autotuning, "print", True)
    bench = Bench()
    kernel = decorate(
        configs=configs(bench),
        key=["n"],
        do_bench=bench,
        cache_results=False,
        prune_configs_by={"early_config_prune": lambda c, nargs, **kw: c if kw["n"] == 100 else c[:1]},
    )(add_kernel)
    kernel[grid](*tensors(), n=100)
    assert capsys.readouterr().out.count("Triton autotuning for function add_kernel") == 1
    kernel[grid](*tensors(), n=100)
    assert capsys.readouterr().out == ""
    kernel[grid](*tensors(50), n=50)
    summaries = capsys.readouterr().out.count("Triton autotuning for function add_kernel")
    assert summaries == (1 if benchmarks_one_pruned_config(decorate) else 0)


def test_without_triton_print_autotuning_nothing_is_printed(capsys: Any) -> None:
    bench = Bench()
    launch(compat.autotune(configs=configs(bench), key=["n"], do_bench=bench)(add_kernel))
    assert capsys.readouterr().out == ""


# ------------------------------------------------------------------------------------------------ do_bench
def test_configs_timings_of_a_do_bench_returning_tuples_are_lists_and_order_with_a_failed_config() -> None:
    """A do_bench may return a tuple: its first item is the median that picks the winner. compat stores it as a
    list (Triton keeps the tuple), so that it compares with a failed config's [inf, inf, inf]."""
    bench = Bench(result=lambda t: (t, 0.5 * t, 2.0 * t))
    cfgs = configs(bench, (16, 48, 64, 32))  # 48: tl.arange needs a power of two, it fails
    kernel = compat.autotune(configs=cfgs, key=["n"], do_bench=bench)(add_kernel)
    launch(kernel)
    timings = kernel.configs_timings
    assert kernel.best_config is cfgs[3]
    assert timings[cfgs[3]] == [1.0, 0.5, 2.0] and timings[cfgs[1]] == [float("inf")] * 3
    assert min(timings, key=timings.__getitem__) is cfgs[3]


def test_a_do_bench_returning_an_empty_list_is_the_users_mistake_naming_do_bench() -> None:
    kernel = compat.autotune(configs=configs(Bench()), key=["n"], do_bench=lambda kernel_call, quantiles: [])(
        add_kernel
    )
    with pytest.raises(TypeError, match=r"do_bench of add_kernel returned \[\]"):
        launch(kernel)


def test_do_bench_cudagraph_is_replaced_by_the_wall_clock_in_the_interpreter() -> None:
    """triton.testing's benchmarkers need a GPU; passed as do_bench= in the interpreter, the native timer stands in."""
    kernel = compat.autotune(
        configs=configs(Bench(), (32, 64)),
        key=["n"],
        do_bench=triton.testing.do_bench_cudagraph,
        tuning=Tuning(reps=3, warmup=0),
    )(add_kernel)
    assert kernel.do_bench is None
    launch(kernel)
    assert all(len(t.samples_ms) > 1 for t in kernel.record().trials)


@BOTH
@pytest.mark.parametrize(
    "options",
    [{"warmup": 5}, {"rep": 7}, {"warmup": 5, "rep": 7}, {"use_cuda_graph": True}, {"use_cuda_graph": True, "rep": 7}],
    ids=["warmup", "rep", "warmup-rep", "graph", "graph-rep"],
)
def test_deprecated_warmup_rep_and_cuda_graph_call_triton_testing_as_triton_does(
    decorate: Decorate, options: Any, monkeypatch: Any
) -> None:
    """Off the interpreter, `warmup`/`rep`/`use_cuda_graph` pick triton.testing.do_bench(warmup=25, rep=100
    unless given) or do_bench_cudagraph(rep=100 unless given), called with Triton's quantiles. Both benchmarkers
    are replaced by a fake that runs the config through the interpreter; compat is told it is not interpreted."""
    bench, calls = Bench(), []

    def fake_do_bench(
        fn: Callable[[], Any],
        warmup: int = 25,
        rep: int = 100,
        grad_to_none: Any = None,
        quantiles: Any = None,
        return_mode: str = "mean",
    ) -> Any:
        calls.append(("do_bench", warmup, rep, tuple(quantiles)))
        return bench(fn, quantiles)

    def fake_cudagraph(
        fn: Callable[[], Any], rep: int = 20, grad_to_none: Any = None, quantiles: Any = None, return_mode: str = "mean"
    ) -> Any:
        calls.append(("cudagraph", rep, tuple(quantiles)))
        return bench(fn, quantiles)

    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", fake_cudagraph)
    monkeypatch.setattr(compat, "is_interpreted", lambda kernel: False)
    with pytest.warns(DeprecationWarning, match="warmup, rep, and use_cuda_graph parameters are deprecated"):
        kernel = decorate(configs=configs(bench), key=["n"], **options)(add_kernel)
    launch(kernel)
    rep = options.get("rep", 100)
    expected = (
        ("cudagraph", rep, (0.5, 0.2, 0.8))
        if options.get("use_cuda_graph")
        else ("do_bench", options.get("warmup", 25), rep, (0.5, 0.2, 0.8))
    )
    assert calls == [expected] * 3 and kernel.best_config.kwargs == {"BLOCK": 32}


def test_the_deprecation_warning_points_at_the_decorators_line() -> None:
    with pytest.warns(DeprecationWarning, match="deprecated") as caught:
        compat.autotune(configs=configs(Bench()), key=["n"], rep=10)(add_kernel)
    assert caught[0].filename == __file__


def test_configs_timings_of_the_native_timer_are_the_median_p20_p80_of_the_trials_samples() -> None:
    """Without a do_bench, a config's timing is Triton's shape, [median, p20, p80] of its samples, interpolated as
    torch.quantile does (one sample is its own three quantiles)."""
    for reps in (1, 6):
        cfgs = configs(Bench(), (32, 64))
        kernel = compat.autotune(
            configs=cfgs,
            key=["n"],
            cache_results=False,
            tuning=Tuning(reps=reps, warmup=0, refine_topk=0, compile_workers=0),
        )(add_kernel)
        launch(kernel)
        record = kernel.record()
        for config, native in zip(cfgs, kernel.tuner.configs):
            samples = torch.tensor(record.trial_for(native).samples_ms, dtype=torch.float64)
            assert len(samples) == reps
            expected = [torch.quantile(samples, q).item() for q in (0.5, 0.2, 0.8)]
            assert kernel.configs_timings[config] == pytest.approx(expected, rel=1e-12, abs=0)


def test_scale_2d_kernel_keys_on_both_sizes_as_triton() -> None:
    """Two key names: the cache key is their values in key order, then the tensors' dtypes."""
    bench = Bench()
    cfgs = [
        triton.Config({"BLOCK_M": m, "BLOCK_N": 16}, pre_hook=lambda nargs, m=m: setattr(bench, "block", m))
        for m in (16, 32)
    ]
    kernel = compat.autotune(configs=cfgs, key=["N", "M"], do_bench=bench)(scale_2d_kernel)
    x = torch.randn(20, 24)
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(20, meta["BLOCK_M"]), triton.cdiv(24, meta["BLOCK_N"]))](x, out, 20, 24, 24)
    torch.testing.assert_close(out, 2 * x)
    assert list(kernel.cache) == [(24, 20, "torch.float32", "torch.float32")] and kernel.best_config is cfgs[1]


# ------------------------------------------------------------------------------------------------ AUTOTUNE_MODE=online
def test_online_mode_runs_the_chosen_configs_pre_hook_at_each_launch_and_a_warmup_launches_nothing(
    monkeypatch: Any,
) -> None:
    """Online, each call launches one candidate: its config's pre_hook runs before it, with the call's arguments.
    run(warmup=True) of a key being tuned online compiles, it does not run the kernel."""
    monkeypatch.setenv("AUTOTUNE_MODE", "online")
    hooked: list[tuple[int, int]] = []
    cfgs = [
        triton.Config({"BLOCK": b}, pre_hook=lambda nargs: hooked.append((nargs["BLOCK"], nargs["n"])))
        for b in (16, 32, 64)
    ]
    kernel = compat.autotune(configs=cfgs, key=["n"], tuning={"reps": 2, "compile_workers": 0})(add_kernel)
    launches = record_launches(kernel, "BLOCK", "warmup")
    for _ in range(4):
        launch(kernel)
    assert len(launches) == 4 and hooked == [(block, 100) for block, _ in launches]
    x, y, out = tensors()
    kernel.run(x, y, out, 100, grid=grid, warmup=True)
    assert out.abs().sum().item() == 0.0 and launches[-1][1] is True and len(hooked) == 4


def test_a_heuristic_under_the_drop_in_that_sets_a_config_field_warns_and_wins_as_in_triton() -> None:
    """Triton lets a triton.heuristics under its autotuner override a config's value; the drop-in keeps that
    (its users' kernels launch as before) and warns, at the user's line, that the tuning times identical launches."""
    under = triton.heuristics({"BLOCK": lambda args: 64})(add_kernel)
    with pytest.warns(
        UserWarning, match="'BLOCK' of add_kernel is set both by its search space and by a triton.heuristics"
    ) as caught:
        kernel = compat.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])(under)
    assert caught[0].filename == __file__
    x, y, out = tensors()
    kernel[grid](x, y, out, 100)
    torch.testing.assert_close(out, x + y)


@triton.jit
def cast_add_kernel(x, y, out, n, OUT_DT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, (tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask)).to(OUT_DT), mask=mask)


@BOTH
def test_a_key_value_that_is_a_triton_dtype_is_in_cache_as_itself(decorate: Decorate) -> None:
    """Triton's `cache` key holds the call's key values as passed: a tl.dtype constexpr is the dtype object (the
    drop-in had its text, so `(100, tl.float16, ...) in kernel.cache` was False)."""
    bench = Bench()
    kernel = decorate(configs=configs(bench), key=["n", "OUT_DT"], do_bench=bench)(cast_add_kernel)
    x, y, _ = tensors()
    out = torch.empty(100, dtype=torch.float16)
    kernel[grid](x, y, out, 100, OUT_DT=tl.float16)
    torch.testing.assert_close(out, (x + y).half())
    assert list(kernel.cache) == [(100, tl.float16, "torch.float32", "torch.float32", "torch.float16")]
    assert kernel.cache[(100, tl.float16, "torch.float32", "torch.float32", "torch.float16")].kwargs == {"BLOCK": 32}
