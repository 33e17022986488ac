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

import contextlib
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import torch
from triton.runtime.jit import KernelInterface

from ..errors import OptionError
from ..kernel.identity import wrapper_layers
from ..kernel.source import kernel_identity
from .tracing import tracing_shapes

__all__ = ["torch_op"]

F = TypeVar("F", bound=Callable[..., Any])

# Which function each op name of this process was registered for (its "module:qualname", with a closure's tag as a
# kernel's identity has it): torch replaces an op of the same name without a word, so a second function under it
# would make the first op object run the second's code.
_OWNERS: dict[str, str] = {}
_OWNERS_LOCK = threading.Lock()  # held while torch registers an op: a check and its record are one step


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
        _refuse_kernel(name, wrapper)
        if schema is None and not hasattr(wrapper, "__globals__"):  # torch's infer_schema reads it
            raise OptionError(
                f"autotune.torch_op({name!r}) was given {type(wrapper).__name__} {wrapper!r:.80}; torch reads the op's "
                "schema from a plain function's annotations: wrap it in a `def` with annotated tensor arguments (or "
                "give schema=)"
            )
        with _claim(name, wrapper):
            op = _define(name, wrapper, mutates_args, device_types, schema)
            op.register_fake(fake if fake is not None else _shapes_of(name, wrapper))
        return op

    return register if fn is None else register(fn)


def _refuse_kernel(name: str, wrapper: Any) -> None:
    """A kernel given in place of the torch-level wrapper (an @autotune, autotune.compat or @triton.jit kernel)
    has no tensor annotations for torch to read a schema from: named now, with the fix, not torch's own error."""
    if isinstance(wrapper, KernelInterface):
        kernel = getattr(wrapper_layers(wrapper)[-1], "__name__", None) or repr(wrapper)
        raise OptionError(
            f"autotune.torch_op({name!r}) was given the kernel {kernel} itself; it takes a torch-level wrapper "
            "function that launches the kernel: its annotations (x: torch.Tensor, ...) are the op's schema and its "
            "own allocations the output shapes, e.g. `def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor: "
            f"out = torch.empty_like(x); {kernel}(x, y, out, x.numel()); return out`"
        )


@contextlib.contextmanager
def _claim(name: str, wrapper: Callable[..., Any]) -> Iterator[None]:
    """Hold `name` while torch registers `wrapper` under it, refused when another function of this process
    registered it: another module:qualname, or another closure of one factory whose captured values differ (as a
    kernel's identity tells them: by their stable text, a value without one, a tensor or an object, by its type).
    The same function again (a module reloaded, a notebook cell run again) re-registers it, as torch does."""
    owner = kernel_identity(wrapper)
    with _OWNERS_LOCK:
        taken = _OWNERS.get(name, owner)
        if taken != owner:
            raise OptionError(
                f"autotune.torch_op({name!r}): that op name is already registered for {taken}, and {owner} would "
                "replace it (torch swaps the op's code under every caller of the first); give this function an op "
                "name of its own"
            )
        yield
        _OWNERS[name] = owner


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


def _shapes_of(name: str, wrapper: F) -> F:
    """The wrapper as a fake implementation: run on FakeTensors with every autotuned launch skipped. A launch that
    is not autotuned (a plain @triton.jit kernel) would read a FakeTensor's data: named, with the fix."""

    @functools.wraps(wrapper)
    def fake(*args: Any, **kwargs: Any) -> Any:
        with tracing_shapes():
            try:
                return wrapper(*args, **kwargs)
            except RuntimeError as exc:
                if "Cannot access data pointer" not in str(exc):
                    raise
                raise OptionError(
                    f"autotune.torch_op({name!r}): its wrapper, run on FakeTensors to learn the output shapes, "
                    "touched a tensor's data; only autotuned launches are skipped there, so a plain "
                    "@triton.jit kernel (or any code that reads tensor data) in the wrapper needs fake= (a function "
                    "that only allocates the outputs), or make that kernel @autotune"
                ) from None

    return fake  # type: ignore[return-value]
