"""Warm start: a new key's search begins with the winners of the kernel's other tuned keys, nearest key first.

Distance between keys: over their numeric values, the sum of |log2(a / b)| (a size twice as large is one
step away, whatever its magnitude); a differing non-numeric value (a dtype, a flag) counts 8 steps; keys of
another length are not compared. The call's dtypes count too: each tensor argument of another dtype is 8
steps, so the same key with other dtypes (n=64 in fp16 for n=64 in fp32) is a near neighbour, not skipped;
only the record of the very same key and dtypes (the one being tuned) is left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from ...record import TuningRecord
from ...space.spaces import Config

__all__ = ["key_distance", "dtypes_distance", "nearest_winners"]

_OTHER = 8.0


def key_distance(a: Sequence[Any], b: Sequence[Any]) -> float:
    """How far apart two keys are (inf when they cannot be compared)."""
    if len(a) != len(b):
        return math.inf
    total = 0.0
    for x, y in zip(a, b):
        if (
            isinstance(x, bool)
            or isinstance(y, bool)
            or not isinstance(x, (int, float))
            or not isinstance(y, (int, float))
        ):
            total += 0.0 if x == y else _OTHER
        elif x == y:
            continue
        elif x > 0 and y > 0:
            total += abs(math.log2(x / y))
        else:
            total += _OTHER
    return total


def dtypes_distance(a: Sequence[Any], b: Sequence[Any]) -> float:
    """How far apart two calls' dtypes are: 8 steps per differing position (or missing one)."""
    a, b = [str(x) for x in a], [str(x) for x in b]
    return _OTHER * (sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b)))


def nearest_winners(
    key: Sequence[Any], records: Iterable[TuningRecord], limit: int = 8, dtypes: Sequence[Any] | None = None
) -> list[Config]:
    """The winners of `records` other than (key, dtypes) itself, nearest first, each once, at most `limit`.

    With `dtypes` (the call's), a record of the same key and other dtypes is kept and ranked by its dtype
    distance; without, every record of the same key is left out (the dtypes are unknown)."""
    key = list(key)
    want = None if dtypes is None else [str(d) for d in dtypes]

    def distance(r: TuningRecord) -> float:
        return key_distance(key, r.key) + (0.0 if want is None else dtypes_distance(want, r.dtypes))

    ranked = sorted(
        (distance(r), i, r.winner)
        for i, r in enumerate(records)
        if list(r.key) != key or (want is not None and [str(d) for d in r.dtypes] != want)
    )
    out: list[Config] = []
    for d, _, winner in ranked:
        if math.isfinite(d) and winner not in out:
            out.append(winner)
        if len(out) >= limit:
            break
    return out
