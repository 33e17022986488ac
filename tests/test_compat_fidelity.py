"""`autotune.compat` against the real `triton.autotune`, side by side on the same kernel and calls: what a user
observes after changing the one import (exceptions of their own hooks, warmup calls, the `cache` dict, attributes
assigned after decoration, early mistakes). Triton's default benchmarker needs a GPU, so both get the same
`do_bench`, which runs each config and reports a fixed time per BLOCK."""

from __future__ import annotations

import warnings

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel

import autotune.compat as compat
import autotune.compat.options as compat_options
from autotune.errors import OptionError, SpaceError

TIMES = {16: 3.0, 32: 1.0, 64: 2.0}  # ms per BLOCK: 32 wins


@triton.jit
def add_at_least_32(x, y, out, n, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK >= 32, "BLOCK 16 cannot run")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


class Bench:
    """A do_bench(kernel_call, quantiles) that runs the config twice and reports TIMES for the BLOCK its
    config's pre_hook announced; counts its calls."""

    def __init__(self) -> None:
        self.block = None
        self.calls = 0

    def hook(self, nargs):
        self.block = nargs["BLOCK"]

    def __call__(self, kernel_call, quantiles):
        kernel_call()
        kernel_call()
        self.calls += 1
        t = TIMES[self.block]
        return [t, 0.9 * t, 1.1 * t]


def configs(bench, blocks=(16, 32, 64)):
    return [triton.Config({"BLOCK": b}, num_warps=4, pre_hook=bench.hook) for b in blocks]


def tensors(n=100):
    return torch.arange(n, dtype=torch.float32), torch.ones(n), torch.zeros(n)


BOTH = pytest.mark.parametrize("decorate", [triton.autotune, compat.autotune], ids=["triton", "compat"])


# ------------------------------------------------------------------------------------------------ user code raising
@BOTH
def test_an_exception_of_the_users_post_hook_is_raised_as_itself_not_taken_for_a_failing_config(decorate):
    """A post_hook bug on the fastest config used to make the drop-in silently pick a slower one."""
    bench = Bench()

    def post_hook(nargs, exception):
        if nargs["BLOCK"] == 32:
            raise KeyError("bug in post_hook")

    kernel = decorate(configs=configs(bench), key=["n"], do_bench=bench, post_hook=post_hook)(add_kernel)
    with pytest.raises(KeyError, match="bug in post_hook") as caught:
        kernel[grid](*tensors(), 100)
    assert type(caught.value) is KeyError


@BOTH
@pytest.mark.parametrize("culprit", ["config pre_hook", "pre_hook", "do_bench"])
def test_an_exception_of_a_pre_hook_or_do_bench_is_raised_as_itself(decorate, culprit):
    bench = Bench()

    def bad_hook(*args, **kwargs):
        raise RuntimeError(f"bug in {culprit}")

    def bad_bench(kernel_call, quantiles):
        bench.block = 32
        kernel_call()
        raise RuntimeError(f"bug in {culprit}")

    options = {
        "do_bench": bad_bench if culprit == "do_bench" else bench,
        "pre_hook": bad_hook if culprit == "pre_hook" else None,
    }
    cfgs = configs(bench)
    if culprit == "config pre_hook":
        cfgs[0] = triton.Config({"BLOCK": 16}, num_warps=4, pre_hook=bad_hook)
    kernel = decorate(configs=cfgs, key=["n"], **options)(add_kernel)
    with pytest.raises(RuntimeError, match=f"bug in {culprit}") as caught:
        kernel[grid](*tensors(), 100)
    assert type(caught.value) is RuntimeError  # not a NoValidConfigError (a RuntimeError too) about configs


def test_a_do_bench_that_returns_no_time_is_the_users_mistake_and_names_do_bench():
    kernel = compat.autotune(configs=configs(Bench()), key=["n"], do_bench=lambda kernel_call, quantiles: "fast")(
        add_kernel
    )
    with pytest.raises(Exception, match="do_bench of add_kernel returned 'fast'"):
        kernel[grid](*tensors(), 100)


def test_a_kernel_that_fails_inside_do_bench_is_still_that_configs_failure():
    """The drop-in's documented difference stays: a config whose run raises is recorded and skipped."""
    bench = Bench()
    cfgs = configs(bench)
    kernel = compat.autotune(configs=cfgs, key=["n"], do_bench=bench)(add_at_least_32)
    x, y, out = tensors()
    kernel[grid](x, y, out, 100)
    assert kernel.best_config is cfgs[1] and kernel.configs_timings[cfgs[0]] == [float("inf")] * 3
    torch.testing.assert_close(out, x + y)


# ------------------------------------------------------------------------------------------------ warmup
@BOTH
def test_a_warmup_through_triton_heuristics_launches_nothing_with_tensors_or_with_dtypes(decorate):
    bench = Bench()
    kernel = triton.heuristics({"UNUSED": lambda args: 0})(
        decorate(configs=configs(bench), key=["n"], do_bench=bench)(add_kernel)
    )
    x, y, out = tensors()
    kernel.warmup(x, y, out, 100, grid=grid)
    kernel.warmup(torch.float32, torch.float32, torch.float32, 100, grid=grid)
    assert out.abs().sum().item() == 0.0  # nothing was launched into the caller's tensor


def test_a_warmup_of_a_tuned_key_compiles_the_winner_only_and_tunes_nothing_new():
    bench = Bench()
    kernel = compat.autotune(configs=configs(bench), key=["n"], do_bench=bench)(add_kernel)
    x, y, out = tensors()
    kernel[grid](x, y, out, 100)
    calls = bench.calls
    out.zero_()
    kernel.run(x, y, out, 100, grid=grid, warmup=True)
    assert bench.calls == calls and out.abs().sum().item() == 0.0
    assert kernel.best_config.kwargs == {"BLOCK": 32}


def test_a_warmup_of_a_new_key_prunes_once_with_the_calls_arguments_and_compiles_what_pruning_kept():
    """run(warmup=True) on an untuned key: early_config_prune sees this call's kwargs, is called once (not once to
    name the stored entry and again to pick what to compile), and only the configs it kept are compiled."""
    bench, seen = Bench(), []
    cfgs = configs(bench)

    def prune(configs, nargs, **kwargs):
        seen.append((sorted(nargs), kwargs))
        return configs[1:]

    kernel = compat.autotune(configs=cfgs, key=["n"], do_bench=bench, prune_configs_by={"early_config_prune": prune})(
        add_at_least_32
    )
    x, y, out = tensors()
    kernel.run(x, y, out, n=100, grid=grid, warmup=True)  # BLOCK 16 (static_assert) would fail to compile
    assert seen == [(["out", "x", "y"], {"n": 100})] and bench.calls == 0 and out.abs().sum().item() == 0.0


# ------------------------------------------------------------------------------------------------ the cache dict
@BOTH
def test_clearing_the_cache_dict_of_a_memory_only_kernel_tunes_again(decorate):
    bench = Bench()
    kernel = decorate(configs=configs(bench), key=["n"], do_bench=bench, cache_results=False)(add_kernel)
    kernel[grid](*tensors(), 100)
    assert bench.calls == 3
    kernel.cache.clear()
    kernel[grid](*tensors(), 100)
    assert bench.calls == 6


def test_clearing_the_cache_dict_of_a_disk_cached_kernel_reads_the_disk_entry_back_without_tuning():
    bench = Bench()
    kernel = compat.autotune(configs=configs(bench), key=["n"], do_bench=bench)(add_kernel)
    kernel[grid](*tensors(), 100)
    kernel.cache.clear()
    kernel[grid](*tensors(), 100)
    assert bench.calls == 3 and kernel.best_config.kwargs == {"BLOCK": 32} and len(kernel.cache) == 1


@BOTH
def test_a_config_pinned_in_the_cache_dict_is_launched_without_tuning(decorate):
    bench = Bench()
    cfgs = configs(bench)
    kernel = decorate(configs=cfgs, key=["n"], do_bench=bench)(add_kernel)
    x, y, out = tensors()
    kernel.cache[(100, "torch.float32", "torch.float32", "torch.float32")] = cfgs[2]
    kernel[grid](x, y, out, 100)
    assert bench.calls == 0 and kernel.best_config is cfgs[2]
    torch.testing.assert_close(out, x + y)


# ------------------------------------------------------------------------------------------------ attributes
@BOTH
def test_configs_assigned_after_decoration_are_the_ones_launched(decorate):
    bench = Bench()
    kernel = decorate(configs=configs(bench), key=["n"], do_bench=bench)(add_kernel)
    kernel.configs = [triton.Config({"BLOCK": 64}, num_warps=4)]
    x, y, out = tensors()
    kernel[grid](x, y, out, 100)
    assert bench.calls == 0 and kernel.best_config.kwargs == {"BLOCK": 64}
    torch.testing.assert_close(out, x + y)


@BOTH
def test_an_early_config_prune_assigned_after_decoration_prunes(decorate):
    bench = Bench()
    kernel = decorate(configs=configs(bench), key=["n"], do_bench=bench)(add_kernel)
    kernel.early_config_prune = lambda cfgs, nargs, **kwargs: [cfgs[0], cfgs[2]]  # without 32, the fastest
    kernel[grid](*tensors(), 100)
    assert bench.calls == 2 and kernel.best_config.kwargs == {"BLOCK": 64}


@BOTH
def test_a_pre_hook_on_a_config_that_early_config_prune_returns_runs_in_trials_and_at_launch(decorate):
    bench = Bench()
    seen = []

    def prune(cfgs, nargs, **kwargs):
        def hooked(nargs, c=None):
            bench.hook(nargs)
            seen.append(nargs["BLOCK"])

        return [triton.Config(c.kwargs, num_warps=c.num_warps, pre_hook=hooked) for c in cfgs]

    kernel = decorate(
        configs=configs(bench), key=["n"], do_bench=bench, prune_configs_by={"early_config_prune": prune}
    )(add_kernel)
    kernel[grid](*tensors(), 100)
    assert set(seen) == {16, 32, 64} and kernel.best_config.pre_hook is not None
    seen.clear()
    kernel[grid](*tensors(), 100)  # a hit launches the config the prune returned
    assert seen == [32]


# ------------------------------------------------------------------------------------------------ early mistakes
@pytest.mark.parametrize(
    "options, message",
    [
        ({"do_bench": 5}, "do_bench of add_kernel must be a callable"),
        ({"pre_hook": 3}, "pre_hook of add_kernel must be a callable"),
        ({"post_hook": "x"}, "post_hook of add_kernel must be a callable"),
        ({"prune_configs_by": {"perf_model": 1}}, r"prune_configs_by\['perf_model'\] of add_kernel must be a callable"),
        (
            {"prune_configs_by": {"early_config_prunes": len}},
            "no option 'early_config_prunes'.*Did you mean 'early_config_prune'",
        ),
    ],
)
def test_a_mistake_in_the_decorators_arguments_fails_at_decoration(options, message):
    with pytest.raises(OptionError, match=message):
        compat.autotune(configs=configs(Bench()), key=["n"], **options)(add_kernel)


def test_a_config_pre_hook_that_is_not_callable_blames_the_config_at_decoration():
    with pytest.raises(SpaceError, match=r"configs\[1\].*pre_hook that is not callable"):
        compat.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32}, pre_hook=7)], key=["n"])(
            add_kernel
        )


def test_a_set_autotuning_listener_is_said_to_be_unsupported_once_at_the_users_line(monkeypatch):
    from triton import knobs

    if not hasattr(knobs.autotuning, "listener"):
        pytest.skip("this Triton has no knobs.autotuning.listener")
    compat_options.listener_warned.clear()
    monkeypatch.setattr(knobs.autotuning, "listener", lambda **kwargs: None)
    bench = Bench()
    kernel = compat.autotune(configs=configs(bench), key=["n"], do_bench=bench)(add_kernel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel[grid](*tensors(), 100)
        kernel[grid](*tensors(200), 200)
    said = [w for w in caught if "listener" in str(w.message)]
    assert len(said) == 1 and said[0].filename == __file__


def test_a_dtype_config_value_is_refused_at_decoration_with_the_way_around_it():
    """A documented difference: winners are cached as JSON, which holds no tl.dtype."""
    with pytest.raises(SpaceError, match=r"configs\[0\] sets OUT_T=fp32, a Triton dtype.*Tune a flag"):
        compat.autotune(configs=[triton.Config({"BLOCK": 16, "OUT_T": tl.float32})], key=["n"])(add_kernel)
