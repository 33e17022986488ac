"""CUDA-graph capture: a key met while a stream is capturing is never tuned there.

Tuning measures, synchronizes and waits on locks, and any of those breaks a capture. So a call that misses
memory while capturing launches, untuned, the best config known without waiting for anything: a usable stored
winner of the key (each tier read at most once per key while capturing, with no lock or lease), else the winner
of the nearest tuned key of the kernel, else `fallback=`, else the first config. Nothing is stored, so the key is
tuned at its next call outside a capture (or by `autotune.warmup` beforehand; a `Tuning(objective=...)` kernel,
never tuned on a launch, only by `warmup` or `sweep`). One `CaptureWarning` per kernel names the key and how to
warm up.

`capturing()` is the one test every mode asks (blocking, online, distributed, `autotune.compat`): torch's
`torch.cuda.is_current_stream_capturing()`, or `assume_capturing()`, the seam a test on the CPU sets.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any, Protocol

from ..errors import CaptureWarning, warn_at_caller
from ..kernel.call import How
from ..record import TuningRecord
from ..space.spaces import Config
from ..storage.kernel_cache import KernelCache

__all__ = ["CapturedKernel", "assume_capturing", "capturing", "select_in_capture"]

_ASSUMED: contextvars.ContextVar[bool] = contextvars.ContextVar("autotune_assume_capturing", default=False)


@contextlib.contextmanager
def assume_capturing() -> Iterator[None]:
    """Treat every launch in this context (this thread or task) as made during CUDA-graph capture: the seam a
    test sets where no GPU can capture, and a serving engine may set around its own capture."""
    token = _ASSUMED.set(True)
    try:
        yield
    finally:
        _ASSUMED.reset(token)


def capturing() -> bool:
    """Whether the launch being made is recorded into a CUDA graph (or `assume_capturing()` says so). Asked only on
    a memory miss; torch is not imported for it, and a process that never initialised CUDA is not capturing."""
    if _ASSUMED.get():
        return True
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    return bool(torch.cuda.is_current_stream_capturing())


class CapturedKernel(Protocol):
    """What `select_in_capture` reads of a decorated kernel (`Autotuned` and compat's engine)."""

    name: str
    cache: KernelCache

    def candidates(self, bound: Any) -> tuple[list[Config], str | None]: ...

    def untuned_among(self, kept: list[Config], checksum: str | None) -> Config: ...

    def peek_stored(
        self, key: tuple, dtypes: tuple, kept: list[Config], candidates: str | None
    ) -> TuningRecord | None: ...


class _KernelState:
    """One kernel's choices made during capture, per (key, dtypes, candidates), each with the count of its cache's
    clears when it was made (a clear since, such as a key deleted from a compat kernel's `cache`, voids it), and
    whether it warned."""

    def __init__(self) -> None:
        self.chosen: dict[tuple, tuple[Config, int]] = {}
        self.warned = False


_STATES: weakref.WeakKeyDictionary[Any, _KernelState] = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()  # held for one dict operation; never while reading a tier


def select_in_capture(
    kernel: CapturedKernel, key: tuple, dtypes: tuple, bound: Any, in_progress: Config | None = None
) -> tuple[Config, TuningRecord | None, How]:
    """(config, record, how) for a memory miss during capture; `how` is "cache" for a stored winner (kept in
    memory: later calls hit), else "capture" (nothing stored: the key is tuned at its next uncaptured call).
    `in_progress`: the best config of an online session of the key, launched as online mode does."""
    if in_progress is not None:
        return in_progress, None, "capture"
    kept, checksum = kernel.candidates(bound)
    with _STATES_LOCK:
        state = _STATES.get(kernel)
        if state is None:
            state = _STATES[kernel] = _KernelState()
    ident, clears = (key, tuple(dtypes), checksum), kernel.cache.clears()
    found = state.chosen.get(ident)
    if found is None or found[1] != clears:  # a key cleared since the choice is looked up again (DESIGN §11)
        record = kernel.peek_stored(key, dtypes, kept, checksum)  # memory, disk, Redis: read once, no lock or lease
        if record is not None:
            state.chosen.pop(ident, None)
            return record.winner, record, "cache"
        found = state.chosen[ident] = (_untuned_choice(kernel, key, dtypes, kept, checksum), clears)
        _warn_once(kernel, state, key, dtypes, found[0])
    return found[0], None, "capture"


def _untuned_choice(
    kernel: CapturedKernel, key: tuple, dtypes: tuple, kept: list[Config], checksum: str | None
) -> Config:
    """The nearest tuned key's winner among the kept configs, else `fallback=` where prune= (`checksum` set) keeps
    it for this call, else the first kept config."""
    from ..engine.search.warm_start import nearest_winners  # not at import: a cache hit never comes here

    allowed = set(kept)
    nearest = nearest_winners(key, kernel.cache.tuned_records(), dtypes=dtypes)
    near = next((c for c in nearest if not allowed or c in allowed), None)
    if near is not None:
        return near
    return kernel.untuned_among(kept, checksum)


def _warn_once(kernel: CapturedKernel, state: _KernelState, key: tuple, dtypes: tuple, config: Config) -> None:
    with _STATES_LOCK:
        first, state.warned = not state.warned, True
    if not first:
        return
    if kernel.cache.objective is not None:  # an objective kernel never tunes on a launch, captured or not
        then = (
            f"A Tuning(objective=...) kernel is not tuned on launches: run autotune.warmup({kernel.name}, calls) or "
            f"autotune.sweep({kernel.name}, calls) for these calls before capturing"
        )
    else:
        then = (
            f"The key is tuned at its next call outside a capture; to capture tuned kernels, warm the keys up "
            f"first: autotune.warmup({kernel.name}, calls) or one eager call per shape before capturing"
        )
    warn_at_caller(
        f"autotune: {kernel.name} met key={key} {list(dtypes)} during CUDA-graph capture with no tuned winner; "
        f"launching {dict(config)} untuned (tuning would synchronize and break the capture). {then}",
        CaptureWarning,
    )
