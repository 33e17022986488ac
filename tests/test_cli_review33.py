"""What `autotune sweep` and `autotune replay` say and write: a number of sweep workers no machine runs is refused
before a worker starts, a sweep claims its workers' directories without rescanning /tmp for each, the sweep summary
escapes control characters from errors, replay's number options name the value they refuse, and replay's --json
records its simulated compile workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sweep_kernels as sk
from test_cli_errors_more import no_traceback, run_cli

import autotune
import autotune.sweeps.local as local
from autotune.errors import OptionError
from autotune.sweeps.report import KeyOutcome, SweepReport, WorkerStats

LANDSCAPE = str(Path(__file__).resolve().parents[1] / "bench" / "landscapes" / "pnpoly_RTX_3090.json.gz")


def test_more_local_workers_than_any_machine_runs_is_refused_before_a_worker_starts(monkeypatch):
    started = []
    monkeypatch.setattr(local, "start_together", started.append)
    with pytest.raises(OptionError, match=r"sweep\(workers=300\): at most 256 worker processes"):
        autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=300)
    with pytest.raises(OptionError, match=r"at most 4096 Ray actors"):
        autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), executor="ray", workers=5000)
    assert started == []


@pytest.mark.parametrize(
    ("workers", "said"),
    [("5000", "5000 is not a number of workers from 1 to 4096"), ("300", "--workers 300: at most 256")],
)
def test_the_cli_refuses_too_many_workers_in_its_own_words(workers, said):
    res = run_cli("sweep", "sweep_kernels:sweep_pick", "--calls", "sweep_kernels:cli_pick_calls", "--workers", workers)
    assert res.returncode == 2 and said in res.stderr, res.stderr
    assert "sweep(workers=" not in res.stderr
    no_traceback(res)


def test_a_local_sweep_scans_for_abandoned_worker_directories_once_not_per_worker(monkeypatch):
    scans = []
    real = local.remove_abandoned_worker_dirs
    monkeypatch.setattr(local, "remove_abandoned_worker_dirs", lambda: scans.append(1) or real())
    import autotune.sweeps.scratch as scratch

    monkeypatch.setattr(scratch, "remove_abandoned_worker_dirs", lambda: scans.append(1) or real())
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32, 64]), workers=2)
    assert [k.status for k in report.keys] == ["tuned", "tuned"]
    assert len(scans) == 2  # once before the workers start, once after they stop


def test_the_sweep_summary_escapes_control_characters_of_errors_and_names():
    report = SweepReport(
        kernel="k\x1b]0;owned\x07",
        executor="local",
        wall_s=1.0,
        start_s=0.5,
        keys=[KeyOutcome(job=0, device="gpu\x1b[2J", status="failed", key=[1], error="\x1b[31merror:\x1b[0m boom")],
        workers=[WorkerStats(index=0, device="gpu\x1b[2J", lost="died \x1b[31mred")],
    )
    text = str(report)
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[31merror:\\x1b[0m boom" in text and "given up: died \\x1b[31mred" in text


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--budget", "abc", "'abc' is not a whole number"),
        ("--seeds", "1.5", "'1.5' is not a whole number"),
        ("--workers", "x", "'x' is not a whole number"),
        ("--budget-fraction", "half", "'half' is not a number; give a fraction in (0, 1]"),
    ],
)
def test_replays_number_options_name_the_value_they_refuse(option, value, said):
    res = run_cli("replay", LANDSCAPE, "--strategy", "random", option, value)
    assert res.returncode == 2 and said in res.stderr, res.stderr
    assert "_positive" not in res.stderr and "_fraction" not in res.stderr
    no_traceback(res)


def test_replays_json_records_its_simulated_compile_workers(tmp_path):
    out = tmp_path / "replay.json"
    res = run_cli(
        "replay", LANDSCAPE, "--strategy", "random", "--budget", "5", "--seeds", "2", "--workers", "3", "--json",
        str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    written = json.loads(out.read_text())
    assert written["workers"] == 3 and len(written["runs"]) == 2
