"""Isolation through the interpreter with real processes: a config that segfaults and one that never ends cost
those configs only; the caller's process, its tensors and the other processes waiting on the key are fine."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from autotune import OptionError, Tuning, autotune
from autotune.isolation import shutdown
from autotune.isolation.pool import shared_worker

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


def run_child(kernel: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), TRITON_INTERPRET="1")
    return subprocess.Popen([sys.executable, "-c", CHILD.format(tests=str(TESTS), kernel=kernel)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel", ["crashy_add", "crashy_add_auto"])
def test_a_segfault_and_a_hang_cost_their_configs_and_a_waiting_process_gets_the_winner(kernel):
    procs = [run_child(kernel), run_child(kernel)]
    first, second = (result(p) for p in procs)
    for r in (first, second):
        assert r["ok"] and r["x_untouched"]
        assert r["winner"]["MODE"] == 0
    assert first["winner"] == second["winner"]
    tuned = [r for r in (first, second) if r["stats"]["tunings"] == 1]
    assert len(tuned) == 1 and [r["stats"]["disk_hits"] for r in (first, second) if r not in tuned] == [1]
    trials = tuned[0]["trials"]
    assert trials[str({"BLOCK": 32, "MODE": 1})][0] == "crashed" and "SIGSEGV" in trials[str({"BLOCK": 32, "MODE": 1})][1]
    assert trials[str({"BLOCK": 32, "MODE": 2})][0] == "timeout"
    assert [s for s, _ in trials.values()].count("ok") == 3


def test_process_isolation_refuses_a_kernel_no_worker_can_import():
    @triton.jit
    def local_add(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    with pytest.raises(OptionError, match="<locals>"):
        autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)",
                 tuning=Tuning(isolate="process"))(local_add)
    kernel = autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)",
                      tuning=Tuning(isolate="auto", compile_workers=0))(local_add)
    x, out = torch.randn(100), torch.empty(100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(x, out, 100)
        kernel(x, out, 100)                                    # the same kernel again: no second note
    notes = [w for w in caught if "tuned in this process" in str(w.message)]
    assert len(notes) == 1 and "<locals>" in str(notes[0].message)
    assert torch.equal(out, x)


def test_the_worker_is_reused_and_stopped_and_dies_with_its_parent(tmp_path):
    from isolation_kernels import crashy_add

    worker, _ = shared_worker()
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    before = worker.starts
    crashy_add(x, y, out, 64)       # a segfault and a hang: two restarts after the first start
    assert worker.starts - before == 3 and worker.alive
    pid = worker.proc.pid
    shutdown()
    assert not _alive(pid)
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(TESTS)!r})
        import torch
        from isolation_kernels import crashy_add
        from autotune.isolation.pool import shared_worker
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (exited, not reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return True


def test_one_worker_serves_several_kernels_and_keys():
    from isolation_kernels import plain_add, plain_mul

    for kernel, op, n, samples in ((plain_add, torch.add, 100, 3), (plain_mul, torch.mul, 100, 2),
                                   (plain_add, torch.add, 300, 3)):     # plain_add refines: 2 reps + 1 interleaved
        x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
        kernel(x, y, out, n)
        torch.testing.assert_close(out, op(x, y))
        assert all(t.ok for t in kernel.record().trials)
        assert [len(t.samples_ms) for t in kernel.record().trials] == [samples, samples]
