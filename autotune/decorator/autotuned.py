"""`@autotune`: the decorated-kernel object, from a call to the launch of the winning config.

A call binds the arguments, builds the key, asks the kernel's cache for the winner (which tunes on a miss,
once, whatever the number of threads and processes asking) and launches it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from triton.runtime.jit import KernelInterface, MockTensor

from ..compiled.capture import capturing, select_in_capture
from ..compiled.tracing import shapes_only
from ..engine.measuring import measuring_suspended
from ..engine.process_group import Mode, active_mode
from ..engine.search import check_strategy, search_of
from ..errors import (
    AutotuneError,
    CacheWarning,
    CallError,
    NoDeviceError,
    OptionError,
    SpaceError,
    warn_at_caller,
)
from ..kernel.call import BoundCall, CallSignature, Found, How, Launch
from ..kernel.compile_options import compile_option_names
from ..kernel.identity import (
    base_kernel,
    constexpr_names,
    has_dtype_stand_ins,
    heuristic_kwargs,
    heuristics_layers,
    is_interpreted,
    launch_lock,
    python_function,
    warn_if_interpreter_breaks,
)
from ..kernel.occupancy import FIELD as OCCUPANCY
from ..kernel.occupancy import GpuTarget, OccupancyUnreachable, lowered_options, lowering
from ..kernel.option_checks import (
    as_derive,
    as_names,
    check_argument_lists,
    check_derive_names,
    check_fallback,
    check_guarded_values,
    check_heuristic_overlap,
    check_hook_signatures,
    check_hooks,
    check_key,
    check_launch_grid,
    check_not_autotuned,
    check_static_options,
    check_timeouts,
    fallback_config,
)
from ..kernel.pruning import PruneSpec, RerunCall, as_pruner, kept_configs, untuned_config
from ..kernel.source import check_kernel_source, kernel_identity
from ..keys import KeyBuilder, check_finite_key
from ..options import (
    Tuning,
    env_disable,
    env_force,
    env_offline,
    env_print_level,
    isolate_setting,
    online_mode,
    warn_misspelt_env,
)
from ..record import TuningRecord
from ..reference import Reference
from ..space.checks import check_required_fields, validate_space
from ..space.checksum import launch_text, tuned_under
from ..space.expressions import compile_derive, compile_grid, to_grid
from ..space.spaces import Config, SearchSpace, as_space
from ..storage.counters import count_hit
from ..storage.fingerprint import source_hash
from ..storage.kernel_cache import ForceBaseline, KernelCache
from .inspection import KernelInspection

if TYPE_CHECKING:
    from ..engine.pipeline import Compiler
    from ..engine.tunable_kernel import TunableKernel
    from ..modes.online import OnlineTuner
    from .tune_key import KeyTuning, Select

__all__ = ["Autotuned", "BoundCall", "Launch", "autotune", "untrace_launches", "untraced_by_dynamo"]

_NOT_A_HIT = object()  # `_launch_hit`'s answer when a call must take the full path
_NO_HIT_PATH = (1, 0)  # `_hit_arity` bounds no count of arguments meets: every call takes the full path

logger = logging.getLogger("autotune")


_DYNAMO_REASON = (
    "an autotuned kernel is launched directly inside torch.compile, whose Dynamo cannot trace its launch (tuning, "
    "caches, locks); make the launch a torch custom op with @autotune.torch_op(...) and call that op in the "
    "compiled code"
)


# Functions `untraced_by_dynamo` marked whose code Dynamo has not been told to skip yet (torch not imported then).
_PENDING: list[Callable[..., Any]] = []


def untraced_by_dynamo(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a launch function so that torch.compile's Dynamo never traces it: a graph break (under fullgraph=True
    an error naming `autotune.torch_op`) and an eager launch. Sets the attributes `torch.compiler.disable(reason=)`
    sets, on the function itself (no wrapper: no cost, no extra frame), and `untrace_launches` does the rest."""
    fn._torchdynamo_disable = True  # type: ignore[attr-defined]
    fn._torchdynamo_disable_msg = _DYNAMO_REASON  # type: ignore[attr-defined]
    _PENDING.append(fn)
    untrace_launches()
    return fn


def untrace_launches() -> None:
    """Once torch is imported (never imported here), have Dynamo skip the marked functions' frames and every frame
    they call: the attributes alone make it break the graph at the call but then compile each frame the launch
    runs (and fail on FakeTensors at a hit). Per code object, through torch's own C hook: the public
    `torch.compiler.disable` wrapper would import torch._dynamo with autotune (seconds) and add a frame to every
    launch (a warning's stacklevel would name torch's file). Called at each decoration; idempotent."""
    if not _PENDING or "torch" not in sys.modules:
        return
    try:
        from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
    except ImportError:  # a torch without the hook: the attributes alone (a graph break, the launch traced)
        return
    skip = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    while _PENDING:
        try:
            set_code_exec_strategy(_PENDING.pop().__code__, skip)
        except IndexError:  # another thread took the last one
            return


def _plain_grid(grid: Any) -> bool:
    """A grid the hit path may hand to Triton as is (a tuple of 1-3 ints >= 0, or a callable); any other (a negative
    size launches nothing, a bool passes for an int) takes the full path, whose `check_launch_grid` says what is
    wrong with it, as on a miss."""
    if type(grid) is not tuple:
        return grid is not None and callable(grid)
    for size in grid:
        if type(size) is not int or size < 0:
            return False
    return 0 < len(grid) <= 3


def _checked_grid(kernel: str, grid: Callable[[dict], Any]) -> Callable[[dict], tuple[int, ...]]:
    """A callable `kernel[grid]` whose result is checked as a tuple grid is (`to_grid`): a negative size would
    launch nothing, silently, and a bool pass for an int."""
    source = f"{kernel}[{getattr(grid, '__name__', type(grid).__name__)}]"
    return lambda meta: to_grid(grid(meta), source)


def _say_cache_hit(record: TuningRecord) -> None:
    """Print or log a winner read from the disk or remote tier, as a tuning is; only then is reporting loaded."""
    if env_print_level() >= 1 or logger.isEnabledFor(logging.INFO):
        from ..reporting.lines import emit

        emit(record, cache_hit=True)


class Autotuned(KernelInspection, KernelInterface):
    """A Triton kernel with a search space. Call it (grid from the decorator) or index it with a grid."""

    default_isolate = "off"  # in this process, as triton.autotune, when neither Tuning nor AUTOTUNE_ISOLATE says

    def __init__(
        self,
        fn: Any,
        *,
        space: Any,
        key: Any = None,
        grid: Any = None,
        derive: Mapping[str, Any] | None = None,
        tuning: Tuning | str | dict | None = None,
        restore_value: Sequence[str] = (),
        reset_to_zero: Sequence[str] = (),
        verify: Callable[..., bool] | Reference | None = None,
        setup: Callable[..., Any] | None = None,
        do_bench: Callable[..., Any] | None = None,
        prune: PruneSpec = None,
        fallback: Mapping[str, Any] | None = None,
        **static_options: Any,
    ) -> None:
        untrace_launches()  # torch imported since the last decoration: launches from compiled code run eagerly
        self.fn = fn
        # The arguments it was decorated with: a worker decorates the kernel anew from them (isolation/) when no
        # module-level name holds this object (a kernel autotuned away from its definition, autotune_launch).
        self.recipe: dict[str, Any] = dict(
            space=space,
            key=key,
            grid=grid,
            derive=derive,
            tuning=tuning,
            restore_value=restore_value,
            reset_to_zero=reset_to_zero,
            verify=verify,
            setup=setup,
            do_bench=do_bench,
            prune=prune,
            fallback=fallback,
            **static_options,
        )
        self._read_kernel(fn)
        self.tuning = Tuning.coerce(tuning)
        warn_misspelt_env()
        self.space: SearchSpace = as_space(space)
        derive = self._check_space(static_options, derive)
        restore_value, reset_to_zero = self._check_argument_names(restore_value, reset_to_zero, derive)
        check_hooks(self.name, self.arg_names, verify=verify, setup=setup, do_bench=do_bench)
        self._list_space()
        self._choose_how_to_tune(prune)
        self._compile_call(fn, grid, derive, key, fallback, verify, setup)
        self._keep_hooks(restore_value, reset_to_zero, verify, setup, do_bench, prune, fallback, derive)
        self._prepare_launches()

    def _read_kernel(self, fn: Any) -> None:
        self.base_fn = base_kernel(fn)
        if not hasattr(self.base_fn, "arg_names"):
            raise AutotuneError(
                f"@autotune decorates a @triton.jit kernel; got {fn!r}. Put @autotune above @triton.jit."
            )
        python_fn = python_function(self.base_fn)
        self.name: str = python_fn.__name__
        check_not_autotuned(self.name, fn, self.base_fn, Autotuned)
        self.arg_names: list[str] = list(self.base_fn.arg_names)
        self._arg_name_set = frozenset(self.arg_names)
        self.constexpr_names = constexpr_names(self.base_fn)
        self._defaults = {
            p.name: p.default
            for p in inspect.signature(python_fn).parameters.values()
            if p.default is not inspect.Parameter.empty
        }

    def _check_space(self, static_options: dict[str, Any], derive: Mapping[str, Any] | None) -> dict[str, Any]:
        """The static options, derive= and the space checked against the kernel (the options kept, with the
        backend's compile option names); derive= as a checked dict."""
        self._compile_options = compile_option_names()
        check_static_options(
            self.name,
            static_options,
            self._compile_options,
            set(inspect.signature(autotune).parameters) - {"static_compile_options"},
        )
        self.static_options = dict(static_options)
        derive = as_derive(self.name, derive)
        check_derive_names(self.name, derive, self.constexpr_names)
        validate_space(
            self.space,
            kernel_name=self.name,
            constexpr_names=self.constexpr_names,
            compile_options=self._compile_options,
            static_options=self.static_options,
            derived_names=derive,
        )
        return derive

    def _check_argument_names(
        self, restore_value: Sequence[str], reset_to_zero: Sequence[str], derive: Mapping[str, Any]
    ) -> tuple[Sequence[str], Sequence[str]]:
        restore_value = as_names(self.name, "restore_value", restore_value)
        reset_to_zero = as_names(self.name, "reset_to_zero", reset_to_zero)
        guarded = {"restore_value": restore_value, "reset_to_zero": reset_to_zero}
        check_argument_lists(self.name, self.arg_names, guarded, tuned_names={*self.space.fields(), *derive})
        return restore_value, reset_to_zero

    def _list_space(self) -> None:
        # A space over LIST_LIMIT configs is never listed (configs is None): it is searched (search/).
        self.configs: list[Config] | None = None if self.space.lazy else self.space.configs()
        self.space_size = len(self.configs) if self.configs is not None else self.space.unfiltered_len()

    def _choose_how_to_tune(self, prune: PruneSpec) -> None:
        """The search strategy, and the timeouts and isolation checked against the kernel."""
        self.strategy = check_strategy(self.tuning, self.space, self.space_size, self.name, prune=prune is not None)
        check_timeouts(self.name, self.tuning, self.default_isolate)
        if isolate_setting(self.tuning, self.default_isolate)[0] == "process":  # refused now if no worker could
            # import it (isolation/); AUTOTUNE_ISOLATE=process is read again at each tuning
            from ..engine.isolation import check_isolation

            check_isolation(self)

    def _compile_call(
        self,
        fn: Any,
        grid: Any,
        derive: Mapping[str, Any],
        key: Any,
        fallback: Mapping[str, Any] | None,
        verify: Callable[..., bool] | Reference | None,
        setup: Callable[..., Any] | None,
    ) -> None:
        """The grid, derive= and key expressions, and what a call must pass (checked against the hooks)."""
        fields = self.space.fields()
        self._grid = compile_grid(grid, config_fields=fields | set(derive), arg_names=self.arg_names)
        self._derive = compile_derive(derive, config_fields=fields, arg_names=self.arg_names) if derive else None
        self._key = KeyBuilder(key, arg_names=self.arg_names)
        # What a call must pass: every parameter that has no default and that neither the space, derive= nor a
        # triton.heuristics layer provides; `_required_upto` lets a call that passes them all by position skip
        # the check.
        self._heuristics = heuristics_layers(fn, self.base_fn)  # what the grid sees too, as in Triton's launch
        heuristic = check_heuristic_overlap(self.name, fields, derive, self._heuristics)
        provided = set(fields) | set(derive) | heuristic
        self._call_signature = CallSignature(
            self.name, self.arg_names, frozenset(fields) | frozenset(derive), self.static_options
        )
        check_key(self.name, self._key, provided)
        check_fallback(self.name, fallback, set(fields) - self._compile_options, self._defaults, derive)
        check_required_fields(
            self.space,
            kernel_name=self.name,
            required=[n for n in self.constexpr_names if n not in self._defaults and n not in heuristic],
        )
        self._required = [n for n in self.arg_names if n not in self._defaults and n not in provided]
        self._required_upto = max((self.arg_names.index(n) + 1 for n in self._required), default=0)
        check_hook_signatures(
            self.name,
            [n for n in self.arg_names if n in self._defaults or n in self._required],
            provided,
            verify=verify,
            setup=setup,
            key=key,
        )

    def _keep_hooks(
        self,
        restore_value: Sequence[str],
        reset_to_zero: Sequence[str],
        verify: Callable[..., bool] | Reference | None,
        setup: Callable[..., Any] | None,
        do_bench: Callable[..., Any] | None,
        prune: PruneSpec,
        fallback: Mapping[str, Any] | None,
        derive: Mapping[str, Any],
    ) -> None:
        """The guards, hooks, prune= and fallback=, as the tuning and the launch use them."""
        self.restore_value, self.reset_to_zero = restore_value, reset_to_zero
        self._guarded = {
            "restore_value": restore_value,
            "reset_to_zero": reset_to_zero,
            "verify=Reference(...) outputs": verify.outputs if isinstance(verify, Reference) else (),
        }
        self.verify, self.setup, self.do_bench = verify, setup, do_bench
        self.prune = as_pruner(prune, self.name, self.static_options)
        self.fallback = (
            None
            if fallback is None
            else fallback_config(
                self.name,
                fallback,
                constexpr_names=self.constexpr_names,
                compile_options=self._compile_options,
                static_options=self.static_options,
                derived_names=derive,
            )
        )

    def _prepare_launches(self) -> None:
        """How this kernel launches (interpreter or GPU), its identity and its cache; the per-call memos."""
        self.interpreted = is_interpreted(self.base_fn)
        if self.interpreted:
            warn_if_interpreter_breaks()
        else:  # the compiler hash every first compile or launch of the process needs, in the background from now
            from ..engine.compilers import warm_triton_key

            warm_triton_key()
        self.launch_lock = launch_lock(self.interpreted)  # serialises interpreted launches across threads
        # module:qualname, so two kernels of one short name keep separate entries; "#<8 hex>" of its closure's values
        # after it for a factory-made variant, so that each has its own directory and slots
        self.identity = kernel_identity(self.base_fn)
        check_kernel_source(self.base_fn)  # unidentifiable: an error now; the hash itself at the first use
        self.cache = KernelCache(
            self.name,
            functools.partial(source_hash, self.base_fn),
            tuned_under(
                self.space.checksum(),
                self.static_options,
                launch_text(self.recipe["grid"], self.recipe["derive"]),
            ),
            self.space.contains,
            identity=self.identity,
            key_fields=self._key.fields,
            search=search_of(self.strategy, self.tuning),
            objective=self.tuning.objective,
        )
        self.compiler_factory: Callable[[Autotuned, Callable[[Config], tuple]], Compiler] | None = None
        self.best_config: Config | None = None
        self._last_key: tuple | None = None
        self._split_cache: dict[Config, tuple[dict, dict]] = {}
        self._hit_kwargs: dict[Config, dict] = {}  # a winner's launch keywords on the hit path (`_launch_hit`)
        # How many positional arguments a call may pass to take `_launch_hit` (lowest, highest): all the required
        # ones, none that bind() would check (a tuned field); with derive=, none (`_NO_HIT_PATH`).
        self._hit_arity = (
            (self._required_upto, min(len(self.arg_names), self._call_signature.first_tuned))
            if self._derive is None
            else _NO_HIT_PATH
        )
        self._forced: set = set()  # set.add and `in` are atomic: no lock a fork could catch held
        # self.__dict__["_online"]: an OnlineTuner, made on first use (online.py; not on a hit)
        self._first: Config | None = None

    @property
    def online(self) -> OnlineTuner:
        """The kernel's online sessions (`mode="online"`), one per key in progress."""
        tuner = self.__dict__.get("_online")
        if tuner is None:
            from ..modes.online import OnlineTuner

            # No lock (one held by another thread at a fork would hang the child): threads racing here each make
            # one, dict.setdefault keeps the first, and the others are dropped before they start any thread.
            tuner = self.__dict__.setdefault("_online", OnlineTuner(self))
        return tuner

    # ------------------------------------------------------------------------------------------ calling
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Launch with the decorator's `grid=`; tunes first on a new key."""
        if shapes_only():  # torch_op's fake implementation: the wrapper gives shapes, nothing launches
            return None
        if not kwargs and self._hit_arity[0] <= len(args) <= self._hit_arity[1] and self._grid is not None:
            result = self._launch_hit(args, None)
            if result is not _NOT_A_HIT:
                return result
        if self._grid is None:
            raise AutotuneError(
                f"{self.name} was decorated without grid=; launch it as {self.name}[grid](...) "
                f"or give @autotune(grid=...)"
            )
        if "grid" in kwargs or "warmup" in kwargs:
            given = "grid" if "grid" in kwargs else "warmup"
            raise CallError(
                f"{self.name}(..., {given}=...): {given} is not an argument of {self.name}; launch it as "
                f"{self.name}[grid](...) (Triton's form), or {self.name}.warmup(...) to compile without "
                "launching"
            )
        return self.run(*args, grid=None, warmup=False, **kwargs)

    def _launch_hit(self, args: tuple, grid: Any) -> Any:
        """`kernel(*args)` or `kernel[grid](*args)` (`grid=None`: the decorator's) on a memory hit, as
        `select_and_launch` launches it less what the last hit of the same winner already did (its launch keywords
        are kept per config): no BoundCall, no Launch. `_NOT_A_HIT` when the call must take the full path (a miss,
        force= not yet applied). Taken only for positional arguments that `bind` would not check (`_hit_arity`)
        and no derive=."""
        named = dict(self._defaults)
        named.update(zip(self.arg_names, args))
        key, dtypes = self._key(named)
        record = self.memory_hit(key, dtypes)
        if record is None:
            return _NOT_A_HIT
        config = self.best_config = record.winner
        launch_kwargs = self._hit_kwargs.get(config)
        if launch_kwargs is None:
            meta, options = self._split(config)
            launch_kwargs = self._hit_kwargs[config] = {**options, **meta}
        if grid is None:
            grid = self._own_grid(config, named, args, launch_kwargs)
        with self.launch_lock:
            return self.fn.run(*args, grid=grid, warmup=False, **launch_kwargs)

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        """Triton's launch protocol (`kernel[grid](...)` and `triton.heuristics` call this)."""
        if shapes_only():  # torch_op's fake implementation: the wrapper gives shapes, nothing launches
            return None
        if not _plain_grid(grid):
            check_launch_grid(self.name, grid)  # a hit says what is wrong with a grid as a miss does
        elif not kwargs and not warmup and self._hit_arity[0] <= len(args) <= self._hit_arity[1]:
            try:
                result = self._launch_hit(args, grid)
            except Exception:
                # A grid callable of the wrong shape, float sizes: said as on a miss (checked only now: hot path);
                # a grid that passes re-raises the launch's own error.
                check_launch_grid(self.name, grid)
                raise
            if result is not _NOT_A_HIT:
                return result
        return self.select_and_launch(args, kwargs, grid, warmup).result

    def select_and_launch(self, args: tuple, kwargs: dict, grid: Any, warmup: bool) -> Launch:
        """Pick the config for these arguments (tuning on a miss) and launch it; returns the `Launch` it made."""
        bound = self.bind(args, kwargs, strict=True)
        how: How
        if warmup and has_dtype_stand_ins(bound.named.values()):  # KernelInterface.warmup(dtypes): tune nothing
            config, record, how = self._stored_winner(bound), None, "cache"
        else:
            config, record, how = self.select(bound, grid)
        self.best_config = config
        if how == "online" and not warmup:  # a key tuned across calls: this call may time a candidate
            return self._launch_online(bound, grid, record)
        launch_args, launch_kwargs, launch_grid = self.launch_args(config, bound, grid)
        with self.launch_lock:
            result = self.fn.run(*launch_args, grid=launch_grid, warmup=warmup, **launch_kwargs)
        return Launch(result, config, record, how, bound, launch_grid, launch_kwargs)

    def _launch_online(self, bound: BoundCall, grid: Any, record: TuningRecord | None) -> Launch:
        """Run a call of a key tuned online: the session picks the config (kept off the cache-hit path)."""
        launched: list = []

        def launch(chosen: Config) -> Any:
            launch_args, launch_kwargs, launch_grid = self.launch_args(chosen, bound, grid)
            launched[:] = [chosen, launch_grid, launch_kwargs]
            with self.launch_lock:
                return self.fn.run(*launch_args, grid=launch_grid, warmup=False, **launch_kwargs)

        result = self.online.launch(*self.key_of(bound), bound, launch)
        chosen, launch_grid, launch_kwargs = launched
        self.best_config = chosen  # the candidate this call ran (the session may time another than its best)
        return Launch(result, chosen, record, "online", bound, launch_grid, launch_kwargs)

    def _stored_winner(self, bound: BoundCall) -> Config:
        """The cached winner of a call made of dtypes (Triton's warmup), which cannot be tuned on: no tensors."""
        key, dtypes = self._key(bound.named)
        record = self.peek_stored(key, dtypes, *self.candidates(bound))
        if record is None:
            raise AutotuneError(
                f"{self.name}: a warmup with dtypes instead of tensors (Triton's KernelInterface.warmup, "
                f"as triton.heuristics' .warmup calls it) found no tuned winner for key={key} "
                f"{list(dtypes)}, and tuning needs real tensors: call {self.name}.warmup(...) with "
                "tensors, or precompile(...) the space ahead of time"
            )
        return record.winner

    def warmup(self, *args: Any, grid: Any = None, **kwargs: Any) -> Any:
        """Tune (if needed) and compile the winner for these arguments without launching it. A torch dtype in place
        of a tensor (Triton's `KernelInterface.warmup` form) compiles the key's stored winner, tuning nothing."""
        return self.run(*map(MockTensor.wrap_dtype, args), grid=grid, warmup=True, **kwargs)

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any], *, strict: bool = False) -> BoundCall:
        """Bind one call's arguments to the kernel's parameters (defaults filled in), before any tuning. `strict`
        (the native call path) also refuses what the triton.autotune drop-in passes through (kernel/call.py)."""
        args, kwargs = tuple(args), dict(kwargs)
        if len(args) > len(self.arg_names):
            raise CallError(
                f"{self.name} takes {len(self.arg_names)} arguments ({self.arg_names}); got {len(args)} positional"
            )
        if kwargs or (strict and len(args) > self._call_signature.first_tuned):
            self._call_signature.check(args, kwargs, strict=strict)
        named = dict(self._defaults)
        named.update(zip(self.arg_names, args))
        named.update((k, v) for k, v in kwargs.items() if k in self._arg_name_set)  # not launch options (num_warps=)
        if len(args) < self._required_upto:  # the fast path: every required argument was passed by position
            missing = [n for n in self._required if n not in named]
            if missing:
                untuned = [n for n in missing if n in self.constexpr_names]
                hint = (
                    f"; not set by the search space, a tl.constexpr ({', '.join(untuned)}) is passed at each call "
                    "or added to the space"
                    if untuned
                    else ""
                )
                raise CallError(
                    f"{self.name}() missing {len(missing)} required argument"
                    f"{'s' if len(missing) > 1 else ''}: {', '.join(map(repr, missing))} (the kernel's "
                    f"arguments: {', '.join(self.arg_names)}; tuned and derived ones come from the "
                    f"search space){hint}"
                )
        return BoundCall(args, kwargs, named)

    def key_of(self, bound: BoundCall) -> tuple[tuple, tuple[str, ...]]:
        """(key values, dtypes of the tensor arguments) of a bound call: what the cache files it under."""
        return self._key(bound.named)

    def select(self, bound: BoundCall, grid: Any) -> tuple[Config, TuningRecord | None, How]:
        """The config to launch for these arguments, the key's record, and how it was found.

        A memory hit costs the key, one dict lookup and one counter (a positional call skips even this:
        `_launch_hit`). The AUTOTUNE_* switches are read only when a process first meets a key.
        """
        key, dtypes = self._key(bound.named)
        record = self.memory_hit(key, dtypes)
        return (
            (record.winner, record, "memory") if record is not None else self._select_on_miss(key, dtypes, bound, grid)
        )

    def memory_hit(self, key: tuple, dtypes: tuple[str, ...]) -> TuningRecord | None:
        """The record this process's memory holds for (key, dtypes), counted as a hit and made the last call's
        key (`record()`); None when a launch must go past memory (not there, or force= not yet applied to it)."""
        ident = (key, dtypes)
        self._last_key = ident
        record = self.cache.memory.lookup(key, dtypes)  # the memory tier: one dict get
        if record is not None and (not self.tuning.force or ident in self._forced):
            count_hit(self.name)
            return record
        return None

    def _select_on_miss(
        self, key: tuple, dtypes: tuple, bound: BoundCall, grid: Any
    ) -> tuple[Config, TuningRecord | None, How]:
        """A miss of the memory tier: the first that applies of autotune disabled (the fallback config), a
        CUDA-graph capture, offline, a kernel tuned for sets of calls, then a tuning of the key (`_tune_on_miss`)."""
        check_finite_key(key, self.name)
        if env_disable():
            return self.untuned_for(bound), None, "disabled"
        if capturing():  # CUDA-graph capture: nothing tunes, waits or synchronizes there (capture.py)
            online = self.online_started
            in_progress = online.best_in_progress(key, dtypes) if online is not None else None
            return select_in_capture(self, key, dtypes, bound, in_progress)
        if env_offline():
            return self._select_offline(key, dtypes, bound)
        check_launch_grid(self.name, grid)  # known before tuning: a bad one would fail every config alike
        check_guarded_values(self.name, bound.named, self._guarded)
        if self.tuning.objective is not None:  # tuned for a set of calls (sweep/warmup), never on one call
            return self._select_tuned_for_calls(key, dtypes, bound)
        if not self.interpreted and self.compiler_factory is None:
            self._refuse_without_gpu_driver()
        return self._tune_on_miss(key, dtypes, bound, grid)

    def _tune_on_miss(
        self, key: tuple, dtypes: tuple, bound: BoundCall, grid: Any
    ) -> tuple[Config, TuningRecord | None, How]:
        """Online tuning (never waits), or the record of a blocking tuning: found in a cache tier, tuned here, or
        agreed across the ranks of a job."""
        forcing = self.tuning.force or env_force()
        # memory before `_forced`: a winner stored by a forced tuning after this read is not this call's baseline
        baseline = self.cache.force_baseline(key, dtypes) if forcing else None
        force = forcing and (key, dtypes) not in self._forced
        dist_mode = active_mode(self.tuning.distributed)
        if dist_mode is None and not force and online_mode(self.tuning):
            return self.online.select(key, dtypes, bound, grid)  # tunes across calls (online.py)
        with measuring_suspended():  # inside a hook's measurement: another thread tuning this key waits for it
            if dist_mode is not None:  # every rank of the job launches the same winner (modes/distributed.py)
                record, how = self._agree_across_ranks(key, dtypes, bound, grid, dist_mode, force, baseline)
            else:
                record, how = self._get_or_tune(key, dtypes, bound, grid, baseline if force else None)
        if force:  # tuned now, or produced by another tuning while this call waited: fresh either way
            self._forced.add((key, dtypes))
        if how in ("disk", "remote"):
            _say_cache_hit(record)
        return record.winner, record, how

    def _get_or_tune(
        self, key: tuple, dtypes: tuple, bound: BoundCall, grid: Any, forced_from: ForceBaseline | None
    ) -> tuple[TuningRecord, Found]:
        """The key's record from a cache tier (memory read again, disk, Redis), else tuned here (`tune_key`,
        loaded only then). `forced_from`: force=, and what memory held when the call began.
        prune= runs first: an entry there counts only for the configs it kept for this call (`candidates`). A
        memory hit runs no prune (as in triton.autotune), so what prune= reads belongs in key=."""
        kept, candidates = self.candidates(bound)

        def tune() -> TuningRecord:
            from .tune_key import KeyTuning, tune_key

            return tune_key(self, KeyTuning(key, dtypes, bound, grid, kept, candidates, force=force))

        force = forced_from is not None
        return self.cache.get_or_tune(
            key,
            dtypes,
            tune,
            force=force,
            lock_timeout_s=self.tuning.lock_timeout_s,
            candidates=candidates,
            baseline=forced_from,
        )

    def _refuse_without_gpu_driver(self) -> None:
        from ..engine.compilers import await_triton_key, driver_problem

        await_triton_key()  # a new key's launch or tuning needs the compiler hash started at decoration
        problem = driver_problem()
        if problem is not None:
            raise NoDeviceError(
                f"{self.name} cannot be tuned here: no GPU driver is active ({problem}). To run "
                "on the CPU, set TRITON_INTERPRET=1 before triton is imported; for a GPU, check "
                "that the NVIDIA/AMD driver is installed and visible (nvidia-smi, "
                "CUDA_VISIBLE_DEVICES)."
            )

    def _candidates_for_agreement(self, bound: BoundCall) -> tuple[list[Config], str | None, Exception | None]:
        """`candidates(bound)` and None, or, when prune= raised, every config, no checksum and its error: raised
        inside the agreement (at its handshake), so every rank learns of it together."""
        try:
            return *self.candidates(bound), None
        except RerunCall:  # not an error: this rank runs its call again, then agrees
            raise
        except Exception as exc:
            return list(self.configs or ()), None, exc

    def _agree_across_ranks(
        self,
        key: tuple,
        dtypes: tuple,
        bound: BoundCall,
        grid: Any,
        dist_mode: Mode,
        force: bool,
        baseline: ForceBaseline | None,
    ) -> tuple[TuningRecord, Found]:
        kept, candidates, prune_error = self._candidates_for_agreement(bound)

        def tune_shard(select: Select | None) -> TuningRecord:
            from .tune_key import KeyTuning, tune_key

            return tune_key(self, KeyTuning(key, dtypes, bound, grid, kept, candidates, force=force, select=select))

        from ..modes import distributed as _distributed

        return _distributed.agree(
            self.cache,
            key,
            dtypes,
            dist_mode,
            tune_shard,
            force=force,
            candidates=candidates,
            lock_timeout_s=self.tuning.lock_timeout_s,
            prune_error=prune_error,
            baseline=baseline if force else None,  # read before prune= ran, as without a process group
        )  # raised on every rank at the handshake

    def _select_tuned_for_calls(
        self, key: tuple, dtypes: tuple, bound: BoundCall
    ) -> tuple[Config, TuningRecord | None, How]:
        """The stored winner of a kernel tuned for a set of calls (`Tuning.objective`); refused when there is none:
        tuning it on this call alone would file a one-shape winner as the whole set's."""
        stale: list[str] = []  # why a stored entry was not used (one tuned for another objective, say)
        record = self._stored_record(key, dtypes, bound, stale)[0]
        if record is None:
            why = f" ({'; '.join(stale)})" if stale else ""
            raise AutotuneError(
                f"{self.name} is tuned with Tuning(objective={self.tuning.objective!r}), one config for a set of "
                f"calls, and no usable entry for key={key} {list(dtypes)} is stored{why}: tune it before launching, with "
                f"autotune.sweep({self.name}, calls) or autotune.warmup({self.name}, calls) (calls: argument makers "
                "of the shapes to serve), or drop objective= to tune each key on its first call"
            )
        return record.winner, record, "cache"

    def tune_calls(
        self,
        calls: Sequence[tuple[BoundCall, Any]],
        *,
        force: bool = False,
        pruning_as: Sequence[Callable[[], AbstractContextManager[Any]]] | None = None,
    ) -> tuple[TuningRecord, Found]:
        """One config for every (bound call, grid) of `calls`, scored by `Tuning.objective` (geometric mean or max
        of the per-call medians), through the cache as any key: (the record, where it was found). Every call must
        fall in one key (key=None, or a bucket key that maps them together). The candidates are the configs prune=
        keeps for all of them (`candidates_of_calls`; `pruning_as`: per call, the context its prune= runs in), the
        same for the set in any order; under a process group the calls are taken in their canonical order
        (`in_call_order`), so every rank's per-call times line up."""
        from ..engine.multi_call import describe_call, in_call_order
        from .tune_key import KeyTuning

        objective = self.tuning.objective
        if objective is None:
            raise OptionError(f"{self.name}.tune_calls(...) needs a Tuning with objective='geomean' or 'max'")
        described = [describe_call(bound.named) for bound, _ in calls]
        agreed = active_mode(self.tuning.distributed) is not None
        order = in_call_order(described) if agreed else list(range(len(calls)))
        calls, described = [calls[i] for i in order], [described[i] for i in order]
        key, dtypes = self.key_of_calls([bound for bound, _ in calls])
        contexts = None if pruning_as is None else [pruning_as[i] for i in order]
        kept, candidates = self.candidates_of_calls([bound for bound, _ in calls], contexts)
        first, grid = calls[0]
        # Tuned again for a changed set of calls, but the crash journal's notes stay: a restart whose calls differ
        # from the entry's until a tuning completes would otherwise try a crashing config at every start.
        job = KeyTuning(key, dtypes, first, grid, kept, candidates, force=force, calls=calls, described=described)
        retune = force or self.cache.calls_changed(key, dtypes, candidates, described)
        with measuring_suspended():  # called inside a hook's measurement: as `_tune_on_miss`
            return self._tune_calls_through_cache(job, retune, candidates, described)

    def candidates_of_calls(
        self,
        calls: Sequence[BoundCall],
        pruning_as: Sequence[Callable[[], AbstractContextManager[Any]]] | None = None,
    ) -> tuple[list[Config], str | None]:
        """`candidates` of a set of calls (`Tuning.objective`): the configs prune= keeps for every call, and their
        checksum, the same for the set in any order (`common_candidates`); an OptionError when none is kept for
        all. `pruning_as`: per call, the context its prune= runs in (an autotune.compat kernel's arguments)."""
        from ..engine.multi_call import common_candidates, describe_call

        if self.prune is None or self.configs is None or not calls:
            return list(self.configs or ()), None
        kept = []
        for index, bound in enumerate(calls):
            with pruning_as[index]() if pruning_as is not None else contextlib.nullcontext():
                kept.append(self.candidates(bound)[0])
        described = [describe_call(bound.named) for bound in calls]
        return common_candidates(self.name, self.configs, kept, described)

    def _tune_calls_through_cache(
        self, job: KeyTuning, retune: bool, candidates: str | None, described: list[str]
    ) -> tuple[TuningRecord, Found]:
        from .tune_key import tune_key

        key, dtypes = job.key, job.dtypes
        mode = active_mode(self.tuning.distributed)
        if mode is not None:  # every rank launches the same winner, as for one call (rank 0's cache decides)
            from ..modes import distributed as _distributed

            return _distributed.agree(
                self.cache,
                key,
                dtypes,
                mode,
                lambda select: tune_key(self, dataclasses.replace(job, select=select)),
                force=retune,
                candidates=candidates,
                lock_timeout_s=self.tuning.lock_timeout_s,
                calls=described,
            )
        return self.cache.get_or_tune(
            key,
            dtypes,
            lambda: tune_key(self, job),
            force=retune,
            lock_timeout_s=self.tuning.lock_timeout_s,
            candidates=candidates,
        )

    def key_of_calls(self, calls: Sequence[BoundCall]) -> tuple[tuple, tuple[str, ...]]:
        """The one key every call of a multi-call tuning falls in (`Tuning.objective`); a CallError when none or
        several."""
        keys = list(dict.fromkeys(self.key_of(bound) for bound in calls))
        objective = self.tuning.objective
        if not keys:
            raise CallError(f"{self.name}: a tuning with objective={objective!r} needs at least one call")
        if len(keys) > 1:
            shown = "; ".join(f"{k} {list(d)}" for k, d in keys[:4])
            raise CallError(
                f"{self.name}: Tuning(objective={objective!r}) tunes one config for one key, and these calls fall "
                f"in {len(keys)} keys ({shown}{'; ...' if len(keys) > 4 else ''}): decorate it with key=None (one "
                "entry for every call) or a bucket key that maps them to one, or tune each key's calls separately"
            )
        check_finite_key(keys[0][0], self.name)  # as a first call checks it
        return keys[0]

    def _stored_record(
        self, key: tuple, dtypes: tuple, bound: BoundCall, stale: list[str]
    ) -> tuple[TuningRecord | None, list[Config], str | None]:
        """The key's stored record, never tuned: under a process group rank 0's, sent to every rank (all launch the
        same config, or all find none); else this process's tiers' (why an entry was not used added to `stale`).
        With it, `candidates(bound)`, read once for the record and for what launches without one."""
        mode = active_mode(self.tuning.distributed)
        if mode is None:
            kept, candidates = self.candidates(bound)
            return self.peek_stored(key, dtypes, kept, candidates, stale), kept, candidates
        from ..modes import distributed as _distributed

        kept, candidates, prune_error = self._candidates_for_agreement(bound)
        record = _distributed.agree_offline(
            self.cache,
            key,
            dtypes,
            mode,
            candidates=candidates,
            prune_error=prune_error,
            winner_among=self._winner_among(kept, candidates),
        )
        return record, kept, candidates

    def _winner_among(self, kept: list[Config], candidates: str | None) -> list[Config] | None:
        """What a stored entry's winner must be among for this call to launch it: a `Tuning.objective` kernel's entry
        was tuned among the configs prune= keeps for every call of its set, never this call's own, so it counts
        when prune= keeps its winner for this call (`kept`); None (the candidates checksum must match) otherwise."""
        return kept if self.tuning.objective is not None and candidates is not None else None

    def peek_stored(
        self, key: tuple, dtypes: tuple, kept: list[Config], candidates: str | None, stale: list[str] | None = None
    ) -> TuningRecord | None:
        """The stored record a call whose prune= kept `kept` (`candidates`: its checksum) may launch; never tunes."""
        return self.cache.peek(key, dtypes, candidates, stale, winner_among=self._winner_among(kept, candidates))

    def _select_offline(self, key: tuple, dtypes: tuple, bound: BoundCall) -> tuple[Config, TuningRecord | None, How]:
        """AUTOTUNE_OFFLINE=1: the stored winner, never a tuning; under a process group rank 0's, sent to every rank
        (all launch the same config, also where only some nodes hold the entry); else, warned once, `fallback=`
        where prune= keeps it for this call, else the first config it keeps (`untuned_config`)."""
        stale: list[str] = []  # why a stored entry was not used: the warning's diagnosis
        record, kept, candidates = self._stored_record(key, dtypes, bound, stale)
        if record is not None:
            return record.winner, record, "cache"
        config = self.untuned_among(kept, candidates)
        if self.cache.count_offline_miss(key, dtypes):
            why = f" ({'; '.join(stale)})" if stale else ""
            warn_at_caller(
                f"autotune: AUTOTUNE_OFFLINE=1 and no {'usable ' if why else ''}cached winner for "
                f"{self.name} key={key} {list(dtypes)}{why}; launching {dict(config)} untuned",
                CacheWarning,
            )
        return config, None, "offline"

    def untuned_for(self, bound: BoundCall) -> Config:
        """What this call launches untuned under AUTOTUNE_DISABLE: `fallback=` where prune= keeps it for this call,
        else the first config it keeps (`untuned_config`). prune= runs only on such a miss, never on a hit."""
        if self.prune is None or self.configs is None:
            return self.fallback_config()
        return self.untuned_among(*self.candidates(bound))

    def untuned_among(self, kept: Sequence[Config], checksum: str | None) -> Config:
        """What a call whose prune= kept `kept` (`checksum`: None without prune=) launches untuned (offline,
        disabled, captured, online before a measurement): `untuned_config`, else `fallback_config`."""
        return untuned_config(self.fallback, kept, checksum, self.space.contains) or self.fallback_config()

    def fallback_config(self) -> Config:
        """What launches untuned without prune=: `fallback=`, else the space's first config (`untuned_for` asks
        prune= first)."""
        if self.fallback is not None:
            return self.fallback
        if self._first is None:  # found once: walking a huge filtered space to its first config would be slow
            self._first = self.configs[0] if self.configs is not None else self.space.sample(random.Random(0))
        return self._first

    def _split(self, config: Config, target: GpuTarget | None = None) -> tuple[dict, dict]:
        """(meta-parameters, compile options) of a config, `occupancy` lowered for `target` (None: where this process
        launches, memoised: this runs on every launch)."""
        split = self._split_cache.get(config) if target is None else None
        if split is None:
            meta = {k: v for k, v in config.items() if k not in self._compile_options}
            options = {**self.static_options, **{k: v for k, v in config.items() if k in self._compile_options}}
            if OCCUPANCY in options:
                options = lowered_options(options, target if target is not None else self.launch_target())
            split = (meta, options)
            if target is None:
                self._split_cache[config] = split
        return split

    def launch_target(self) -> GpuTarget | None:
        """The target this process compiles for: the active GPU's (Triton's driver), None under the interpreter."""
        if self.interpreted:
            return None
        from triton.runtime.driver import driver

        return driver.active.get_current_target()

    def lowered(self, config: Config, target: GpuTarget | None = None) -> dict[str, int | None] | None:
        """What `config`'s occupancy becomes on `target` (None: where this process launches); None without one,
        or where it cannot be reached (that config's failure says why)."""
        options = {**self.static_options, **config}
        if options.get(OCCUPANCY) is None:
            return None
        try:
            return lowering(options, target if target is not None else self.launch_target())
        except OccupancyUnreachable:
            return None

    def launch_args(
        self, config: Config, bound: BoundCall, grid: Any, target: GpuTarget | None = None
    ) -> tuple[tuple, dict, Any]:
        """(positional args, keyword args, grid) that launch `config` for a bound call through `fn.run`.
        `grid=None` evaluates the decorator's `grid=`; `target` (precompile's) defaults to where this process
        launches."""
        args, kwargs, named = bound.args, bound.kwargs, bound.named  # bind() refused tuned fields in kwargs
        meta, options = self._split(config, target)
        launch_kwargs = {**kwargs, **options, **meta}
        values: Mapping[str, Any] = config
        if self._derive is not None:
            derived = self._derive(config, named)
            launch_kwargs.update(derived)
            values = {**config, **derived}
        if grid is None:
            if self._grid is None:
                given_how = "give @autotune(grid=...) or " if getattr(self, "takes_grid_option", True) else ""
                raise AutotuneError(f"{self.name} needs a grid: {given_how}launch {self.name}[grid](...)")
            grid = self._own_grid(values, named, args, launch_kwargs)
        elif callable(grid) and getattr(self, "takes_grid_option", True):  # the drop-in hands Triton the caller's
            grid = _checked_grid(self.name, grid)
        return args, launch_kwargs, grid

    def _own_grid(self, values: Mapping[str, Any], named: Mapping[str, Any], args: tuple, launch_kwargs: dict) -> Any:
        """The decorator's grid for a launch; it reads the values of the `triton.heuristics` layers under the
        decorator too, as a Triton grid reads them."""
        if self._heuristics:
            named = {**named, **heuristic_kwargs(self._heuristics, args, launch_kwargs)}
        return self._grid(values, named)  # type: ignore[misc]  # only called with a grid

    def grid_meta(self, launch: Launch) -> dict[str, Any]:
        """What a callable grid was handed at `launch`, as Triton hands it: the call's arguments and the launch
        keywords, with the values of the `triton.heuristics` layers under the decorator."""
        named, args, launch_kwargs = launch.bound.named, launch.bound.args, launch.launch_kwargs
        if self._heuristics:
            launch_kwargs = heuristic_kwargs(self._heuristics, args, launch_kwargs)
        return {**named, **launch_kwargs}

    # ------------------------------------------------------------------------------------------ tuning
    def tune_selected(self, bound: BoundCall, grid: Any = None, *, select: Select) -> TuningRecord:
        """Tune only the candidates `select` keeps for this call (the others recorded skipped; a lone one measured
        too), reading and writing no cache: one share of a key that several processes tune (a sweep's split)."""
        from .tune_key import KeyTuning, tune_key

        key, dtypes = self.key_of(bound)
        kept, candidates = self.candidates(bound)
        return tune_key(self, KeyTuning(key, dtypes, bound, grid, kept, candidates, select=select))

    def run_trial(self, config: Config, args: tuple, kwargs: dict, grid: Any) -> Any:
        """Launch one run of `config` while tuning (never the final launch). A seam: the triton.autotune
        drop-in (`autotune.compat`) overrides it to call Triton's pre/post hooks around each run."""
        with self.launch_lock:
            return self.fn.run(*args, grid=grid, warmup=False, **kwargs)

    def candidates(self, bound: BoundCall) -> tuple[list[Config], str | None]:
        """(the configs prune= keeps for this call, in its order, or every config without prune=; the checksum
        of the kept ones, or None without prune=). Ties between equal timings go to the earlier one here, as in
        triton.autotune (the order after early_config_prune and perf_model)."""
        if self.prune is None or self.configs is None:  # a lazy space has no prune= (refused at decoration)
            return list(self.configs or ()), None
        return kept_configs(self.prune, self.configs, bound.named, self.name)

    def compiler_for(self, prepare: Callable[[Config], tuple]) -> Compiler:
        """The compiler of the tuning pipeline: the JIT on a GPU, nothing under the interpreter."""
        from ..engine.compilers import JitCompiler, NoCompile

        if self.compiler_factory is not None:
            return self.compiler_factory(self, prepare)
        if self.interpreted:
            return NoCompile()
        return JitCompiler(self.fn, prepare)

    def synchronize(self) -> None:
        if not self.interpreted:
            import torch

            torch.cuda.synchronize()

    # ------------------------------------------------------------------------------------------ inspection
    def __repr__(self) -> str:
        return f"<autotuned {self.name}: {self.space_size} configs>"


untraced_by_dynamo(Autotuned.__call__)
untraced_by_dynamo(Autotuned.run)


def autotune(
    space: Any,
    *,
    key: Any = None,
    grid: Any = None,
    derive: Mapping[str, Any] | None = None,
    tuning: Tuning | str | dict | None = None,
    restore_value: Sequence[str] = (),
    reset_to_zero: Sequence[str] = (),
    verify: Callable[..., bool] | Reference | None = None,
    setup: Callable[..., Any] | None = None,
    do_bench: Callable[..., Any] | None = None,
    prune: PruneSpec = None,
    fallback: Mapping[str, Any] | None = None,
    **static_compile_options: Any,
) -> Callable[[Any], Autotuned]:
    """Decorate a `@triton.jit` kernel with a search space; see DESIGN.md section 1 for the full story."""
    # Validate what can be validated without the kernel now, so a bad option fails at the decorator line.
    if hasattr(space, "arg_names"):
        raise SpaceError(
            "@autotune takes arguments: write @autotune(space=..., key=..., grid=...) above @triton.jit, "
            "not a bare @autotune"
        )
    Tuning.coerce(tuning)
    as_space(space)
    as_pruner(prune, "this @autotune")  # the kernel is not known yet

    def decorate(fn: Any) -> Autotuned:
        return Autotuned(
            fn,
            space=space,
            key=key,
            grid=grid,
            derive=derive,
            tuning=tuning,
            restore_value=restore_value,
            reset_to_zero=reset_to_zero,
            verify=verify,
            setup=setup,
            do_bench=do_bench,
            prune=prune,
            fallback=fallback,
            **static_compile_options,
        )

    return decorate


if TYPE_CHECKING:  # mypy: an Autotuned is what the engine tunes

    def _is_tunable(kernel: Autotuned) -> TunableKernel:
        return kernel
