"""`autotune.isolation`, the documented path of what a user calls about isolation's worker processes (the code is in
`engine/isolation/`): `shutdown()` stops them (a tuning still using them ends with `WorkerShutdownError`)."""

from __future__ import annotations

from .engine.isolation import shutdown

__all__ = ["shutdown"]
