"""What the engine needs of a decorated kernel, written down: `TunableKernel`. `Autotuned` (decorator/) and the
`autotune.compat` drop-in's engine satisfy it, which mypy checks; the engine never sees more of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..kernel.call import BoundCall
from ..options import Tuning
from ..reference import Reference
from ..space.spaces import Config
from .compilers import JitKernel, LaunchArgs
from .pipeline import Compiler


class TunableKernel(Protocol):
    """A decorated kernel as the engine uses it: identity, how to bind a call and launch a config, what guards
    each trial, how a config is compiled, and what a worker needs to load it anew."""

    name: str  # the kernel's short name, for messages
    identity: str  # "module:qualname": where a worker imports it, and its cache directory
    tuning: Tuning
    default_isolate: str  # where untried configs run when neither Tuning nor AUTOTUNE_ISOLATE says
    interpreted: bool  # Triton's CPU interpreter: nothing to compile, the wall clock to time with
    fn: JitKernel  # what a trial launches (heuristics layers included)
    base_fn: Any  # the @triton.jit kernel itself (a JITFunction: its source, arg_names, module)
    launch_lock: AbstractContextManager[Any]
    recipe: dict[str, Any]  # the @autotune arguments, for a worker that decorates the kernel anew
    restore_value: Sequence[str]
    reset_to_zero: Sequence[str]
    setup: Callable[..., Any] | None
    verify: Callable[..., Any] | Reference | None
    do_bench: Callable[..., Any] | None
    compiler_factory: Callable[[Any, Callable[[Config], tuple]], Compiler] | None

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any], *, strict: bool = False) -> BoundCall: ...

    def launch_args(self, config: Config, bound: BoundCall, grid: Any) -> LaunchArgs: ...

    def run_trial(self, config: Config, args: tuple, kwargs: dict, grid: Any) -> Any: ...

    def compiler_for(self, prepare: Callable[[Config], tuple]) -> Compiler: ...

    def synchronize(self) -> None: ...
