"""Key names that have defaults, side by side with the real `triton.autotune`: calls that pass them or not, by
position or by keyword, in different orders. Triton's `cache` key holds the values of the key names a call passes
(`[_args[k] for k in self.keys if k in _args]`, no names), so two calls that pass different key names can share one
key: `A=7` (B left to 5) and `B=7` (A left to 5) are both `(7, dtypes)`; Triton tunes the first and launches its
winner for both. The drop-in tunes each call for its own values (a difference kept on purpose, DESIGN section 11):
every launch runs the winner for the values it runs with.

The scripted `do_bench` makes each config's time depend on the kernel's effective A and B (read back from the
output, out = x * A + B), so that a winner tuned for other values than the launch's would show.

Kept on purpose (DESIGN section 11): two spellings of the same values (`A` left to its default, `A=5` passed) are
two `cache` keys in both, tuned twice by Triton and once here (the engine's key fills in the default).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from side_by_side import DECORATORS

F32 = "torch.float32"
N = 24
BLOCKS = (8, 16, 32)

Call = tuple[tuple, dict[str, Any]]  # the positional arguments after (x, out, n), the keywords


@triton.jit
def affine(x, out, n, A=5, B=5, BLOCK: tl.constexpr = 8):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * A + B, mask=mask)


@triton.jit
def affine_constexpr(x, out, n, A: tl.constexpr = 5, B: tl.constexpr = 6, BLOCK: tl.constexpr = 8):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * A + B, mask=mask)


def _time(block: int, a: int, b: int) -> float:
    """A config's time for effective (A, B): the winner moves with them (BLOCK 8 for A > B, 32 for B > A, else 16)."""
    best = 8 if a > b else 32 if b > a else 16
    return 1.0 + abs(BLOCKS.index(block) - BLOCKS.index(best))


class Bench:
    """`do_bench(kernel_call, quantiles)` that counts its calls per config and times a config by its BLOCK (told by
    the shared pre_hook) and the effective A, B the run wrote."""

    def __init__(self) -> None:
        self.block = None
        self.out = None
        self.per_config: dict[int, int] = {}

    def pre_hook(self, nargs, reset_only=False):
        if not reset_only:
            self.block, self.out = nargs["BLOCK"], nargs["out"]

    def __call__(self, kernel_call, quantiles):
        self.block = None
        kernel_call()
        b = int(self.out[0])
        a = int(self.out[1]) - b
        self.per_config[self.block] = self.per_config.get(self.block, 0) + 1
        return [_time(self.block, a, b)] * len(quantiles)


def _scenario(decorate: Any, kernel_fn: Any, key: list[str], calls: list[Call]) -> dict:
    bench = Bench()
    kernel = decorate(
        configs=[triton.Config({"BLOCK": b}) for b in BLOCKS], key=key, do_bench=bench, pre_hook=bench.pre_hook
    )(kernel_fn)
    x = torch.arange(N, dtype=torch.float32)
    launched, tuned_at = [], []
    defaults = {"A": 5, "B": 5 if kernel_fn is affine else 6}
    for i, (extra, kwargs) in enumerate(calls):
        out = torch.zeros(N)
        before = sum(bench.per_config.values())
        kernel[lambda meta: (triton.cdiv(N, meta["BLOCK"]),)](x, out, N, *extra, **kwargs)
        if sum(bench.per_config.values()) != before:
            tuned_at.append(i)
        effective = {**defaults, **dict(zip(("A", "B"), extra)), **kwargs}
        assert torch.equal(out, x * effective["A"] + effective["B"])
        launched.append(kernel.best_config.kwargs["BLOCK"])
    return {
        "launched": launched,
        "tuned_at": tuned_at,
        "per_config": dict(sorted(bench.per_config.items())),
        "cache": {k: v.kwargs["BLOCK"] for k, v in kernel.cache.items()},
    }


def _each(kernel_fn: Any, key: list[str], calls: list[Call]) -> dict[str, dict]:
    return {name: _scenario(decorate, kernel_fn, key, calls) for name, decorate in DECORATORS.items()}


# Calls whose key names, passed or left to defaults, give Triton one key for different effective values.
SHARED_KEY = {
    "A=7 then B=7 by keyword": (["A", "B"], [((), {"A": 7}), ((), {"B": 7}), ((), {"A": 7}), ((), {"B": 7})]),
    "B=7 then A=7 by keyword": (["A", "B"], [((), {"B": 7}), ((), {"A": 7}), ((), {"B": 7})]),
    "A=7 by position then B=7": (["A", "B"], [((7,), {}), ((), {"B": 7}), ((7,), {})]),
    "A=5 vs B=5": (["A", "B"], [((), {"A": 5}), ((), {"B": 5}), ((5,), {}), ((), {"B": 5})]),
    "n in the key too": (["n", "A", "B"], [((), {"A": 2}), ((), {"B": 2}), ((2,), {}), ((5, 2), {})]),
    "position and keyword": (
        ["A", "B"],
        [((7,), {}), ((), {"A": 7}), ((7, 9), {}), ((7,), {"B": 9}), ((), {"B": 9, "A": 7}), ((), {"A": 7, "B": 9})],
    ),
    "both passed, other values": (["A", "B"], [((7, 9), {}), ((9, 7), {}), ((), {"B": 7, "A": 9}), ((7, 9), {})]),
}


def _effective(kernel_fn: Any, calls: list[Call]) -> list[tuple[int, int]]:
    """Each call's (A, B) as the kernel runs with them: passed by position or keyword, else the defaults."""
    defaults = {"A": 5, "B": 5 if kernel_fn is affine else 6}
    return [
        tuple({**defaults, **dict(zip(("A", "B"), extra)), **kwargs}[k] for k in ("A", "B"))  # type: ignore
        for extra, kwargs in calls
    ]


@pytest.mark.parametrize("kernel_fn", [affine, affine_constexpr], ids=["int", "constexpr"])
@pytest.mark.parametrize("name", sorted(SHARED_KEY))
def test_each_call_launches_the_winner_for_its_own_key_values(name, kernel_fn):
    """Whatever Triton's `cache` key says, the drop-in tunes once per distinct values of the key names (passed or
    left to their defaults) and launches that values' winner: B=7 after A=7 is tuned and runs BLOCK 32, not A=7's
    8. Each config is benchmarked once per distinct values."""
    key, calls = SHARED_KEY[name]
    seen = _scenario(DECORATORS["compat"], kernel_fn, key, calls)
    effective = _effective(kernel_fn, calls)
    assert seen["launched"] == [8 if a > b else 32 if b > a else 16 for a, b in effective]
    assert seen["tuned_at"] == [i for i, values in enumerate(effective) if values not in effective[:i]]
    assert seen["per_config"] == {block: len(set(effective)) for block in BLOCKS}


def test_where_triton_s_key_collides_it_launches_another_value_s_winner_and_the_drop_in_does_not():
    """The difference, side by side: A=7 (B left to 5) then B=7 (A left to 5), alternating."""
    calls = [((), {"A": 7}), ((), {"B": 7}), ((), {"A": 7}), ((), {"B": 7})]
    seen = _each(affine, ["A", "B"], calls)
    assert seen["triton"]["tuned_at"] == [0] and seen["triton"]["launched"] == [8, 8, 8, 8]
    assert seen["compat"]["tuned_at"] == [0, 1] and seen["compat"]["launched"] == [8, 32, 8, 32]
    assert set(seen["triton"]["cache"]) == set(seen["compat"]["cache"]) == {(7, F32, F32)}


def test_a_key_name_left_to_its_default_or_passed_as_the_default_is_tuned_once_here_twice_by_triton():
    """Kept on purpose: `()`, `(A=5)`, `(B=5)` and `(A=5, B=5)` are three `cache` keys in both; Triton tunes each, the
    drop-in tunes the values once (its engine's key fills in the defaults) and launches the same winner."""
    calls = [((), {}), ((), {"A": 5}), ((5,), {}), ((), {"B": 5}), ((5, 5), {}), ((), {"B": 5, "A": 5})]
    seen = _each(affine, ["A", "B"], calls)
    assert (
        seen["triton"]["cache"] == seen["compat"]["cache"] == {(F32, F32): 16, (5, F32, F32): 16, (5, 5, F32, F32): 16}
    )
    assert seen["triton"]["launched"] == seen["compat"]["launched"] == [16] * 6
    assert seen["triton"]["tuned_at"] == [0, 1, 4] and seen["triton"]["per_config"] == {8: 3, 16: 3, 32: 3}
    assert seen["compat"]["tuned_at"] == [0] and seen["compat"]["per_config"] == {8: 1, 16: 1, 32: 1}


def test_key_order_b_a_values_tuned_under_another_spelling_are_not_tuned_again():
    """key=["B", "A"]: `(7, 5)` by position (A=7, B=5) is Triton key (5, 7), new to `cache`, so Triton tunes it; the
    drop-in finds A=7, B=5 tuned by the first call (A=7 by keyword) and launches that winner, the one Triton's
    tuning picks too. B=7 by keyword shares the first call's key `(7,)` in Triton, which launches A=7's winner for
    it; the drop-in tunes B=7's values and launches theirs, then reuses them for `(5, 7)`."""
    calls = [((), {"A": 7}), ((), {"B": 7}), ((7, 5), {}), ((5, 7), {})]
    seen = _each(affine, ["B", "A"], calls)
    assert seen["triton"]["launched"] == [8, 8, 8, 32] and seen["triton"]["tuned_at"] == [0, 2, 3]
    assert seen["compat"]["launched"] == [8, 32, 8, 32] and seen["compat"]["tuned_at"] == [0, 1]
    assert (
        set(seen["triton"]["cache"])
        == set(seen["compat"]["cache"])
        == {(7, F32, F32), (5, 7, F32, F32), (7, 5, F32, F32)}
    )
