"""Whether this process has a torch.distributed process group: read without importing torch.distributed (or
autotune.distributed) where it has not been imported, so a single-process launch pays nothing for it."""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["initialized_dist"]


def initialized_dist() -> Any:
    """torch.distributed if a process group is initialised in this process, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist
