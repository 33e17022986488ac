"""One reading of a tuning key typed on the command line, for every CLI subcommand and `report`.

`(4096,)`, `[4096]`, `4096` and `4096,1024` are read the same way everywhere: as a Python or JSON literal
(a tuple or list is the key, a lone value a 1-tuple), else as a comma list whose items are literals or bare
strings (`1024,row` -> `(1024, "row")`). Literals are parsed, never evaluated. What no cached key can hold is
refused with a ValueError naming --key (the CLI's exit 2): a dict, set, bytes or complex, NaN or an infinity (no
key holds one: `NaN`, `Infinity`, `1e999`), and tuples nested deeper than `MAX_KEY_DEPTH`.
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any

__all__ = ["MAX_KEY_DEPTH", "parse_key"]

_MAX_KEY_TEXT = 10_000  # a key is a few sizes and flags; longer text is a mistake, not a key
MAX_KEY_DEPTH = 16  # tuples in tuples: a key nests one or two deep; what reads one (parsers, a stored key's text)
# recurses once per level


def _literal(text: str) -> Any:
    """`text` as a Python literal, else as JSON (`true`, `null`); raises ValueError when it is neither."""
    for parse in (ast.literal_eval, json.loads):
        try:
            return parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    raise ValueError(text)


def parse_key(text: str) -> tuple:
    """The key tuple `text` names (see the module docstring). Raises ValueError for an empty or huge text."""
    text = text.strip()
    if not text or len(text) > _MAX_KEY_TEXT:
        raise ValueError(f"--key {text[:40]!r}: give the key's values, e.g. 4096 or 4096,1024 or '(4096, 1024)'")
    if _depth(text) > MAX_KEY_DEPTH:
        raise ValueError(
            f"--key {text[:40]!r}: its tuples nest deeper than {MAX_KEY_DEPTH} levels, deeper than any key; give the "
            "key's values, e.g. 4096,1024 or '(4096, (1, 2))'"
        )
    try:
        value = _literal(text)
    except ValueError:
        if text.count("(") != text.count(")") or text.count("[") != text.count("]"):  # a tuple or list left open
            raise ValueError(
                f"--key {text[:40]!r} is not a valid tuple or list (its brackets do not match); close "
                "it, e.g. '(4096, 1024)', or give the values as 4096,1024"
            ) from None
        items = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                items.append(_literal(part))
            except ValueError:
                items.append(part)
        return _checked(text, tuple(items))
    return _checked(text, tuple(value) if isinstance(value, (tuple, list)) else (value,))


def _depth(text: str) -> int:
    """How deep the brackets of `text` nest (quotes are not looked into: a key's strings hold no brackets)."""
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    return deepest


def _bad_value(value: Any) -> Any:
    """The first part of `value` a typed key cannot hold (a dict, set, bytes, complex, Ellipsis, NaN or an
    infinity), else None."""
    if isinstance(value, (tuple, list)):
        return next((bad for bad in map(_bad_value, value) if bad is not None), None)
    if isinstance(value, float) and not math.isfinite(value):
        return value
    return None if value is None or isinstance(value, (bool, int, float, str)) else value


def _checked(text: str, key: tuple) -> tuple:
    """`key`, after refusing a value no cached key can have (ValueError naming it)."""
    bad = _bad_value(key)
    if isinstance(bad, float):
        raise ValueError(
            f"--key {text[:40]!r}: {bad} is not a key value (a key never holds NaN or an infinity); give finite "
            "numbers, e.g. 4096,1024"
        )
    if bad is not None:
        raise ValueError(
            f"--key {text[:40]!r}: {str(bad)[:40]} ({type(bad).__name__}) is not a key value; give numbers, strings, "
            "true/false, None or tuples of those, e.g. 4096,1024"
        )
    return key
