"""`Config`: one point of a search space, an immutable mapping of JSON-serialisable fields with a canonical text
(its identity in checksums and cache entries)."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Iterator

from .errors import SpaceError

__all__ = ["Config", "check_json_value"]

_JSON_SCALARS = (bool, int, float, str, type(None))


def check_json_value(name: str, value: Any) -> Any:
    """Return `value` normalised for a Config (lists become tuples) or raise SpaceError."""
    if isinstance(value, _JSON_SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise SpaceError(f"config field {name!r} = {value!r}: non-finite floats are not JSON-serialisable; "
                             "use a finite number")
        return value
    if isinstance(value, (tuple, list)):
        return tuple(check_json_value(name, v) for v in value)
    raise SpaceError(f"config field {name!r} = {value!r} ({type(value).__name__}) is not JSON-serialisable; "
                     "config values must be int, float, bool, str, None or tuples of those")


class Config(Mapping[str, Any]):
    """An immutable, hashable mapping of field -> value with attribute access (`cfg.BLOCK_M`).

    Fields that name Triton compile options (`num_warps`, `num_stages`, ...) are passed to the launch
    as options; every other field is a kernel `tl.constexpr` meta-parameter.
    """

    __slots__ = ("_fields", "_hash")
    _fields: dict[str, Any]
    _hash: int

    def __init__(self, fields: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        merged = dict(fields or {})
        merged.update(kwargs)
        clean = {}
        for name, value in merged.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise SpaceError(f"config field name {name!r} is not a Python identifier")
            clean[name] = check_json_value(name, value)
        object.__setattr__(self, "_fields", clean)
        object.__setattr__(self, "_hash", hash(frozenset(clean.items())))

    # Mapping protocol
    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"Config has no field {name!r}; fields: {sorted(self._fields)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is immutable; use cfg.replace(...) for a changed copy")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._hash == other._hash and self._fields == other._fields
        if isinstance(other, Mapping):
            return self._fields == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self._fields.items()) + ")"

    def __reduce__(self):
        return (Config, (self._fields,))

    def replace(self, **changes: Any) -> "Config":
        """A copy with some fields changed or added."""
        return Config({**self._fields, **changes})

    def to_json(self) -> dict[str, Any]:
        """The config as a JSON-ready dict (tuples become lists when dumped)."""
        return dict(self._fields)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Config":
        """Inverse of `to_json` (JSON lists come back as tuples)."""
        return cls(data)

    def canonical(self) -> str:
        """A stable string (sorted keys) used for checksums and cache file names."""
        return json.dumps(self._fields, sort_keys=True, separators=(",", ":"))
