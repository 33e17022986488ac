"""`autotune.compat` against Triton 3.9's Autotuner, as review 33 found it: a launch option the configs leave None
is the caller's, a do_bench's inf ranks last (all inf: the first config, no error), a non-finite key argument is
refused with advice that works in the drop-in, `configs_timings` is keyed by early_config_prune's copies, and a
reset_to_zero= argument that is not a tensor is told what reset_to_zero does."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

import autotune.compat as compat
from autotune.errors import CallError, KeyValueError, OptionError

N = 100
BLOCKS = (16, 32, 64)


@triton.jit
def add_one(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 1, mask=mask)


@triton.jit
def clamp_kernel(x, out, n, hi, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.minimum(tl.load(x + offs, mask=mask), hi), mask=mask)


def grid(meta: dict[str, Any]) -> tuple[int]:
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


class BlockBench:
    """A do_bench giving each config the time `times[BLOCK]` (inf: the config cannot run, as Triton's _bench
    reports it); the running config's BLOCK comes from its pre_hook (`hook`)."""

    def __init__(self, times: dict[int, float]) -> None:
        self.times, self.block = times, 0

    def hook(self, nargs: dict[str, Any]) -> None:
        self.block = nargs["BLOCK"]

    def __call__(self, kernel_call: Any, quantiles: Any) -> list[float]:
        kernel_call()
        return [self.times[self.block]] * 3


def flat_bench(kernel_call: Any, quantiles: Any) -> list[float]:
    kernel_call()
    return [1.0, 0.9, 1.1]


def launch_add(kernel: Any, **kwargs: Any) -> torch.Tensor:
    x, out = torch.ones(N), torch.zeros(N)
    kernel[grid](x, out, N, **kwargs)
    assert torch.equal(out, x + 1)
    return out


# ------------------------------------------------------------------------------------------------ num_warps=None
@pytest.mark.parametrize("option", ["num_warps", "num_stages"])
def test_an_option_every_config_leaves_none_is_the_callers_and_reaches_every_launch(
    option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton leaves a None option out of all_kwargs(), so the caller's value is launched (and hooks see it)."""
    seen: list[Any] = []
    configs = [triton.Config({"BLOCK": b}, **{option: None}) for b in BLOCKS]
    kernel = compat.autotune(
        configs=configs,
        key=["n"],
        do_bench=flat_bench,
        pre_hook=lambda nargs, reset_only=False: seen.append(nargs.get(option)),
    )(add_one)
    launched: list[Any] = []
    real = kernel.fn.run

    def recording(*args: Any, **kwargs: Any) -> Any:
        launched.append(kwargs.get(option))
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel.fn, "run", recording)
    launch_add(kernel, **{option: 2})
    launch_add(kernel, **{option: 2})  # a memory hit
    assert launched and set(launched) == {2}
    assert seen and set(seen) == {2}


def test_an_option_one_config_sets_is_refused_at_the_launch_naming_it() -> None:
    configs = [triton.Config({"BLOCK": 16}, num_warps=None), triton.Config({"BLOCK": 32}, num_warps=4)]
    kernel = compat.autotune(configs=configs, key=["n"], do_bench=flat_bench)(add_one)
    with pytest.raises(CallError, match="a triton.Config sets it") as info:
        launch_add(kernel, num_warps=2)
    assert "num_warps" in str(info.value)


# ------------------------------------------------------------------------------------------------ do_bench's inf
def inf_kernel(times: dict[int, float]) -> Any:
    bench = BlockBench(times)
    configs = [triton.Config({"BLOCK": b}, pre_hook=bench.hook) for b in BLOCKS]
    return compat.autotune(configs=configs, key=["n"], do_bench=bench)(add_one)


def test_a_do_bench_inf_ranks_last_and_shows_as_inf_in_configs_timings() -> None:
    kernel = inf_kernel({16: math.inf, 32: 2.0, 64: 1.0})
    launch_add(kernel)
    assert kernel.best_config.kwargs == {"BLOCK": 64}
    timings = {c.kwargs["BLOCK"]: t for c, t in kernel.configs_timings.items()}
    assert timings == {16: [math.inf] * 3, 32: [2.0] * 3, 64: [1.0] * 3}


def test_every_config_inf_launches_the_first_as_triton_does_and_a_new_process_reads_inf_back() -> None:
    """Triton ranks inf last and, with every config inf, launches the first; the entry on disk reads back as inf
    in configs_timings, not as the finite stand-in the engine ranks."""
    kernel = inf_kernel({16: math.inf, 32: math.inf, 64: math.inf})
    launch_add(kernel)
    assert kernel.best_config.kwargs == {"BLOCK": 16}
    assert list(kernel.configs_timings.values()) == [[math.inf] * 3] * 3

    again = inf_kernel({16: 3.0, 32: 2.0, 64: 1.0})  # another kernel object: loads the entry, tunes nothing
    launch_add(again)
    assert again.best_config.kwargs == {"BLOCK": 16}
    assert all(t[0] == math.inf for t in again.configs_timings.values())


def test_a_config_that_cannot_run_shows_as_inf_in_the_log_line(capsys, monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_PRINT", "1")
    launch_add(inf_kernel({16: math.inf, 32: math.inf, 64: math.inf}))
    line = capsys.readouterr().err
    assert "-> Config(BLOCK=16" in line and " inf ms" in line and "e+30" not in line and "100000000" not in line


# ------------------------------------------------------------------------------------------------ non-finite keys
@pytest.mark.parametrize("hi", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("cache_results", [True, False])
def test_a_non_finite_key_argument_is_refused_with_advice_for_the_drop_in(hi: float, cache_results: bool) -> None:
    configs = [triton.Config({"BLOCK": b}) for b in BLOCKS]
    kernel = compat.autotune(configs=configs, key=["n", "hi"], do_bench=flat_bench, cache_results=cache_results)(
        clamp_kernel
    )
    x, out = torch.arange(float(N)), torch.zeros(N)
    with pytest.raises(KeyValueError) as info:
        kernel[grid](x, out, N, hi)
    message = str(info.value)
    assert "bucket/clean" not in message
    assert "'hi' out of key=" in message and "autotune.autotune" in message
    kernel[grid](x, out, N, 3.0)  # a finite value tunes as before
    assert torch.equal(out, x.clamp(max=3.0))


# ------------------------------------------------------------------------------------------------ pruned copies
def test_configs_timings_is_keyed_by_the_copies_early_config_prune_returned() -> None:
    bench = BlockBench({16: 3.0, 32: 1.0, 64: 2.0})

    def prune(configs: list[Any], nargs: dict[str, Any], **kwargs: Any) -> list[Any]:
        return [triton.Config(c.kwargs, num_warps=c.num_warps, pre_hook=bench.hook) for c in configs]

    configs = [triton.Config({"BLOCK": b}) for b in BLOCKS]
    kernel = compat.autotune(
        configs=configs, key=["n"], do_bench=bench, prune_configs_by={"early_config_prune": prune}
    )(add_one)
    launch_add(kernel)
    assert kernel.best_config.kwargs == {"BLOCK": 32} and kernel.best_config.pre_hook == bench.hook
    assert kernel.configs_timings[kernel.best_config] == [1.0] * 3
    assert all(c.pre_hook == bench.hook for c in kernel.configs_timings)


# ------------------------------------------------------------------------------------------------ guard messages
@pytest.mark.parametrize(
    ("option", "told"),
    [("reset_to_zero", "zeroed before each trial"), ("restore_value", "snapshotted and restored around each trial")],
)
def test_a_guarded_int_is_told_what_its_list_does(option: str, told: str) -> None:
    configs = [triton.Config({"BLOCK": b}) for b in BLOCKS]
    kernel = compat.autotune(configs=configs, key=["n"], do_bench=flat_bench, **{option: ["n"]})(add_one)
    with pytest.raises(OptionError) as info:
        launch_add(kernel)
    assert told in str(info.value) and f"drop 'n' from {option}=" in str(info.value)
