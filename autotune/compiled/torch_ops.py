"""`autotune.torch_op`: an autotuned kernel, through a torch-level wrapper, as a PyTorch custom op, so that code
compiled with `torch.compile(fullgraph=True)` calls it without a graph break.

```python
@autotune.torch_op("mylib::add", mutates_args=())
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel(x, y, out, x.numel())  # an @autotune (or autotune.compat) kernel
    return out
```

The wrapper is written once and says everything torch needs: its annotations are the op's schema,
`mutates_args` the arguments it writes in place, and its own allocations the output shapes. The op's fake
implementation (what Dynamo and AOTAutograd run on FakeTensors to learn shapes) is the same wrapper with every
autotuned launch skipped (`tracing.tracing_shapes`), unless `fake=` gives one (a wrapper that reads tensor values
to size its outputs needs one). At run time the compiled graph calls the real wrapper: the kernel's key, tuning,
cache tiers, online mode, isolation and CUDA-graph capture rules apply as in eager code, per call, so a graph
compiled once for dynamic shapes still picks a config per shape.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch

from .tracing import tracing_shapes

__all__ = ["torch_op"]

F = TypeVar("F", bound=Callable[..., Any])


def torch_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    *,
    mutates_args: Iterable[str] | str,
    fake: Callable[..., Any] | None = None,
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
) -> Any:
    """Register `fn` (a function over tensors that launches autotuned kernels) as the custom op `name`
    ("namespace::op"), with a fake implementation; returns torch's op object, called like `fn`. Use it as a
    decorator (`@torch_op("mylib::add", mutates_args=())`) or call it on a function. `mutates_args` is required,
    as in `torch.library.custom_op`: the names of the arguments the wrapper writes in place (`()` for none),
    which torch must know to order and copy them correctly."""
    if not isinstance(name, str) or "::" not in name:
        raise ValueError(f"autotune.torch_op(name=...) takes 'namespace::op_name' (e.g. 'mylib::add'); got {name!r}")

    def register(wrapper: Callable[..., Any]) -> Any:
        op = _define(name, wrapper, mutates_args, device_types, schema)
        op.register_fake(fake if fake is not None else _shapes_of(wrapper))
        return op

    return register if fn is None else register(fn)


def _define(
    name: str,
    wrapper: Callable[..., Any],
    mutates_args: Iterable[str] | str,
    device_types: str | Sequence[str] | None,
    schema: str | None,
) -> Any:
    """The op itself: `torch.library.custom_op`, opaque to Inductor, which calls the wrapper at run time. The seam
    for a GPU route through `torch.library.triton_op` + `wrap_triton` (Inductor then sees the chosen config's
    kernel): see DESIGN section 2e."""
    return torch.library.custom_op(name, wrapper, mutates_args=mutates_args, device_types=device_types, schema=schema)


def _shapes_of(wrapper: F) -> F:
    """The wrapper as a fake implementation: run on FakeTensors with every autotuned launch skipped."""

    @functools.wraps(wrapper)
    def fake(*args: Any, **kwargs: Any) -> Any:
        with tracing_shapes():
            return wrapper(*args, **kwargs)

    return fake  # type: ignore[return-value]
