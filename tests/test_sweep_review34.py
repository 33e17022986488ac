"""Review 34 of sweeps: a split key's worker given up after the key's unsplit retry says why in the report (the
unsplit case of test_sweep_review's test_no_worker_is_started_after_the_last_jobs_final_failure)."""

from __future__ import annotations

import sweep_kernels as sk

import autotune


def _killing(real):
    """`real` (a LocalWorker request) made to find its worker killed first, as by the OOM killer."""

    def request(self, *args):
        self.process.kill()
        self.process.join()
        return real(self, *args)

    return request


def test_a_split_key_s_worker_that_dies_again_unsplit_is_reported_given_up(monkeypatch):
    """One key split over two workers; every request kills its worker: the group is replaced, the key tuned once
    more unsplit on the first worker, which dies again: the key is failed and that worker says it was given up."""
    import autotune.sweeps.local as local

    monkeypatch.setattr(local.LocalWorker, "tune", _killing(local.LocalWorker.tune))
    monkeypatch.setattr(local.LocalWorker, "tune_share", _killing(local.LocalWorker.tune_share))
    report = autotune.sweep(sk.sweep_pick, sk.pick_calls([32]), workers=2)
    assert [k.status for k in report.keys] == ["failed"], report.keys
    lost = [w.lost for w in report.workers if w.lost is not None]
    assert lost and "killed by SIGKILL" in lost[0] and "given up:" in str(report), report.workers
