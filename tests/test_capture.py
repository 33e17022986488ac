"""CUDA-graph capture: a key with no winner is never tuned while a stream captures, in every mode and in
`autotune.compat`. On the CPU through the documented seam `autotune.compiled.capture.assume_capturing()`, which
`capturing()` consults besides torch's own check; real kernels through the interpreter, a real disk cache."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
import triton
from kernels_for_tests import add_kernel

from autotune import CaptureWarning, Config, Tuning, autotune
from autotune.compat import autotune as triton_style_autotune
from autotune.compiled.capture import assume_capturing, capturing
from autotune.storage.disk import DiskCache
from autotune.storage.protocol import SOURCES_PER_KEY

FAST = Tuning(warmup=0, reps=1, compile_workers=0, isolate="off")
SPACE = {"BLOCK": [32, 64]}
WAIT_S = 30.0  # a gate not opened by then is a deadlock: the test fails instead of hanging


def tuned_add(**options):
    return autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=options.pop("tuning", FAST), **options)(
        add_kernel
    )


def vectors(n):
    return torch.randn(n), torch.randn(n), torch.empty(n)


def captured_calls(kernel, *sizes):
    """Call `kernel` once per size as if a CUDA graph were being captured; returns (launched configs, warnings)."""
    launched = []
    with warnings.catch_warnings(record=True) as caught, assume_capturing():
        warnings.simplefilter("always")
        for n in sizes:
            x, y, out = vectors(n)
            kernel(x, y, out, n)
            assert torch.equal(out, x + y)
            launched.append(kernel.best_config)
    return launched, [w for w in caught if issubclass(w.category, CaptureWarning)]


def test_the_seam_is_what_capturing_reads_and_it_ends_with_its_block():
    assert not capturing()
    with assume_capturing():
        assert capturing()
    assert not capturing()


def test_a_new_key_during_capture_launches_the_first_config_untuned_warns_once_and_is_tuned_after():
    add = tuned_add()
    launched, warned = captured_calls(add, 100, 200, 100)
    assert launched == [Config(BLOCK=32)] * 3
    assert add.cache_info()["tunings"] == 0 and add.cache_info()["entries"] == 0  # nothing measured, nothing kept
    assert len(warned) == 1  # once per kernel, naming the key and how to warm up
    text = str(warned[0].message)
    assert "add_kernel met key=(100,)" in text and "autotune.warmup(add_kernel, calls)" in text
    assert warned[0].filename == __file__  # the user's line
    x, y, out = vectors(100)
    add(x, y, out, 100)  # the next call outside a capture tunes the key
    assert torch.equal(out, x + y) and add.cache_info()["tunings"] == 1


def test_fallback_is_launched_during_capture_when_no_key_is_tuned():
    add = tuned_add(fallback={"BLOCK": 64})
    assert captured_calls(add, 100)[0] == [Config(BLOCK=64)]


def test_the_nearest_tuned_keys_winner_beats_the_fallback_during_capture():
    first = tuned_add()
    x, y, out = vectors(1000)
    first(x, y, out, 1000)  # tuned, on disk
    winner = first.record((1000,)).winner
    other = next(c for c in map(Config, [{"BLOCK": 32}, {"BLOCK": 64}]) if c != winner)
    later = tuned_add(fallback=dict(other))  # a new process's kernel: reads the disk
    assert captured_calls(later, 900)[0] == [winner]
    assert later.cache_info()["tunings"] == 1  # `first`'s (the counters are per name): n=900 was not tuned


def test_a_stored_winner_is_read_once_during_capture_and_kept(monkeypatch):
    reads = []
    real_get = DiskCache.get

    def counting_get(self, entry):
        reads.append(entry.key)
        return real_get(self, entry)

    monkeypatch.setattr(DiskCache, "get", counting_get)
    tuner = tuned_add()
    x, y, out = vectors(300)
    tuner(x, y, out, 300)  # a winner on disk for n=300
    winner = tuner.record((300,)).winner
    add = tuned_add()
    reads.clear()
    launched, warned = captured_calls(add, 300, 300, 500, 500, 500)
    assert (
        launched[:2] == [winner, winner] and add.cache_info()["tunings"] == 1
    )  # the counters are per name: 1 is `tuner`'s
    # each key looked up on disk once, however often it is met: the stored one found in its first slot, the
    # missing one in none of the key's slots (one per kernel source)
    assert reads == [(300,)] + [(500,)] * SOURCES_PER_KEY
    assert add.cache_info()["entries"] == 1  # the stored winner is kept in memory: later calls hit
    assert len(warned) == 1 and "key=(500,)" in str(warned[0].message)


def test_capture_never_waits_for_a_tuning_of_the_same_key_in_progress():
    entered, gate = threading.Event(), threading.Event()

    def setup(**_):
        entered.set()
        gate.wait(WAIT_S)  # holds the key's memory lock and file lock while the main thread captures

    add = tuned_add(setup=setup)
    tuning = threading.Thread(target=lambda: add(*vectors(256), 256))
    tuning.start()
    try:
        assert entered.wait(WAIT_S)
        launched, _ = captured_calls(add, 256)
        assert tuning.is_alive()  # the capture launched while the tuning still held its locks
        assert launched == [Config(BLOCK=32)]
    finally:
        gate.set()
        tuning.join(WAIT_S)
    assert add.cache_info()["tunings"] == 1


def test_online_mode_launches_the_sessions_best_and_starts_no_session_during_capture():
    add = tuned_add(tuning=FAST.replace(mode="online"))
    assert captured_calls(add, 128)[0] == [Config(BLOCK=32)]
    assert "online" not in add.cache_info()  # no session (no background compile) started during capture
    x, y, out = vectors(128)
    add(x, y, out, 128)  # outside a capture: the session starts
    assert list(add.cache_info()["online"]) == ["[128] float32,float32,float32"]
    key, dtypes = add.key_of(add.bind((x, y, out, 128), {}))
    launched, warned = captured_calls(add, 128)
    assert launched == [add.online.best_in_progress(key, dtypes)]
    assert warned == []  # a key in progress was met outside capture: nothing to warn of


@pytest.mark.parametrize("cache_results", [True, False])
def test_compat_kernels_follow_the_same_rule(cache_results):
    kernel = triton_style_autotune(
        configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})],
        key=["n"],
        cache_results=cache_results,
        tuning=FAST,
    )(add_kernel)
    x, y, out = vectors(100)
    grid = lambda meta: (triton.cdiv(100, meta["BLOCK"]),)  # noqa: E731
    with warnings.catch_warnings(record=True) as caught, assume_capturing():
        warnings.simplefilter("always")
        kernel[grid](x, y, out, 100)
        kernel[grid](x, y, out, 100)
    assert torch.equal(out, x + y)
    assert kernel.best_config.kwargs == {"BLOCK": 32} and kernel.cache == {}  # untuned, nothing filed
    assert kernel.cache_info()["tunings"] == 0
    assert [issubclass(w.category, CaptureWarning) for w in caught] == [True]
    kernel[grid](x, y, out, 100)  # outside a capture: tuned and filed
    assert kernel.cache_info()["tunings"] == 1 and len(kernel.cache) == 1
