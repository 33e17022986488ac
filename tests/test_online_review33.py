"""Online tuning (DESIGN 2c): the crash journal's note is taken outside a candidate's timing, and one bad call (the
caller's mistake) launches at most one other, already compiled, config before its own error is raised."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import record_launches

from autotune import Tuning, autotune
from autotune.engine.compilers import FunctionCompiler
from autotune.storage import journal


@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr, SLOW: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(x + offs, mask=mask)
    for _ in range(SLOW):
        acc = acc * 1.0
    tl.store(out + offs, acc + tl.load(y + offs, mask=mask), mask=mask)


def online(space, **options):
    return autotune(space=space, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(mode="online", **options))(add)


def call(kernel, out=None, n=512):
    x, y = torch.randn(n), torch.randn(n)
    out = torch.empty(n) if out is None else out
    kernel(x, y, out, n)
    if out.device.type != "meta":
        torch.testing.assert_close(out, x + y)


def decide(kernel, limit=200):
    """Good calls until the key is decided; its record."""
    for _ in range(limit):
        if kernel.cache.in_memory((512,), ("torch.float32",) * 3) is not None:
            return kernel.record()
        call(kernel)
        time.sleep(0.005)
    raise AssertionError(f"not decided after {limit} calls: {kernel.cache_info()}")


def test_the_crash_journals_note_is_not_in_an_online_sample(monkeypatch):
    """A slow journal write (0.5 s per note, a slow shared file system) is paid by the call, never by a candidate's
    timing: every sample stays far below it (an interpreted launch here takes milliseconds)."""
    real_write = journal._write
    notes = []

    def slow_write(path, data):
        notes.append(path)
        time.sleep(0.5)
        return real_write(path, data)

    monkeypatch.setattr(journal, "_write", slow_write)
    kernel = online({"BLOCK": [64, 128], "SLOW": [0]}, reps=2, compile_workers=0)
    record = decide(kernel)
    assert len(notes) >= 5  # the first call's note and each timed launch's: the journal was written
    samples = [s for t in record.trials for s in t.samples_ms]
    assert len(samples) == 4 and max(samples) < 400, samples


def test_a_bad_call_launches_the_best_known_only_and_blames_none(caplog):
    """The candidates are not compiled yet (held): a call whose output is on the meta device fails with the best
    known config, which ran before, so that error is the call's. It is raised without launching (and compiling on
    the caller's thread) any other candidate, no config is blamed, and the key decides as usual later."""
    kernel = online({"BLOCK": [32, 64, 128], "SLOW": [0, 1]}, reps=2, compile_workers=1)
    held = threading.Event()
    kernel.compiler_factory = lambda tuned, prepare: FunctionCompiler(lambda config: held.wait(60))
    runs = record_launches(kernel, "BLOCK", "SLOW")
    try:
        call(kernel)
        del runs[:]
        with caplog.at_level("WARNING", logger="autotune"):
            with pytest.raises(NotImplementedError, match="meta"):
                call(kernel, torch.empty(512, device="meta"))
        assert runs == [(32, 0)], runs
    finally:
        held.set()
    assert "failed during online tuning" not in caplog.text
    assert {t.status.value for t in decide(kernel).trials} == {"ok"}


def test_a_bad_call_on_a_timed_candidate_tries_one_other_config(caplog):
    """Once the candidates are compiled, a bad call timing one of them re-runs with one other config (the best
    known) and, that failing too, raises its error: two launches, not one per candidate, and none blamed."""
    kernel = online({"BLOCK": [32, 64, 128], "SLOW": [0, 1]}, reps=3, compile_workers=0)
    runs = record_launches(kernel, "BLOCK", "SLOW")
    call(kernel)
    for _ in range(200):  # until a call times a candidate other than the start: the candidates are compiled
        del runs[:]
        call(kernel)
        if runs != [(32, 0)]:
            break
        time.sleep(0.01)
    else:
        raise AssertionError("no candidate compiled after 200 calls")
    del runs[:]
    with caplog.at_level("WARNING", logger="autotune"):
        with pytest.raises(NotImplementedError, match="meta"):
            call(kernel, torch.empty(512, device="meta"))
    assert len(runs) == 2, runs
    assert "failed during online tuning" not in caplog.text
    assert {t.status.value for t in decide(kernel).trials} == {"ok"}


@triton.jit
def add_s(x, y, out, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def test_a_config_that_ran_the_key_and_fails_on_another_specialisation_is_replaced_and_blamed(caplog):
    """BLOCK=128 runs the key's first calls, then fails on calls Triton specialises anew (s == 1; simulated): each
    such call runs with a compiled config and gets a right result, and 128 is blamed, never raised to the caller."""
    kernel = autotune(
        space={"BLOCK": [128, 64, 32]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(mode="online", reps=2, compile_workers=1),
    )(add_s)
    kernel.compiler_factory = lambda tuned, prepare: FunctionCompiler(lambda config: None)
    real = kernel.fn.run

    def run(*args, **kwargs):
        if kwargs.get("BLOCK") == 128 and args[4] == 1:
            raise RuntimeError("CompilationError: static_assert failed for this specialization")
        return real(*args, **kwargs)

    kernel.fn.run = run
    n = 512
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    for _ in range(3):
        kernel(x, y, out, n, 2)
    for _ in range(10):
        out.zero_()
        kernel(x, y, out, n, 1)
        torch.testing.assert_close(out, x + y)
    assert "config {'BLOCK': 128} failed during online tuning" in caplog.text


def test_a_bad_call_after_configs_out_of_resources_stops_and_blames_only_them(caplog):
    """A call every config fails (a run error: the call's), where compiled configs are also out of resources: it
    raises the run error after at most one launch past it, never compiles on the caller's thread, and blames the
    out-of-resources configs (never launched again), not the config whose run error was the call's."""
    from triton.runtime.errors import OutOfResources

    kernel = autotune(
        space={"BLOCK": [128, 96, 64, 48, 32]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(mode="online", reps=2, compile_workers=1),
    )(add_s)
    held = threading.Event()
    kernel.compiler_factory = lambda tuned, prepare: FunctionCompiler(
        lambda config: held.wait(60) if config["BLOCK"] == 32 else None
    )
    real, launched, bad = kernel.fn.run, [], []

    def run(*args, **kwargs):
        launched.append(kwargs["BLOCK"])
        if bad and kwargs["BLOCK"] in (96, 64, 48):
            raise OutOfResources(kwargs["BLOCK"] * 1024, 65536, "shared memory")
        if bad:
            raise RuntimeError("Pointer argument (at 2) cannot be accessed from Triton (cpu tensor?)")
        return real(*args, **kwargs)

    kernel.fn.run = run
    n = 512
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    try:
        kernel(x, y, out, n, 2)  # the start config, 128, runs the key
        bad.append(True)
        deadline = time.monotonic() + 120  # until the background compiles of 96, 64 and 48 are in
        while caplog.text.count("(out_of_resources); not launched again") < 3:
            assert time.monotonic() < deadline, caplog.text
            launched.clear()
            with pytest.raises(RuntimeError, match="Pointer argument"):
                kernel(x, y, out, n, 2)
            assert 32 not in launched and len(launched) <= 3  # nothing compiled on the call; two past the run error
            time.sleep(0.05)
        launched.clear()
        with pytest.raises(RuntimeError, match="Pointer argument"):
            kernel(x, y, out, n, 2)
        assert launched == [128]  # the out-of-resources ones are blamed: never launched again
    finally:
        held.set()
    assert "config {'BLOCK': 128} failed" not in caplog.text  # its run error was the call's
