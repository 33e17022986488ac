"""A forced sweep (`Tuning(force=True)`) is tuned past each config that ends a worker, as an unforced one is: the
driver forces, and a worker's tuning reads its slot's crash journal. A real worker process killed by SIGSEGV."""

from __future__ import annotations

import sweep_kernels as sk
from test_sweep_review_fixes import _tuned_past_both_crashing_configs

import autotune


def test_a_forced_sweep_is_tuned_past_each_config_that_kills_the_worker():
    report = autotune.sweep(sk.sweep_crashy, sk.calls([64]), workers=1, tuning=sk.TUNING.replace(force=True))
    _tuned_past_both_crashing_configs(report)
