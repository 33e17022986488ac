"""Process isolation under hostile conditions (issue 40, items 9-11), in fresh processes through the interpreter: a
config that hangs with no trial_timeout_s set, a worker killed from outside (as by the OOM killer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def run_child(body: str, tmp_path: Path) -> dict:
    code = (
        textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(TESTS)!r})
        import torch
        import autotune.engine.isolation.runner as runner
        import isolation_kernels as k
    """)
        + body
    )
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        TRITON_INTERPRET="1",
        AUTOTUNE_TEST_GATE_DIR=str(tmp_path),
        AUTOTUNE_CACHE_DIR=str(tmp_path / "cache"),
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"out": json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


TRIALS = textwrap.dedent("""
    x, y, out = torch.randn(500), torch.randn(500), torch.empty(500)
    kernel(x, y, out, 500)
    record = kernel.record()
    print(json.dumps({"ok": bool(torch.allclose(out, x + y)), "winner": dict(record.winner),
                      "trials": {t.config["BLOCK"]: [t.status.value, t.error] for t in record.trials}}))
""")


def test_a_hang_under_process_isolation_times_out_without_trial_timeout_s(tmp_path):
    """#40 item 11: the default limit (shortened here from the interpreter's 300 s) applies when none is set."""
    got = run_child("runner.INTERPRETER_TRIAL_TIMEOUT_S = 5.0\nkernel = k.hang_add\n" + TRIALS, tmp_path)["out"]
    assert got["ok"] and got["winner"] == {"BLOCK": 64, "MODE": 0}
    status, error = got["trials"]["32"]
    assert status == "timeout" and "default trial timeout of an isolated trial, 5 s" in error, error


def test_a_worker_killed_from_outside_is_retried_once_before_its_config_is_blamed(tmp_path):
    """#40 item 10: BLOCK 64's worker is SIGKILLed once (then the config is measured in a new worker), BLOCK 16's
    every time (crashed, after two workers)."""
    child = run_child("kernel = k.sigkilled_add\n" + TRIALS, tmp_path)
    got = child["out"]
    assert got["ok"] and (tmp_path / "killed-once").exists()
    assert got["trials"]["32"][0] == "ok" and got["trials"]["64"][0] == "ok", got["trials"]
    status, error = got["trials"]["16"]
    assert status == "crashed" and "SIGKILL" in error and "twice, in two workers" in error, error
    assert "trying that config once more in a new worker" in child["stderr"]


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_call_over_isolate_max_bytes_is_tuned_in_process_saying_why_once(monkeypatch):
    """#40 item 9, above the bound: copies in a worker would cost ~3x the call's bytes; the call is tuned here."""
    import isolation_kernels
    import pytest
    import torch
    from isolation_kernels import default_add

    from autotune import IsolationWarning

    monkeypatch.setattr(default_add, "tuning", default_add.tuning.replace(isolate="process", isolate_max_bytes=4096))
    del isolation_kernels.SETUP_PIDS[:]
    x, y, out = torch.randn(1024), torch.randn(1024), torch.empty(1024)  # 12 KiB of tensors
    with pytest.warns(
        IsolationWarning, match=r"tuned in this process despite isolate='process'.*isolate_max_bytes=4096"
    ):
        default_add(x, y, out, 1024)
    torch.testing.assert_close(out, x + y)
    assert set(isolation_kernels.SETUP_PIDS) == {os.getpid()}  # measured here: its setup= ran in this process
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", IsolationWarning)  # said once per kernel
        default_add(x, y, out, 1000)


def test_isolate_max_bytes_counts_the_storage_a_view_carries_not_its_elements(monkeypatch):
    """A worker gets a view as a copy of the storage span it covers: a column of a 256 x 1024 matrix is 1 KiB of
    elements but ~1 MiB of copy, so it is over a 64 KiB bound and tuned here (it was counted as 1 KiB and sent)."""
    import warnings

    import isolation_kernels
    import torch
    from isolation_kernels import default_add

    from autotune import IsolationWarning, clear_autotune_cache

    monkeypatch.setattr(default_add, "tuning", default_add.tuning.replace(isolate="process", isolate_max_bytes=65536))
    clear_autotune_cache(default_add, key=(211,))  # a module-level kernel: another test may have tuned the key
    del isolation_kernels.SETUP_PIDS[:]
    x = torch.randn(256, 1024)[:, 0]  # 256 elements, strided over the whole matrix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IsolationWarning)  # said once per kernel: maybe by an earlier test
        default_add(x, torch.randn(211), torch.empty(211), 211)  # (the kernel reads x as contiguous: not the point)
    assert set(isolation_kernels.SETUP_PIDS) == {os.getpid()}  # measured here: its setup= ran in this process


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads a worker's RSS from /proc")
def test_a_call_under_the_bound_is_isolated_and_the_worker_frees_its_copies_after(monkeypatch):
    """#40 item 9, below the bound: tuned in the worker, which no longer keeps a 64 MiB copy after the tuning (the
    measure: its RSS after a small tuning, then after this one; a kept copy is the whole 64 MiB)."""
    import isolation_kernels
    import torch
    from isolation_kernels import default_add

    from autotune.engine.isolation.pool import shared_worker

    monkeypatch.setattr(default_add, "tuning", default_add.tuning.replace(isolate="process"))
    small = torch.randn(256)
    default_add(small, small, torch.empty(256), 256)
    worker = shared_worker()[0]
    before = _rss_bytes(worker.proc.pid)
    del isolation_kernels.SETUP_PIDS[:]
    big = torch.randn(16 << 20)  # 64 MiB, only its first 512 elements read: the copy travels whole
    y, out = torch.randn(512), torch.empty(512)
    default_add(big, y, out, 512)  # 64 MiB + 4 KiB, under the default bound of 1 GiB
    torch.testing.assert_close(out, big[:512] + y)
    assert isolation_kernels.SETUP_PIDS == []  # measured in the worker
    grown = _rss_bytes(worker.proc.pid) - before
    assert grown < (32 << 20), f"the worker grew by {grown >> 20} MiB after the tuning: it kept its copies"


def _tune_failing_when_re_measured(tmp_path, how: str) -> dict:
    """fails_when_re_measured tuned in a fresh process whose re-measurement opens the gate `how` (see its setup=)."""
    body = textwrap.dedent(f"""
        import pathlib
        original = runner.WorkerRunner.refine
        def refine(self, configs, reps, retried=False):  # the gate the worker's setup= reads: the re-measurement begins
            pathlib.Path({str(tmp_path)!r}, "refining-{how}").touch()
            return original(self, configs, reps, retried)
        runner.WorkerRunner.refine = refine
        x, y, out, arm = torch.randn(500), torch.randn(500), torch.empty(500), torch.zeros(1, dtype=torch.int64)
        kernel = k.fails_when_re_measured
        kernel(x, y, out, 500, arm)
        record = kernel.record()
        print(json.dumps({{"winner": record.winner["CRASHES"], "remeasured": len(record.remeasured or []),
                          "trials": {{t.config["CRASHES"]: [t.status.value, t.error] for t in record.trials}}}}))
    """)
    return run_child(body, tmp_path)


def test_a_config_that_ends_its_worker_when_re_measured_is_failed_and_never_the_winner(tmp_path):
    """CRASHES 1 wins the first pass (CRASHES 0 loads y 17 times), then ends its worker with a wild load when the
    best two are re-measured: the worker named it before its run, so it is failed and the other config wins."""
    got = _tune_failing_when_re_measured(tmp_path, "segfault")["out"]
    status, error = got["trials"]["1"]
    assert got["winner"] == 0 and got["trials"]["0"][0] == "ok", got
    assert status == "crashed" and error.startswith("failed when re-measured: ") and "SIGSEGV" in error, error


@pytest.mark.parametrize(
    ("how", "says"), [("poison", "poisoned the device"), ("sigkill-always", "SIGKILL")], ids=["poison", "sigkill"]
)
def test_the_config_running_when_a_re_measurement_loses_its_worker_is_failed_and_the_other_wins(tmp_path, how, says):
    """The device poisoned, or the worker SIGKILLed from outside in two workers in turn, at the first run of the
    re-measurement: that run's config is failed (whichever of the two it was), the other wins."""
    got = _tune_failing_when_re_measured(tmp_path, how)["out"]
    failed = [c for c, (status, _) in got["trials"].items() if status != "ok"]
    assert len(failed) == 1 and got["winner"] == 1 - int(failed[0]), got
    status, error = got["trials"][failed[0]]
    assert status == "crashed" and error.startswith("failed when re-measured: ") and says in error, error
    assert how != "sigkill-always" or "twice, in two workers" in error


def test_a_re_measurement_whose_worker_is_sigkilled_once_from_outside_runs_again_in_a_new_worker(tmp_path):
    child = _tune_failing_when_re_measured(tmp_path, "sigkill")
    got = child["out"]
    assert [status for status, _ in got["trials"].values()] == ["ok", "ok"] and got["remeasured"] == 2, got
    assert "re-measuring them once more in a new worker" in child["stderr"]
