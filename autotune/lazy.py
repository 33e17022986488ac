"""Names a package loads on first use (PEP 562): start-up is part of the API, so what a cache hit never needs is
not imported with the package."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, namespace: dict[str, Any], names: Mapping[str, tuple[str, str | None]]
) -> Callable[[str], object]:
    """A module `__getattr__` for `package`: each of `names` is (module, attribute; None for the module itself),
    imported the first time it is asked for and then kept in `namespace` (the package's globals)."""

    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = names[name]
        imported = importlib.import_module(module)
        value = imported if attribute is None else getattr(imported, attribute)
        namespace[name] = value
        return value

    return __getattr__
