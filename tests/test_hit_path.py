"""A cache hit of `kernel(...)` or `kernel[grid](...)` with positional arguments does no work the last hit already
did: no BoundCall, no Launch, the winner's launch keywords kept per config; what it launches and counts is what
the full path would."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import autotune.decorator.autotuned as decorator
from autotune import Tuning, autotune, clear_autotune_cache, stats


@triton.jit
def hit_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def test_a_hit_builds_no_bound_call_and_launches_and_counts_as_the_full_path(monkeypatch):
    add = autotune(
        space={"BLOCK": [32, 64]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0),
    )(hit_add)
    bound_calls = []
    real = decorator.BoundCall
    monkeypatch.setattr(decorator, "BoundCall", lambda *a: bound_calls.append(a) or real(*a))
    x, y, out = torch.rand(100), torch.rand(100), torch.empty(100)
    add(x, y, out, 100)  # the miss: bound, tuned, launched
    assert len(bound_calls) == 1 and stats()["hit_add"]["tunings"] == 1
    for launch in (lambda: add(x, y, out, 100), lambda: add[lambda meta: (4,)](x, y, out, 100)):
        out.zero_()
        launch()
        torch.testing.assert_close(out, x + y)
    assert len(bound_calls) == 1 and stats()["hit_add"]["hits"] == 2
    assert add.best_config == add.record().winner

    add(x, y, out, n=100)  # a keyword: the full path
    assert len(bound_calls) == 2
    z = torch.rand(50)
    add(z, z, torch.empty(50), 50)  # another key: a miss, then tuned
    assert stats()["hit_add"]["tunings"] == 2
    clear_autotune_cache(add)
    add(x, y, out, 100)  # cleared: not a hit any more
    assert stats()["hit_add"]["tunings"] == 3
    torch.testing.assert_close(out, x + y)
