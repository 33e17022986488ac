"""Whether this process has a torch.distributed process group: read without importing torch.distributed (or
autotune.distributed) where it has not been imported, so a single-process launch pays nothing for it."""
from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any

__all__ = ["group_timeout", "initialized_dist"]


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
