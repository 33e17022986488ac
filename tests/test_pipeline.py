"""The compile pool feeding the calling thread: overlap, completion order, timeouts, Ctrl-C."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
import torch
from kernels_for_tests import add_kernel

from autotune import Config, Tuning, autotune
from autotune.engine.compilers import FunctionCompiler
from autotune.engine.in_process import InProcessRunner
from autotune.engine.pipeline import compile_in_order_of_completion
from autotune.engine.timing import WallClockTimer
from autotune.engine.tuner import TuneJob, tune
from autotune.record import TrialStatus


def pool_threads() -> list[threading.Thread]:
    """The compile threads of the tunings these tests run: online tuning's shared per-kernel pools (an earlier
    test's, idle until their idle timeout) are not theirs."""
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith("autotune-compile") and not t.name.startswith("autotune-compile-online")
    ]


GATE_S = 30.0  # a gate that is never opened fails the test after this long instead of hanging it


class GatedCompiler(FunctionCompiler):
    """Compiles config BLOCK=b once `gates[b]` is open (no gate: at once), logging when each compile ends.
    Tests open gates from the measuring side, so they assert what happened in which order, never durations."""

    def __init__(self, gates: dict[int, threading.Event], events: list) -> None:
        def compile_fn(config: Config) -> None:
            gate = gates.get(config["BLOCK"])
            if gate is not None:
                events.append(("gate", config["BLOCK"], gate.wait(GATE_S)))
            events.append(("compiled", config["BLOCK"], time.perf_counter()))

        super().__init__(compile_fn)


def job(configs, compiler, events, workers=2, on_run=None, **kwargs):
    def run_config(config):
        events.append(("run", config["BLOCK"], time.perf_counter()))
        if on_run is not None:
            on_run(config["BLOCK"])

    tuning = Tuning(preset="fast", warmup=0, reps=1, compile_workers=workers)
    runner = InProcessRunner(run_config=run_config, compiler=compiler, timer=WallClockTimer(), tuning=tuning)
    return TuneJob(configs=configs, tuning=tuning, runner=runner, **kwargs)


def _order(events: list, kind: str) -> list:
    seen: list = []
    for k, block, _ in events:
        if k == kind and block not in seen:
            seen.append(block)
    return seen


def test_measuring_starts_before_the_last_compile_ends():
    """Configs 2-4 cannot finish compiling until config 1 has been measured: the tuning completes only if
    measuring overlaps compiling."""
    events: list = []
    measured_1 = threading.Event()
    configs = [Config(BLOCK=b) for b in (1, 2, 3, 4)]
    tune(
        job(
            configs,
            GatedCompiler({2: measured_1, 3: measured_1, 4: measured_1}, events),
            events,
            on_run=lambda b: b == 1 and measured_1.set(),
        )
    )
    assert all(opened for kind, _, opened in events if kind == "gate"), "a compile waited for a run that never came"
    kinds = [(k, b) for k, b, _ in events]
    assert kinds.index(("run", 1)) < max(kinds.index(("compiled", b)) for b in (2, 3, 4))


def test_configs_are_measured_in_completion_order():
    """Config 2 compiles at once, 3 once 2 was measured, 1 once 3 was measured: completion order is 2, 3, 1,
    unlike the submission order 1, 2, 3."""
    events: list = []
    gates = {3: threading.Event(), 1: threading.Event()}
    after = {2: gates[3], 3: gates[1]}
    configs = [Config(BLOCK=b) for b in (1, 2, 3)]
    tune(job(configs, GatedCompiler(gates, events), events, workers=3, on_run=lambda b: b in after and after[b].set()))
    assert _order(events, "run") == [2, 3, 1]
    assert all(opened for kind, _, opened in events if kind == "gate")


def test_serial_mode_compiles_and_measures_one_config_at_a_time():
    events: list = []
    configs = [Config(BLOCK=b) for b in (1, 2, 3)]
    tune(job(configs, GatedCompiler({}, events), events, workers=0))
    kinds = [(kind, block) for kind, block, _ in events]
    assert kinds[:2] == [("compiled", 1), ("run", 1)]
    assert kinds.index(("compiled", 2)) > kinds.index(("run", 1))
    assert not pool_threads()


def test_compile_timeout_is_recorded_and_the_rest_tune():
    events: list = []
    configs = [Config(BLOCK=b) for b in (1, 2)]
    never = threading.Event()  # config 1's compile waits until after the tuning: a hang
    tuning = Tuning(preset="fast", warmup=0, reps=1, compile_workers=2, compile_timeout_s=1.0)
    try:
        result = tune(
            TuneJob(
                configs=configs,
                tuning=tuning,
                runner=InProcessRunner(
                    run_config=lambda c: None,
                    compiler=GatedCompiler({1: never}, events),
                    timer=WallClockTimer(),
                    tuning=tuning,
                ),
            )
        )
    finally:
        never.set()
    statuses = {t.config["BLOCK"]: t.status for t in result.trials}
    assert statuses == {1: TrialStatus.TIMEOUT, 2: TrialStatus.OK}
    assert result.winner == Config(BLOCK=2)
    # The timed-out compile cannot be killed; its thread ends when the compile does.
    for thread in pool_threads():
        thread.join(timeout=5)
    assert not pool_threads()


def test_proposals_go_on_after_every_compile_in_flight_timed_out():
    """Both compiles in flight hang past compile_timeout_s: the stream asks for more proposals after those
    timeouts, as after any other outcome, instead of ending with the budget unspent."""
    from autotune.engine.pipeline import compile_as_proposed

    never = threading.Event()
    configs = [Config(BLOCK=b) for b in range(6)]
    left = list(configs)

    def propose(n):
        batch = left[:n]
        del left[:n]
        return batch

    compiler = GatedCompiler({0: never, 1: never}, [])
    try:
        with compile_as_proposed(propose, compiler, workers=2, ahead=2, timeout_s=0.2) as outcomes:
            statuses = {o.config["BLOCK"]: o.status for o in outcomes}
    finally:
        never.set()
    assert statuses == {0: TrialStatus.TIMEOUT, 1: TrialStatus.TIMEOUT} | {b: TrialStatus.OK for b in range(2, 6)}


def test_outcomes_iterator_directly_reports_errors_in_completion_order():
    """t=0.0 compiles at once; t=0.1 once the consumer saw t=0.0; t=0.2 once it saw t=0.1."""
    seen_outcome = {0.0: threading.Event(), 0.1: threading.Event()}
    wait_for = {0.1: seen_outcome[0.0], 0.2: seen_outcome[0.1]}

    def compile_fn(config):
        gate = wait_for.get(config["t"])
        if gate is not None:
            assert gate.wait(GATE_S)
        if config["t"] == 0.1:
            raise ValueError("bad config")
        return config["t"]

    configs = [Config(t=0.2), Config(t=0.1), Config(t=0.0)]
    seen = []
    with compile_in_order_of_completion(configs, FunctionCompiler(compile_fn), workers=3) as outcomes:
        for o in outcomes:
            seen.append((o.config["t"], o.status))
            if o.config["t"] in seen_outcome:
                seen_outcome[o.config["t"]].set()
    assert seen == [(0.0, TrialStatus.OK), (0.1, TrialStatus.COMPILE_ERROR), (0.2, TrialStatus.OK)]
    assert not pool_threads()


def test_ctrl_c_mid_tune_cancels_the_pool_leaves_no_thread_and_no_record(monkeypatch):
    from autotune.engine.thread_pool import DaemonThreadPool

    events: list = []
    calls = []
    dropped = threading.Event()  # 32 and 64 (compiling) finish only once the pool has dropped its queue (128)
    real_shutdown = DaemonThreadPool.shutdown

    def shutdown(self, wait=True, *, cancel_futures=False):
        real_shutdown(self, wait=False, cancel_futures=cancel_futures)  # the queue is dropped here ...
        dropped.set()  # ... then the running compiles end
        real_shutdown(self, wait=wait, cancel_futures=cancel_futures)

    monkeypatch.setattr(DaemonThreadPool, "shutdown", shutdown)

    class Taken:
        """64's gate: notes that a worker has taken 64 (the worker that compiled 16 takes it next, after 16's
        result reached the measuring thread, so Ctrl-C could otherwise come first and cancel 64 while queued)."""

        def __init__(self) -> None:
            self.taken = threading.Event()

        def wait(self, timeout: float) -> bool:
            self.taken.set()
            return dropped.wait(timeout)

    gate_64 = Taken()

    def setup(**_):
        calls.append(1)
        if len(calls) == 2:
            assert gate_64.taken.wait(GATE_S), "no worker took 64 after compiling 16"
            raise KeyboardInterrupt

    add = autotune(
        space={"BLOCK": (16, 32, 64, 128)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        setup=setup,
        tuning=Tuning(preset="fast", warmup=0, reps=3, compile_workers=2),
    )(add_kernel)
    add.compiler_factory = lambda tuned, prepare: GatedCompiler({32: dropped, 64: gate_64, 128: dropped}, events)
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    with pytest.raises(KeyboardInterrupt):
        add(x, y, out, 64)
    assert not pool_threads()
    assert add.cache_info()["entries"] == 0
    cache_dir = os.environ["AUTOTUNE_CACHE_DIR"]
    stored = [f for _, _, files in os.walk(cache_dir) for f in files if f.endswith(".json")]
    assert stored == []
    # The config still queued when Ctrl-C came (two workers: 16, then 32 and 64 were taken) was never compiled.
    assert sorted(block for kind, block, _ in events if kind == "compiled") == [16, 32, 64]


@pytest.mark.parametrize("workers", [0, 2])
def test_proposals_compile_while_earlier_ones_are_measured(workers):
    """`compile_as_proposed`: one more config is asked for as soon as one is handed to the caller, so compiling
    the next proposals overlaps measuring the current ones (parallel) and a strategy hears each result before
    its next proposal (both modes); an empty proposal ends the stream."""
    from autotune.engine.pipeline import compile_as_proposed

    configs = [Config(BLOCK=i) for i in range(10)]
    consumed: list = []
    asks: list = []  # (configs handed over when asked, how many asked for, what was proposed)

    def propose(n):
        batch = configs[sum(len(b) for _, _, b in asks) :][:n]
        asks.append((len(consumed), n, batch))
        return batch

    with compile_as_proposed(
        propose, FunctionCompiler(lambda c: time.sleep(0.01)), workers=workers, ahead=4
    ) as outcomes:
        for outcome in outcomes:
            consumed.append(outcome.config)
    assert sorted(c["BLOCK"] for c in consumed) == list(range(10))
    assert asks[0] == (0, 4, configs[:4])
    assert asks[1][:2] == (1, 1)  # asked for one more right after the first config was handed over
    if not workers:  # serial: exactly one ask per config handed over, the window kept full
        assert [a[:2] for a in asks[1:7]] == [(i, 1) for i in range(1, 7)]
        assert consumed == configs
    assert asks[-1][2] == []


HANGING_COMPILE_CHILD = """
import sys, threading
sys.path.insert(0, {tests!r})
from autotune import Tuning, autotune
from autotune.engine.compilers import FunctionCompiler
from kernels_for_tests import add_kernel
import torch

def compile_fn(config):
    if config["BLOCK"] == 64:
        threading.Event().wait()          # a compile that never ends
{kernel}
x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
add(x, y, out, 64)
assert torch.equal(out, x + y)
print("RETURNED", {report}, flush=True)
"""


def run_child_that_leaves_a_hanging_compile(tmp_path, kernel: str, report: str) -> str:
    """Run HANGING_COMPILE_CHILD in a fresh interpreter; return its output once it exited. A process held by the
    hanging compile is killed after a limit that only a hang reaches (the child needs seconds)."""
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    code = HANGING_COMPILE_CHILD.format(tests=str(tests), kernel=kernel, report=report)
    env = dict(
        os.environ,
        PYTHONPATH=str(tests.parent),
        TRITON_INTERPRET="1",
        AUTOTUNE_PROGRESS="0",
        AUTOTUNE_CACHE_DIR=str(tmp_path / "child-cache"),
    )
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not exit after its last line; it printed {exc.stdout!r}")
    assert res.returncode == 0, res.stderr
    assert "RETURNED" in res.stdout, res.stdout
    return res.stdout


def test_a_compile_abandoned_by_compile_timeout_does_not_hold_the_process_at_exit(tmp_path):
    """Pool threads are daemons: the interpreter does not join the thread of a compile that hangs, so a script
    whose tuning abandoned one (compile_timeout_s, in-process) still exits once it is done."""
    kernel = """
add = autotune(space={"BLOCK": [32, 64, 128]}, key=["n"], grid="(cdiv(n, $BLOCK),)",
               tuning=Tuning(isolate="off", compile_workers=2, compile_timeout_s=1, warmup=0, reps=1,
                             refine_topk=0))(add_kernel)
add.compiler_factory = lambda tuned, prepare: FunctionCompiler(compile_fn)
"""
    out = run_child_that_leaves_a_hanging_compile(
        tmp_path, kernel, "{t.config['BLOCK']: t.status.value for t in add.record((64,)).trials}"
    )
    assert "{32: 'ok', 64: 'timeout', 128: 'ok'}" in out


def _flaky_job(failing: set[int]) -> TuneJob:
    """BLOCK 32, 64 and 128, all re-measured; those in `failing` raise from their third run on (the re-measurement:
    their check run and first measurement pass are clean)."""
    runs: dict[int, int] = {}

    def run_config(config: Config) -> None:
        block = config["BLOCK"]
        runs[block] = runs.get(block, 0) + 1
        if block in failing and runs[block] > 2:
            raise RuntimeError("flaky launch")

    tuning = Tuning(warmup=0, reps=1, compile_workers=0, refine_topk=3, refine_reps=3)
    runner = InProcessRunner(
        run_config=run_config, compiler=FunctionCompiler(lambda c: None), timer=WallClockTimer(), tuning=tuning
    )
    return TuneJob(configs=[Config(BLOCK=b) for b in (32, 64, 128)], tuning=tuning, runner=runner)


@pytest.mark.parametrize("failing", [{64}, {128}, {32, 128}])
def test_a_config_that_fails_when_re_measured_is_failed_and_the_others_decide(failing):
    """The re-measurement of the best few runs each again: one that raises there (its own error, say a flaky
    launch) is recorded failed and never wins; the others' rounds decide, and the tuning completes."""
    outcome = tune(_flaky_job(failing))
    trials = {t.config["BLOCK"]: t for t in outcome.trials}
    for block in failing:
        assert trials[block].status is TrialStatus.RUNTIME_ERROR
        assert trials[block].error == "failed when re-measured: RuntimeError: flaky launch"
    survivors = {32, 64, 128} - failing
    assert outcome.winner["BLOCK"] in survivors and {c["BLOCK"] for c in outcome.remeasured} == survivors
    assert all(len(trials[b].samples_ms) == 3 for b in survivors)  # their rounds decided


def test_when_every_config_fails_when_re_measured_none_wins():
    from autotune import NoValidConfigError

    with pytest.raises(NoValidConfigError, match="failed when re-measured: RuntimeError: flaky launch"):
        tune(_flaky_job({32, 64, 128}))


class _SharedFutureCompiler(FunctionCompiler):
    """Configs with the same "kernel" field get one future, as Triton's JIT cache hands two configs that compile to
    the same kernel (occupancy 1 and 2 lowering alike) the same FutureKernel."""

    def __init__(self) -> None:
        super().__init__(lambda config: time.sleep(0.05))
        self.futures: dict = {}

    def submit(self, config, executor):
        if config["kernel"] not in self.futures:
            self.futures[config["kernel"]] = super().submit(config, executor)
        return self.futures[config["kernel"]]


def test_two_configs_that_compile_to_one_kernel_each_get_their_outcome():
    configs = [Config(kernel=k, occupancy=o) for k, o in ((0, 1), (0, 2), (1, 4))]
    with compile_in_order_of_completion(configs, _SharedFutureCompiler(), workers=2) as outcomes:
        seen = [(o.config, o.status) for o in outcomes]
    assert sorted(seen, key=lambda item: item[0]["occupancy"]) == [(c, TrialStatus.OK) for c in configs]
    assert not pool_threads()


def test_leaving_after_a_compile_timed_out_still_waits_for_the_compiles_within_their_time():
    """A compile past compile_timeout_s is abandoned; one still within its time is joined when the caller leaves
    (by an error here): no compile thread runs on after the tuning. Two workers: "hang" and "first" start at once,
    "late" when "first" ends, so it is well within its time when "hang" passes it."""
    started, go, finished, release = (threading.Event() for _ in range(4))

    def compile_fn(config):
        if config["name"] == "hang":
            release.wait(60)  # abandoned (released at the end, so no thread outlives the test)
        elif config["name"] == "first":
            time.sleep(2.5)
        else:
            started.set()
            go.wait(30)
            time.sleep(0.2)
            finished.set()

    configs = [Config(name=n) for n in ("hang", "first", "late")]
    with pytest.raises(RuntimeError, match="the caller's own"):
        with compile_in_order_of_completion(
            configs, FunctionCompiler(compile_fn), workers=2, timeout_s=4.0
        ) as outcomes:
            for outcome in outcomes:
                if outcome.status is TrialStatus.TIMEOUT:
                    assert outcome.config["name"] == "hang" and started.is_set()
                    go.set()
                    raise RuntimeError("the caller's own")
    assert finished.is_set()
    release.set()
    deadline = time.monotonic() + 30
    while pool_threads() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_an_error_mid_tune_reaches_the_caller_without_waiting_past_compile_timeout():
    """One compile hangs, compile_timeout_s=0.5, and the caller raises while measuring the other one: leaving
    waits for the hung compile no longer than its timeout (it is abandoned, still running, when the error
    reaches the caller), instead of joining it for as long as it hangs."""
    release, hang_ended = threading.Event(), threading.Event()

    def compile_fn(config):
        if config["name"] == "hang":
            release.wait(GATE_S)
            hang_ended.set()

    configs = [Config(name="hang"), Config(name="fast")]
    try:
        with pytest.raises(KeyboardInterrupt):
            with compile_in_order_of_completion(
                configs, FunctionCompiler(compile_fn), workers=2, timeout_s=0.5
            ) as outcomes:
                for outcome in outcomes:
                    assert outcome.config["name"] == "fast"
                    raise KeyboardInterrupt
        assert not hang_ended.is_set(), "leaving the pipeline joined a compile past compile_timeout_s"
    finally:
        release.set()
    deadline = time.monotonic() + 30
    while pool_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pool_threads()


def test_ctrl_c_while_measuring_reaches_the_caller_within_compile_timeout():
    """At the decorator: Ctrl-C (from setup=) while the first config is measured and another one's compile
    hangs; with compile_timeout_s=1 the KeyboardInterrupt reaches the caller while that compile still runs."""
    release, hang_ended = threading.Event(), threading.Event()

    def compile_fn(config):
        if config["BLOCK"] == 64:
            release.wait(GATE_S)
            hang_ended.set()

    def setup(**_):
        raise KeyboardInterrupt

    add = autotune(
        space={"BLOCK": (32, 64)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        setup=setup,
        tuning=Tuning(isolate="off", compile_workers=2, compile_timeout_s=1, warmup=0, reps=1, refine_topk=0),
    )(add_kernel)
    add.compiler_factory = lambda tuned, prepare: FunctionCompiler(compile_fn)
    try:
        with pytest.raises(KeyboardInterrupt):
            add(torch.randn(64), torch.randn(64), torch.empty(64), 64)
        assert not hang_ended.is_set(), "Ctrl-C waited for a compile past compile_timeout_s"
    finally:
        release.set()
    assert add.cache_info()["entries"] == 0


STICKY = "CUDA error: an illegal memory access was encountered (simulated by the test)"


def _unrestorable_add(hook: str, error: BaseException):
    """add_kernel with restore_value=["out"], whose `hook` (setup= or verify=) shrinks `out` so that putting it
    back raises (as a copy on a lost device does) and then raises `error`."""

    def spoil(x, y, out, n):
        out.resize_(0)  # the snapshot no longer fits: restoring it raises a RuntimeError of its own
        raise error

    return autotune(
        space={"BLOCK": (32, 64)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        restore_value=["out"],
        tuning=Tuning(isolate="off", compile_workers=0, warmup=0, reps=1, refine_topk=0),
        **{hook: spoil},
    )(add_kernel)


def test_a_lost_device_reaches_the_caller_as_device_error_not_as_the_restores_error():
    """A config poisons the device: the DeviceError (with its advice) reaches the caller; the runner does not
    try to put the arguments back on the dead device, whose raw CUDA error would take its place."""
    from autotune import DeviceError

    add = _unrestorable_add("verify", RuntimeError(STICKY))
    with pytest.raises(DeviceError, match="left the GPU unusable"):
        add(torch.randn(64), torch.randn(64), torch.empty(64), 64)


def test_an_error_closing_the_runner_does_not_replace_the_one_that_ended_the_tuning():
    """Ctrl-C (from setup=) ends the tuning and putting the arguments back fails too: the KeyboardInterrupt
    reaches the caller, the close's error noted on it, not raised in its place."""
    add = _unrestorable_add("setup", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt) as caught:
        add(torch.randn(64), torch.randn(64), torch.empty(64), 64)
    if sys.version_info >= (3, 11):
        assert any("trial runner failed too" in note for note in caught.value.__notes__)


def test_a_shut_down_compile_pool_ends_the_tuning_instead_of_failing_every_config():
    """Submitting to a shared pool that was shut down (at exit, in a forked child) is no config's compile error:
    it is raised, not recorded as each config's compile_error."""
    from autotune import AutotuneError
    from autotune.engine.thread_pool import DaemonThreadPool

    pool = DaemonThreadPool(2, "autotune-compile-test-shut")
    pool.shutdown()
    configs = [Config(BLOCK=b) for b in (1, 2)]
    with pytest.raises(AutotuneError, match="compile pool that was shut down"):
        with compile_in_order_of_completion(configs, FunctionCompiler(lambda c: None), workers=2, pool=pool) as outs:
            statuses = [o.status for o in outs]
            assert statuses == []  # not reached: no outcome is a config's
