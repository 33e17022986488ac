"""Sweep review fixes: a worker that dies measuring a config in its own process (isolate="off") names that config,
and the key is tuned past each config that ends a worker (the slot's crash journal has it)."""

from __future__ import annotations

import sweep_kernels as sk

import autotune
import autotune.sweeps.api as sweep_api
from autotune.record import TrialStatus
from autotune.storage.files import disk_entries


def _tuned_past_both_crashing_configs(report) -> None:
    [outcome] = report.keys
    assert outcome.status == "tuned", outcome.error
    assert outcome.attempts == 3  # one worker ended by each MODE=1 config, then a third that tunes the rest
    assert report.workers[0].restarts == 2
    record = next(e.record for e in disk_entries("sweep_crashy") if e.record and e.record.key == [64])
    statuses = {tuple(sorted(dict(t.config).items())): t.status for t in record.trials}
    assert statuses == {
        (("BLOCK", 32), ("MODE", 0)): TrialStatus.OK,
        (("BLOCK", 64), ("MODE", 0)): TrialStatus.OK,
        (("BLOCK", 32), ("MODE", 1)): TrialStatus.CRASHED,
        (("BLOCK", 64), ("MODE", 1)): TrialStatus.CRASHED,
    }
    assert record.winner["MODE"] == 0


def test_a_key_whose_two_configs_each_kill_the_worker_is_tuned_past_both():
    _tuned_past_both_crashing_configs(autotune.sweep(sk.sweep_crashy, sk.calls([64]), workers=1, tuning=sk.TUNING))


def test_a_key_whose_two_configs_each_kill_a_ray_actor_is_tuned_past_both(ray_cluster):
    report = autotune.sweep(sk.sweep_crashy, sk.calls([64]), executor="ray", workers=1, tuning=sk.TUNING)
    _tuned_past_both_crashing_configs(report)


def test_a_key_that_fails_on_a_dead_worker_names_the_config_it_was_measuring(monkeypatch):
    # no rerun past a crashing config, only the one ordinary retry: the second death fails the key
    monkeypatch.setattr(sweep_api, "_CRASH_RERUNS", 0, raising=False)

    report = autotune.sweep(sk.sweep_crashy, sk.calls([64]), workers=1, tuning=sk.TUNING)

    [outcome] = report.keys
    assert outcome.status == "failed"
    assert "died: killed by SIGSEGV, while measuring config {'BLOCK': " in outcome.error
    assert "'MODE': 1} in its own process" in outcome.error


def test_a_key_that_fails_on_a_dead_ray_actor_names_the_config_it_was_measuring(ray_cluster, monkeypatch):
    monkeypatch.setattr(sweep_api, "_CRASH_RERUNS", 0, raising=False)  # the ordinary retry only, as above

    report = autotune.sweep(sk.sweep_crashy, sk.calls([64]), executor="ray", workers=1, tuning=sk.TUNING)

    [outcome] = report.keys
    assert outcome.status == "failed"
    assert "sweep actor 0 (interpreter) was lost while measuring config {'BLOCK': " in outcome.error
    assert "'MODE': 1} in its own process (not isolated): " in outcome.error
