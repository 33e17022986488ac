"""Validated data in and out: where the library's typed records (`msgspec.Struct`s) meet JSON and plain data.

msgspec, not pydantic, because a cache hit reads an entry in every new process: msgspec imports in about 3 ms
where pydantic took 35-40 ms, and start-up is part of the API (DESIGN.md section 9). Validation is still
declared on the types (`Annotated[int, Meta(ge=1)]`, `Literal[...]`, unknown fields rejected); nothing is
evaluated or unpickled. `Config`, the one custom type inside records, is encoded and decoded by the hooks here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from .space.spaces import Config

__all__ = ["ValidationError", "DecodeError", "to_json", "from_json", "to_builtins", "from_builtins", "error_text"]

ValidationError = msgspec.ValidationError  # data of the wrong shape (a field's type, range or name)
DecodeError = msgspec.DecodeError  # bytes that are not JSON (ValidationError is its subclass)

T = TypeVar("T")


def _encode_hook(obj: Any) -> Any:
    if isinstance(obj, Config):
        return obj.to_json()
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def _decode_hook(kind: type, obj: Any) -> Any:
    if kind is Config:
        if isinstance(obj, Mapping):
            return Config(obj)  # names and values are checked there (SpaceError is a ValueError)
        raise TypeError(f"Expected `object` for a config, got `{type(obj).__name__}`")
    raise TypeError(f"no decoder for {kind!r}")


_ENCODER = msgspec.json.Encoder(enc_hook=_encode_hook)


def to_json(obj: Any, indent: int | None = None) -> bytes:
    """JSON bytes of a record, an option set or plain data (indented when `indent` is given)."""
    data = _ENCODER.encode(obj)
    return msgspec.json.format(data, indent=indent) if indent is not None else data


def from_json(data: bytes | str, kind: type[T]) -> T:
    """Decode and validate `data` as `kind`; raises `DecodeError` (not JSON) or `ValidationError` (wrong shape).
    Non-finite numbers are not JSON and are refused."""
    return _checked(msgspec.json.decode(data, type=kind, dec_hook=_decode_hook))


def to_builtins(obj: Any) -> Any:
    """The plain-data form of a record (dicts, lists, str, numbers): what JSON would hold."""
    return msgspec.to_builtins(obj, enc_hook=_encode_hook)


def from_builtins(obj: Any, kind: type[T]) -> T:
    """Validate plain data (e.g. parsed JSON, or a worker's reply) as `kind`; raises `ValidationError`."""
    return _checked(msgspec.convert(obj, kind, dec_hook=_decode_hook))


def _checked(value: T) -> T:
    """`value`, once its own `check_decoded()` (what its field types cannot declare, such as an "ok" trial's
    median) passed; that raises `ValidationError`, naming the field as msgspec does."""
    check = getattr(value, "check_decoded", None)
    if callable(check):
        check()
    return value


def error_text(exc: Exception) -> str:
    """A validation error as `field.path: what was wrong` (msgspec writes `... - at `$.a.b``)."""
    text = str(exc)
    message, sep, where = text.rpartition(" - at `")
    if not sep:
        return text
    path = where.rstrip("`").removeprefix("$").lstrip(".") or "value"
    return f"{path}: {message}"
