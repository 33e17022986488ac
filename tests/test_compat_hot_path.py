"""`autotune.compat`'s launch path where the hand mutation testing of the hot path (the `cache` hit launched from
what the module filed) and of the re-indexing of configs found no test: `cache`'s key of a call that leaves the
last key name to its default, a one-config list grown in place, a list shortened in place, the copy a prune
returned filed in `cache`, and a call whose engine another thread replaced while it tuned. Side by side with the
real `triton.autotune` where Triton defines the behaviour; real threads (ordered with Events) where it is ours."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel
from side_by_side import both

from autotune.compat import autotune
from autotune.engine.measuring import measuring_suspended

FAST = dict(preset="fast", reps=2, warmup=0, compile_workers=0)
WAIT_S = 30.0  # an Event not set by then is a deadlock: the test fails instead of hanging
F32 = "torch.float32"


@triton.jit
def add_scaled(x, y, out, n, SCALE: tl.constexpr = 1, BLOCK: tl.constexpr = 16):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * SCALE + tl.load(y + offs, mask=mask), mask=mask)


def fixed_bench(kernel_call, quantiles):
    """Triton's do_bench signature: runs the config once and reports the same time for every config (the first
    config wins), so that neither decorator needs a GPU timer."""
    kernel_call()
    return [1.0] * len(quantiles)


def vectors(n: int) -> tuple:
    return torch.arange(n, dtype=torch.float32), torch.ones(n), torch.zeros(n)


def grid_of(n: int) -> Callable[[dict], tuple]:
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


# ------------------------------------------------------------------------------------------------ keys
def _key_names_left_to_defaults(decorate: Any) -> dict:
    kernel = decorate(
        configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n", "SCALE"], do_bench=fixed_bench
    )(add_scaled)
    x, y, out = vectors(40)
    kernel[grid_of(40)](x, y, out, 40)  # every argument up to SCALE by position, SCALE left to its default
    right = [bool(torch.equal(out, x + y))]
    kernel[grid_of(40)](x, y, out, 40, 3)  # SCALE passed: another key
    right.append(bool(torch.equal(out, 3 * x + y)))
    kernel[grid_of(40)](x, y, out, n=40)  # n by keyword, SCALE left out: the first key again
    return {"cache": list(kernel.cache), "right": right}


def test_a_call_passing_every_argument_before_the_last_key_name_leaves_it_out_of_the_cache_key():
    """As Triton: `cache`'s key holds the key names the call passes, so a call whose positional arguments stop just
    before the last key name (left to its default) is filed without it, apart from a call that passes it."""
    seen = both(_key_names_left_to_defaults)
    assert seen == {"cache": [(40, F32, F32, F32), (40, 3, F32, F32, F32)], "right": [True, True]}


# ------------------------------------------------------------------------------------------------ one config
def _one_config_list_grown_in_place(decorate: Any) -> dict:
    configs = [triton.Config({"BLOCK": 16})]
    kernel = decorate(configs=configs, key=["n"], do_bench=fixed_bench)(add_kernel)
    x, y, out = vectors(40)
    kernel[grid_of(40)](x, y, out, 40)  # one config: launched as it is, no key
    seen: dict = {"one": list(kernel.cache)}
    configs.append(triton.Config({"BLOCK": 32}))  # Triton reads the list at each call: now there are two
    out.zero_()
    kernel[grid_of(40)](x, y, out, 40)
    seen.update(
        two=list(kernel.cache),
        timed=sorted(c.kwargs["BLOCK"] for c in kernel.configs_timings),
        right=bool(torch.equal(out, x + y)),
    )
    return seen


def test_a_config_appended_to_a_one_config_list_is_tuned_at_the_next_call():
    """A kernel of one config launches it without a key; a config appended to its list in place makes the next call
    tune both and file the key, as Triton (which reads `len(self.configs)` at each call) does."""
    seen = both(_one_config_list_grown_in_place)
    assert seen == {"one": [], "two": [(40, F32, F32, F32)], "timed": [16, 32], "right": True}


# ------------------------------------------------------------------------------------------------ threads
def test_a_call_whose_engine_was_replaced_while_it_tuned_leaves_the_newer_entry_in_cache():
    """A is tuning key 96 when B assigns new configs (a new engine) and launches key 96 on it, filing its winner in
    `cache`. A then finishes on the engine it started on and launches its own winner, but leaves B's entry in
    `cache`: the next call at that key launches the new configs' winner, from the engine B built, without tuning."""
    a_tuning, b_done = threading.Event(), threading.Event()

    def pre_hook(nargs, reset_only=False):
        if threading.current_thread().name == "a" and not a_tuning.is_set():
            a_tuning.set()
            with measuring_suspended():  # inside A's measurement: B's tuning measures while A waits for it
                assert b_done.wait(WAIT_S), "B never finished"

    old = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
    new = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]
    kernel = autotune(configs=old, key=["n"], pre_hook=pre_hook, tuning=FAST, cache_results=False)(add_kernel)
    results: dict = {}

    def call(name: str, n: int) -> None:
        x, y, out = vectors(n)
        kernel[grid_of(n)](x, y, out, n)
        results[name] = bool(torch.equal(out, x + y))

    def a() -> None:
        call("a", 96)

    def b() -> None:
        try:
            assert a_tuning.wait(WAIT_S), "A never started tuning"
            kernel.configs = new
            call("b", 96)
        finally:
            b_done.set()

    threads = [threading.Thread(target=a, name="a"), threading.Thread(target=b, name="b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * WAIT_S)
    assert not any(thread.is_alive() for thread in threads), "a thread is stuck"
    assert results == {"a": True, "b": True}
    engine = kernel.tuner
    assert list(kernel.cache) == [(96, F32, F32, F32)]
    assert any(kernel.cache[(96, F32, F32, F32)] is config for config in new)  # B's, not A's older one
    tunings = engine.cache_info()["tunings"]
    call("c", 96)
    assert results["c"] and kernel.tuner is engine and engine.cache_info()["tunings"] == tunings
    assert any(kernel.best_config is config for config in new)


# ------------------------------------------------------------------------------------------------ configs in place
def _list_shortened_in_place(decorate: Any) -> dict:
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    kernel = decorate(configs=configs, key=["n"], do_bench=fixed_bench)(add_kernel)
    x, y, out = vectors(40)
    kernel[grid_of(40)](x, y, out, 40)
    configs.pop()  # Triton reads the list at each tuning: BLOCK=64 is gone
    x, y, out = vectors(50)
    kernel[grid_of(50)](x, y, out, 50)
    return {"timed": sorted(c.kwargs["BLOCK"] for c in kernel.configs_timings), "keys": len(kernel.cache)}


def test_a_config_removed_from_the_end_of_the_list_is_not_tuned_at_the_next_key():
    assert both(_list_shortened_in_place) == {"timed": [16, 32], "keys": 2}


def _prune_returning_copies(decorate: Any) -> dict:
    import copy

    configs = [triton.Config({"BLOCK": b}) for b in (16, 32)]
    returned: list = []

    def prune(configs, named_args, **kwargs):
        returned[:] = [copy.copy(c) for c in configs]
        return returned

    kernel = decorate(configs=configs, key=["n"], do_bench=fixed_bench, prune_configs_by={"early_config_prune": prune})(
        add_kernel
    )
    x, y, out = vectors(40)
    kernel[grid_of(40)](x, y, out, 40)
    filed = kernel.cache[(40, F32, F32, F32)]
    return {
        "filed_is_a_copy": any(filed is c for c in returned),
        "filed_is_listed": any(filed is c for c in configs),
        "right": bool(torch.equal(out, x + y)),
    }


def test_cache_holds_the_copy_early_config_prune_returned_not_the_listed_config_equal_to_it():
    """As Triton: the winner filed in `cache` is the triton.Config the prune returned (an equal copy), not the item of
    `configs` it equals."""
    assert both(_prune_returning_copies) == {"filed_is_a_copy": True, "filed_is_listed": False, "right": True}
