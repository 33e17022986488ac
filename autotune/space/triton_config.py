"""`triton.Config`s read as `Config`s: their kwargs plus their non-None compile options."""

from __future__ import annotations

import sys
from typing import Any

from ..config import Config
from ..errors import SpaceError

__all__ = ["config_from_triton", "is_triton_config"]


def is_triton_config(obj: Any) -> bool:
    triton = sys.modules.get("triton")
    cls = getattr(triton, "Config", None) if triton is not None else None
    return cls is not None and isinstance(obj, cls)


def config_from_triton(cfg: Any, where: str, *, pre_hook_ok: bool = False) -> Config:
    """A `triton.Config` as a Config: its kwargs plus its non-None compile options. `where` names it in errors
    ("triton.Config 3"); a pre_hook is refused unless the caller runs it (`autotune.compat`)."""
    if not pre_hook_ok and getattr(cfg, "pre_hook", None) is not None:
        raise SpaceError(
            f"{where} ({cfg}) has a pre_hook, which a search space cannot carry; use "
            "autotune.compat.autotune (the drop-in for triton.autotune), which supports pre_hook"
        )
    if getattr(cfg, "ir_override", None) is not None:
        raise SpaceError(
            f"{where} ({cfg}) has an ir_override, which autotune does not support; drop it from the config"
        )
    fields = dict(cfg.kwargs)
    for option in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        value = getattr(cfg, option, None)
        if value is not None:
            if option in fields:
                raise SpaceError(f"{where} has {option!r} both in its kwargs and as an option; keep one")
            fields[option] = value
    return Config(fields)
