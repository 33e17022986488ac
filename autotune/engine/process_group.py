"""Whether this process has a torch.distributed process group, which group autotune agrees over and in which mode:
read without importing torch.distributed (or autotune.modes.distributed) where it has not been imported, so a
single-process launch pays nothing for it."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any, Literal

__all__ = ["Mode", "active_mode", "chosen_group", "group_timeout", "initialized_dist", "set_process_group"]

Mode = Literal["shard", "rank0"]
_group_override: Any = None


def initialized_dist() -> Any:
    """torch.distributed if a process group is initialised in this process, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def group_timeout(dist: Any, group: Any) -> timedelta:
    """The process group's collective timeout (what `init_process_group(timeout=...)` set)."""
    pg = group if group is not None else dist.group.WORLD
    import torch

    for device in ("cpu", "cuda"):
        try:
            timeout = pg._get_backend(torch.device(device)).options._timeout
        except Exception:
            continue
        if isinstance(timeout, timedelta):
            return timeout
    try:
        return dist.distributed_c10d._get_default_timeout(dist.get_backend(group))
    except Exception:
        return timedelta(minutes=30)


def set_process_group(group: Any = None) -> None:
    """Agree over `group` instead of the default (WORLD) group; None goes back to the default.

    Why: on an nccl job, a gloo group (`dist.new_group(backend="gloo")`, created by every rank) keeps
    autotune's small object exchanges on the CPU and lets a missing rank be named.
    """
    global _group_override
    _group_override = group


def active_mode(setting: str | None) -> Mode | None:
    """The agreement mode for `Tuning.distributed == setting` in this process, or None (tune locally).

    None when the setting is "off", when no process group is initialised, when it has one rank, or when
    this process is not a member of the group set by `set_process_group`.
    """
    if setting == "off":
        return None
    dist = initialized_dist()
    if dist is None:
        return None
    group = _group_override
    if dist.get_world_size(group) <= 1 or dist.get_rank(group) < 0:
        return None
    return "rank0" if setting is None else setting  # type: ignore[return-value]


def chosen_group() -> Any:
    """The group `set_process_group` chose, or None for the default (WORLD) group."""
    return _group_override
