"""Launches skipped while torch traces shapes: `autotune.torch_op`'s fake implementation runs the user's wrapper on
FakeTensors, so that the wrapper's own code (its `torch.empty_like(x)`) gives the output shapes, and every
autotuned launch inside it does nothing. Torch-free, so the launch path can ask it without importing torch."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

__all__ = ["shapes_only", "tracing_shapes"]

_SHAPES_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("autotune_shapes_only", default=False)


# Whether this thread is inside `tracing_shapes()`: an autotuned kernel's launch then returns None at once. The
# context variable's own bound `get` (no Python frame): it is asked on every launch.
shapes_only: Callable[[], bool] = _SHAPES_ONLY.get


@contextlib.contextmanager
def tracing_shapes() -> Iterator[None]:
    """Skip every autotuned launch in this context (this thread or task): no binding, tuning or launch."""
    token = _SHAPES_ONLY.set(True)
    try:
        yield
    finally:
        _SHAPES_ONLY.reset(token)
