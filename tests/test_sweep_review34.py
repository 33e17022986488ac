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


def test_a_split_key_s_worker_that_dies_again_unsplit_is_reported_given_up(monkeypatch):
    """One key split over two workers; every request kills its worker: the group is replaced, the key tuned once
    more unsplit on the first worker, which dies again: the key is failed and that worker says it was given up."""
    import autotune.sweeps.local as local

    real_tune, real_share = local.LocalWorker.tune, local.LocalWorker.tune_share

    def tune(self):
        self.process.kill()
        self.process.join()
        return real_tune(self)

    def tune_share(self, share):
        self.process.kill()
        self.process.join()
        return real_share(self, share)

    monkeypatch.setattr(local.LocalWorker, "tune", tune)
    monkeypatch.setattr(local.LocalWorker, "tune_share", tune_share)
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=2)
    assert [k.status for k in report.keys] == ["failed"], report.keys
    lost = [w.lost for w in report.workers if w.lost is not None]
    assert lost and "killed by SIGKILL" in lost[0] and "given up:" in str(report), report.workers
