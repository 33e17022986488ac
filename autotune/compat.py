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

How Triton's pieces map onto the native ones (the "why" of this module):

- A `triton.Config` becomes an `autotune.Config` of its kwargs plus its non-None compile options
  (`num_warps`, `num_stages`, `num_ctas`, `maxnreg`). A config's `pre_hook` is a Python callable that cannot
  be stored in a JSON cache, so it stays in a side table (native config -> `triton.Config`); `best_config`,
  `cache` and `configs_timings` hand back the caller's own `triton.Config` objects.
- Triton's `pre_hook`/`post_hook` and each config's `pre_hook` run around every kernel run while tuning
  (the native `_run_trial` seam), `post_hook` receiving the exception when a run raises; pre_hook calls with
  `reset_only=False` and post_hook calls always pair up. After a tuning that benchmarked, Triton calls
  `pre_hook(nargs, reset_only=True)` once, and so does this module.
- `reset_to_zero` / `restore_value` use the native argument guard (arguments passed as None are skipped).
  Unlike Triton, a user `pre_hook`/`post_hook` does not switch them off. As in Triton, the
  `reset_to_zero` arguments are zeroed once more before the final launch of a call that benchmarked.
- `prune_configs_by` is applied by this module with Triton's exact calls: `early_config_prune(configs,
  nargs, **kwargs)` with the caller's `triton.Config`s and positional arguments, then
  `perf_model(**nargs, **kwargs, **config.all_kwargs())` and `top_k` (an int, or a float <= 1.0 fraction;
  never fewer than one config). It runs only when a key is tuned, as in Triton.
- Timing: `do_bench(kernel_call, quantiles)` is Triton's benchmark signature; it is called once per config
  and its median (the first of the quantiles it returns) is the config's time. The deprecated
  `warmup`/`rep`/`use_cuda_graph` select `triton.testing.do_bench`/`do_bench_cudagraph` with those ms budgets,
  as in Triton. With none of these, the native timers measure (CUDA events with L2 flush on a GPU). In the
  interpreter, where Triton's GPU benchmarkers cannot run, the wall-clock timer stands in for them.
- `cache_results`: left out (None), the native disk cache is on: that is what the migration is for.
  `cache_results=True` is the same; an explicit `cache_results=False` keeps winners in memory only.
- One config: launched directly, no key, no benchmark, `cache` untouched (as Triton). Several configs
  pruned down to one: that one is launched without benchmarking and recorded in `cache`.
- Keys: the `key` arguments' values plus the dtype of every tensor argument, in signature order (Triton
  orders the dtypes by call order, so passing keywords in another order can retune there; not here).

Not reproduced on purpose: Triton's crash on a config that fails to run (here it is recorded and skipped),
`knobs.autotuning.listener`, `ir_override` configs (rejected when decorating), and configs returned by
`early_config_prune` that are not among `configs` (an error: winners are cached by value).
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import triton
from triton.runtime.errors import AutotunerError
from triton.runtime.jit import KernelInterface

from .decorator import Autotuned
from .kernel_ref import base_kernel, heuristics_layers, is_interpreted, python_function
from .pruning import check_top_k, top_k_count
from .errors import AutotuneError, SpaceError
from .options import Tuning
from .record import TrialStatus, TuningRecord
from .space import Config as _NativeConfig
from .space_input import config_from_triton
from .storage.tiers import KernelCache

__all__ = ["autotune", "Autotuner", "Config", "heuristics"]

# Re-exported so that `from autotune.compat import autotune, Config, heuristics` reads as Triton's names.
Config = triton.Config
heuristics = triton.heuristics

_QUANTILES = (0.5, 0.2, 0.8)                        # what Triton's Autotuner asks do_bench for
_LAUNCH_KEYS = ("grid", "warmup")                   # KernelInterface.__getitem__ passes these in **kwargs
TimingValue = Union[float, List[float]]


# ------------------------------------------------------------------------------------------------ configs
def _to_native(config: Any, index: int) -> _NativeConfig:
    """A `triton.Config` as a native Config: its kwargs plus its non-None compile options."""
    if not isinstance(config, triton.Config):
        raise TypeError(f"configs[{index}] is {type(config).__name__} {config!r}; autotune.compat.autotune takes a "
                        "list of triton.Config (for plain dicts use autotune.autotune(space=...))")
    return config_from_triton(config, f"configs[{index}]", pre_hook_ok=True)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (what torch.quantile computes)."""
    if not sorted_values:
        return float("inf")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def _timing_from_samples(samples: Sequence[float]) -> List[float]:
    """[median, p20, p80] in ms, the shape of a `configs_timings` value under Triton's default benchmarker."""
    ordered = sorted(samples)
    return [_quantile(ordered, q) for q in _QUANTILES]


def _triton_print_enabled() -> bool:
    try:
        from triton import knobs

        return bool(knobs.autotuning.print)
    except Exception:  # pragma: no cover - a Triton without knobs
        return False


# ------------------------------------------------------------------------------------------------ engine
class _Engine(Autotuned):
    """The native autotuner under an `Autotuner`: each trial run goes through the owner's Triton hooks."""

    owner: "Autotuner"
    default_isolate = "off"      # as triton.autotune: in this process, Triton's hooks around each run

    def _run_trial(self, config: _NativeConfig, args: tuple, kwargs: dict, grid: Any) -> Any:
        return self.owner._run_trial(config, args, kwargs, grid)


class _QuantileBench:
    """Adapts Triton's `do_bench(kernel_call, quantiles)` to the native `CallableTimer` (`do_bench(fn)`).

    Called once per config; returns the median (the first quantile Triton asks for) as the config's one
    sample, and hands the raw return value to `record` so `configs_timings` shows what do_bench returned.
    """

    def __init__(self, bench: Callable[..., Any], record: Callable[[Any], None]) -> None:
        self.bench = bench
        self.record = record

    def __call__(self, kernel_call: Callable[[], Any]) -> List[float]:
        result = self.bench(kernel_call, quantiles=_QUANTILES)
        self.record(result)
        if isinstance(result, (list, tuple)):
            return [float(result[0])]
        return [float(result)]


# ------------------------------------------------------------------------------------------------ Autotuner
class Autotuner(KernelInterface):
    """`triton.runtime.autotuner.Autotuner`'s interface on top of the native `Autotuned` (`self.tuner`).

    Launch it as Triton's: `kernel[grid](*args, **kwargs)`. Attributes as in Triton: `fn`, `base_fn` (the
    Python function), `arg_names`, `configs` (the `triton.Config` list), `keys`, `cache` ({key tuple:
    triton.Config}), `best_config`, `configs_timings` ({triton.Config: timing} of the last tuning in this
    process, or of the disk entry it loaded), `bench_time` (seconds the last tuning took), `reset_to_zero`,
    `restore_value`, `pre_hook`, `post_hook`, `perf_model`, `configs_top_k`, `early_config_prune`,
    `num_warmups`, `num_reps`, `use_cuda_graph`, `do_bench`, `cache_results`. Extensions: `tuner`, `name`,
    `record()`, `report()`, `cache_info()`.
    """

    def __init__(self, fn: Any, arg_names: Sequence[str], configs: Optional[Sequence[Any]], key: Sequence[str],
                 reset_to_zero: Optional[Sequence[str]], restore_value: Optional[Sequence[str]],
                 pre_hook: Optional[Callable[..., Any]] = None, post_hook: Optional[Callable[..., Any]] = None,
                 prune_configs_by: Optional[Mapping[str, Any]] = None, warmup: Optional[int] = None,
                 rep: Optional[int] = None, use_cuda_graph: bool = False,
                 do_bench: Optional[Callable[..., Any]] = None, cache_results: Optional[bool] = None, *,
                 tuning: Union[Tuning, str, dict, None] = None) -> None:
        self.fn = fn
        self.arg_names: List[str] = list(arg_names)
        self.configs: List[Any] = list(configs) if configs else [triton.Config({}, num_warps=4, num_stages=3,
                                                                                num_ctas=1)]
        self.keys: List[str] = [key] if isinstance(key, str) else list(key or [])
        self.reset_to_zero: List[str] = list(reset_to_zero or [])
        self.restore_value: List[str] = list(restore_value or [])
        for param, names in (("key", self.keys), ("reset_to_zero", self.reset_to_zero),
                             ("restore_value", self.restore_value)):
            unknown = [name for name in names if name not in self.arg_names]
            if unknown:
                raise ValueError(f"{param} contains names that are not kernel arguments: {', '.join(unknown)}. "
                                 f"Valid argument names are: {', '.join(self.arg_names)}.")

        # triton.Config <-> native Config. Equal triton.Configs are one config (as in Triton's timing dict).
        self._natives: List[_NativeConfig] = []
        self._triton_of: Dict[_NativeConfig, Any] = {}
        for i, tconfig in enumerate(self.configs):
            native = _to_native(tconfig, i)
            seen = self._triton_of.get(native)
            if seen is None:
                self._triton_of[native] = tconfig
                self._natives.append(native)
            elif seen.pre_hook is not tconfig.pre_hook:
                raise SpaceError(f"configs[{i}] ({tconfig}) equals an earlier config except for its pre_hook; "
                                 "autotune caches winners by value, so two configs must differ in a kwarg or "
                                 "compile option")
        self._meta_names = frozenset().union(*(c.kwargs.keys() for c in self.configs))

        # Hooks, as Triton stores them (no-ops when not given; reset/restore are done by the native guard).
        self.user_defined_pre_hook = pre_hook is not None
        self.user_defined_post_hook = post_hook is not None
        self.pre_hook: Callable[..., Any] = pre_hook if pre_hook is not None else (lambda kwargs, reset_only=False: 0)
        self.post_hook: Callable[..., Any] = (post_hook if post_hook is not None
                                              else (lambda kwargs, exception: 0))

        # Pruning, as Triton reads prune_configs_by.
        prune_configs_by = dict(prune_configs_by or {})
        self.perf_model: Optional[Callable[..., Any]] = prune_configs_by.get("perf_model")
        self.configs_top_k: Union[int, float] = prune_configs_by.get("top_k", 1.0)
        self.early_config_prune: Optional[Callable[..., Any]] = prune_configs_by.get("early_config_prune")
        check_top_k(self.configs_top_k, "prune_configs_by['top_k']")

        # Benchmarking.
        base = base_kernel(fn)
        self.base_fn = python_function(fn)
        self.num_warmups = warmup
        self.num_reps = rep
        self.use_cuda_graph = use_cuda_graph
        self.do_bench = self._resolve_do_bench(do_bench, interpreted=is_interpreted(base))
        self.cache_results: bool = cache_results is not False

        tuning_obj = Tuning.coerce(tuning)
        if self.do_bench is not None:
            # A do_bench is Triton's whole measurement of a config: call it once per config, no refinement.
            tuning_obj = tuning_obj.replace(refine_topk=0)
        self._local = threading.local()
        use_prune = self.early_config_prune is not None or self.perf_model is not None
        # Triton skips a key name the call does not pass (a config's meta-parameter, a triton.heuristics value);
        # so does the engine's key.
        unpassed = self._meta_names.union(*(layer.values for layer in heuristics_layers(fn, base_kernel(fn))))
        call_keys = [k for k in self.keys if k not in unpassed]
        self.tuner: _Engine = _Engine(fn, space=list(self._natives), key=call_keys, tuning=tuning_obj,
                                      restore_value=self.restore_value, reset_to_zero=self.reset_to_zero,
                                      do_bench=_QuantileBench(self.do_bench, self._record_raw)
                                      if self.do_bench is not None else None,
                                      prune=self._prune_for_tuner if use_prune else None)
        self.tuner.owner = self
        if not self.cache_results:  # the memory tier alone: same single flight and stats, no file touched
            native = self.tuner.cache
            self.tuner.cache = KernelCache(native.kernel_name, lambda: native.source_hash, native.space_checksum,
                                           native.space_contains, identity=native.identity, tiers=[])
        self.name: str = self.tuner.name

        # Triton's public state.
        self.cache: Dict[Tuple, Any] = {}
        self.best_config: Optional[Any] = None
        self.configs_timings: Dict[Any, TimingValue] = {}
        self.bench_time: Optional[float] = None
        self.nargs: Optional[Dict[str, Any]] = None

    # ---------------------------------------------------------------------------------------- setup helpers
    def _resolve_do_bench(self, do_bench: Optional[Callable[..., Any]], *, interpreted: bool) -> Optional[Callable]:
        """Triton's choice of benchmark function, or None for the native timers."""
        legacy = self.num_warmups is not None or self.num_reps is not None or self.use_cuda_graph
        if legacy:
            warnings.warn("warmup, rep, and use_cuda_graph parameters are deprecated. See "
                          "https://github.com/triton-lang/triton/pull/4496 for details.", DeprecationWarning,
                          stacklevel=4)
            if interpreted:
                return None  # triton.testing's benchmarkers need a GPU; the wall clock stands in
            import triton.testing

            rep = self.num_reps if self.num_reps is not None else 100
            if self.use_cuda_graph:
                return lambda kernel_call, quantiles: triton.testing.do_bench_cudagraph(
                    kernel_call, rep=rep, quantiles=quantiles)
            warmup = self.num_warmups if self.num_warmups is not None else 25
            return lambda kernel_call, quantiles: triton.testing.do_bench(
                kernel_call, warmup=warmup, rep=rep, quantiles=quantiles)
        if do_bench is None:
            return None
        if interpreted:
            from triton.testing import do_bench as triton_do_bench, do_bench_cudagraph

            if do_bench in (triton_do_bench, do_bench_cudagraph):
                return None
        return do_bench

    # ---------------------------------------------------------------------------------------- launching
    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Triton's launch protocol: `kernel[grid](...)` calls `run(*args, grid=grid, warmup=False, **kwargs)`."""
        grid = kwargs.get("grid")
        warmup = kwargs.get("warmup", False)
        call_kwargs = {k: v for k, v in kwargs.items() if k not in _LAUNCH_KEYS}
        conflicts = sorted(call_kwargs.keys() & self._meta_names)
        if conflicts:
            raise ValueError(f"Conflicting meta-parameters: {', '.join(conflicts)}. Make sure that you don't "
                             "re-define auto-tuned symbols.")
        tuner = self.tuner
        nargs = dict(zip(self.arg_names, args))
        bound = tuner.bind(args, call_kwargs)
        benchmarked, how = False, "memory"
        if len(self._natives) == 1:
            native = self._natives[0]
        else:
            self._local.call = (nargs, kwargs)
            self._local.raw = {}
            self._local.announced = set()
            try:
                native, record, how = tuner.select(bound, grid)
            finally:
                self._local.call = None
            if record is not None:
                key_values, dtypes = tuner.key_of(bound)
                key = (*key_values, *dtypes)
                self.cache[key] = self._triton_of[native]
                if how != "memory":
                    benchmarked = self._absorb(record, how)
        config = self._triton_of[native]
        self.best_config = config
        tuner.best_config = native
        if benchmarked and _triton_print_enabled():
            print(f"Triton autotuning for function {self.base_fn.__name__},\nwith key as {key},\n"
                  f"finished after {self.bench_time:.2f}s,\nbest config selected: {self.best_config};")
        full_nargs = {**nargs, **kwargs, **config.all_kwargs()}
        if benchmarked:
            # As Triton after benchmarking: reset the reset_to_zero arguments before the real launch.
            for name in self.reset_to_zero:
                if full_nargs.get(name) is not None:
                    full_nargs[name].zero_()
            if self.user_defined_pre_hook:
                self.pre_hook(full_nargs, reset_only=True)

        if how == "online" and not warmup:   # AUTOTUNE_MODE=online: this call may time a candidate

            def launch(chosen: _NativeConfig) -> Any:
                triton_config = self._triton_of[chosen]
                if triton_config.pre_hook is not None:
                    triton_config.pre_hook({**nargs, **kwargs, **triton_config.all_kwargs()})
                launch_args, launch_kwargs, launch_grid = tuner.launch_args(chosen, bound, grid)
                with tuner.launch_lock:
                    return self.fn.run(*launch_args, grid=launch_grid, warmup=False, **launch_kwargs)

            return tuner.online.launch(*tuner.key_of(bound), bound, launch)
        if config.pre_hook is not None:
            config.pre_hook(full_nargs)
        launch_args, launch_kwargs, launch_grid = tuner.launch_args(native, bound, grid)
        with tuner.launch_lock:
            return self.fn.run(*launch_args, grid=launch_grid, warmup=warmup, **launch_kwargs)

    def warmup(self, *args: Any, **kwargs: Any) -> List[Any]:
        """As Triton: compile every config that pruning keeps for these arguments, without launching."""
        nargs = dict(zip(self.arg_names, args))
        return [self.fn.warmup(*args, **kwargs, **config.all_kwargs())
                for config in self.prune_configs(kwargs, nargs=nargs)]

    def prune_configs(self, kwargs: Dict[str, Any], nargs: Optional[Dict[str, Any]] = None) -> List[Any]:
        """Triton's pruning of `configs`: early_config_prune, then the perf model's top_k (never empty)."""
        nargs = dict(self.nargs or {}) if nargs is None else nargs
        pruned = list(self.configs)
        if self.early_config_prune is not None:
            pruned = list(self.early_config_prune(self.configs, nargs, **kwargs) or [])
            if not pruned:
                raise AutotunerError("No valid autotuner configs after pruning. `early_config_prune` should return "
                                     "at least one config.")
        if self.perf_model is not None:
            top_k = top_k_count(len(pruned), self.configs_top_k)
            if len(pruned) > top_k:
                estimates = [self.perf_model(**nargs, **kwargs, **config.all_kwargs()) for config in pruned]
                order = sorted(range(len(pruned)), key=estimates.__getitem__)
                pruned = [pruned[i] for i in order[:top_k]]
        return pruned

    # ---------------------------------------------------------------------------------------- tuner callbacks
    def _prune_for_tuner(self, configs: List[_NativeConfig], named: Dict[str, Any]) -> List[_NativeConfig]:
        """The native `prune=`: Triton's pruning with the caller's triton.Configs, positional args and kwargs."""
        call = getattr(self._local, "call", None)
        nargs, kwargs = call if call is not None else (dict(named), {})
        kept = []
        for config in self.prune_configs(kwargs, nargs=nargs):
            native = _to_native(config, -1) if isinstance(config, triton.Config) else None
            if native is None or native not in self._triton_of:
                raise AutotuneError(f"early_config_prune on {self.name} returned {config}, which is not one of the "
                                    "decorator's configs; autotune tunes (and caches winners among) those configs "
                                    "only: return a subset of them")
            kept.append(native)
        return kept

    def _run_trial(self, native: _NativeConfig, args: tuple, kwargs: dict, grid: Any) -> Any:
        """One kernel run while tuning, wrapped as Triton's `kernel_call`: config.pre_hook, pre_hook, run,
        post_hook (told the exception, which is then re-raised)."""
        config = self._triton_of[native]
        self._local.current = native
        announced = getattr(self._local, "announced", None)
        if announced is not None and native not in announced and _triton_print_enabled():
            announced.add(native)  # as Triton's _bench: one line per config, before it is benchmarked
            print(f"Autotuning kernel {self.base_fn.__name__} with config {config}")
        full_nargs = {**dict(zip(self.arg_names, args)), "grid": grid, "warmup": False, **kwargs}
        if config.pre_hook is not None:
            config.pre_hook(full_nargs)
        self.pre_hook(full_nargs)
        try:
            with self.tuner.launch_lock:
                ret = self.fn.run(*args, grid=grid, warmup=False, **kwargs)
        except Exception as exc:
            self.post_hook(full_nargs, exception=exc)
            raise
        self.post_hook(full_nargs, exception=None)
        return ret

    def _record_raw(self, result: Any) -> None:
        raw = getattr(self._local, "raw", None)
        current = getattr(self._local, "current", None)
        if raw is not None and current is not None:
            raw[current] = list(result) if isinstance(result, tuple) else result

    def _absorb(self, record: TuningRecord, how: str) -> bool:
        """Take Triton's view of a record just tuned or loaded from disk; True when configs were benchmarked."""
        raw = getattr(self._local, "raw", None) or {}
        timings: Dict[Any, TimingValue] = {}
        for trial in record.trials:
            config = self._triton_of.get(trial.config)
            if config is None or trial.status is TrialStatus.SKIPPED:
                continue
            if trial.status is TrialStatus.OK:
                timings[config] = raw.get(trial.config, _timing_from_samples(trial.samples_ms))
            else:
                timings[config] = [float("inf")] * len(_QUANTILES)
        benchmarked = how == "tuned" and bool(timings)
        if timings:
            self.configs_timings = timings
        if how == "tuned":
            self.bench_time = float(record.tuning_s)
        return benchmarked

    # ---------------------------------------------------------------------------------------- native extras
    def record(self, key: Optional[Sequence[Any]] = None) -> TuningRecord:
        """The native tuning record (every config's trial) of `key`, or of the last call's key."""
        return self.tuner.record(key)

    def report(self, key: Optional[Sequence[Any]] = None, png: Optional[str] = None) -> str:
        """The native trial table of `key` as text (and a PNG chart with `png=`)."""
        return self.tuner.report(key, png=png)

    def cache_info(self) -> Dict[str, Any]:
        """Entries in memory and this process's hit/miss/tuning counters for this kernel."""
        return self.tuner.cache_info()

    def __repr__(self) -> str:
        return f"<autotune.compat.Autotuner {self.name}: {len(self.configs)} configs>"


def autotune(configs: Optional[Sequence[Any]], key: Sequence[str],
             prune_configs_by: Optional[Mapping[str, Any]] = None, reset_to_zero: Optional[Sequence[str]] = None,
             restore_value: Optional[Sequence[str]] = None, pre_hook: Optional[Callable[..., Any]] = None,
             post_hook: Optional[Callable[..., Any]] = None, warmup: Optional[int] = None,
             rep: Optional[int] = None, use_cuda_graph: bool = False, do_bench: Optional[Callable[..., Any]] = None,
             cache_results: Optional[bool] = None, *,
             tuning: Union[Tuning, str, dict, None] = None) -> Callable[[Any], Autotuner]:
    """`triton.autotune` with the same arguments and meaning, running on autotune's pipeline and disk cache.

    See the module docstring for how each argument maps. `tuning=` (keyword only, not in Triton) sets the
    native `Tuning` (repetitions, compile workers, ...) used when no `do_bench` is in play.
    """
    Tuning.coerce(tuning)
    check_top_k(dict(prune_configs_by or {}).get("top_k", 1.0), "prune_configs_by['top_k']")

    def decorator(fn: Any) -> Autotuner:
        return Autotuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                         post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                         use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results,
                         tuning=tuning)

    return decorator
