"""`autotune.warmup(kernel, calls)`: tunes the keys the calls make, skips what any tier holds, and leaves a
process that can serve with AUTOTUNE_OFFLINE=1 without a miss. Real kernels through the interpreter, a real disk
cache (a new kernel object stands for a new process: it starts with an empty memory tier)."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel

from autotune import CallError, OptionError, Tuning, WarmupReport, autotune, warmup
from autotune.compat import autotune as triton_style_autotune

FAST = Tuning(warmup=0, reps=1, compile_workers=0, isolate="off")
SPACE = {"BLOCK": [32, 64]}


def tuned_add(tuning=FAST):
    return autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=tuning)(add_kernel)


def add_args(n: int, grid: bool = False) -> tuple[tuple, dict]:
    """An argument maker (a module-level function under functools.partial: picklable, as a sweep will need)."""
    kwargs = {"grid": lambda meta: (triton.cdiv(n, meta["BLOCK"]),)} if grid else {}
    return (torch.randn(n), torch.randn(n), torch.empty(n), n), kwargs


def makers(*sizes, grid=False):
    return [functools.partial(add_args, n, grid) for n in sizes]


def test_warmup_tunes_each_new_key_once_and_skips_cached_ones():
    add = tuned_add()
    report = warmup(add, makers(100, 200, 100))
    assert isinstance(report, WarmupReport)
    assert [k.key for k in report.tuned] == [(100,), (200,)] and report.cached == ()
    assert str(report).startswith("add_kernel: 2 keys tuned, 0 already cached (")
    assert add.cache_info()["tunings"] == 2
    again = warmup(tuned_add(), makers(200, 300))  # a new process: (200,) is read from disk, (300,) tuned
    assert [k.key for k in again.cached] == [(200,)] and [k.key for k in again.tuned] == [(300,)]


def test_after_warmup_an_offline_process_serves_every_warmed_key_without_a_miss(monkeypatch):
    warmup(tuned_add(), makers(128, 512))
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    serving = tuned_add()
    before = serving.cache_info()  # the counters are per kernel name: the warm-up's are in them
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an offline miss would warn
        for n in (128, 512):
            args, _ = add_args(n)
            serving(*args)
            assert torch.equal(args[2], args[0] + args[1])
    after = serving.cache_info()
    assert after["disk_hits"] - before["disk_hits"] == 2
    assert after["misses"] == before["misses"] and after["tunings"] == before["tunings"] == 2


def test_warmup_refuses_to_run_where_tuning_is_switched_off(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    with pytest.raises(OptionError, match="AUTOTUNE_OFFLINE=1 forbids tuning"):
        warmup(tuned_add(), makers(64))


def test_an_online_kernel_is_warmed_up_on_the_blocking_path_and_then_hits():
    add = tuned_add(FAST.replace(mode="online"))
    report = warmup(add, makers(96))
    assert len(report.tuned) == 1
    args, _ = add_args(96)
    add(*args)
    assert add.cache_info()["hits"] == 1 and "online" not in add.cache_info()


def test_warming_up_a_key_an_online_session_has_begun_ends_that_session():
    add = tuned_add(FAST.replace(mode="online"))
    args, _ = add_args(96)
    add(*args)  # the key's online session begins
    assert list(add.cache_info()["online"]) == ["[96] float32,float32,float32"]
    warmup(add, makers(96), in_process=True)
    assert "online" not in add.cache_info()  # tuned by the warm-up: no longer in progress
    add(*args)
    assert add.cache_info()["hits"] == 1


def test_tuning_given_to_warmup_tunes_under_it():
    add = tuned_add()
    warmup(add, makers(80), tuning=FAST.replace(strategy="random", max_configs=1))
    record = add.record((80,))  # in the kernel's memory, tuned as the warm-up's Tuning says
    assert record.strategy == "random" and len(record.trials) == 1


@pytest.mark.parametrize("gpus", [0, 1])
def test_a_compat_kernel_given_its_own_tuning_is_refused_with_a_gpu_and_without(monkeypatch, gpus):
    """A compat kernel is warmed up with its own Tuning: `tuning=` is refused before anything starts, whether the
    keys would be tuned in this process or over the GPUs (here the GPU count is the seam)."""
    import autotune.compiled.warm_up as warm_up

    monkeypatch.setattr(warm_up, "visible_gpus", lambda: gpus)
    kernel = triton_style_autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"], tuning=FAST)(add_kernel)
    with pytest.raises(OptionError, match=r"give tuning= to autotune.compat.autotune\(...\)"):
        warmup(kernel, makers(100, grid=True), tuning=FAST.replace(max_configs=1))


def test_compat_kernels_take_their_grid_from_the_makers_kwargs():
    kernel = triton_style_autotune(
        configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"], tuning=FAST
    )(add_kernel)
    report = warmup(kernel, makers(100, 200, grid=True))
    assert len(report.tuned) == 2 and kernel.cache_info()["tunings"] == 2
    with pytest.raises(CallError, match="has no grid= of its own"):
        warmup(kernel, makers(300))


def test_a_maker_that_returns_something_else_is_named():
    with pytest.raises(CallError, match=r"callable returning \(args, kwargs\)"):
        warmup(tuned_add(), [lambda: (torch.randn(4), 4)])
    with pytest.raises(CallError, match="takes an @autotune or autotune.compat kernel"):
        warmup(add_kernel, makers(4))


@triton.heuristics({"SCALE": lambda args: 2})
@autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST)
@triton.jit
def scaled_add(x, y, out, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * SCALE + tl.load(y + offs, mask=mask), mask=mask)


def test_a_kernel_under_triton_heuristics_is_warmed_up_through_them():
    report = warmup(scaled_add, makers(100))  # the heuristics layer adds SCALE to the warm-up's calls
    assert [k.key for k in report.tuned] == [(100,)]
    args, _ = add_args(100)
    scaled_add.run(*args, grid=None, warmup=False)  # grid=None: @autotune's own grid=
    assert torch.equal(args[2], 2 * args[0] + args[1]) and scaled_add.fn.cache_info()["hits"] == 1


def test_autotune_force_reports_what_it_tuned(monkeypatch):
    """AUTOTUNE_FORCE=1 is read when a process first meets a key: a key this process already holds is served, and
    the report says cached, not tuned; a new process (kernel) tunes it again and says so."""
    add = tuned_add()
    warmup(add, makers(100))
    monkeypatch.setenv("AUTOTUNE_FORCE", "1")
    held = warmup(add, makers(100))
    assert [k.key for k in held.cached] == [(100,)] and held.tuned == () and add.cache_info()["tunings"] == 1
    fresh = tuned_add()  # its counters are the kernel name's: the process's tunings of add_kernel
    forced = warmup(fresh, makers(100))
    assert [k.key for k in forced.tuned] == [(100,)] and fresh.cache_info()["tunings"] == 2
