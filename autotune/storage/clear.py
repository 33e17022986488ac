"""`clear_autotune_cache`: remove tuned winners from memory (every kernel loaded in this process) and from the
persistent tiers, by kernel and key."""
from __future__ import annotations

from typing import Any, Optional

from ..errors import warn_at_caller
from .disk import DiskCache
from .entries import as_key_tuple
from .protocol import Cache
from .remote import remote_tier
from .tiers import KernelCache, live_caches

__all__ = ["clear_autotune_cache"]


def _persistent(remote: bool) -> list[Cache]:
    """The disk, and the configured remote tier when `remote`."""
    tier = remote_tier() if remote else None
    return [DiskCache()] + ([tier] if tier is not None else [])


def _kernel_name_of(kernel: Any) -> tuple[str, Optional[KernelCache]]:
    if isinstance(kernel, str):
        return kernel, None
    cache = getattr(kernel, "cache", None)
    if isinstance(cache, KernelCache):
        return cache.kernel_name, cache
    name = getattr(kernel, "name", None)
    if isinstance(name, str):
        return name, None
    raise TypeError(f"clear_autotune_cache(kernel=...) takes an autotuned kernel or a kernel name, "
                    f"got {type(kernel).__name__}")


def clear_autotune_cache(kernel: Any = None, key: Any = None, *, remote: bool = False) -> int:
    """Remove tuned winners from memory (every kernel loaded in this process) and disk, and with `remote=True`
    from the shared remote tier too (every node's winners: a node's local clear leaves the fleet's alone).

    - no arguments: everything, every kernel, on disk also those not loaded in this process;
    - `kernel` (the decorated object or its name): that kernel's entries;
    - `kernel` and `key`: the entries of that key, every dtype variant (and device) of it. `key` is
      the tuple the `key=` spec computes, e.g. `(1024,)` for `key=["n"]`; a single value means a
      1-tuple. `key` without `kernel` raises ValueError.

    Returns the number of distinct entries removed (one in memory and on disk counts once).
    """
    if key is not None and kernel is None:
        raise ValueError("clear_autotune_cache(key=...) needs kernel= as well: keys are per kernel")
    if key is not None:
        key = as_key_tuple(key)
    if kernel is None:
        removed = {(e.location, e.entry_id) for cache in live_caches() for e in cache.forget(None)}
        for tier in _persistent(remote):
            removed |= {(e.location, e.entry_id) for e in tier.remove()}
        return len(removed)
    name, own = _kernel_name_of(kernel)
    if own is not None:  # the object: that kernel alone, whatever other kernels share its short name
        return own.clear(key, remote=remote)
    removed, kernels = set(), set()
    for cache in live_caches():
        if cache.kernel_name == name:
            dropped = cache.forget(key)
            removed |= {(e.location, e.entry_id) for e in dropped}
            if dropped:
                kernels.add(cache.identity or name)
    for tier in _persistent(remote):
        for e in tier.remove(name, key):
            removed.add((e.location, e.entry_id))
            kernels.add(e.record.kernel_id or e.record.kernel)
    if len(kernels) > 1:
        warn_at_caller(f"clear_autotune_cache(kernel={name!r}) cleared {len(kernels)} kernels of that name: "
                       f"{', '.join(sorted(kernels))}; pass the kernel object to clear one of them")
    return len(removed)
