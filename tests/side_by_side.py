"""Running one scenario under `triton.autotune` and under `autotune.compat` (the one-import swap) and comparing
what each observed; and the scripted timings both decorators' `do_bench` report."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import triton

from autotune import compat

DECORATORS = {"triton": triton.autotune, "compat": compat.autotune}


def both(scenario: Callable[..., Any], *args: Any) -> Any:
    """The scenario's observations under each decorator; they must be equal."""
    seen = {name: scenario(decorate, *args) for name, decorate in DECORATORS.items()}
    assert seen["compat"] == seen["triton"]
    return seen["compat"]


def scripted_times(config_id: Any) -> list[float]:
    """do_bench's [median, 20th, 80th percentile] for a config: fixed by the config's values, 1.0 to 10.96 ms."""
    t = 1.0 + int(hashlib.sha256(repr(config_id).encode()).hexdigest(), 16) % 997 / 100
    return [t, 0.9 * t, 1.1 * t]
