"""`autotune_launch`: the functional form of `@autotune`, for a kernel launched without decorating it."""

from __future__ import annotations

import enum
import functools
import inspect
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..compiled.tracing import shapes_only
from ..errors import CallError, OptionError
from ..kernel.identity import base_kernel, python_function
from ..record import TuningRecord
from ..space.checksum import code_identity
from ..space.expressions import to_grid
from ..space.spaces import Config, SearchSpace
from .autotuned import Autotuned, untraced_by_dynamo

__all__ = ["autotune_launch", "TuningResult"]


@dataclass(frozen=True)
class TuningResult:
    """What `autotune_launch` returns: the config launched, its grid, the key's record, and whether it was cached."""

    config: Config
    grid: Any
    record: TuningRecord | None
    cache_hit: bool


# Kept for the life of the process, on purpose: each wrapper holds its keys' winners in memory, so a repeated
# call is a memory hit. One entry per distinct (kernel, space, grid, key, options); the wrapper keeps its kernel
# (and a SearchSpace, and any object identified by id) alive, so the ids in the entry's identity are never reused
# while it exists. A callable is told apart by what it computes (`_callable_identity`), not by its address, so a
# lambda written at the call site finds the wrapper the previous call made.
_launch_registry: dict[tuple, Autotuned] = {}
_launch_registry_lock = threading.Lock()
_CALLABLE_GRID = "<callable grid: given at launch>"
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


def _stable(value: Any, depth: int = 0) -> bool:
    """Whether `value`, captured by a function, is identified by its text in `code_identity` (immutable, its repr
    holds no address) or is a function that is itself stable."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, type, ModuleType, enum.Enum)):
        return True
    if isinstance(value, (tuple, frozenset)):
        return depth < 8 and all(_stable(v, depth + 1) for v in value)
    inner = python_function(value)
    if inspect.isfunction(inner):
        return depth < 8 and not _unstable_captures(inner, depth + 1)
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.dtype)


def _unstable_captures(fn: Any, depth: int = 0) -> list[tuple[str, Any]]:
    """(name, value) of what `fn` closes over or has as a default that `_stable` refuses."""
    captured = list(
        zip(fn.__code__.co_freevars, (c.cell_contents if _filled(c) else None for c in fn.__closure__ or ()))
    )
    captured += [(f"default {i}", v) for i, v in enumerate(fn.__defaults__ or ())]
    captured += list((fn.__kwdefaults__ or {}).items())
    return [(name, value) for name, value in captured if not _stable(value, depth)]


def _filled(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True


def _callable_identity(fn: Any, what: str) -> tuple:
    """A function by its module, name and `code_identity` (so the same lambda, made anew at each call, is the
    same); a bound method by its object and function; a `functools.partial` by its function and arguments (so
    one made anew at each call is the same); any other callable by id (the registry keeps it alive).
    A function that captures a value with no stable identity (a tensor, a list, an object) is refused: keyed by
    id, a function made at each call would make a new wrapper at each call."""
    if inspect.ismethod(fn):
        return ("method", id(fn.__self__), _callable_identity(fn.__func__, what))
    if isinstance(fn, functools.partial):
        return (
            "partial",
            _callable_identity(fn.func, what),
            _identity(fn.args, what),
            _identity(dict(sorted(fn.keywords.items())), what),
        )
    if not inspect.isfunction(fn):
        return ("object", id(fn))
    unstable = _unstable_captures(fn)
    if unstable:
        name, value = unstable[0]
        raise OptionError(
            f"autotune_launch({what}=...): {fn.__qualname__} captures {name} = "
            f"{type(value).__name__}, which autotune_launch cannot identify from one call to the next "
            f"(it keeps one tuner per distinct {what}=, so a function made anew at each call would "
            f"make, and keep, a new tuner at each call): read the value from the call's arguments "
            f"(passed by name) or a module-level name instead of capturing it, or decorate the kernel "
            f"with @autotune({what}=...) once"
        )
    return ("function", fn.__module__, fn.__qualname__, code_identity(fn))


def _identity(value: Any, what: str) -> Any:
    """A hashable identity of an argument of `autotune_launch`, the same for equal arguments made anew at each
    call: data by its text, callables by `_callable_identity`, containers item by item."""
    if isinstance(value, Mapping):
        return ("map", tuple((repr(k), _identity(v, f"{what}[{k!r}]")) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_identity(v, what) for v in value))
    if callable(value) and not isinstance(value, type):
        return _callable_identity(value, what)
    text = repr(value)
    if _ADDRESS.search(text):  # an object without a readable repr (a Reference): by its attributes, else by id
        attributes = getattr(value, "__dict__", None)
        if attributes is None:
            return ("object", id(value))
        return (type(value).__qualname__, _identity(attributes, what))
    return text


def _space_identity(space: Any) -> Any:
    """A space given as data, by its text; where that holds object addresses (`triton.Config`s, which have no
    repr of their own), item by item, as `_identity` tells objects apart."""
    text = repr(space)
    return _identity(space, "space") if _ADDRESS.search(text) else text


def _registered(kernel: object, space: Any, grid: Any, key: Any, options: dict[str, Any]) -> Autotuned:
    """The autotuned wrapper kept for these arguments, made at their first launch. Spaces given as data are told
    apart by their repr, a SearchSpace object by identity (the registry keeps it alive): a checksum would hash
    every config on every call of this hot path. A callable grid is the launch's, not the wrapper's."""
    callable_grid = callable(grid)
    ident = (
        id(kernel),
        id(space) if isinstance(space, SearchSpace) else _space_identity(space),
        _CALLABLE_GRID if callable_grid else _identity(grid, "grid"),
        _identity(key, "key"),
        tuple((name, _identity(value, name)) for name, value in sorted(options.items())),
    )
    with _launch_registry_lock:
        tuned = _launch_registry.get(ident)
        if tuned is None:
            tuned = Autotuned(kernel, space=space, key=key, grid=None if callable_grid else grid, **options)
            _launch_registry[ident] = tuned
    return tuned


def autotune_launch(
    kernel: object,
    *,
    space: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None = None,
    grid: Any = None,
    key: Any = None,
    **autotune_options: Any,
) -> TuningResult:
    """Functional form of `@autotune`: tune (or reuse) and launch `kernel` once; returns a `TuningResult`.

    The autotuned wrapper is kept per (kernel, space, grid, key, options), so repeated calls hit its cache. A
    callable `grid=` (Triton's `meta -> tuple`) is not part of the wrapper: it is this launch's grid, as in
    `kernel[grid](...)`, so a lambda written at the call site costs nothing.
    """
    if shapes_only():  # torch_op's fake implementation, on FakeTensors: nothing to tune, and no result to give
        raise OptionError(
            "autotune_launch(...) ran inside an autotune.torch_op wrapper while torch traced its shapes on "
            "FakeTensors; it returns a TuningResult, so it cannot be skipped there as a kernel's launch is: give "
            "that torch_op fake= (a function that only allocates the outputs)"
        )
    if not hasattr(base_kernel(kernel), "arg_names"):
        raise CallError(
            f"autotune_launch(kernel, ...) takes a @triton.jit kernel (or one wrapped by triton.heuristics); "
            f"got {kernel!r}"
        )
    if grid is None:
        raise CallError(
            "autotune_launch(...) needs grid=: a tuple, a '$X' expression string such as "
            "'(cdiv(n, $BLOCK),)', or a callable meta -> tuple as in kernel[grid](...)"
        )
    if not isinstance(args, (tuple, list)):  # a dict would pass its keys, a tensor its rows, as the arguments
        raise CallError(
            f"autotune_launch(args=...) takes the kernel's positional arguments as a tuple or list, "
            f"e.g. args=(x, y, out, n); got {type(args).__name__} (keyword arguments go in kwargs=)"
        )
    launch_grid = grid if callable(grid) else None
    tuned = _registered(kernel, space, grid, key, autotune_options)
    call_args, call_kwargs = tuple(args), dict(kwargs or {})
    launch = tuned.select_and_launch(call_args, call_kwargs, launch_grid, False)
    launched = launch.grid
    if launch_grid is not None:  # the grid as launched, as with grid= given as a string
        launched = to_grid(launch_grid(tuned.grid_meta(launch)), f"callable {getattr(launch_grid, '__name__', 'grid')}")
    return TuningResult(
        config=launch.config,
        grid=launched,
        record=launch.record,
        cache_hit=launch.how in ("memory", "disk", "remote", "cache"),
    )


untraced_by_dynamo(autotune_launch)  # Dynamo refuses it naming torch_op, and never traces its work
