"""Checksums of search spaces, stable across processes: of listed configs, and of a lazy space's filters."""
from __future__ import annotations

import hashlib
from typing import Any, Iterable

__all__ = ["configs_checksum", "code_identity"]


def configs_checksum(configs: Iterable[Any]) -> str:
    """sha256 hex of configs' canonical JSON, in order: what a space, or the configs prune= kept, are."""
    h = hashlib.sha256()
    for config in configs:
        h.update(config.canonical().encode())
        h.update(b"\n")
    return h.hexdigest()


def code_identity(fn: Any) -> str:
    """What a filter computes, for a lazy space's checksum, the same in every process: its bytecode, names and
    constants (nested code objects too, never their addresses), the values it closes over and its defaults."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__qualname__", type(fn).__name__)
    h = hashlib.sha256(_code_text(code).encode())
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            h.update(repr(cell.cell_contents).encode())
        except ValueError:   # an empty cell
            h.update(b"<empty>")
    h.update(repr(getattr(fn, "__defaults__", None)).encode())
    return h.hexdigest()


def _code_text(code: Any) -> str:
    consts = [_code_text(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return f"{code.co_code.hex()}|{code.co_names}|{code.co_varnames}|{consts}"
