"""`autotune.compat`'s memo of keys on the cache-hit path (`_Engine.keys_of_shape`): a call shaped as one that hit
before (same positional count, keyword names, key values, dtypes: `compat_options.shape_key`) skips binding and
key building. The memo holds only keys, never a winner: every launch still checks `cache`, what the module filed
and the engine's memory, so each way a winner goes stale today still works with the memo filled. Real @triton.jit
kernels through the interpreter; side by side with the real `triton.autotune` where Triton defines the behaviour."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel
from side_by_side import both

from autotune import clear_autotune_cache
from autotune.compat import autotune

FAST = dict(preset="fast", reps=2, warmup=0, compile_workers=0)
F16, F32 = "torch.float16", "torch.float32"


@triton.jit
def add_scaled(x, y, out, n, SCALE: tl.constexpr = 1, BLOCK: tl.constexpr = 16):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * SCALE + tl.load(y + offs, mask=mask), mask=mask)


def counting_bench(counts: list) -> Callable[..., list]:
    """Triton's do_bench signature: runs the config once, notes it, reports the same time for every config."""

    def bench(kernel_call, quantiles):
        counts.append(1)
        kernel_call()
        return [1.0] * len(quantiles)

    return bench


def vectors(n: int, dtype: torch.dtype = torch.float32) -> tuple:
    return torch.arange(n, dtype=dtype), torch.ones(n), torch.zeros(n)


def grid_of(n: int) -> Callable[[dict], tuple]:
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def configs() -> list:
    return [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]


def launch(kernel: Any, n: int, dtype: torch.dtype = torch.float32) -> bool:
    x, y, out = vectors(n, dtype)
    kernel[grid_of(n)](x, y, out, n)
    return bool(torch.equal(out, x.float() + y))


def memoised_kernel(**options: Any) -> Any:
    """add_kernel over two configs, tuned at n=40 and hit once, so that the memo holds n=40's keys."""
    kernel = autotune(configs=configs(), key=["n"], tuning=FAST, **options)(add_kernel)
    assert launch(kernel, 40) and launch(kernel, 40)
    assert len(kernel.tuner.keys_of_shape) == 1
    return kernel


# ------------------------------------------------------------------------------------------------ counters
def test_each_memoised_hit_is_counted_and_is_the_last_key_of_record():
    kernel = memoised_kernel(cache_results=False)
    engine = kernel.tuner
    before = kernel.cache_info()
    assert launch(kernel, 64)  # a new key: tuned, then memoised at its first hit
    assert launch(kernel, 64) and launch(kernel, 40) and launch(kernel, 40)
    info = kernel.cache_info()
    assert info["tunings"] - before["tunings"] == 1
    assert info["hits"] - before["hits"] == 3
    assert len(engine.keys_of_shape) == 2
    assert kernel.record().key == [40] and kernel.record().dtypes == [F32, F32, F32]
    assert launch(kernel, 64)
    assert kernel.record().key == [64]
    assert kernel.best_config is kernel.cache[(64, F32, F32, F32)]


# ------------------------------------------------------------------------------------------------ invalidation
def test_clear_autotune_cache_retunes_a_memoised_key():
    kernel = memoised_kernel(cache_results=False)
    tunings = kernel.cache_info()["tunings"]
    clear_autotune_cache(kernel)
    assert kernel.cache == {}  # forget_cleared dropped what this module filed
    assert launch(kernel, 40)
    assert kernel.cache_info()["tunings"] == tunings + 1
    assert list(kernel.cache) == [(40, F32, F32, F32)]
    assert launch(kernel, 40) and kernel.cache_info()["tunings"] == tunings + 1


def test_a_memoised_key_deleted_from_cache_is_looked_up_again():
    kernel = memoised_kernel(cache_results=False)
    tunings = kernel.cache_info()["tunings"]
    del kernel.cache[(40, F32, F32, F32)]
    assert launch(kernel, 40)
    assert kernel.cache_info()["tunings"] == tunings + 1  # memory only: looked up again means tuned again
    assert (40, F32, F32, F32) in kernel.cache


def test_an_entry_the_user_puts_in_cache_over_a_memoised_key_is_launched():
    kernel = memoised_kernel(cache_results=False)
    mine = triton.Config({"BLOCK": 64})
    kernel.cache[(40, F32, F32, F32)] = mine
    hits = kernel.cache_info()["hits"]
    assert launch(kernel, 40)
    assert kernel.best_config is mine and kernel.cache_info()["hits"] == hits  # the user's entry, not a hit


def test_new_configs_leave_the_old_memo_behind():
    kernel = memoised_kernel(cache_results=False)
    kernel.configs = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]
    assert kernel.tuner.keys_of_shape == {}
    del kernel.cache[(40, F32, F32, F32)]  # else the old winner stays as the user's own entry, as in Triton
    assert launch(kernel, 40) and launch(kernel, 40) and launch(kernel, 40)
    assert kernel.best_config.kwargs["BLOCK"] in (64, 128)
    assert len(kernel.tuner.keys_of_shape) == 1


def test_force_still_tunes_a_key_once_per_process_with_the_memo():
    kernel = autotune(configs=configs(), key=["n"], tuning=dict(FAST, force=True), cache_results=False)(add_kernel)
    for _ in range(4):
        assert launch(kernel, 40)
    assert kernel.cache_info()["tunings"] == 1 and kernel.cache_info()["hits"] == 3


def test_a_memoised_hit_passes_the_calls_own_keywords_to_the_launch():
    kernel = autotune(configs=configs(), key=["n"], tuning=FAST, cache_results=False)(add_scaled)
    x, y, out = vectors(40)
    for scale in (1, 3, 3, 2, 3):  # SCALE by keyword: not a key name, so one key for all
        out.zero_()
        kernel[grid_of(40)](x, y, out, 40, SCALE=scale)
        assert torch.equal(out, scale * x + y)
    assert kernel.cache_info()["tunings"] == 1 and list(kernel.cache) == [(40, F32, F32, F32)]


# ------------------------------------------------------------------------------------------------ shapes
def test_calls_with_other_dtypes_or_another_spelling_keep_their_own_keys():
    kernel = memoised_kernel(cache_results=False)
    assert launch(kernel, 40, torch.float16) and launch(kernel, 40, torch.float16)  # x in float16: another key
    assert kernel.cache_info()["tunings"] == 2
    x, y, out = vectors(40, torch.float16)
    for _ in range(2):  # out and n by keyword: the float16 key, spelt otherwise
        out.zero_()
        kernel[grid_of(40)](x, y, out=out, n=40)
        assert torch.equal(out, x.float() + y)
    assert kernel.cache_info()["tunings"] == 2
    assert sorted(kernel.cache) == [(40, F16, F32, F32), (40, F32, F32, F32)]
    assert len(kernel.tuner.keys_of_shape) == 3


def _equal_key_values_of_other_types(decorate: Any) -> dict:
    counts: list = []
    kernel = decorate(configs=configs(), key=["n", "SCALE"], do_bench=counting_bench(counts))(add_scaled)
    x, y, out = vectors(40)
    right = []
    for n, scale in ((40, 1), (40, 1), (40, True), (40, 1), (40, 1.0), (40, 2), (40, 2)):
        out.zero_()
        kernel[grid_of(40)](x, y, out, n, scale)
        right.append(bool(torch.equal(out, int(scale) * x + y)))
    return {"benchmarked": len(counts), "cache": len(kernel.cache), "right": right}


def test_key_values_equal_across_types_share_one_entry_as_in_triton():
    """1, True and 1.0 are one dict key to Triton's `cache`; the memo takes only int, str and None key values, so
    it never decides between them: the unmemoised path finds the same entry, as Triton does."""
    assert both(_equal_key_values_of_other_types) == {"benchmarked": 4, "cache": 2, "right": [True] * 7}


def _key_name_left_to_default(decorate: Any) -> dict:
    counts: list = []
    kernel = decorate(configs=configs(), key=["n", "SCALE"], do_bench=counting_bench(counts))(add_scaled)
    x, y, out = vectors(40)
    right = []
    for passed in ((), (), (3,), (3,), (), (3,)):
        out.zero_()
        kernel[grid_of(40)](x, y, out, 40, *passed)
        right.append(bool(torch.equal(out, (passed[0] if passed else 1) * x + y)))
    return {"benchmarked": len(counts), "cache": sorted(kernel.cache, key=len), "right": right}


def test_a_call_leaving_a_key_name_to_its_default_keeps_its_own_memo_entry():
    assert both(_key_name_left_to_default) == {
        "benchmarked": 4,
        "cache": [(40, F32, F32, F32), (40, 3, F32, F32, F32)],
        "right": [True] * 6,
    }


# ------------------------------------------------------------------------------------------------ threads
def test_threads_hitting_memoised_keys_count_every_hit_and_launch_right():
    kernel = autotune(configs=configs(), key=["n"], tuning=FAST, cache_results=False)(add_kernel)
    assert launch(kernel, 40) and launch(kernel, 48)
    before = kernel.cache_info()
    calls, wrong, start = 30, [], threading.Barrier(4)

    def worker(i: int) -> None:
        start.wait(30)
        for j in range(calls):
            if not launch(kernel, 40 if (i + j) % 2 else 48):
                wrong.append((i, j))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    info = kernel.cache_info()
    assert wrong == [] and info["tunings"] == before["tunings"]
    assert info["hits"] - before["hits"] == 4 * calls
    assert len(kernel.tuner.keys_of_shape) == 2


def _key_names_by_keyword_in_either_order(decorate: Any) -> dict:
    counts: list = []
    kernel = decorate(configs=configs(), key=["n", "SCALE"], do_bench=counting_bench(counts))(add_scaled)
    x, y, _ = vectors(40)
    right = []
    for named in (
        {"n": 40, "SCALE": 3},
        {"n": 40, "SCALE": 3},
        {"SCALE": 40, "n": 3},
        {"SCALE": 40, "n": 3},
        {"SCALE": 3, "n": 40},
    ):
        out = torch.zeros(40)
        kernel[grid_of(40)](x, y, out, **named)
        n = named["n"]
        right.append(bool(torch.equal(out[:n], named["SCALE"] * x[:n] + y[:n]) and not out[n:].any()))
    return {"benchmarked": len(counts), "cache": sorted(kernel.cache), "right": right}


def test_key_values_given_by_keyword_are_told_apart_by_name():
    """n=40, SCALE=3 and SCALE=40, n=3 pass the same values in the same order: two keys all the same."""
    assert both(_key_names_by_keyword_in_either_order) == {
        "benchmarked": 4,
        "cache": [(3, 40, F32, F32, F32), (40, 3, F32, F32, F32)],
        "right": [True] * 5,
    }
