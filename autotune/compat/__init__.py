"""Drop-in for `triton.autotune`: change one import, keep every decorator argument, get autotune's pipeline.

```python
from autotune.compat import autotune          # was: triton.autotune

@autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4), ...], key=["n"])
@triton.jit
def kernel(x, n, BLOCK: tl.constexpr): ...

kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
```

`autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=None)` takes
Triton's arguments with Triton's meaning (where Triton 3.6 and 3.9 differ, 3.9's: a `key` name that is not an
argument is a ValueError, a single config left after pruning is launched without benchmarking, and `top_k`
keeps at least one config) and returns an `Autotuner` that exposes Triton's attributes
(`configs`, `keys`, `cache`, `best_config`, `configs_timings`, `bench_time`, `pre_hook`, `post_hook`, ...).
Underneath, the native `Autotuned` (its `tuner` attribute) does the work, so a migrated kernel gets the
thread-pool compile -> measure pipeline, the file-locked disk cache shared by processes, failed configs
recorded and skipped instead of crashing, and benchmarking in Triton's CPU interpreter.

How Triton's pieces map onto the native ones, and the differences kept on purpose: docs/DESIGN.md section 11.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import triton
from triton.runtime.jit import KernelInterface

from ..compiled.tracing import shapes_only
from ..decorator.autotuned import Autotuned, untraced_by_dynamo
from ..errors import CallError, UserCodeError
from ..kernel.identity import base_kernel, heuristics_layers, is_interpreted, python_function
from ..kernel.occupancy import FIELD as OCCUPANCY
from ..kernel.occupancy import lowered_options
from ..kernel.pruning import MAX_RERUNS, check_top_k
from ..options import Tuning
from ..record import TuningRecord
from ..space.spaces import Config as _NativeConfig
from ..storage.kernel_cache import KernelCache
from .options import (
    ConfigChangedInPlace,
    ConfigIndex,
    ConfigsChanged,
    PruneFunction,
    check_callables,
    check_finite_key_args,
    checked_prune_options,
    passed_key,
    shape_key,
    to_native,
    triton_print_enabled,
    triton_prune,
    warn_listener_once,
)
from .timing import QuantileBench, TimingValue, call_user, choose_do_bench, timings_of

if TYPE_CHECKING:
    from ..engine.tunable_kernel import TunableKernel

__all__ = ["autotune", "Autotuner", "Config", "heuristics"]

# Re-exported so that `from autotune.compat import autotune, Config, heuristics` reads as Triton's names.
Config = triton.Config
heuristics = triton.heuristics

_CONFIG_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})  # what a triton.Config may set


# ------------------------------------------------------------------------------------------------ engine
class _Engine(Autotuned):
    """The native autotuner under an `Autotuner`, over one `ConfigIndex` of its configs, with what the owner filed
    in `cache` through it: a call reads all of it from the engine it started on, so a re-index (a new engine) by
    another thread never changes a call in flight. Each trial run goes through the owner's Triton hooks."""

    owner: Autotuner
    index: ConfigIndex
    key_names: list[str]
    key_positions: dict[str, int]
    filed: dict[tuple, tuple[Any, _NativeConfig, tuple]]  # what the owner put in `cache` (config, native, key)
    key_at: tuple[bool, ...]  # per parameter, whether it is one of key_names
    keys_of_shape: dict[tuple, tuple]  # shape_key -> (`cache` key, (key, dtypes), key, dtypes) of a hit
    options_of: dict[_NativeConfig, dict[str, Any]]  # launch_options, memoised
    pruned_of: dict[tuple, dict[_NativeConfig, Any]]  # (key, dtypes) -> its prune's own copies (`_pruned_copies`)
    default_isolate = "off"  # as triton.autotune: in this process, Triton's hooks around each run
    takes_grid_option = False  # autotune.compat.autotune has no grid=: a launch is given one, kernel[grid](...)

    def launch_options(self, config: _NativeConfig) -> dict[str, Any]:
        """The keywords `launch_args` adds for `config` (compile options, meta-parameters; no derive=), made once."""
        options = self.options_of.get(config)
        if options is None:
            meta, compile_options = self._split(config)
            options = self.options_of[config] = {**compile_options, **meta}
        return options

    def run_trial(self, config: _NativeConfig, args: tuple, kwargs: dict, grid: Any) -> Any:
        return self.owner._run_trial(self.index, config, args, kwargs, grid)

    def compiler_for(self, prepare: Callable[[_NativeConfig], tuple]) -> Any:
        """The native compiler, with each config's Triton `pre_hook` (its pruned copy's) run on its launch arguments
        as they are made for its compile: Triton compiles in a config's first run, after the hook, and specializes
        on what the hook sets (the tutorials set a TensorDescriptor's block_shape there). Within a call, only while
        that call selects: an online session compiles in the background after its call returned, when the
        arguments are the caller's again, so those compiles run no hook (each launch runs it)."""
        owner, index = self.owner, self.index
        scope: _CallScope | None = getattr(owner._local, "scope", None)
        pruned_as = (scope.pruned_as if scope is not None else None) or {}

        def prepare_hooked(config: _NativeConfig) -> tuple:
            launch_args = prepare(config)
            triton_config = pruned_as.get(config) or index.triton_of[config]
            if triton_config.pre_hook is None:
                return launch_args
            if scope is None:  # not made by a call (a compile worker, `kernel.tuner`): no caller's arguments
                owner._config_pre_hook(triton_config, *launch_args)
                return launch_args
            with scope.lock:
                if scope.open:
                    owner._config_pre_hook(triton_config, *launch_args)
            return launch_args

        return super().compiler_for(prepare_hooked)


class _CallScope:
    """One call's selection of its config, as the compiles it starts see it: the copies its early_config_prune
    returned, and whether the call is still selecting (its arguments are the call's to hook only until then)."""

    __slots__ = ("lock", "open", "pruned_as")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open = True
        self.pruned_as: dict[_NativeConfig, Any] | None = None

    def close(self) -> None:
        """The call has chosen: a compile still under way (an online session's) runs no hook from now on."""
        with self.lock:
            self.open = False


# ------------------------------------------------------------------------------------------------ Autotuner
@dataclass(slots=True)
class _Picked:
    """The config a call launches, and how it was chosen."""

    config: Any  # the triton.Config
    native: _NativeConfig
    bound: Any  # the bound call, or None on a memoised hit
    how: str = "memory"
    benchmarked: bool = False
    key: Any = None
    pruned: dict[_NativeConfig, Any] | None = None  # the key's early_config_prune copies (an online launch's)


class Autotuner(KernelInterface):
    """`triton.runtime.autotuner.Autotuner`'s interface on top of the native `Autotuned` (`self.tuner`).

    Launch it as Triton's: `kernel[grid](*args, **kwargs)`. Attributes as in Triton: `fn`, `base_fn` (the
    Python function), `arg_names`, `configs` (the `triton.Config` list), `keys`, `cache` ({key tuple:
    triton.Config}, read before tuning as in Triton: an entry set there is launched, one deleted is looked up
    again), `best_config`, `configs_timings` ({triton.Config: timing} of the last tuning in this process, or of
    the disk entry it loaded), `bench_time` (seconds the last tuning took), `reset_to_zero`, `restore_value`,
    `pre_hook`, `post_hook`, `perf_model`, `configs_top_k`, `early_config_prune`, `num_warmups`, `num_reps`,
    `use_cuda_graph`, `do_bench`, `cache_results`, `nargs` (the running call's positional arguments, per thread).
    Assigning `configs`, `early_config_prune` or `perf_model` later rebuilds the engine, as Triton reads them at
    each tuning. Extensions: `tuner`, `name`, `record()`, `report()`, `cache_info()`.
    """

    def __init__(
        self,
        fn: Any,
        arg_names: Sequence[str],
        configs: Sequence[Any] | None,
        key: Sequence[str],
        reset_to_zero: Sequence[str] | None,
        restore_value: Sequence[str] | None,
        pre_hook: Callable[..., Any] | None = None,
        post_hook: Callable[..., Any] | None = None,
        prune_configs_by: Mapping[str, Any] | None = None,
        warmup: int | None = None,
        rep: int | None = None,
        use_cuda_graph: bool = False,
        do_bench: Callable[..., Any] | None = None,
        cache_results: bool | None = None,
        *,
        tuning: Tuning | str | dict | None = None,
    ) -> None:
        self.fn = fn
        self.arg_names: list[str] = list(arg_names)
        self.keys: list[str] = [key] if isinstance(key, str) else list(key or [])
        self.reset_to_zero: list[str] = list(reset_to_zero or [])
        self.restore_value: list[str] = list(restore_value or [])
        self._check_argument_names()
        prune_configs_by = checked_prune_options(prune_configs_by)
        check_callables(
            python_function(fn).__name__,
            pre_hook=pre_hook,
            post_hook=post_hook,
            do_bench=do_bench,
            **{f"prune_configs_by['{k}']": v for k, v in prune_configs_by.items() if k != "top_k"},
        )
        self._set_hooks(pre_hook, post_hook)
        self._set_pruning(prune_configs_by)

        # Benchmarking (choose_do_bench's deprecation warning points at the decorator's line: called here).
        self.base_fn = python_function(fn)
        self.num_warmups = warmup
        self.num_reps = rep
        self.use_cuda_graph = use_cuda_graph
        self.do_bench = choose_do_bench(
            do_bench, warmup, rep, use_cuda_graph, interpreted=is_interpreted(base_kernel(fn))
        )
        self.cache_results: bool = cache_results is not False
        self._tuning = Tuning.coerce(tuning)
        self._local = threading.local()
        self._index_lock = threading.RLock()  # one re-index at a time (a new engine replaces the current one)
        self._prune_lock = threading.RLock()  # one early_config_prune at a time: it may change configs in place

        # Triton's public state.
        self.cache: dict[tuple, Any] = {}
        self.best_config: Any | None = None
        self.configs_timings: dict[Any, TimingValue] = {}
        self.bench_time: float | None = None
        self._configs: Any = []
        self.configs = configs if configs else [triton.Config({}, num_warps=4, num_stages=3, num_ctas=1)]

    # ---------------------------------------------------------------------------------------- setup helpers
    def _check_argument_names(self) -> None:
        for param, names in (
            ("key", self.keys),
            ("reset_to_zero", self.reset_to_zero),
            ("restore_value", self.restore_value),
        ):
            unknown = [name for name in names if name not in self.arg_names]
            if unknown:
                raise ValueError(
                    f"{param} contains names that are not kernel arguments: {', '.join(unknown)}. "
                    f"Valid argument names are: {', '.join(self.arg_names)}."
                )

    def _set_hooks(self, pre_hook: Callable[..., Any] | None, post_hook: Callable[..., Any] | None) -> None:
        """As Triton stores them (no-ops when not given; reset/restore are done by the native guard)."""
        self.user_defined_pre_hook = pre_hook is not None
        self.user_defined_post_hook = post_hook is not None
        self.pre_hook: Callable[..., Any] = pre_hook if pre_hook is not None else (lambda kwargs, reset_only=False: 0)
        self.post_hook: Callable[..., Any] = post_hook if post_hook is not None else (lambda kwargs, exception: 0)

    def _set_pruning(self, prune_configs_by: Mapping[str, Any]) -> None:
        """As Triton reads prune_configs_by."""
        self._perf_model: Callable[..., Any] | None = prune_configs_by.get("perf_model")
        self.configs_top_k: int | float = prune_configs_by.get("top_k", 1.0)
        self._early_config_prune: Callable[..., Any] | None = prune_configs_by.get("early_config_prune")
        check_top_k(self.configs_top_k, "prune_configs_by['top_k']", perf_model=self._perf_model)

    @property
    def configs(self) -> Any:
        return self._configs

    @configs.setter
    def configs(self, configs: Sequence[Any]) -> None:
        """As Triton reads `configs` at each tuning: a new list is indexed and the engine rebuilt over it (keys in
        `cache` keep their configs, as in Triton). The list is kept as given, so a change made to it in place is
        seen (and indexed) at the next tuning, as in Triton."""
        index = ConfigIndex(configs)
        with self._index_lock:
            self._configs = configs
            self.rebuild_engine(index)

    early_config_prune = PruneFunction()
    perf_model = PruneFunction()

    def rebuild_engine(self, index: ConfigIndex | None = None) -> None:
        """The native engine over `index` (else the current engine's), pruning and timing, made whole and then
        published as `self.tuner`. Entries in `cache` from an earlier engine stay, and count as the user's own
        (launched without tuning, as in Triton)."""
        index = index or self.tuner.index
        tuning = self._tuning
        if tuning.strategy == "auto" and "max_configs" not in tuning.explicit_fields():
            tuning = tuning.replace(strategy="exhaustive")  # Triton measures every config, however many
        if self.do_bench is not None:
            # A do_bench is Triton's whole measurement of a config: call it once per config, no refinement.
            tuning = tuning.replace(refine_topk=0)
        use_prune = self._early_config_prune is not None or self._perf_model is not None
        # Triton skips a key name the call does not pass (a config's meta-parameter, a triton.heuristics value);
        # so does the engine's key.
        unpassed = index.meta_names.union(*(layer.values for layer in heuristics_layers(self.fn, base_kernel(self.fn))))
        bench = (
            QuantileBench(self.do_bench, self._record_raw, self.base_fn.__name__, self._is_run_error)
            if self.do_bench is not None
            else None
        )
        key_names = [k for k in self.keys if k not in unpassed]
        tuner = _Engine(
            self.fn,
            space=list(index.natives),
            key=key_names,
            tuning=tuning,
            restore_value=self.restore_value,
            reset_to_zero=self.reset_to_zero,
            do_bench=bench,
            prune=partial(self._prune_for_tuner, index) if use_prune else None,
        )
        tuner.owner, tuner.index, tuner.key_names, tuner.filed = self, index, key_names, {}
        tuner.key_positions = {name: self.arg_names.index(name) for name in key_names}
        tuner.key_at = tuple(name in tuner.key_positions for name in self.arg_names)
        tuner.keys_of_shape, tuner.options_of, tuner.pruned_of = {}, {}, {}
        if not self.cache_results:  # the memory tier alone: same single flight and stats, no file touched
            native = tuner.cache
            tuner.cache = KernelCache(
                native.kernel_name,
                lambda: native.source_hash,
                native.space_checksum,
                native.space_contains,
                identity=native.identity,
                tiers=[],
                key_fields=native.key_fields,
            )
        tuner.cache.on_forget(self.forget_cleared)  # a clear of any kind: `cache` drops what it cleared
        self.name: str = tuner.name
        self.tuner: _Engine = tuner

    @property
    def nargs(self) -> dict[str, Any] | None:
        """Triton's `nargs`: the positional arguments by name of the call running in this thread (a do_bench or a
        hook may read it off the kernel), None between calls. Per thread, as compat kernels are shared by threads."""
        return getattr(self._local, "nargs", None)

    @nargs.setter
    def nargs(self, nargs: dict[str, Any] | None) -> None:
        self._local.nargs = nargs

    # ---------------------------------------------------------------------------------------- launching
    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Triton's launch protocol: `kernel[grid](...)` calls `run(*args, grid=grid, warmup=False, **kwargs)`."""
        if shapes_only():  # torch_op's fake implementation: the wrapper gives shapes, nothing launches
            return None
        local = self._local  # the `nargs` property's storage, set directly on this hot path
        local.nargs = nargs = dict(zip(self.arg_names, args))
        try:
            try:
                return self._run(nargs, args, kwargs)
            except ConfigsChanged as exc:  # early_config_prune changed a config in place (or found one changed)
                return self._rerun(nargs, args, kwargs, exc)
        finally:
            local.nargs = None

    def _rerun(self, nargs: dict[str, Any], args: tuple, kwargs: dict[str, Any], exc: ConfigsChanged) -> Any:
        """Run the call again on configs indexed anew (by this thread, or by the one that saw the change first),
        until its prune finds them as indexed. The call's own prune may change them once: a second change is
        ConfigChangedInPlace, raised by the prune; a change made before its prune ran (another thread's prune, the
        caller) costs it nothing."""
        changed = exc.own
        for _ in range(MAX_RERUNS):
            self.reindex()
            try:
                return self._run(nargs, args, kwargs, changed=changed)
            except ConfigsChanged as again:
                exc, changed = again, changed or again.own
        raise ConfigChangedInPlace(self.name, exc.index, exc.config) from exc

    def reindex(self) -> None:
        """Index `configs` anew if they changed since the current engine indexed them; threads that saw one change
        rebuild the engine once, so that none discards what another tuned on the engine it built."""
        with self._index_lock:
            if self.tuner.index.changed_at() is not None:
                self.configs = self._configs

    def _refuse_config_options(self, call_kwargs: dict[str, Any]) -> None:
        """A launch option (num_warps, num_stages, num_ctas, maxnreg) passed to the call that a config sets (not
        None): Triton's `fn.run(**kwargs, **config.all_kwargs())` raises TypeError, so does this (a CallError).
        One no config sets (all None: left out of `all_kwargs()`) is the caller's, as in Triton."""
        passed = [name for name in sorted(call_kwargs.keys() & _CONFIG_OPTIONS) if call_kwargs[name] is not None]
        given = [name for name in passed if any(getattr(c, name, None) is not None for c in self._configs)]
        if given:
            raise CallError(
                f"{self.base_fn.__name__}() got multiple values for keyword argument {given[0]!r}: a "
                f"triton.Config sets it; give it in the configs (triton.Config({{...}}, {given[0]}=...)), not the "
                "launch, or set it to None in every config to take the launch's"
            )

    def _run(self, nargs: dict[str, Any], args: tuple, kwargs: dict[str, Any], changed: bool = False) -> Any:
        call_kwargs = kwargs.copy()
        grid, warmup = call_kwargs.pop("grid", None), call_kwargs.pop("warmup", False)
        tuner = self.tuner  # this call's engine and index, whatever other threads re-index meanwhile
        index = tuner.index
        if call_kwargs and call_kwargs.keys() & index.meta_names:
            conflicts = sorted(call_kwargs.keys() & index.meta_names)
            raise ValueError(
                f"Conflicting meta-parameters: {', '.join(conflicts)}. Make sure that you don't "
                "re-define auto-tuned symbols."
            )
        if call_kwargs and not call_kwargs.keys().isdisjoint(_CONFIG_OPTIONS):
            self._refuse_config_options(call_kwargs)
        if len(index.natives) == 1 and not index.list_changed():
            picked = _Picked(index.indexed[0], index.natives[0], tuner.bind(args, call_kwargs))
        else:
            chosen = self._pick(tuner, nargs, args, kwargs, call_kwargs, grid, warmup, changed)
            if not isinstance(chosen, _Picked):
                return chosen  # a warm-up's result, or the call re-run after the list was re-read
            picked = chosen
        config, native, bound = picked.config, picked.native, picked.bound
        self.best_config = config
        tuner.best_config = native
        full_nargs = self._after_benchmark(picked, nargs, kwargs) if picked.benchmarked else {}
        if picked.how == "online" and not warmup and bound is not None:  # AUTOTUNE_MODE=online: may time one
            return self._launch_online(tuner, bound, grid, nargs, kwargs, picked.pruned or {})
        if config.pre_hook is not None:
            config.pre_hook(full_nargs or {**nargs, **kwargs, **config.all_kwargs()})
        if bound is None:  # a memoised hit: launched as launch_args would (no derive=, a grid given)
            launch_kwargs = tuner.launch_options(native)  # read only: fn.run(**launch_kwargs) copies it
            launch_kwargs = {**call_kwargs, **launch_kwargs} if call_kwargs else launch_kwargs
            with tuner.launch_lock:
                return self.fn.run(*args, grid=grid, warmup=warmup, **launch_kwargs)
        launch_args, launch_kwargs, launch_grid = tuner.launch_args(native, bound, grid)
        with tuner.launch_lock:
            return self.fn.run(*launch_args, grid=launch_grid, warmup=warmup, **launch_kwargs)

    def _pick(
        self,
        tuner: _Engine,
        nargs: dict[str, Any],
        args: tuple,
        kwargs: dict[str, Any],
        call_kwargs: dict[str, Any],
        grid: Any,
        warmup: bool,
        changed: bool,
    ) -> Any:
        """The config for this call's key (`_Picked`): the hot path's memo, the user's own `cache` entry, or the
        engine's choice; or, for a warm-up or a list that changed, the result of that call instead."""
        index, bound = tuner.index, None
        # the keys of a call shaped as one seen before, memoised (bind and key_of run on a call first seen)
        shape = shape_key(tuner.key_at, tuner.key_positions, args, call_kwargs) if grid is not None else None
        keys = tuner.keys_of_shape.get(shape) if shape is not None else None
        if keys is None:
            bound = tuner.bind(args, call_kwargs)
            check_finite_key_args(self.base_fn.__name__, tuner.key_names, bound.named)
            key_values, dtypes = ident = tuner.key_of(bound)
            passed = tuple(bound.named[name] for name in tuner.key_names)  # as called (a tl.dtype as itself)
            key = passed_key(tuner.key_names, passed, dtypes, tuner.key_positions, len(args), call_kwargs)
        else:
            key, ident, key_values, dtypes = keys
        config, filed = self.cache.get(key), tuner.filed.get(key)
        hot = (
            filed is not None
            and config is filed[0]
            and filed[2] == ident
            and (hit := tuner.memory_hit(key_values, dtypes)) is not None
            and ((winner := hit.winner) is filed[1] or winner == filed[1])
        )
        if bound is None and not hot:
            bound = tuner.bind(args, call_kwargs)
        if hot and filed is not None:
            if keys is None and shape is not None:
                tuner.keys_of_shape[shape] = (key, filed[2], *filed[2])
            return _Picked(config, filed[1], bound)  # the hot path: what this module filed, still in memory
        if config is not None and (filed is None or filed[0] is not config):  # the user's own entry
            return _Picked(config, to_native(config, -1), bound)
        if warmup and config is None:
            return self._warm(tuner, args, call_kwargs, grid, nargs, key_values, dtypes, bound, changed)
        if config is None and index.changed_at() is not None:  # as Triton reads the list at each tuning
            self.reindex()
            return self._run(nargs, args, kwargs, changed)
        if config is None and filed is not None:  # deleted from `cache`: looked up again, as in Triton
            tuner.filed.pop(key, None)
            tuner.cache.forget(key_values)
            filed = None
        native, record, how = self._select(tuner, bound, grid, nargs, kwargs, changed)
        pruned = self._pruned_copies(tuner, ident, bound, nargs, kwargs, changed)
        # the config this module filed for the key keeps its identity (a pre_hook early_config_prune gave)
        config = pruned.get(native) or (filed[0] if filed and filed[1] == native else None) or index.triton_of[native]
        # filed; by a call whose engine another thread replaced meanwhile, only where no newer entry is
        if record is not None and (tuner is self.tuner or self.cache.setdefault(key, config) is config):
            self.cache[key], tuner.filed[key] = config, (config, native, (key_values, dtypes))
        benchmarked = record is not None and how != "memory" and self._absorb(index, record, how, pruned)
        return _Picked(config, native, bound, how, benchmarked, key, pruned)

    def _pruned_copies(
        self, tuner: _Engine, ident: tuple, bound: Any, nargs: dict[str, Any], kwargs: dict[str, Any], changed: bool
    ) -> dict[_NativeConfig, Any]:
        """The configs early_config_prune returned for this call's key that are copies of listed ones with their
        own pre_hook (native -> triton.Config): this call's when its prune ran, else those kept for the key by the
        engine (a memory hit, an online session's later calls); for a key never pruned in a call here (tuned through
        `kernel.tuner`) the prune runs now, as Triton prunes every key not in its `cache`."""
        pruned = self._local.pruned_as
        if pruned is None and self._early_config_prune is not None:
            pruned = tuner.pruned_of.get(ident)
            if pruned is None:
                self._local.call = (nargs, kwargs, changed)
                try:
                    tuner.candidates(bound)
                except UserCodeError as exc:
                    raise exc.original from None
                finally:
                    self._local.call = None
                pruned = self._local.pruned_as
        if pruned is None:
            return {}
        tuner.pruned_of[ident] = pruned
        return pruned

    def _after_benchmark(self, picked: _Picked, nargs: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """What Triton does after benchmarking a key: print (TRITON_PRINT_AUTOTUNING), reset the reset_to_zero
        arguments and run the user's pre_hook before the real launch. The dict Triton's hooks see."""
        if triton_print_enabled():
            print(
                f"Triton autotuning for function {self.base_fn.__name__},\nwith key as {picked.key},\n"
                f"finished after {self.bench_time:.2f}s,\nbest config selected: {self.best_config};"
            )
        full_nargs = {**nargs, **kwargs, **picked.config.all_kwargs()}
        warn_listener_once()
        for name in self.reset_to_zero:
            if full_nargs.get(name) is not None:
                full_nargs[name].zero_()
        if self.user_defined_pre_hook:
            self.pre_hook(full_nargs, reset_only=True)
        return full_nargs

    def _launch_online(
        self,
        tuner: _Engine,
        bound: Any,
        grid: Any,
        nargs: dict[str, Any],
        kwargs: dict[str, Any],
        pruned: dict[_NativeConfig, Any],
    ) -> Any:
        """Run a call of a key tuned online: the session picks the candidate, launched as its triton.Config (the
        copy the key's early_config_prune returned, with its pre_hook), which `best_config` then is."""
        index = tuner.index

        def launch(chosen: _NativeConfig) -> Any:
            triton_config = pruned.get(chosen) or index.triton_of[chosen]
            self.best_config, tuner.best_config = triton_config, chosen  # the one this call runs, as natively
            if triton_config.pre_hook is not None:
                triton_config.pre_hook({**nargs, **kwargs, **triton_config.all_kwargs()})
            launch_args, launch_kwargs, launch_grid = tuner.launch_args(chosen, bound, grid)
            with tuner.launch_lock:
                return self.fn.run(*launch_args, grid=launch_grid, warmup=False, **launch_kwargs)

        return tuner.online.launch(*tuner.key_of(bound), bound, launch)

    def _select(
        self, tuner: _Engine, bound: Any, grid: Any, nargs: dict[str, Any], kwargs: dict[str, Any], changed: bool
    ) -> tuple[_NativeConfig, TuningRecord | None, str]:
        """The engine's choice for this call (tuning on a miss, with Triton's hooks around each run). A user hook
        or do_bench that raised is raised as itself, as triton.autotune does. `changed`: this call's prune already
        changed a config in place."""
        local = self._local
        local.call = (nargs, kwargs, changed)
        local.raw, local.announced, local.pruned_as = {}, set(), None
        local.run_error = None
        outer, local.scope = getattr(local, "scope", None), _CallScope()  # outer: a call made by a hook of a call
        scope = local.scope
        try:
            return tuner.select(bound, grid)
        except UserCodeError as exc:
            raise exc.original from None
        finally:
            local.call, local.scope = None, outer
            scope.close()

    def _warm(
        self,
        tuner: _Engine,
        args: tuple,
        kwargs: dict[str, Any],
        grid: Any,
        nargs: dict[str, Any],
        key_values: tuple,
        dtypes: tuple,
        bound: Any,
        changed: bool,
    ) -> Any:
        """`run(..., warmup=True)` on a key not in `cache` (KernelInterface.warmup, triton.heuristics' warmup):
        compile the stored winner if there is one, else every config pruning keeps; launch and tune nothing (the
        arguments may be dtypes, not tensors). Returns the first compiled kernel, as Triton's run returns one."""
        self._local.call, self._local.pruned_as = (nargs, kwargs, changed), None
        try:  # pruned once, with this call's arguments: the kept configs name the stored entry and are compiled
            kept, checksum = tuner.candidates(bound)
            pruned_as = self._local.pruned_as or {}
        finally:
            self._local.call = None
        record, triton_of = tuner.cache.peek(key_values, dtypes, checksum), tuner.index.triton_of
        if record is not None and record.winner in triton_of:
            configs = [triton_of[record.winner]]
        else:
            configs = [pruned_as.get(native) or triton_of[native] for native in kept]
        compiled = [
            self.fn.run(*args, grid=grid, warmup=True, **kwargs, **self._compiled_as(config)) for config in configs
        ]
        return compiled[0]

    def _compiled_as(self, config: Any) -> dict[str, Any]:
        """A triton.Config's launch keywords, an `occupancy` in its kwargs lowered as the native engine lowers it."""
        kwargs = config.all_kwargs()
        return lowered_options(kwargs, self.tuner.launch_target()) if OCCUPANCY in kwargs else kwargs

    def warmup(self, *args: Any, **kwargs: Any) -> list[Any]:
        """As Triton: compile every config that pruning keeps for these arguments, without launching."""
        self.nargs = nargs = dict(zip(self.arg_names, args))
        try:
            return [
                self.fn.warmup(*args, **kwargs, **self._compiled_as(config))
                for config in self.prune_configs(kwargs, nargs=nargs)
            ]
        finally:
            self.nargs = None

    def prune_configs(self, kwargs: dict[str, Any], nargs: dict[str, Any] | None = None) -> list[Any]:
        """Triton's pruning of `configs`: early_config_prune, then the perf model's top_k (never empty)."""
        return triton_prune(self, kwargs, dict(self.nargs or {}) if nargs is None else nargs)

    @contextmanager
    def as_call(self, args: tuple, kwargs: Mapping[str, Any], grid: Any) -> Iterator[None]:
        """The prune context `run` gives a launch, for the engine's prune run outside one (`autotune.warmup`'s):
        early_config_prune and perf_model see the positional arguments in nargs and the call's keywords, grid and
        warmup in kwargs, as Triton passes them."""
        local = self._local
        saved = (getattr(local, "nargs", None), getattr(local, "call", None), getattr(local, "pruned_as", None))
        local.nargs = nargs = dict(zip(self.arg_names, args))
        local.call, local.pruned_as = (nargs, {**kwargs, "grid": grid, "warmup": False}, False), None
        try:
            yield
        finally:
            local.nargs, local.call, local.pruned_as = saved

    # ---------------------------------------------------------------------------------------- tuner callbacks
    def _prune_for_tuner(
        self, index: ConfigIndex, configs: list[_NativeConfig], named: dict[str, Any]
    ) -> list[_NativeConfig]:
        """The native `prune=` of the engine over `index`: Triton's pruning with the caller's triton.Configs,
        positional args and kwargs. A returned config equal to one of `configs` but for its pre_hook keeps its own
        hook for this call's runs. One at a time, so that a config changed in place is known to be this call's
        change (ConfigsChanged(own=True)) or one made before it ran (own=False); see `_rerun`."""
        call = getattr(self._local, "call", None)
        nargs, kwargs, changed = call if call is not None else (dict(named), {}, False)
        with self._prune_lock:
            index.raise_if_changed(self.name)
            pruned = self.prune_configs(kwargs, nargs=nargs)
        pruned_as: dict[_NativeConfig, Any] | None = None
        if call is not None:  # this call's copies (none noted by a prune outside a call: `kernel.tuner`'s)
            pruned_as = self._local.pruned_as = {}
            scope = getattr(self._local, "scope", None)
            if scope is not None:
                scope.pruned_as = pruned_as
        return index.natives_of(pruned, self.name, changed, pruned_as)

    def _run_trial(self, index: ConfigIndex, native: _NativeConfig, args: tuple, kwargs: dict, grid: Any) -> Any:
        """One kernel run while tuning, wrapped as Triton's `kernel_call`: config.pre_hook, pre_hook, run,
        post_hook (told the exception, which is then re-raised). An exception of a hook is the user's
        (UserCodeError, raised by `run` as itself); one of the run is the config's."""
        config = self._triton_config(index, native)
        self._local.current = native
        announced = getattr(self._local, "announced", None)
        if announced is not None and native not in announced and triton_print_enabled():
            announced.add(native)  # as Triton's _bench: one line per config, before it is benchmarked
            print(f"Autotuning kernel {self.base_fn.__name__} with config {config}")
        full_nargs = self._full_nargs(args, kwargs, grid)
        name = self.base_fn.__name__
        if config.pre_hook is not None:
            call_user(f"pre_hook of config {config}", name, config.pre_hook, full_nargs)
        call_user("pre_hook", name, self.pre_hook, full_nargs)
        try:
            with self.tuner.launch_lock:
                ret = self.fn.run(*args, grid=grid, warmup=False, **kwargs)
        except Exception as exc:
            self._local.run_error = exc
            call_user("post_hook", name, self.post_hook, full_nargs, exception=exc)
            raise
        call_user("post_hook", name, self.post_hook, full_nargs, exception=None)
        return ret

    def _config_pre_hook(self, config: Any, args: tuple, kwargs: dict, grid: Any) -> None:
        """A triton.Config's pre_hook on a compile's launch arguments (`_Engine.compiler_for`)."""
        full_nargs = self._full_nargs(args, kwargs, grid)
        call_user(f"pre_hook of config {config}", self.base_fn.__name__, config.pre_hook, full_nargs)

    def _triton_config(self, index: ConfigIndex, native: _NativeConfig) -> Any:
        """The caller's `triton.Config` of `native`: the one this call's early_config_prune returned, else the list's
        (also for a trial outside a call: `kernel.tuner`'s)."""
        local = self._local
        pruned_as = getattr(local, "pruned_as", None) if getattr(local, "call", None) is not None else None
        return (pruned_as or {}).get(native) or index.triton_of[native]

    def _full_nargs(self, args: tuple, kwargs: dict, grid: Any) -> dict[str, Any]:
        return {**dict(zip(self.arg_names, args)), "grid": grid, "warmup": False, **kwargs}

    def _is_run_error(self, exc: BaseException) -> bool:
        """Whether `exc`, out of do_bench, is the kernel run's own failure (the config's), not do_bench's."""
        return exc is getattr(self._local, "run_error", None)

    def _record_raw(self, result: Any) -> None:
        raw = getattr(self._local, "raw", None)
        current = getattr(self._local, "current", None)
        if raw is not None and current is not None:
            raw[current] = list(result) if isinstance(result, tuple) else result

    def _absorb(self, index: ConfigIndex, record: TuningRecord, how: str, pruned: Mapping[_NativeConfig, Any]) -> bool:
        """Take Triton's view of a record just tuned or loaded from disk, keyed by the call's triton.Configs (the
        copies its early_config_prune returned, as Triton times those); True when configs were benchmarked."""
        triton_of = {**index.triton_of, **pruned} if pruned else index.triton_of
        timings = timings_of(record, triton_of, getattr(self._local, "raw", None) or {})
        benchmarked = how == "tuned" and bool(timings)
        if timings:
            self.configs_timings = timings
        if how == "tuned":
            self.bench_time = float(record.tuning_s)
        return benchmarked

    # ---------------------------------------------------------------------------------------- native extras
    def record(self, key: Sequence[Any] | None = None) -> TuningRecord:
        """The native tuning record (every config's trial) of `key`, or of the last call's key."""
        return self.tuner.record(key)

    def report(self, key: Sequence[Any] | None = None, png: str | None = None) -> str:
        """The native trial table of `key` as text (and a PNG chart with `png=`)."""
        return self.tuner.report(key, png=png)

    def forget_cleared(self) -> int:
        """Drop from `cache` the entries this module put there whose winner is no longer in the engine's memory
        (`clear_autotune_cache` removed it), so that `cache` shows what the next launch uses; entries you put
        there yourself stay. Returns how many were dropped. Called by the engine's cache after every clear."""
        tuner = self.tuner
        live = set(tuner.cache.records())
        gone = [(key, filed) for key, filed in list(tuner.filed.items()) if filed[2] not in live]
        for key, (config, _, _) in gone:
            tuner.filed.pop(key, None)
            if self.cache.get(key) is config:
                self.cache.pop(key, None)
        return len(gone)

    def cache_info(self) -> dict[str, Any]:
        """Entries in memory and this process's hit/miss/tuning counters for this kernel."""
        return self.tuner.cache_info()

    def __repr__(self) -> str:
        return f"<autotune.compat.Autotuner {self.name}: {len(self.configs)} configs>"


untraced_by_dynamo(Autotuner.run)


def autotune(
    configs: Sequence[Any] | None,
    key: Sequence[str],
    prune_configs_by: Mapping[str, Any] | None = None,
    reset_to_zero: Sequence[str] | None = None,
    restore_value: Sequence[str] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    warmup: int | None = None,
    rep: int | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable[..., Any] | None = None,
    cache_results: bool | None = None,
    *,
    tuning: Tuning | str | dict | None = None,
) -> Callable[[Any], Autotuner]:
    """`triton.autotune` with the same arguments and meaning, running on autotune's pipeline and disk cache.

    See the module docstring for how each argument maps. `tuning=` (keyword only, not in Triton) sets the
    native `Tuning` (repetitions, compile workers, ...) used when no `do_bench` is in play.
    """
    Tuning.coerce(tuning)
    prune_options = checked_prune_options(prune_configs_by)
    check_top_k(
        prune_options.get("top_k", 1.0), "prune_configs_by['top_k']", perf_model=prune_options.get("perf_model")
    )

    def decorator(fn: Any) -> Autotuner:
        return Autotuner(
            fn,
            fn.arg_names,
            configs,
            key,
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            warmup=warmup,
            rep=rep,
            use_cuda_graph=use_cuda_graph,
            do_bench=do_bench,
            cache_results=cache_results,
            tuning=tuning,
        )

    return decorator


if TYPE_CHECKING:  # mypy: the drop-in's engine is what the engine tunes, as the native kernel is

    def _is_tunable(engine: _Engine) -> TunableKernel:
        return engine
