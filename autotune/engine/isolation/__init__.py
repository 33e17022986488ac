"""Isolation: untried configs are compiled and measured in worker processes, so a config that segfaults, kills its
process or hangs costs that config (`crashed`, `timeout`), never the tuning or the caller's process.
`trial_timeout_s` bounds one config's compile and measurement together (with compile workers, the compile in one
and the measurement in the measuring worker, each within it).

`isolate="off"` (the default, as `triton.autotune`) never isolates; `"auto"` isolates when a worker can import
the kernel (by module and qualified name) and the launch grid can be sent to it, and otherwise tunes in-process
with a one-time note saying why; `"process"` always isolates (refusing a kernel it cannot), except a call whose
tensors exceed `isolate_max_bytes`, tuned in-process with a one-time note (issue 40: a worker holds ~3x copies).

Modules: `worker` (the worker process and how arguments travel), `trial` (a trial inside a worker), `pool`
(the parent's worker processes), `runner` (the parent's side of one tuning).
"""

from __future__ import annotations

from .pool import shutdown
from .runner import WorkerCompiler, WorkerRunner, check_isolation, isolation_for

__all__ = ["WorkerRunner", "WorkerCompiler", "isolation_for", "check_isolation", "shutdown"]
