"""Ctrl-C during a sweep stops its workers and still says what finished: `sweep()` raises `SweepInterrupted` (a
KeyboardInterrupt) carrying the report, and `autotune sweep` prints the summary, writes --json and exits 130.
Real worker processes; the interrupt is a real SIGINT (or the main thread's KeyboardInterrupt)."""

from __future__ import annotations

import _thread
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import sweep_kernels as sk

import autotune
from autotune.storage.files import disk_entries

TESTS = str(Path(__file__).parent)
REPO = str(Path(__file__).parent.parent)


def _wait_for(path: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"never written: {path}"
        time.sleep(0.05)


def _gone(pid: int, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return True
        time.sleep(0.1)
    return False


def _stored_keys() -> list[int]:
    return sorted(e.record.key[0] for e in disk_entries("sweep_pick") if e.record)


def test_ctrl_c_raises_sweep_interrupted_carrying_what_finished(tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()

    def interrupt_once_key_64_waits() -> None:
        _wait_for(gate / "pid-64")
        _thread.interrupt_main()

    threading.Thread(target=interrupt_once_key_64_waits, daemon=True).start()
    calls = [functools.partial(sk.pick_call, 32), functools.partial(sk.gated_pick, 64, str(gate))]
    try:
        autotune.sweep(sk.sweep_pick, calls, workers=1)
    except autotune.SweepInterrupted as stopped:
        report = stopped.report
        assert isinstance(stopped, KeyboardInterrupt)
    else:
        raise AssertionError("sweep() returned although Ctrl-C stopped it")
    assert [(k.job, k.status) for k in report.keys] == [(0, "tuned"), (1, "interrupted")]
    assert report.keys[0].winner == {"BLOCK": 32}
    assert report.failed == [report.keys[1]]
    assert _stored_keys() == [32]
    assert _gone(int((gate / "pid-64").read_text()))  # the worker was stopped, not left waiting at its gate


def test_the_cli_prints_and_writes_the_summary_of_an_interrupted_sweep_and_exits_130(tmp_path):
    gate, out = tmp_path / "gate", tmp_path / "sweep.json"
    gate.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([TESTS, REPO, os.environ.get("PYTHONPATH", "")]),
        "SWEEP_GATE": str(gate),
    }
    command = [
        sys.executable, "-m", "autotune", "sweep", "sweep_kernels:sweep_pick", "--calls",
        "sweep_kernels:cli_gated_pick_calls", "--workers", "1", "--json", str(out), "--export",
        str(tmp_path / "a.tar.gz"),
    ]  # fmt: skip
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as cli:
        try:
            _wait_for(gate / "pid-64")
            cli.send_signal(signal.SIGINT)
            stdout, stderr = cli.communicate(timeout=120)
        finally:
            cli.kill()
    assert cli.returncode == 130, stderr
    assert "interpreter" in stdout and "interrupted" in stdout  # the summary table, and the key left
    assert "1 of 2 keys are in the tuning cache" in stderr and "--export was not written" in stderr
    assert "Traceback" not in stderr
    summary = json.loads(out.read_text())
    assert [(k["job"], k["status"]) for k in summary["keys"]] == [(0, "tuned"), (1, "interrupted")]
    assert summary["by_device"] == {"interpreter": {"tuned": 1, "skipped": 0, "failed": 1}}
    assert not (tmp_path / "a.tar.gz").exists()
    assert _gone(int((gate / "pid-64").read_text()))
