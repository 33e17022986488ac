"""What `space=` accepts, turned into a SearchSpace: a space, a dict of axes, or a list of mappings, Configs or
`triton.Config`s."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from ..errors import SpaceError
from .spaces import CartesianSpace, Config, FixedSpace, SearchSpace

__all__ = ["as_space", "config_from_triton"]


def _is_triton_config(obj: Any) -> bool:
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


def as_space(obj: Any) -> SearchSpace:
    """Turn what `space=` accepts into a SearchSpace: a space, a dict of axes, or a list of mappings/triton.Configs."""
    if isinstance(obj, SearchSpace):
        return obj
    if isinstance(obj, Mapping) and not isinstance(obj, Config):
        return CartesianSpace(**obj)
    if isinstance(obj, (list, tuple)):
        items: list[Any] = []
        for i, item in enumerate(obj):
            if _is_triton_config(item):
                items.append(config_from_triton(item, f"triton.Config {i}"))
            elif isinstance(item, Mapping):
                items.append(item)
            else:
                raise SpaceError(
                    f"space item {i} is {type(item).__name__} {item!r}; a list space holds mappings, "
                    "autotune.Configs or triton.Configs"
                )
        return FixedSpace(items)
    raise SpaceError(
        f"space must be a SearchSpace, a dict of axes (CartesianSpace), or a list of configs "
        f"(FixedSpace); got {type(obj).__name__}: {obj!r}"
    )
