"""`clear_autotune_cache`: remove tuned winners from memory (every kernel loaded in this process) and from the
persistent tiers, by kernel and key."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import CallError, warn_at_caller
from ..keys import normalise_key
from . import journal
from .disk import DiskCache
from .entries import (
    as_key_tuple,
    base_identity,
    is_kernel_id,
    kernel_matches,
    kernel_suggestion,
    short_name,
    wanted_key_text,
)
from .kernel_cache import KernelCache, counted_as, live_caches
from .protocol import Cache
from .remote_config import required_remote_tier

__all__ = ["clear_autotune_cache", "forget_crashes"]

_REMOTE = "clear_autotune_cache(..., remote=True)"


def _persistent(remote: bool) -> list[Cache]:
    """The disk, and the configured remote tier when `remote` (an OptionError when none is configured)."""
    return [DiskCache()] + ([required_remote_tier(_REMOTE)] if remote else [])


@dataclass
class _Target:
    """What `kernel=` names: a kernel's own cache (that kernel alone), else `name` as `entries.kernel_matches`
    reads it: a short name (every kernel of it) or a "module:qualname" (one kernel; also what a plain Triton
    kernel stands for: its entries by identity, whatever wrapper tuned it)."""

    name: str
    own: KernelCache | None = None


def _layers(kernel: object) -> list[Any]:
    """`kernel` and what each `triton.heuristics` layer above the autotuner wraps (`kernel_ref` finds the layers)."""
    from ..kernel.identity import base_kernel, heuristics_layers

    return [kernel, *(layer.fn for layer in heuristics_layers(kernel, base_kernel(kernel)))]


def _target(kernel: object) -> _Target:
    if isinstance(kernel, str):
        return _Target(kernel)
    from ..kernel.identity import base_kernel
    from ..kernel.source import kernel_identity

    for layer in _layers(kernel):
        own = getattr(layer, "cache", None)
        if not isinstance(own, KernelCache):  # autotune.compat: `cache` is Triton's dict, the engine is `tuner`
            own = getattr(getattr(layer, "tuner", None), "cache", None)
        if isinstance(own, KernelCache):
            return _Target(own.kernel_name, own)
    base = base_kernel(kernel)
    if hasattr(base, "arg_names"):  # a @triton.jit kernel (autotune_launch's): its entries, by its identity
        return _Target(kernel_identity(base))
    name = getattr(kernel, "name", None)
    if isinstance(name, str):
        return _Target(name)
    raise CallError(
        f"clear_autotune_cache(kernel=...) takes an autotuned kernel (also under triton.heuristics, or "
        f"an autotune.compat one), the @triton.jit kernel given to autotune_launch, or a kernel name "
        f"('add_kernel', or 'module:qualname' for one module's); got {type(kernel).__name__}"
    )


def _warn_if_misspelt(name: str) -> None:
    """A name that matched nothing, where a kernel of this process or an entry on disk has a close one: a warning
    naming it (`entries.kernel_suggestion`, as the CLI's; nothing for a known kernel: a clear of a kernel never
    tuned here is not a mistake, a typo of one is)."""
    known = [(c.kernel_name, c.identity) for c in live_caches()]
    known += [(e.record.kernel, e.record.kernel_id) for e in DiskCache().entries()]
    suggestion = kernel_suggestion(name, known)
    if suggestion:
        warn_at_caller(
            f"clear_autotune_cache(kernel={name!r}) matched no kernel loaded in this process or stored "
            f"on disk, so nothing was cleared{suggestion}",
            UserWarning,
        )


def _warn_if_key_length_differs(name: str, key: tuple) -> None:
    """A key by a kernel's name that cleared nothing, where that kernel's keys (loaded here or on disk) have another
    number of values: a warning saying how many (by the kernel object, such a key is a CallError)."""
    lengths = {
        len(r.key) for c in live_caches() if kernel_matches(c.kernel_name, c.identity, name) for r in c.tuned_records()
    }
    lengths |= {
        len(e.record.key) for e in DiskCache().entries() if kernel_matches(e.record.kernel, e.record.kernel_id, name)
    }
    if lengths and len(key) not in lengths:
        warn_at_caller(
            f"clear_autotune_cache(kernel={name!r}, key={key!r}) matched no entry, so nothing was cleared: the keys "
            f"of {name} have {' or '.join(map(str, sorted(lengths)))} values, this one {len(key)}; pass the tuple "
            "its key= computes",
            UserWarning,
        )


def _warn_if_key_mistyped(cache: KernelCache, key: tuple) -> None:
    """A key that cleared nothing, where a cached key of the kernel reads the same but holds other types ('40' or
    40.0 for 40): a warning naming the cached key (clearing a key never tuned is not a mistake; this is)."""
    for record in cache.tuned_records():
        if len(record.key) == len(key) and all(map(_reads_same, record.key, key)):
            warn_at_caller(
                f"clear_autotune_cache(key={key!r}) matched no entry of {cache.kernel_name}, so nothing was "
                f"cleared; its cached key {tuple(record.key)!r} reads the same with other types: pass the "
                f"values the key= spec computes, e.g. key={tuple(record.key)!r}",
                UserWarning,
            )
            return


def _reads_same(stored: Any, given: Any) -> bool:
    numbers = (int, float)
    return str(stored) == str(given) or (isinstance(stored, numbers) and isinstance(given, numbers) and stored == given)


def forget_crashes(kernel: str | None, key: Any = None, kernel_ids: Iterable[str] = ()) -> int:
    """Forget the crash journal's notes a clear of `kernel` (a name as `entries.kernel_matches` reads it; None:
    every kernel) and `key` (None: every key) asked for, so their configs are tried again: the notes of the
    `kernel_ids` (the kernels whose entries it removed) and of every kernel the name matches, also one neither
    loaded nor cached here (a crash in a key's first tuning leaves a note and no entry). The one rule of
    `clear_autotune_cache` and `autotune cache clear`; returns how many notes went."""
    if kernel is None:
        return journal.forget()  # every kernel's (keys are per kernel: no key without one)
    ids = set(kernel_ids)
    ids.update(n.kernel for n in journal.crashes(limit=None) if kernel_matches(short_name(n.kernel), n.kernel, kernel))
    if is_kernel_id(kernel):
        ids.add(kernel)  # its notes that cannot be read are found by the kernel's file-name prefix
    journal_key = None if key is None else _journal_key(key)
    return sum(journal.forget(kernel_id, journal_key) for kernel_id in sorted(ids))


def _journal_key(key: Any) -> tuple:
    """The key as the journal files it: as a call normalises it (an enum as `Type.NAME`), as KernelCache.clear."""
    return normalise_key(as_key_tuple(key), "clear_autotune_cache(key=...)")


def _clear_in_order(
    caches: list[KernelCache], persistent: list[Cache], name: str | None, key: tuple | None
) -> tuple[set[tuple], set[str]]:
    """Clear `caches`' memory and the `persistent` tiers (of kernel `name` and `key`; None: all) in the order
    `KernelCache.clear` keeps: memory forgotten before the tiers and again after (a lookup begun while they were
    being cleared keeps nothing), the remote tier before the disk (a lookup copies a remote hit to the disk, never
    back). Returns the entries removed, each once (`counted_as`), and the kernel ids they belonged to."""
    removed: set[tuple] = set()
    kernels: set[str] = set()

    def forget_all() -> None:
        for cache in caches:
            dropped = cache.forget(key)
            removed.update(counted_as(e) for e in dropped)
            if dropped:
                kernels.add(cache.identity or cache.kernel_name)

    forget_all()
    for tier in reversed(persistent):
        for e in tier.remove(name, key):
            removed.add(counted_as(e))
            kernels.add(e.record.kernel_id or e.record.kernel)
    forget_all()  # a barrier: what a lookup begun while the tiers were being cleared kept in memory goes too
    return removed, kernels


def clear_autotune_cache(kernel: object = None, key: Any = None, *, remote: bool = False) -> int:
    """Remove tuned winners from memory (every kernel loaded in this process) and disk, and with `remote=True`
    from the shared remote tier too (every node's winners: a node's local clear leaves the fleet's alone).

    - no arguments: everything, every kernel, on disk also those not loaded in this process;
    - `kernel`: that kernel's entries. The decorated object (also under `triton.heuristics`, or an
      `autotune.compat` kernel) or the
      `@triton.jit` kernel given to `autotune_launch` clears that kernel alone; its short name clears every
      kernel of that name (warning when there were several), its "module:qualname" (the `kernel_id` of its
      entries, as `autotune cache list` shows it) that kernel alone;
    - `kernel` and `key`: the entries of that key, every dtype variant (and device) of it. `key` is
      the tuple the `key=` spec computes, e.g. `(1024,)` for `key=["n"]`, normalised as a call's key is (a
      `tl.float32` or an enum value matches what the call stored); a single value means a 1-tuple. `key`
      without `kernel` raises ValueError; with the kernel object, a key of another length than its `key=`
      raises CallError. A name that matches nothing but is close to a known kernel's warns "Did you mean".

    An `autotune.compat` kernel's Triton-style `cache` dict drops the keys cleared from its memory, however they
    were named. `remote=True` tries the remote cache now, even within the pause after an outage, and warns when it cannot
    (what stays would be read back); with no remote cache configured it raises OptionError, before clearing
    anything. Returns the number of distinct entries removed (one in memory and on disk counts once).
    """
    if key is not None and kernel is None:
        raise ValueError("clear_autotune_cache(key=...) needs kernel= as well: keys are per kernel")
    if key is not None:
        wanted_key_text(key)  # a value that cannot be a key is an error before anything is cleared
        key = as_key_tuple(key)
    if kernel is None:
        persistent = _persistent(remote)
        removed, _ = _clear_in_order(live_caches(), persistent, None, None)
        forget_crashes(None)  # configs that ended a process are tried again
        return len(removed)
    target = _target(kernel)
    if target.own is not None:  # the object: that kernel alone, whatever other kernels share its short name
        cleared = target.own.clear(key, remote=remote)
        if key is not None and not cleared:
            _warn_if_key_mistyped(target.own, key)
        return cleared
    persistent = _persistent(remote)
    name = target.name
    matching = [c for c in live_caches() if kernel_matches(c.kernel_name, c.identity, name)]
    removed, kernels = _clear_in_order(matching, persistent, name, key)
    forgotten = forget_crashes(name, key, kernels | {cache.journal_id for cache in matching})
    if isinstance(kernel, str) and not removed and not forgotten:
        _warn_if_misspelt(name)  # a name typed by hand: an object given cannot be misspelt
        if key is not None:
            _warn_if_key_length_differs(name, key)
    if len({base_identity(k) for k in kernels}) > 1:  # a module:qualname's factory variants are what it names
        warn_at_caller(
            f"clear_autotune_cache(kernel={name!r}) cleared {len(kernels)} kernels of that name: "
            f"{', '.join(sorted(kernels))}; pass the kernel object, or its 'module:qualname', to clear "
            "one of them"
        )
    return len(removed)
