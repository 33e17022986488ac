"""Sweeps: tune every key a list of argument makers produces, ahead of deployment, on a pool of workers (local
processes, or Ray actors across a cluster), once per device kind, with the winners written through the cache
tiers serving processes read (disk; Redis when AUTOTUNE_REMOTE_CACHE is set).

Modules: `api` (`sweep`, the driver), `worker` (a worker's side), `local` and `ray_executor` (the two executors),
`slots` (what the driver sees of a worker), `report` (`SweepReport`).
"""

from __future__ import annotations

from .api import sweep
from .report import KeyOutcome, SweepInterrupted, SweepReport, WorkerStats

__all__ = ["sweep", "SweepReport", "SweepInterrupted", "KeyOutcome", "WorkerStats"]
