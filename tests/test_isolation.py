"""Isolation through the interpreter with real processes: a config that segfaults and one that never ends cost
those configs only; the caller's process, its tensors and the other processes waiting on the key are fine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from autotune import IsolationWarning, OptionError, Tuning, VerificationWarning, WorkerShutdownError, autotune
from autotune.engine.isolation import shutdown
from autotune.engine.isolation.pool import shared_worker

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {tests!r})
    import torch
    from isolation_kernels import {kernel} as kernel
    from autotune import stats
    x, y, out = torch.randn(1000), torch.randn(1000), torch.empty(1000)
    kept = x.clone()
    kernel(x, y, out, 1000)
    record = kernel.record()
    print(json.dumps({{"ok": bool(torch.allclose(out, x + y)), "x_untouched": bool(torch.equal(x, kept)),
                      "winner": dict(record.winner), "stats": stats()[kernel.name],
                      "trials": {{str(dict(t.config)): [t.status.value, t.error] for t in record.trials}}}}))
""")


_MEASURED: dict[str, float] = {}


@pytest.fixture
def worker_start_s() -> float:
    """How long a fresh worker takes, here and now, to start and tune a small kernel (measured once per session):
    the timeout of the tests whose config hangs. Under any load, an ok trial or compile in a running worker takes
    a small part of it (a start imports torch and triton), and a hang costs no more than a worker start."""
    if "start" not in _MEASURED:
        from isolation_kernels import plain_mul

        shutdown()  # a worker left by an earlier test would not start
        x = torch.randn(333)
        started = time.monotonic()
        plain_mul(x, x, torch.empty(333), 333)  # a key no other test tunes
        _MEASURED["start"] = time.monotonic() - started
    return _MEASURED["start"]


def run_child(kernel: str, trial_timeout_s: float) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), TRITON_INTERPRET="1")
    env["AUTOTUNE_TEST_TRIAL_TIMEOUT_S"] = repr(trial_timeout_s)  # read by isolation_kernels
    return subprocess.Popen(
        [sys.executable, "-c", CHILD.format(tests=str(TESTS), kernel=kernel)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel", ["crashy_add", "crashy_add_auto"])
def test_a_segfault_and_a_hang_cost_their_configs_and_a_waiting_process_gets_the_winner(kernel, worker_start_s):
    procs = [run_child(kernel, worker_start_s), run_child(kernel, worker_start_s)]
    first, second = (result(p) for p in procs)
    for r in (first, second):
        assert r["ok"] and r["x_untouched"]
        assert r["winner"]["MODE"] == 0
    assert first["winner"] == second["winner"]
    tuned = [r for r in (first, second) if r["stats"]["tunings"] == 1]
    assert len(tuned) == 1 and [r["stats"]["disk_hits"] for r in (first, second) if r not in tuned] == [1]
    trials = tuned[0]["trials"]
    assert (
        trials[str({"BLOCK": 32, "MODE": 1})][0] == "crashed" and "SIGSEGV" in trials[str({"BLOCK": 32, "MODE": 1})][1]
    )
    assert trials[str({"BLOCK": 32, "MODE": 2})][0] == "timeout"
    assert [s for s, _ in trials.values()].count("ok") == 3


def test_process_isolation_refuses_a_kernel_no_worker_can_import():
    @triton.jit
    def local_add(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    with pytest.raises(OptionError, match="isolate='process' on local_add: .*<locals>.*Define the kernel at the top"):
        autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(isolate="process"))(
            local_add
        )
    with pytest.MonkeyPatch.context() as env:  # the environment asking is refused as early, and named
        env.setenv("AUTOTUNE_ISOLATE", "process")
        with pytest.raises(OptionError, match="AUTOTUNE_ISOLATE=process on local_add: .*Define the kernel at the"):
            autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)")(local_add)
    kernel = autotune(
        space={"BLOCK": [32, 64]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(isolate="auto", compile_workers=0),
    )(local_add)
    x, out = torch.randn(100), torch.empty(100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(x, out, 100)
        kernel(x, out, 100)  # the same kernel again: no second note
    notes = [w for w in caught if "tuned in this process" in str(w.message)]
    assert len(notes) == 1 and "<locals>" in str(notes[0].message) and notes[0].category is IsolationWarning
    assert torch.equal(out, x)


def test_the_worker_is_reused_and_stopped_and_dies_with_its_parent(tmp_path, worker_start_s, monkeypatch):
    from isolation_kernels import crashy_add

    monkeypatch.setattr(crashy_add, "tuning", crashy_add.tuning.replace(trial_timeout_s=worker_start_s))
    shutdown()  # whatever an earlier test left running: this one starts from no worker
    worker, _ = shared_worker()
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    before = worker.starts
    crashy_add(x, y, out, 64)  # a segfault and a hang: two restarts after the first start
    assert worker.starts - before == 3 and worker.alive
    pid = worker.proc.pid
    shutdown()
    assert not _alive(pid)
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(TESTS)!r})
        import torch
        from isolation_kernels import crashy_add
        from autotune.engine.isolation.pool import shared_worker
        worker, _ = shared_worker()
        worker.start()
        print(worker.proc.pid, flush=True)
        time.sleep(600)
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO), TRITON_INTERPRET="1")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    child_pid = int(parent.stdout.readline())
    assert _alive(child_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 60
    while _alive(child_pid):
        assert time.monotonic() < deadline, "the worker outlived its SIGKILLed parent"
        time.sleep(0.1)


def test_shutdown_during_a_tuning_ends_it_with_an_error_and_restarts_no_worker(monkeypatch, tmp_path):
    from isolation_kernels import crashy_add

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    # The hanging config now hangs for two minutes: the tuning is surely still running when shutdown() comes.
    monkeypatch.setattr(crashy_add, "tuning", crashy_add.tuning.replace(trial_timeout_s=120.0))
    shutdown()
    worker, requests = shared_worker()
    x, y, out = torch.randn(48), torch.randn(48), torch.empty(48)
    outcome: dict = {}

    def tune() -> None:
        try:
            crashy_add(x, y, out, 48)
            outcome["result"] = "tuned"
        except Exception as exc:  # noqa: BLE001 - the test looks at what it was
            outcome["result"] = exc

    thread = threading.Thread(target=tune)
    thread.start()
    deadline = time.monotonic() + 120
    while not (worker.alive and requests.locked()):  # the tuning's worker is up and answering a request
        assert time.monotonic() < deadline and thread.is_alive(), outcome
        time.sleep(0.05)
    pid = worker.proc.pid
    shutdown()  # whether mid-request or between two: the same end
    thread.join(timeout=120)
    assert not thread.is_alive()
    error = outcome["result"]
    assert isinstance(error, WorkerShutdownError) and "no config is to blame" in str(error), error
    assert not _alive(pid) and not worker.alive and worker.proc is None  # not started again by the tuning
    assert crashy_add.cache_info().get("tunings", 0) == 0 and not list(tmp_path.rglob("*.json"))  # nothing stored


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return True


def test_one_worker_serves_several_kernels_and_keys():
    from isolation_kernels import plain_add, plain_mul

    for kernel, op, n, samples in (
        (plain_add, torch.add, 100, 1),
        (plain_mul, torch.mul, 100, 2),
        (plain_add, torch.add, 300, 1),
    ):  # plain_add refines: its 1 interleaved round
        x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
        kernel(x, y, out, n)
        torch.testing.assert_close(out, op(x, y))
        assert all(t.ok for t in kernel.record().trials)
        assert [len(t.samples_ms) for t in kernel.record().trials] == [samples, samples]


def test_compile_workers_compile_side_by_side_while_the_measuring_worker_measures(tmp_path):
    """compile_workers=2 under isolation: two compiles run at once in two compile workers, a third compiles while
    the measuring worker measures (each waits on a gate only that overlap opens), and a compile that segfaults
    costs its config only."""
    code = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(TESTS)!r})
        import torch
        from isolation_kernels import gated_add
        x, y, out = torch.randn(500), torch.randn(500), torch.empty(500)
        gated_add(x, y, out, 500)
        record = gated_add.record()
        from autotune.engine.isolation.pool import compile_workers
        holding = [w.call_token for w in compile_workers().workers if w.call_token is not None]
        print(json.dumps({{"ok": bool(torch.allclose(out, x + y)), "pid": os.getpid(), "winner": dict(record.winner),
                          "holding": holding,
                          "trials": {{t.config["BLOCK"]: [t.status.value, t.error, t.compile_s]
                                     for t in record.trials}}}}))
    """)
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        TRITON_INTERPRET="1",
        AUTOTUNE_TEST_GATE_DIR=str(tmp_path),
        AUTOTUNE_CACHE_DIR=str(tmp_path / "cache"),
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    trials = {int(block): value for block, value in got["trials"].items()}
    assert got["ok"]
    assert {block: trials[block][0] for block in trials} == {32: "ok", 64: "ok", 128: "ok", 16: "crashed"}
    assert "SIGSEGV" in trials[16][1]
    assert all(trials[block][2] is not None for block in (32, 64, 128))  # compile_s from the compile workers
    assert got["holding"] == []  # the tuning ended: no compile worker keeps the call's (device-sized) tensors
    compilers = {int(p.name.split("-")[2]) for p in tmp_path.glob("compile-*")}
    measurers = {int(p.name.split("-")[1]) for p in tmp_path.glob("measure-*")}
    assert len(measurers) == 1 and len(compilers) >= 2
    assert not compilers & measurers and got["pid"] not in compilers | measurers
    deadline = time.monotonic() + 60  # the child has exited: so have its workers
    while any(_alive(pid) for pid in compilers | measurers):
        assert time.monotonic() < deadline, "a worker outlived the process that started it"
        time.sleep(0.1)


def test_the_default_tunes_in_process_and_autotune_isolate_auto_isolates_an_importable_kernel(monkeypatch):
    import isolation_kernels
    from isolation_kernels import default_add

    monkeypatch.delenv("AUTOTUNE_ISOLATE", raising=False)
    del isolation_kernels.SETUP_PIDS[:]
    x, y, out = torch.randn(50), torch.randn(50), torch.empty(50)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in-process by default: nothing to say
        default_add(x, y, out, 50)
    assert set(isolation_kernels.SETUP_PIDS) == {os.getpid()} and default_add.record().where == "in-process"
    monkeypatch.setenv("AUTOTUNE_ISOLATE", "auto")
    del isolation_kernels.SETUP_PIDS[:]
    threads = set(threading.enumerate())
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    default_add(x, y, out, 100)  # measured in the worker: its setup= ran there
    torch.testing.assert_close(out, x + y)
    assert all(t.ok for t in default_add.record().trials) and isolation_kernels.SETUP_PIDS == []
    assert default_add.record().where == "worker process"
    assert set(threading.enumerate()) <= threads  # no thread of the tuning is left in this process
    monkeypatch.setenv("AUTOTUNE_ISOLATE", "off")
    x, y, out = torch.randn(200), torch.randn(200), torch.empty(200)
    default_add(x, y, out, 200)  # a new key, tuned in this process
    assert set(isolation_kernels.SETUP_PIDS) == {os.getpid()}
    monkeypatch.setenv("AUTOTUNE_ISOLATE", "sometimes")
    x, y, out = torch.randn(300), torch.randn(300), torch.empty(300)
    with pytest.raises(OptionError, match="AUTOTUNE_ISOLATE='sometimes'.*auto.*process.*off"):
        default_add(x, y, out, 300)


def test_a_kernel_autotuned_away_from_its_definition_is_decorated_anew_in_the_worker(monkeypatch):
    """`autotune(...)(module.jit_kernel)`: the worker imports the @triton.jit kernel and decorates it with the same
    (pickled) arguments; with a lambda among them it cannot, and the kernel is tuned in-process, saying why."""
    import isolation_kernels

    monkeypatch.setenv("AUTOTUNE_ISOLATE", "auto")
    from isolation_kernels import plain_jit_add

    space = {"BLOCK": [32, 64]}
    del isolation_kernels.SETUP_PIDS[:]
    tuned = autotune(
        space=space,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        setup=isolation_kernels._note_pid,
        tuning=Tuning(compile_workers=0, warmup=0, reps=1),
    )(plain_jit_add)
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # isolated: no note
        tuned(x, y, out, 100)
    torch.testing.assert_close(out, x + y)
    assert all(t.ok for t in tuned.record().trials) and isolation_kernels.SETUP_PIDS == []  # setup= ran there

    local = autotune(
        space=space,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        verify=lambda **args: True,
        tuning=Tuning(compile_workers=0, warmup=0, reps=1),
    )(plain_jit_add)
    x, y, out = torch.randn(120), torch.randn(120), torch.empty(120)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        local(x, y, out, 120)
    notes = [str(w.message) for w in caught if "tuned in this process" in str(w.message)]
    assert len(notes) == 1 and "isolation_kernels.plain_jit_add holds the plain @triton.jit kernel" in notes[0]
    assert "cannot be sent to a worker" in notes[0]
    torch.testing.assert_close(out, x + y)
    strict = autotune(
        space=space,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        verify=lambda **args: True,  # decorating
        tuning=Tuning(isolate="process"),
    )(plain_jit_add)  # is fine: the name is checked at the call
    x, y, out = torch.randn(128), torch.randn(128), torch.empty(128)
    with pytest.raises(
        OptionError,
        match="isolate='process'.*apply @autotune where the kernel is defined.*Define the kernel at the top level",
    ):
        strict(x, y, out, 128)  # a key not tuned yet


def test_the_triton_autotune_drop_in_stays_in_process_unless_asked():
    from autotune import compat

    runs: list = []
    kernel = compat.autotune(
        configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})],
        key=["n"],
        pre_hook=lambda nargs, reset_only=False: runs.append(os.getpid()),
    )(__import__("isolation_kernels").plain_jit_add)
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no isolation note either: "off" is compat's default
        kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, out, 100)
    torch.testing.assert_close(out, x + y)
    assert runs and set(runs) == {os.getpid()}


def test_a_poisoned_device_costs_the_config_in_a_worker_and_stops_an_in_process_tuning_saying_what_to_do():
    from isolation_kernels import poisoning_add, poisoning_verify

    from autotune import DeviceError

    worker, _ = shared_worker()
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    poisoning_add(x, y, out, 100)
    torch.testing.assert_close(out, x + y)
    statuses = [(t.config["WRONG"], t.status.value) for t in poisoning_add.record().trials]
    assert sorted(statuses) == [(0, "ok"), (0, "ok"), (1, "crashed")]
    wrong = next(t for t in poisoning_add.record().trials if t.config["WRONG"])
    assert "poisoned the device" in wrong.error and "illegal memory access" in wrong.error
    assert "isolate='process'" not in wrong.error  # the in-process advice is not this isolated config's
    assert worker.alive  # a fresh worker took over after the poisoned one was killed

    @triton.jit
    def local_add(x, y, out, n, BLOCK: tl.constexpr, WRONG: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        a, b = tl.load(x + offs, mask=offs < n), tl.load(y + offs, mask=offs < n)
        tl.store(out + offs, a - b if WRONG else a + b, mask=offs < n)

    in_process = autotune(
        space=[{"BLOCK": 32, "WRONG": 1}, {"BLOCK": 64, "WRONG": 0}],
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        verify=poisoning_verify,
        tuning=Tuning(isolate="off", compile_workers=0),
    )(local_add)
    with pytest.raises(DeviceError, match="left the GPU unusable.*isolate='process'"):
        in_process(x, y, out, 100)


def test_autotune_launch_tunes_in_a_worker_too(monkeypatch):
    import isolation_kernels

    monkeypatch.setenv("AUTOTUNE_ISOLATE", "auto")

    from autotune import autotune_launch

    del isolation_kernels.SETUP_PIDS[:]
    x, y, out = torch.randn(90), torch.randn(90), torch.empty(90)
    result = autotune_launch(
        isolation_kernels.plain_jit_add,
        space={"BLOCK": [32, 64]},
        args=(x, y, out, 90),
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        setup=isolation_kernels._note_pid,
        tuning=Tuning(compile_workers=0, warmup=0, reps=1),
    )
    torch.testing.assert_close(out, x + y)
    assert not result.cache_hit and all(t.ok for t in result.record.trials)
    assert isolation_kernels.SETUP_PIDS == []  # its trials ran in the worker


def test_a_call_whose_arguments_cannot_be_sent_to_a_worker_is_tuned_in_process_saying_why(monkeypatch):
    from isolation_kernels import apply_add, negate

    monkeypatch.setenv("AUTOTUNE_ISOLATE", "auto")

    x, y, out = torch.randn(70), torch.randn(70), torch.empty(70)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_add(x, y, out, 70, negate)  # a @triton.jit function as an argument: no pickle
    notes = [str(w.message) for w in caught if "tuned in this process" in str(w.message)]
    assert len(notes) == 1 and "an argument of the call cannot be sent to a worker" in notes[0]
    torch.testing.assert_close(out, -(x + y))


def test_compile_timeout_s_kills_a_compile_worker_that_does_not_finish(worker_start_s, monkeypatch, tmp_path):
    from isolation_kernels import slow_compile_add

    limit = round(worker_start_s, 1)
    monkeypatch.setattr(slow_compile_add, "tuning", slow_compile_add.tuning.replace(compile_timeout_s=limit))
    monkeypatch.setenv("AUTOTUNE_TEST_GATE_DIR", str(tmp_path))  # where the compiles note their worker's life
    shutdown()  # compile workers started now, with the variable
    try:
        x, y, out = torch.randn(80), torch.randn(80), torch.empty(80)
        slow_compile_add(x, y, out, 80)  # BLOCK=64 would compile forever
    finally:
        shutdown()
    torch.testing.assert_close(out, x + y)
    trials = {t.config["BLOCK"]: t for t in slow_compile_add.record().trials}
    assert {b: t.status.value for b, t in trials.items()} == {32: "ok", 64: "timeout", 128: "ok"}
    assert f"longer than {limit:g} s" in trials[64].error
    for block in (32, 128):  # the worker's own compile, not its start: less than the worker had lived by its end
        assert trials[block].compile_s < float((tmp_path / f"compiled-{block}").read_text()), trials[block]


def test_compile_timeout_s_bounds_a_compile_in_the_measuring_worker_without_compile_workers(
    worker_start_s, monkeypatch
):
    """compile_workers=0 under isolation: the measuring worker compiles each config as its trial begins, and that
    compile has compile_timeout_s (below trial_timeout_s), not only the trial's limit."""
    from isolation_kernels import slow_compile_add

    limit = round(worker_start_s, 1)
    tuning = slow_compile_add.tuning.replace(compile_workers=0, compile_timeout_s=limit, trial_timeout_s=600)
    monkeypatch.setattr(slow_compile_add, "tuning", tuning)
    x, y, out = torch.randn(90), torch.randn(90), torch.empty(90)
    slow_compile_add(x, y, out, 90)  # BLOCK=64 would compile forever: killed after `limit`, not 600 s
    torch.testing.assert_close(out, x + y)
    trials = {t.config["BLOCK"]: t for t in slow_compile_add.record().trials}
    assert {b: t.status.value for b, t in trials.items()} == {32: "ok", 64: "timeout", 128: "ok"}
    assert f"longer than compile_timeout_s={limit:g} s" in trials[64].error


def test_arguments_travel_as_copies_of_the_same_layout_and_alignment():
    from autotune.engine.isolation.call_copies import decode_args, encode_args

    base = torch.arange(40, dtype=torch.float32)
    originals = {
        "shifted": base[1:],
        "transposed": base[:36].reshape(6, 6).t(),
        "empty": torch.empty(0, 3),
        "broadcast": base[3:4].expand(5, 8),
        "overlapping": base.as_strided((6, 4), (2, 1), 1),
        "n": 7,
    }
    for data in (True, False):
        copies = decode_args(encode_args(originals, data=data))
        assert copies["n"] == 7
        for name in ("shifted", "transposed", "empty", "broadcast", "overlapping"):
            original, copy = originals[name], copies[name]
            assert copy.shape == original.shape and copy.stride() == original.stride()
            assert copy.dtype == original.dtype and copy.data_ptr() % 16 == original.data_ptr() % 16
            assert copy.data_ptr() != original.data_ptr() or original.numel() == 0
            if data:
                assert torch.equal(copy, original)


def test_a_worker_that_cannot_start_leaves_auto_tuning_in_process(monkeypatch):
    import isolation_kernels
    from isolation_kernels import default_add

    shutdown()  # the next tuning has to start a worker
    monkeypatch.setenv("AUTOTUNE_ISOLATE", "auto")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    del isolation_kernels.SETUP_PIDS[:]
    x, y, out = torch.randn(150), torch.randn(150), torch.empty(150)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        default_add(x, y, out, 150)
    notes = [str(w.message) for w in caught if "tuned in this process" in str(w.message)]
    assert len(notes) == 1 and "could not load" in notes[0] and "nonexistent" in notes[0]
    torch.testing.assert_close(out, x + y)
    assert set(isolation_kernels.SETUP_PIDS) == {os.getpid()}


@pytest.mark.parametrize("isolate", ["off", "process"])
def test_a_mistake_in_the_callers_verify_is_raised_as_its_own_class_in_a_worker_as_in_process(monkeypatch, isolate):
    """A TypeError in the user's verify= is the caller's to fix, not a config's failure: it reaches the caller as
    a TypeError with its message either way (isolated, with the worker's traceback as a note)."""
    from isolation_kernels import buggy_verify_add

    monkeypatch.setenv("AUTOTUNE_ISOLATE", isolate)
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    with pytest.raises(TypeError, match="allclose.. missing 1 required") as caught:
        buggy_verify_add(x, y, out, 100)
    notes = "\n".join(getattr(caught.value, "__notes__", ()))
    if isolate == "process":
        assert "raised in the tuning worker of buggy_verify_add" in str(caught.value)
        if sys.version_info >= (3, 11):
            assert "buggy_verify" in notes and "torch.allclose(out)" in notes
    else:
        assert "worker" not in str(caught.value) and not notes


def test_a_worker_error_keeps_an_autotune_class_and_names_the_worker_for_any_other():
    """Only a class name comes back from the worker: an autotune error or a built-in one is rebuilt as itself, any
    other class (the user's own, which the worker may not share) as an AutotuneError that names the worker."""
    from autotune import AutotuneError, KeyValueError
    from autotune.engine.isolation.runner import worker_error

    own = worker_error(
        ("error", "KeyValueError: bad key", "tb", ("autotune.errors", "KeyValueError", "bad key")),
        "the tuning worker of k",
    )
    assert type(own) is KeyValueError and str(own) == "bad key (raised in the tuning worker of k)"
    foreign = worker_error(("error", "MyError: boom", "tb", ("mymodule", "MyError", "boom")), "the tuning worker of k")
    assert type(foreign) is AutotuneError and str(foreign) == "the tuning worker of k failed: MyError: boom"
    for spoof in (
        ("autotune.errors", "warn_at_caller", "x"),
        ("builtins", "UserWarning", "x"),
        ("builtins", "eval", "x"),
        ("os", "system", "x"),
    ):
        assert type(worker_error(("error", "x", "", spoof), "w")) is AutotuneError
    from autotune.engine.isolation.worker import raised_message

    missing = KeyError("BLOCK")  # str() is the repr "'BLOCK'": rebuilt, it is quoted once
    rebuilt = worker_error(
        ("error", f"KeyError: {missing}", "tb", ("builtins", "KeyError", raised_message(missing))), "w"
    )
    assert type(rebuilt) is KeyError and str(rebuilt) == "'BLOCK (raised in w)'"
    old_worker = worker_error(("error", "the kernel or the call's arguments are not loaded in the worker"), "w")
    assert type(old_worker) is AutotuneError and "not loaded" in str(old_worker)
    for odd in (
        ("error", "x", "tb", None),
        ("error", "x", "tb", ("builtins", "TypeError")),
        ("error", "x", 3, ("builtins", 7, "m")),
        ("error", "x", "tb", (["builtins"], "TypeError", "m")),
    ):
        assert type(worker_error(odd, "w")) is AutotuneError  # never raises while reading the reply
    assert (
        type(worker_error(("error", "TypeError: m", "tb", ("builtins", "TypeError", "m")), "w", own_class=False))
        is AutotuneError
    )


def test_an_error_of_the_compile_workers_setup_stops_the_tuning_instead_of_failing_every_config():
    """A compile worker answers "error" only for what is not the config's fault (here the kernel's compiler setup):
    the tuning stops with that error; no config is recorded as a compile error and nothing is stored."""
    from isolation_kernels import unconfigured_compiler_add

    from autotune import AutotuneError, NoValidConfigError

    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    with pytest.raises(
        AutotuneError,
        match="compile worker of unconfigured_compiler_add failed: RuntimeError: my_toolchain is not configured",
    ) as caught:
        unconfigured_compiler_add(x, y, out, 100)
    assert not isinstance(caught.value, NoValidConfigError)
    assert unconfigured_compiler_add.cache_info()["entries"] == 0


WARMS_UP_AT_IMPORT = textwrap.dedent("""
    import os
    import torch
    import triton
    import triton.language as tl
    from autotune import Tuning, autotune

    @autotune(space={"BLOCK": [16, 32]}, key=["n"], grid="(cdiv(n, $BLOCK),)",
              tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0))     # isolate: the default
    @triton.jit
    def warm_add(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

    WORKER_PIDS = []
    _x = torch.ones(64)
    OUT = torch.empty(64)
    warm_add(_x, _x, OUT, 64)     # a warm-up at import, as some libraries do
""")


def test_a_module_that_calls_its_kernel_at_import_does_not_deadlock_with_its_worker(tmp_path):
    """The parent tunes the import-time call in a worker that imports the module, so calls the kernel too: there the
    call launches the fallback config untuned instead of waiting for the key's lock the parent holds (a deadlock
    until the 300 s load timeout). The child's timeout is one only such a hang reaches."""
    (tmp_path / "warms_up_at_import.py").write_text(WARMS_UP_AT_IMPORT)
    script = textwrap.dedent("""
        import json, warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            import warms_up_at_import as m
        record = m.warm_add.record((64,))
        print(json.dumps({"ok": bool((m.OUT == 2).all()), "notes": [str(w.message) for w in caught],
                          "statuses": [t.status.value for t in record.trials]}))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]), TRITON_INTERPRET="1")
    env.pop("AUTOTUNE_ISOLATE", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["statuses"] == ["ok", "ok"]
    assert not [n for n in out["notes"] if "tuned in this process" in n]  # tuned in the worker, not in-process


def test_a_broadcast_argument_is_sent_to_the_worker_as_the_view_it_is():
    """A zero-stride view (a bias expanded to n) travels as the storage span it covers and is rebuilt as the same
    view in the worker (copying its values into a strided view of n distinct elements failed)."""
    from isolation_kernels import strided_add

    n = 64
    x, y, out = torch.rand(1).expand(n), torch.rand(n), torch.zeros(n)
    strided_add(x, x.stride(0), y, out, n)
    assert [t.status.value for t in strided_add.record((n,)).trials] == ["ok", "ok"]
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize("isolate", ["off", "process"])
def test_a_config_that_fails_verify_is_warned_of_in_the_callers_process_either_way(monkeypatch, isolate):
    from isolation_kernels import verified_add

    monkeypatch.setenv("AUTOTUNE_ISOLATE", isolate)
    n = {"off": 100, "process": 101}[isolate]  # a key of its own: the kernel's memory outlives a test
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verified_add(x, y, out, n)
    notes = [str(w.message) for w in caught if "failed verification" in str(w.message)]
    assert notes == [
        "autotune: verified_add config {'BLOCK': 64, 'WRONG': 1} failed verification and is skipped: "
        "verify(...) returned False"
    ]
    assert [w.category for w in caught if "failed verification" in str(w.message)] == [VerificationWarning]
    assert caught[[str(w.message) for w in caught].index(notes[0])].filename == __file__  # at the caller's line
    torch.testing.assert_close(out, x + y)


def test_a_module_on_a_sys_path_entry_added_after_the_worker_started_loads_in_it(tmp_path, monkeypatch):
    """The worker's PYTHONPATH is the caller's sys.path when it started; each load sends sys.path as it is now."""
    from isolation_kernels import plain_add

    x, y, out = torch.randn(50), torch.randn(50), torch.empty(50)
    plain_add(x, y, out, 50)  # the measuring worker is running now
    worker, _ = shared_worker()
    assert worker.alive
    late = tmp_path / "late"
    late.mkdir()
    (late / "late_path_kernel.py").write_text(
        WARMS_UP_AT_IMPORT.replace("warm_add(_x, _x, OUT, 64)", "").replace(
            "Tuning(compile_workers=0", "Tuning(isolate='process', compile_workers=0"
        )
    )
    monkeypatch.syspath_prepend(str(late))
    from late_path_kernel import warm_add

    started = worker.starts
    warm_add(x, y, out, 50)
    assert [t.status.value for t in warm_add.record((50,)).trials] == ["ok", "ok"]
    assert worker.starts == started  # in the same worker
    torch.testing.assert_close(out, x + y)


def test_every_config_failing_the_same_way_in_a_worker_is_raised_from_that_error_as_in_process():
    """In process the NoValidConfigError is raised from the exception itself; from a worker only its text comes
    back, and the chain still shows it (it was None)."""
    from isolation_kernels import not_a_power_of_two_add

    from autotune import AutotuneError, NoValidConfigError

    x = torch.randn(64)
    with pytest.raises(NoValidConfigError, match="failed with the same error") as caught:
        not_a_power_of_two_add(x, x, torch.empty(64), 64)
    cause = caught.value.__cause__
    assert isinstance(cause, AutotuneError) and "power of 2" in str(cause) and "raised in a worker" in str(cause)


def test_a_lambda_grid_is_tuned_in_process_with_the_grid_s_fix_not_the_kernel_s(monkeypatch):
    """The kernel is at the top level of an importable module: the note names the grid, and what to launch with."""
    from isolation_kernels import launched_with_a_grid

    monkeypatch.setenv("AUTOTUNE_ISOLATE", "auto")

    x, y, out = torch.randn(90), torch.randn(90), torch.empty(90)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launched_with_a_grid[lambda meta: (triton.cdiv(90, meta["BLOCK"]),)](x, y, out, 90)
    notes = [str(w.message) for w in caught if "tuned in this process" in str(w.message)]
    assert len(notes) == 1 and "its launch grid <function" in notes[0]
    assert "launch it with a tuple or a module-level function as the grid" in notes[0]
    assert "decorate it at the top level" not in notes[0]
    torch.testing.assert_close(out, x + y)


def test_a_worker_does_not_repeat_what_decorating_warned_of(monkeypatch, capfd):
    """A worker imports the kernel's module, so it decorates every kernel there again: what that warned of (here a
    misspelt AUTOTUNE_* variable, which the worker inherits) the parent has already said, and the worker's stderr,
    the caller's, stays free of it."""
    from isolation_kernels import plain_mul

    monkeypatch.setenv("AUTOTUNE_ISOLATION", "1")  # close to AUTOTUNE_ISOLATE: warned where decorating sees it
    shutdown()  # a fresh worker, started with the variable set
    x, y, out = torch.randn(47), torch.randn(47), torch.empty(47)
    tunings = plain_mul.cache_info()["tunings"]
    plain_mul(x, y, out, 47)
    torch.testing.assert_close(out, x * y)
    assert plain_mul.cache_info()["tunings"] == tunings + 1 and all(t.ok for t in plain_mul.record().trials)
    shutdown()
    assert "AUTOTUNE_ISOLATION" not in capfd.readouterr().err


def test_a_pathlib_path_on_sys_path_does_not_keep_the_worker_from_starting(monkeypatch, tmp_path):
    """Import skips a sys.path entry that is not a string (a `sys.path.append(Path(...))` is common): the worker's
    PYTHONPATH and the sys.path sent to it keep the strings, and the isolated tuning runs in a new worker."""
    from isolation_kernels import plain_add

    shutdown()  # the next tuning has to start a worker
    monkeypatch.setattr(sys, "path", [*sys.path, tmp_path, Path(tmp_path / "other")])
    x, y, out = torch.randn(170), torch.randn(170), torch.empty(170)
    plain_add(x, y, out, 170)
    assert plain_add.record((170,)).where == "worker process"
    assert [t.status.value for t in plain_add.record((170,)).trials] == ["ok", "ok"]
    torch.testing.assert_close(out, x + y)


def test_an_unexpected_error_starting_the_worker_leaves_auto_tuning_in_process(monkeypatch):
    """isolate="auto" tunes in-process when the worker cannot be started, whatever the error starting it."""
    import isolation_kernels
    from isolation_kernels import default_add

    from autotune.engine.isolation.pool import Worker

    def broken_start(self):
        raise TypeError("an unexpected failure starting the worker")

    shutdown()  # the next tuning has to start a worker
    monkeypatch.setenv("AUTOTUNE_ISOLATE", "auto")
    monkeypatch.setattr(Worker, "_start", broken_start)
    del isolation_kernels.SETUP_PIDS[:]
    x, y, out = torch.randn(171), torch.randn(171), torch.empty(171)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IsolationWarning)  # said once per kernel: an earlier test may have
        default_add(x, y, out, 171)
    assert default_add.record((171,)).where == "in-process"
    assert set(isolation_kernels.SETUP_PIDS) == {os.getpid()}
    torch.testing.assert_close(out, x + y)


def test_two_isolated_tunings_taking_turns_in_the_worker_send_their_arguments_once_each(monkeypatch):
    """Two threads tune two kernels at once in the one measuring worker, their trials alternating: the worker keeps
    both tunings' copies, so each tuning's arguments are sent once, not again at every turn."""
    from isolation_kernels import plain_add, plain_mul

    from autotune.engine.isolation import pool
    from autotune.engine.isolation.runner import WorkerRunner

    sends: dict[str, int] = {}
    real_request, real_measure = pool.Worker.request, WorkerRunner.measure

    def request(self, message, *args, **kwargs):
        if message[0] == "call" and message[2]:
            sends[message[1]] = sends.get(message[1], 0) + 1
        return real_request(self, message, *args, **kwargs)

    turn = {"next": "add", "done": set()}
    cond = threading.Condition()

    def measure(self, config):  # one trial of one tuning, then one of the other: they alternate in the worker
        me = "add" if self.kernel_name == plain_add.name else "mul"
        other = "mul" if me == "add" else "add"
        with cond:
            assert cond.wait_for(lambda: turn["next"] == me or other in turn["done"], timeout=120)
        try:
            return real_measure(self, config)
        finally:
            with cond:
                turn["next"] = other
                cond.notify_all()

    monkeypatch.setattr(pool.Worker, "request", request)
    monkeypatch.setattr(WorkerRunner, "measure", measure)
    outs = {}

    def tune(name, kernel):
        try:
            x, y, out = torch.randn(777), torch.randn(777), torch.empty(777)
            kernel(x, y, out, 777)
            outs[name] = (x, y, out)
        finally:
            with cond:
                turn["done"].add(name)
                cond.notify_all()

    threads = [threading.Thread(target=tune, args=(n, k)) for n, k in (("add", plain_add), ("mul", plain_mul))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert set(outs) == {"add", "mul"}
    torch.testing.assert_close(outs["add"][2], outs["add"][0] + outs["add"][1])
    torch.testing.assert_close(outs["mul"][2], outs["mul"][0] * outs["mul"][1])
    assert len(sends) == 2 and set(sends.values()) == {1}, sends
    worker, _ = shared_worker()
    assert worker.call_token is None  # both tunings ended: the worker freed both copies


FLAKY_WHEN_REMEASURED = '''
import triton
import triton.language as tl

from autotune import Tuning, autotune

LAST, RUNS = {}, {}


def remember(**named):
    LAST.update(named)


def bench(fn):
    """TAG's time is TAG ms; TAG 2 raises from its second measurement on (the re-measurement)."""
    fn()
    tag = int(LAST["out"][0])
    RUNS[tag] = RUNS.get(tag, 0) + 1
    if tag == 2 and RUNS[tag] > 1:
        raise RuntimeError("flaky launch")
    return [float(tag)] * 2


@autotune(space={"TAG": (1, 2, 3)}, grid="(1,)", setup=remember, do_bench=bench,
          tuning=Tuning(isolate="process", compile_workers=0, warmup=0, reps=1, refine_topk=3, refine_reps=2))
@triton.jit
def flaky_tagged(out, n, TAG: tl.constexpr):
    tl.store(out, TAG + n * 0)
'''


def test_a_config_failing_in_the_workers_re_measurement_is_recorded_with_its_error(tmp_path, monkeypatch):
    """A config that raises only when re-measured in the worker is failed with the worker's actual error (its
    class and text), as in-process, not a placeholder that says only that it raised."""
    (tmp_path / "flaky_remeasure_kernel.py").write_text(FLAKY_WHEN_REMEASURED)
    monkeypatch.syspath_prepend(str(tmp_path))
    from flaky_remeasure_kernel import flaky_tagged

    out = torch.zeros(1, dtype=torch.int32)
    flaky_tagged(out, 1)
    record = flaky_tagged.record(())
    trials = {t.config["TAG"]: t for t in record.trials}
    assert record.winner["TAG"] == 1 and trials[2].status.value == "runtime_error"
    assert "RuntimeError: flaky launch" in trials[2].error and trials[2].error.startswith("failed when re-measured")


def test_a_tuning_ending_while_a_compile_worker_is_busy_has_its_arguments_freed_when_the_worker_is_given_back():
    """A compile worker busy for another tuning when this tuning ends is not asked then (it is lent out); it frees
    this tuning's copies as soon as it is given back, not when newer tunings' calls push them out."""
    from autotune.engine.isolation.call_copies import encode_call
    from autotune.engine.isolation.pool import WorkerPool

    pool = WorkerPool()
    x = torch.randn(64)
    try:
        with pool.borrow(1) as worker:
            worker.start()
            worker.send_call("ended", [encode_call((x,), {}, data=False)], None, 60)
            worker.send_call("running", [encode_call((x,), {}, data=False)], None, 60)
            pool.drop_call("ended", 60)  # its tuning ended while the worker is busy for "running"
            assert list(worker.held) == ["ended", "running"]  # lent out: not asked now
        assert list(worker.held) == ["running"]  # given back: freed, by the worker's own reply
        assert worker.alive
        pool.drop_call("running", 60)  # idle now: freed at once
        assert list(worker.held) == []
    finally:
        pool.close()
