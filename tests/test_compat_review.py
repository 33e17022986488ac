"""`autotune.compat` as a review found it: a config's pre_hook given by `early_config_prune` kept on every path
(a memory hit, another spelling of a key, online mode), online mode's `best_config` and its background compiles,
a `perf_model` assigned after decorating with `top_k: None`, and what a launch without a grid is told.

Triton re-prunes every key not in its `cache` and launches `cache[key]` with its pre_hook, so a copy of a listed
config that the prune returned with its own pre_hook runs that hook at every launch; these tests pin the same."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel, record_launches

import autotune
import autotune.compat as compat
from autotune import Tuning
from autotune.errors import AutotuneError
from autotune.kernel.pruning import TopKError

N = 100
BLOCKS = (32, 64, 128)
BLOCKING = Tuning(warmup=0, reps=1, compile_workers=0)
ONLINE = Tuning(mode="online", warmup=0, reps=2, compile_workers=0)


@triton.jit
def acc_kernel(x, acc, n, m=7, BLOCK: tl.constexpr = 32):
    """acc += x: right only when the config's pre_hook zeroed acc first."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(acc + offs, tl.load(acc + offs, mask=mask) + tl.load(x + offs, mask=mask), mask=mask)


def grid(meta: dict[str, Any]) -> tuple[int]:
    return (triton.cdiv(N, meta["BLOCK"]),)


class ZeroingPrune:
    """An early_config_prune returning copies of the listed configs, each with a pre_hook that zeroes `acc` (the
    split-K pattern); counts the hook's calls and its own."""

    def __init__(self) -> None:
        self.hooked = 0
        self.pruned = 0

    def zero_acc(self, nargs: dict[str, Any]) -> None:
        self.hooked += 1
        nargs["acc"].zero_()

    def __call__(self, configs: list[Any], nargs: dict[str, Any], **kwargs: Any) -> list[Any]:
        self.pruned += 1
        return [triton.Config(c.kwargs, num_warps=c.num_warps, pre_hook=self.zero_acc) for c in configs]


def acc_kernel_pruned(prune: ZeroingPrune, tuning: Tuning, key: list[str]) -> Any:
    given = [triton.Config({"BLOCK": b}, num_warps=4) for b in BLOCKS]
    return compat.autotune(configs=given, key=key, prune_configs_by={"early_config_prune": prune}, tuning=tuning)(
        acc_kernel
    )


def accumulate(kernel: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    """One launch on acc = 5 everywhere: acc is x (all ones) when the config's pre_hook ran, 6 when it did not."""
    x, acc = torch.ones(N), torch.full((N,), 5.0)
    kernel[grid](x, acc, N, *args, **kwargs)
    return acc


# ------------------------------------------------------------------------------------------------ pruned pre_hooks
def test_a_key_tuned_under_another_spelling_launches_the_prunes_copy_with_its_pre_hook() -> None:
    """`m` passed (m=7) and left to its default 7 are two `cache` keys and one engine key: the second call is a
    memory hit, where the prune does not run; it launches the prune's copy, hook and all, and files that copy."""
    prune = ZeroingPrune()
    kernel = acc_kernel_pruned(prune, BLOCKING, ["n", "m"])
    torch.testing.assert_close(accumulate(kernel, 7), torch.ones(N))
    hooked = prune.hooked
    torch.testing.assert_close(accumulate(kernel), torch.ones(N))
    assert prune.hooked == hooked + 1
    assert len(kernel.cache) == 2 and all(c.pre_hook == prune.zero_acc for c in kernel.cache.values())
    assert kernel.best_config.pre_hook == prune.zero_acc


def test_a_key_tuned_through_the_native_engine_is_pruned_at_its_first_launch_and_runs_the_copys_pre_hook() -> None:
    """A key tuned outside a compat launch (through `kernel.tuner`, the native engine) is in the engine's memory,
    not in `cache`: its first launch prunes it (as Triton prunes every key not in `cache`) and launches the copy with
    its pre_hook."""
    prune = ZeroingPrune()
    kernel = acc_kernel_pruned(prune, BLOCKING, ["n"])
    kernel.tuner[grid](torch.ones(N), torch.zeros(N), N)
    assert kernel.cache == {} and kernel.cache_info()["entries"] == 1
    pruned = prune.pruned
    torch.testing.assert_close(accumulate(kernel), torch.ones(N))
    assert prune.pruned == pruned + 1 and kernel.best_config.pre_hook == prune.zero_acc
    torch.testing.assert_close(accumulate(kernel), torch.ones(N))  # then a `cache` hit: no prune, the hook runs
    assert prune.pruned == pruned + 1


def test_online_every_launch_runs_the_prunes_copy_and_best_config_is_that_copy() -> None:
    """Online, the prune runs when the key's session starts; each later call launches one candidate as the copy
    the prune returned (its pre_hook zeroes acc), during the session and after it decided."""
    prune = ZeroingPrune()
    kernel = acc_kernel_pruned(prune, ONLINE, ["n"])
    launches = record_launches(kernel, "BLOCK")
    for i in range(12):
        hooked = prune.hooked
        torch.testing.assert_close(accumulate(kernel), torch.ones(N), msg=f"call {i}")
        assert prune.hooked == hooked + 1, f"call {i}"
        assert kernel.best_config.pre_hook == prune.zero_acc
        assert kernel.best_config.kwargs["BLOCK"] == launches[-1][0], f"call {i}"
    assert not kernel.cache_info().get("online")  # decided: the later calls were memory hits
    assert prune.pruned == 1


# ------------------------------------------------------------------------------------------------ online
def test_online_best_config_is_the_candidate_each_call_launched() -> None:
    """As the native kernel: `best_config` after an online call is the config that call ran, not the session's
    first choice."""
    kernel = compat.autotune(configs=[triton.Config({"BLOCK": b}) for b in BLOCKS], key=["n"], tuning=ONLINE)(
        add_kernel
    )
    launches = record_launches(kernel, "BLOCK")
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    seen = set()
    for _ in range(6):
        kernel[grid](x, y, out, N)
        seen.add(launches[-1][0])
        assert kernel.best_config.kwargs["BLOCK"] == launches[-1][0]
    assert len(seen) > 1  # the session launched more than one candidate


class HeldCompiler:
    """A compiler that, as JitCompiler.submit, makes each config's launch arguments (`prepare`) when it compiles;
    its first compile waits until `release` is set, so it runs after the call that started the session returned."""

    def __init__(self, prepare: Any, release: threading.Event, done: threading.Event) -> None:
        self.prepare, self.release, self.done = prepare, release, done

    def session(self, executor: Any) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def submit(self, config: Any, executor: Any) -> Future:
        assert self.release.wait(60)
        self.prepare(config)
        self.done.set()
        future: Future = Future()
        future.set_result(None)
        return future

    def finalize(self, config: Any, result: Any) -> Any:
        return result


def test_online_compiles_after_the_call_returned_run_no_config_pre_hook_on_its_arguments() -> None:
    """An online session compiles its candidates in the background, after the first call returned: its tensors are
    the caller's again, so a config's pre_hook (zeroing `out`) must not run on them there. Each launch runs it."""
    threads: list[str] = []

    def zero_out(nargs: dict[str, Any]) -> None:
        threads.append(threading.current_thread().name)
        nargs["out"].zero_()

    given = [triton.Config({"BLOCK": b}, pre_hook=zero_out) for b in BLOCKS]
    kernel = compat.autotune(configs=given, key=["n"], tuning=ONLINE)(add_kernel)
    release, done = threading.Event(), threading.Event()
    kernel.tuner.compiler_factory = lambda tuned, prepare: HeldCompiler(prepare, release, done)
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    kernel[grid](x, y, out, N)
    release.set()  # the call returned: now the background compiles make their arguments
    assert done.wait(60)
    torch.testing.assert_close(out, x + y)
    assert threads == [threading.main_thread().name]


def test_a_blocking_compile_runs_the_pre_hook_of_the_prunes_copy() -> None:
    """A blocking tuning compiles while its call waits: each compile's arguments get the config's pre_hook, the
    copy's that early_config_prune returned (compiles made on a pool thread too)."""
    from autotune.engine.compilers import FunctionCompiler

    announced: list[tuple[str, int]] = []

    def announce(nargs: dict[str, Any]) -> None:
        announced.append(("copy", nargs["BLOCK"]))

    def prune(configs: list[Any], nargs: dict[str, Any], **kwargs: Any) -> list[Any]:
        return [triton.Config(c.kwargs, num_warps=c.num_warps, pre_hook=announce) for c in configs]

    given = [triton.Config({"BLOCK": b}, num_warps=4) for b in BLOCKS]
    kernel = compat.autotune(
        configs=given, key=["n"], prune_configs_by={"early_config_prune": prune}, tuning={"compile_workers": 1}
    )(add_kernel)
    compiled: list[int] = []

    def compile_fn(prepare: Any, config: Any) -> None:
        before = len(announced)
        prepare(config)
        assert announced[before:] == [("copy", config["BLOCK"])]
        compiled.append(config["BLOCK"])

    kernel.tuner.compiler_factory = lambda tuned, prepare: FunctionCompiler(lambda config: compile_fn(prepare, config))
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    kernel[grid](x, y, out, N)
    torch.testing.assert_close(out, x + y)
    assert sorted(compiled) == sorted(BLOCKS)


# ------------------------------------------------------------------------------------------------ top_k
def test_a_perf_model_assigned_with_top_k_none_is_the_decorations_top_k_error() -> None:
    """`"top_k": None` is accepted beside no perf model (Triton never reads it then); a perf model assigned later
    makes it read: the assignment raises the error decorating with both gives, not a TypeError at the launch."""
    options = {"perf_model": lambda **kw: kw["BLOCK"], "top_k": None}
    with pytest.raises(TopKError, match=r"prune_configs_by\['top_k'\]=None: top_k must be"):
        compat.autotune(configs=[triton.Config({"BLOCK": b}) for b in BLOCKS], key=["n"], prune_configs_by=options)
    kernel = compat.autotune(
        configs=[triton.Config({"BLOCK": b}) for b in BLOCKS],
        key=["n"],
        prune_configs_by={"perf_model": None, "top_k": None},
        tuning=BLOCKING,
    )(add_kernel)
    with pytest.raises(TopKError, match=r"prune_configs_by\['top_k'\]=None: top_k must be"):
        kernel.perf_model = lambda **kw: kw["BLOCK"]
    assert kernel.perf_model is None
    kernel.configs_top_k = 2
    kernel.perf_model = lambda **kw: kw["BLOCK"]
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    kernel[grid](x, y, out, N)
    torch.testing.assert_close(out, x + y)
    assert kernel.best_config.kwargs["BLOCK"] in (32, 64)  # the perf model's two fastest


def test_configs_top_k_set_after_the_perf_model_is_checked_when_the_prune_reads_it() -> None:
    kernel = compat.autotune(
        configs=[triton.Config({"BLOCK": b}) for b in BLOCKS],
        key=["n"],
        prune_configs_by={"perf_model": lambda **kw: kw["BLOCK"], "top_k": 2},
        tuning=BLOCKING,
    )(add_kernel)
    kernel.configs_top_k = None
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    with pytest.raises(TopKError, match=r"configs_top_k=None: top_k must be"):
        kernel[grid](x, y, out, N)


# ------------------------------------------------------------------------------------------------ messages
def test_a_launch_without_a_grid_is_told_to_give_one_as_triton_takes_it() -> None:
    """autotune.compat.autotune has no grid= (Triton's has none): the error names kernel[grid](...) only."""
    kernel = compat.autotune(configs=[triton.Config({"BLOCK": b}) for b in BLOCKS], key=["n"], tuning=BLOCKING)(
        add_kernel
    )
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    with pytest.raises(AutotuneError) as caught:
        kernel.run(x, y, out, N)
    assert str(caught.value) == "add_kernel needs a grid: launch add_kernel[grid](...)"
    native = autotune.autotune(space={"BLOCK": list(BLOCKS)}, key=["n"], tuning=BLOCKING)(add_kernel)
    with pytest.raises(AutotuneError) as caught:
        native.run(x, y, out, N, grid=None, warmup=False)
    assert str(caught.value) == "add_kernel needs a grid: give @autotune(grid=...) or launch add_kernel[grid](...)"


def test_configs_timings_of_a_record_stored_without_a_loser_s_samples_read_its_median():
    """A record over the entry size limit is stored without the losers' samples (their medians stay): compat's
    `configs_timings` read from it gives each loser's median, not inf as for a failed config."""
    from autotune.compat.timing import timings_of
    from autotune.record import Trial, TrialStatus
    from autotune.space import Config

    winner, loser = Config(BLOCK=64), Config(BLOCK=128)
    trials = [
        Trial(config=winner, status=TrialStatus.OK, median_ms=1.0, min_ms=0.9, samples_ms=[0.9, 1.0, 1.1]),
        Trial(config=loser, status=TrialStatus.OK, median_ms=2.0, min_ms=1.8, samples_ms=[]),
    ]
    record = type("R", (), {"trials": trials})()
    timings = timings_of(record, {winner: "w", loser: "l"}, {})
    assert timings["w"][0] == 1.0 and timings["l"] == [2.0, 2.0, 2.0]
