"""Warm start: a new key's search begins with the winners of the kernel's other tuned keys, nearest key first.

Distance between keys: over their numeric values, the sum of |log2(a / b)| (a size twice as large is one
step away, whatever its magnitude); a differing non-numeric value (a dtype, a flag) counts 8 steps; keys of
another length are not compared.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from ..record import TuningRecord
from ..space import Config

__all__ = ["key_distance", "nearest_winners"]

_OTHER = 8.0


def key_distance(a: Sequence[Any], b: Sequence[Any]) -> float:
    """How far apart two keys are (inf when they cannot be compared)."""
    if len(a) != len(b):
        return math.inf
    total = 0.0
    for x, y in zip(a, b):
        if isinstance(x, bool) or isinstance(y, bool) or not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            total += 0.0 if x == y else _OTHER
        elif x == y:
            continue
        elif x > 0 and y > 0:
            total += abs(math.log2(x / y))
        else:
            total += _OTHER
    return total


def nearest_winners(key: Sequence[Any], records: Iterable[TuningRecord], limit: int = 8) -> list[Config]:
    """The winners of `records` of other keys, nearest key first, each once, at most `limit`."""
    ranked = sorted((key_distance(list(key), r.key), i, r.winner) for i, r in enumerate(records)
                    if list(r.key) != list(key))
    out: list[Config] = []
    for distance, _, winner in ranked:
        if math.isfinite(distance) and winner not in out:
            out.append(winner)
        if len(out) >= limit:
            break
    return out
