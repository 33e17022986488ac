"""`autotune_launch`: the functional form of `@autotune`, for a kernel launched without decorating it."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from .decorator import Autotuned
from .record import TuningRecord
from .space import Config, SearchSpace

__all__ = ["autotune_launch", "TuningResult"]


@dataclass(frozen=True)
class TuningResult:
    """What `autotune_launch` returns: the config launched, its grid, the key's record, and whether it was cached."""

    config: Config
    grid: Any
    record: Optional[TuningRecord]
    cache_hit: bool



# Kept for the life of the process, on purpose: each wrapper holds its keys' winners in memory, so a repeated
# call is a memory hit. One entry per distinct (kernel, space, grid, key, options); the wrapper keeps its kernel
# (and a SearchSpace) alive, so the ids in the entry's identity are never reused while it exists.
_launch_registry: dict[tuple, Autotuned] = {}
_launch_registry_lock = threading.Lock()


def autotune_launch(kernel: Any, *, space: Any, args: Sequence[Any], kwargs: Optional[Mapping[str, Any]] = None,
                    grid: Any = None, key: Any = None, **autotune_options: Any) -> TuningResult:
    """Functional form of `@autotune`: tune (or reuse) and launch `kernel` once; returns a `TuningResult`.

    The autotuned wrapper is kept per (kernel, space, grid, key, options), so repeated calls hit its cache.
    """
    # Spaces given as data are told apart by their repr; a SearchSpace object by identity (the registry keeps it
    # alive). A checksum would hash every config on every call of this hot path.
    space_ident = id(space) if isinstance(space, SearchSpace) else repr(space)
    ident = (id(kernel), space_ident, repr(grid), repr(key), repr(sorted(autotune_options.items())))
    with _launch_registry_lock:
        tuned = _launch_registry.get(ident)
        if tuned is None:
            tuned = _launch_registry[ident] = Autotuned(kernel, space=space, key=key, grid=grid, **autotune_options)
    _, config, record, how, launch_grid = tuned.select_and_launch(tuple(args), dict(kwargs or {}), None, False)
    return TuningResult(config=config, grid=launch_grid, record=record, cache_hit=how in ("memory", "disk", "remote", "cache"))
