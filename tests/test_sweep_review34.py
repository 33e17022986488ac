"""Review 34 of sweeps: a worker given up after its job's second loss says why in the report."""

from __future__ import annotations

import sweep_kernels as sk

import autotune


def test_a_worker_that_dies_under_its_job_s_retry_is_reported_given_up(monkeypatch):
    """Every `tune` request finds its worker killed (as by the OOM killer): the job is retried once on a new
    worker, then failed; that worker is not replaced (no job is left), and its stats and the summary say it was
    given up, and why, instead of showing a healthy worker."""
    import autotune.sweeps.local as local

    real = local.LocalWorker.tune

    def tune(self):
        self.process.kill()
        self.process.join()
        return real(self)

    monkeypatch.setattr(local.LocalWorker, "tune", tune)
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=1)
    assert [(k.status, k.attempts) for k in report.keys] == [("failed", 2)], report.keys
    (worker,) = report.workers
    assert worker.restarts == 1
    assert worker.lost is not None and "killed by SIGKILL" in worker.lost and "no job was left" in worker.lost
    assert "worker 0 on interpreter: given up:" in str(report)
