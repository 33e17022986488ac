"""A key split over two workers, one of which dies on a config measured in its own process (isolate="off"), is
tuned once more on one worker past each config that ends a worker, as an unsplit key is. Real worker processes
killed by SIGSEGV."""

from __future__ import annotations

import sweep_kernels as sk

import autotune
from autotune.record import TrialStatus
from autotune.storage.files import disk_entries


def test_a_split_key_whose_config_kills_a_worker_is_tuned_past_it():
    report = autotune.sweep(sk.sweep_crashy, sk.calls([64]), workers=2, tuning=sk.TUNING)
    [outcome] = report.keys
    assert outcome.status == "tuned", outcome.error
    record = next(e.record for e in disk_entries("sweep_crashy") if e.record and e.record.key == [64])
    statuses = {(t.config["BLOCK"], t.config["MODE"]): t.status for t in record.trials}
    assert statuses[(32, 1)] is TrialStatus.CRASHED and statuses[(64, 1)] is TrialStatus.CRASHED
    assert record.winner["MODE"] == 0
