"""`Config`: one point of a search space, an immutable mapping of JSON-serialisable fields with a canonical text
(its identity in checksums and cache entries)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import SpaceError

__all__ = ["Config", "check_json_value", "value_identity"]

_JSON_SCALARS = (bool, int, float, str, type(None))


def check_json_value(name: str, value: Any) -> Any:
    """Return `value` normalised for a Config (lists become tuples; a subclass of int, float or str, such as
    numpy's float64 or an IntEnum, becomes the plain value its JSON holds) or raise SpaceError."""
    if isinstance(value, _JSON_SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise SpaceError(
                f"config field {name!r} = {value!r}: non-finite floats are not JSON-serialisable; use a finite number"
            )
        if isinstance(value, str) and not _encodable(value):
            raise SpaceError(
                f"config field {name!r} = {value!r}: the text holds a lone surrogate, which no file can hold; "
                "give valid Unicode text"
            )
        return _plain(value)
    if isinstance(value, (tuple, list)):
        return tuple(check_json_value(name, v) for v in value)
    raise SpaceError(
        f"config field {name!r} = {value!r} ({type(value).__name__}) is not JSON-serialisable; "
        "config values must be int, float, bool, str, None or tuples of those"
    )


def _plain(value: Any) -> Any:
    if type(value) in _JSON_SCALARS:
        return value
    for kind in (int, float, str):
        if isinstance(value, kind) and type(value) is not kind:
            return kind.__str__(value) if kind is str else kind(value)
    return value


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def value_identity(value: Any) -> Any:
    """A config value with its JSON type attached: equal exactly when the JSON texts are, so 1, 1.0 and True are
    three values (a float by its repr, the text JSON writes, so 0.0 and -0.0 differ too). How Configs and the
    spaces' axes tell values apart."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", float.__repr__(value))
    if isinstance(value, (tuple, list)):
        return ("array", tuple(value_identity(v) for v in value))
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{type(value).__name__} is not a config value")


def _identity(fields: Mapping[str, Any]) -> frozenset[tuple[str, Any]]:
    return frozenset((name, value_identity(value)) for name, value in fields.items())


def _fill(config: Config, fields: dict[str, Any], identity: frozenset[tuple[str, Any]]) -> None:
    """Set a new Config's slots (a function, not a method: no name of a config's fields is taken from it)."""
    object.__setattr__(config, "_fields", fields)
    object.__setattr__(config, "_identity", identity)
    object.__setattr__(config, "_hash", hash(identity))


class Config(Mapping[str, Any]):
    """An immutable, hashable mapping of field -> value with attribute access (`cfg.BLOCK_M`).

    Fields that name Triton compile options (`num_warps`, `num_stages`, ...) are passed to the launch
    as options; every other field is a kernel `tl.constexpr` meta-parameter.
    """

    __slots__ = ("_fields", "_identity", "_hash")
    _fields: dict[str, Any]
    _identity: frozenset[tuple[str, Any]]
    _hash: int

    def __init__(self, fields: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        merged = dict(fields or {})
        merged.update(kwargs)
        clean = {}
        for name, value in merged.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise SpaceError(f"config field name {name!r} is not a Python identifier")
            clean[name] = check_json_value(name, value)
        _fill(self, clean, _identity(clean))

    @classmethod
    def from_checked(cls, fields: dict[str, Any], identity: frozenset[tuple[str, Any]]) -> Config:
        """A Config of fields already checked (`check_json_value`, identifier names) and their `value_identity`
        pairs, taken as they are: how a Cartesian space builds its configs without checking each value again."""
        config = object.__new__(cls)
        _fill(config, fields, identity)
        return config

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
        """Equal to a Config or mapping with the same fields and values, a value's type included: 1, 1.0 and
        True are three values, as in the config's JSON (its identity in cache entries and checksums)."""
        if isinstance(other, Config):
            return self._hash == other._hash and self._identity == other._identity
        if isinstance(other, Mapping):
            try:
                return self._identity == _identity(other)
            except TypeError:  # a value with no JSON form is no config value
                return False
        return NotImplemented

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self._fields.items()) + ")"

    def __reduce__(self):
        return (Config, (self._fields,))

    def replace(self, **changes: Any) -> Config:
        """A copy with some fields changed or added."""
        return Config({**self._fields, **changes})

    def to_json(self) -> dict[str, Any]:
        """The config as a JSON-ready dict (tuples become lists when dumped)."""
        return dict(self._fields)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Config:
        """Inverse of `to_json` (JSON lists come back as tuples)."""
        return cls(data)

    def canonical(self) -> str:
        """A stable string (sorted keys) used for checksums and cache file names."""
        return json.dumps(self._fields, sort_keys=True, separators=(",", ":"))
