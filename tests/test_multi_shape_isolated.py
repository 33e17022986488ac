"""Multi-shape tuning (`Tuning(objective=...)`, DESIGN 6b) under isolation (2d): the set's trials run in the
measuring worker, which holds every call's copies together; a config that crashes on one call of the set costs that
config; `isolate_max_bytes` counts every call's tensors. Real worker processes, kernels through the interpreter."""

from __future__ import annotations

import functools
import time
import warnings
from pathlib import Path

import pytest
import sweep_kernels as sk
import torch

import autotune
from autotune import Config, IsolationWarning
from autotune.engine.isolation import shutdown
from autotune.engine.isolation.pool import shared_worker


def _tune(kernel, sizes: list[int], force: bool = False):
    bound = [kernel.bind(*sk.shape_call(n)) for n in sizes]
    return kernel.tune_calls([(b, None) for b in bound], force=force)[0]


@pytest.mark.parametrize("objective", ["geomean", "max"])
def test_a_set_tuned_under_process_isolation_runs_in_the_worker_and_picks_the_in_process_winner(objective):
    here = _tune(sk.shape_tagged(objective), [1, 2])
    assert here.where == "in-process"
    sk._LAST_CALL.clear()  # setup= fills it where a trial runs: in the worker, it stays empty here
    isolated = _tune(sk.shape_tagged(objective, isolate="process"), [1, 2], force=True)
    assert isolated.where == "worker process" and sk._LAST_CALL == {}
    assert isolated.winner == here.winner == Config(TAG=3 if objective == "geomean" else 2)
    assert isolated.objective == objective and isolated.calls == ["out[1], n=1", "out[1], n=2"]
    for trial in isolated.trials:  # the per-call medians came back from the worker
        assert trial.calls_ms == [sk.SHAPE_TIMES[(trial.config["TAG"], 1)], sk.SHAPE_TIMES[(trial.config["TAG"], 2)]]
    assert {t.config: t.median_ms for t in isolated.trials} == {t.config: t.median_ms for t in here.trials}


def _add_call(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n)
    return (x, torch.randn(n), torch.empty(n), n), {}


@pytest.fixture
def worker_start_s() -> float:
    """How long a fresh worker takes here and now to start and tune a small set: the trial timeout of a test whose
    config hangs (an ok trial on one call takes a small part of it; a start imports torch and Triton)."""
    shutdown()
    started = time.monotonic()
    _tune(sk.shape_tagged("geomean", isolate="process"), [1, 2])
    return time.monotonic() - started


@pytest.mark.parametrize("hang", [0, 1], ids=["segfault", "hang"])
def test_a_config_that_crashes_or_hangs_in_a_later_round_of_the_re_measurement_is_that_config_s_failure(
    worker_start_s, monkeypatch, tmp_path, hang
):
    """Three configs re-measured over a set of two calls: TAG 1 ends the worker, or hangs, in the second round on
    call 1, after TAG 0 ran there. The worker named TAG 1 before that run, so TAG 1 is failed, not the first config
    of the round; TAG 0 and TAG 2 keep their first-pass samples and TAG 0 wins."""
    from isolation_kernels import fails_in_a_later_round as kernel

    import autotune.engine.isolation.runner as runner

    monkeypatch.setenv("AUTOTUNE_TEST_GATE_DIR", str(tmp_path))
    shutdown()  # a worker started with the gate's variable
    monkeypatch.setattr(kernel, "tuning", kernel.tuning.replace(trial_timeout_s=worker_start_s))
    original = runner.WorkerRunner.refine

    def refine(self, configs, reps, retried=False):
        (tmp_path / "refining").touch()
        return original(self, configs, reps, retried)

    monkeypatch.setattr(runner.WorkerRunner, "refine", refine)
    calls = []
    for n in (100, 200):
        args = (torch.randn(n), torch.randn(n), torch.empty(n), n, torch.zeros(1, dtype=torch.int64), hang)
        calls.append((kernel.bind(args, {}), None))
    try:
        record = kernel.tune_calls(calls)[0]
    finally:
        shutdown()  # no later test gets a worker with the gate's variable
    by_tag = {t.config["TAG"]: t for t in record.trials}
    assert record.winner["TAG"] == 0 and by_tag[0].ok and by_tag[2].ok, record.trials
    assert by_tag[1].status.value == ("timeout" if hang else "crashed"), by_tag[1]
    assert by_tag[1].error.startswith("failed when re-measured: "), by_tag[1].error
    assert (f"trial_timeout_s={worker_start_s:g} passed" if hang else "SIGSEGV") in by_tag[1].error


def test_a_config_that_crashes_or_hangs_on_one_call_of_the_set_costs_that_config_and_the_tuning_goes_on(
    worker_start_s, monkeypatch
):
    from isolation_kernels import large_call_crashy_add as kernel

    monkeypatch.setattr(kernel, "tuning", kernel.tuning.replace(trial_timeout_s=worker_start_s))
    autotune.warmup(kernel, [functools.partial(_add_call, 100), functools.partial(_add_call, 1000)])
    record = kernel.record(())  # this process is alive: the segfault was the worker's
    assert record.where == "worker process" and record.winner["MODE"] == 0
    by_mode = {t.config["MODE"]: t for t in record.trials if t.config["BLOCK"] == 32}
    crashed, hung = by_mode[1], by_mode[2]  # each ran on call 0 (n=100), then failed on call 1 (n=1000)
    assert crashed.status.value == "crashed", crashed
    assert crashed.error.startswith("on call 1: ") and "SIGSEGV" in crashed.error, crashed.error
    assert hung.status.value == "timeout", hung
    assert hung.error.startswith(f"on call 1: trial_timeout_s={worker_start_s:g} passed"), hung.error
    assert [len(t.calls_ms) for t in record.trials if t.ok] == [2, 2] and len(record.trials) == 4
    (x, y, out, n), _ = _add_call(1000)
    kernel(x, y, out, n)  # the winner serves the set
    torch.testing.assert_close(out, x + y)


def test_isolate_max_bytes_counts_every_call_of_the_set_together():
    each = 4  # one int32 output per call
    kernel = sk.shape_tagged("geomean", isolate="process", isolate_max_bytes=each + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IsolationWarning)  # one call alone is under the bound: isolated
        assert _tune(kernel, [1]).where == "worker process"
    with pytest.warns(IsolationWarning, match=r"tensors of these 2 calls are, together,.*isolate_max_bytes=5 "):
        record = _tune(kernel, [1, 2], force=True)  # 8 bytes together (the same key: forced)
    assert record.where == "in-process" and record.winner == Config(TAG=3)
    assert sk._LAST_CALL  # its setup= ran here


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads a worker's RSS from /proc")
def test_the_worker_frees_every_call_s_copies_when_the_set_s_tuning_ends():
    """The worker holds 2 x 40 MiB of copies while it tunes the set (each call's x travels whole, though only its
    first n elements are read); a kept copy would be 40 MiB at least."""
    from isolation_kernels import large_call_crashy_add as kernel

    def call(n: int, big: int = 0):
        return kernel.bind((torch.randn(max(big, n)), torch.randn(n), torch.empty(n), n), {}), None

    kernel.tune_calls([call(16), call(32)])  # a started worker, with the kernel loaded
    worker = shared_worker()[0]
    before = _rss_bytes(worker.proc.pid)
    record = kernel.tune_calls([call(100, big=10 << 20), call(200, big=10 << 20)], force=True)[0]
    assert record.where == "worker process" and worker.alive
    grown = _rss_bytes(worker.proc.pid) - before
    assert grown < (32 << 20), f"the worker grew by {grown >> 20} MiB after the tuning: it kept the set's copies"
