"""Checksums of search spaces, stable across processes: of listed configs, and of a lazy space's filters."""
from __future__ import annotations

import hashlib
import inspect
from typing import Any, Iterable

from .kernel_ref import python_function

__all__ = ["configs_checksum", "code_identity"]


def configs_checksum(configs: Iterable[Any]) -> str:
    """sha256 hex of configs' canonical JSON, in order: what a space, or the configs prune= kept, are."""
    h = hashlib.sha256()
    for config in configs:
        h.update(config.canonical().encode())
        h.update(b"\n")
    return h.hexdigest()


def code_identity(fn: Any, _depth: int = 0) -> str:
    """What a function computes, the same in every process: its bytecode, names and constants (nested code objects
    too, never their addresses; a set literal's members sorted, as their order follows PYTHONHASHSEED), its
    annotations, the values it closes over (a jitted or plain function there by its own identity) and its
    defaults. Used for a lazy space's filters and for a kernel made by exec(), whose source cannot be read."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__qualname__", type(fn).__name__)
    h = hashlib.sha256(_code_text(code).encode())
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:   # an empty cell
            h.update(b"<empty>")
            continue
        inner = python_function(value)      # a function, or a @triton.jit helper's (under its wrappers)
        if inspect.isfunction(inner) and _depth < 8:
            h.update(code_identity(inner, _depth + 1).encode())
        else:
            h.update(repr(value).encode())
    h.update(repr(getattr(fn, "__defaults__", None)).encode())
    try:
        annotations = dict(getattr(fn, "__annotations__", None) or {})
    except Exception:        # lazily evaluated annotations (Python 3.14) naming what is not defined
        annotations = {}
    h.update(repr(sorted((k, repr(v)) for k, v in annotations.items())).encode())
    return h.hexdigest()


def _code_text(code: Any) -> str:
    consts = [_code_text(c) if hasattr(c, "co_code") else _const_text(c) for c in code.co_consts]
    return f"{code.co_code.hex()}|{code.co_names}|{code.co_varnames}|{consts}"


def _const_text(value: Any) -> str:
    if isinstance(value, frozenset):
        return "frozenset(" + repr(sorted(map(repr, value))) + ")"
    return repr(value)
