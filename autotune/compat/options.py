"""Checks and conversions `autotune.compat` applies when decorating, so that a mistake in Triton's decorator
arguments fails at the decorator line: triton.Configs as native configs, `prune_configs_by`'s keys, hooks that
must be callables; and what the drop-in says about Triton's knobs it does not follow. Also the caller's configs
as one engine indexed them (`ConfigIndex`: what changed in place since, what a prune returned) and Triton's
pruning of them."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import triton
from triton.runtime.errors import AutotunerError

from ..errors import AutotuneError, KeyValueError, OptionError, SpaceError, did_you_mean, warn_at_caller
from ..kernel.pruning import RerunCall, check_top_k, fastest_by_model
from ..keys import DTYPE_TEXTS  # the dtype texts KeyBuilder.dtypes already made
from ..space.spaces import Config as NativeConfig
from ..space.triton_config import config_from_triton

if TYPE_CHECKING:
    from . import Autotuner

__all__ = [
    "ConfigChangedInPlace",
    "ConfigIndex",
    "ConfigsChanged",
    "PruneFunction",
    "check_callables",
    "check_finite_key_args",
    "checked_prune_options",
    "listener_warned",
    "passed_key",
    "shape_key",
    "to_native",
    "triton_print_enabled",
    "triton_prune",
    "warn_listener_once",
]

_PRUNE_KEYS = ("early_config_prune", "perf_model", "top_k")  # what Triton reads from prune_configs_by


def to_native(config: Any, index: int) -> NativeConfig:
    """A `triton.Config` as a native Config: its kwargs plus its non-None compile options."""
    if not isinstance(config, triton.Config):
        raise TypeError(
            f"configs[{index}] is {type(config).__name__} {config!r}; autotune.compat.autotune takes a "
            "list of triton.Config (for plain dicts use autotune.autotune(space=...))"
        )
    if config.pre_hook is not None and not callable(config.pre_hook):
        raise SpaceError(
            f"configs[{index}] ({config}) has a pre_hook that is not callable: "
            f"{type(config.pre_hook).__name__} {config.pre_hook!r}; pass a function of the arguments"
        )
    for name, value in config.kwargs.items():
        if isinstance(value, triton.language.dtype):
            raise SpaceError(
                f"configs[{index}] sets {name}={value}, a Triton dtype: autotune caches winners as JSON, "
                f"so a config value is a number, a string or a bool. Tune a flag instead (e.g. "
                f"{name}_FP32: tl.constexpr = True/False) and pick the dtype from it in the kernel"
            )
    return config_from_triton(config, f"configs[{index}]", pre_hook_ok=True)


class ConfigChangedInPlace(AutotuneError):
    """`early_config_prune` changed one of the decorator's own triton.Configs in place and returned it, on a call
    whose prune had already done so. The first time, `Autotuner.run` indexes the configs anew and runs the call
    again (triton.autotune launches a config as changed); a prune that changes one on every run never settles."""

    def __init__(self, kernel: str, index: int, config: Any) -> None:
        super().__init__(
            f"early_config_prune on {kernel} changed configs[{index}] in place (now {config}) on a call "
            "that had already re-indexed the configs after such a change; return a subset of the configs "
            "unchanged, and set the values you want on kernel.configs once, before the first launch"
        )
        self.index = index


class ConfigsChanged(RerunCall):
    """Raised by the drop-in's prune when the configs no longer match the index of the engine running the call:
    `Autotuner.run` indexes them anew and runs the call again. `own`: this call's early_config_prune changed one
    (which a call may do once); else they had changed before it ran (another thread's prune, the caller)."""

    def __init__(self, kernel: str, index: int, config: Any, *, own: bool) -> None:
        super().__init__(f"the configs of {kernel} changed in place (configs[{index}] is now {config})")
        self.index, self.config, self.own = index, config, own


class ConfigIndex:
    """The caller's `configs` list as one engine indexed it: native config -> triton.Config (equal triton.Configs
    are one config, as in Triton's timing dict), each item's value when indexed, the meta-parameter names. Never
    changed once made: a call keeps the index of the engine it started on, whatever other threads re-index."""

    def __init__(self, configs: Sequence[Any]) -> None:
        self.configs, self.indexed = configs, list(configs)
        self.values = [to_native(tconfig, i) for i, tconfig in enumerate(self.indexed)]
        self.natives: list[NativeConfig] = []
        self.triton_of: dict[NativeConfig, Any] = {}
        for i, (tconfig, native) in enumerate(zip(self.indexed, self.values)):
            seen = self.triton_of.get(native)
            if seen is None:
                self.triton_of[native] = tconfig
                self.natives.append(native)
            elif seen.pre_hook != tconfig.pre_hook:  # Triton's Config.__eq__: `==`, so `obj.method` twice is one hook
                raise SpaceError(
                    f"configs[{i}] ({tconfig}) equals an earlier config except for its pre_hook; "
                    "autotune caches winners by value, so two configs must differ in a kwarg or "
                    "compile option"
                )
        self.meta_names = frozenset().union(*(c.kwargs.keys() for c in self.indexed))

    def list_changed(self) -> bool:
        """Whether the list was changed in place (an item added, removed or replaced) since it was indexed: Triton
        reads the list at each tuning, so the drop-in then indexes it again."""
        return len(self.configs) != len(self.indexed) or any(a is not b for a, b in zip(self.configs, self.indexed))

    def changed_at(self) -> int | None:
        """The first position of the list whose item is not the one indexed there, or has another value now; None
        when the list is as indexed."""
        for i, tconfig in enumerate(self.configs):
            if i >= len(self.indexed) or tconfig is not self.indexed[i] or to_native(tconfig, i) != self.values[i]:
                return i
        return None if len(self.configs) == len(self.indexed) else len(self.configs)

    def raise_if_changed(self, kernel: str) -> None:
        """ConfigsChanged(own=False) when the list is no longer as indexed (checked before a prune runs: whatever
        changed it, it was not that prune)."""
        at = self.changed_at()
        if at is not None:
            raise ConfigsChanged(kernel, at, self.configs[at] if at < len(self.configs) else None, own=False)

    def natives_of(
        self, pruned: Sequence[Any], kernel: str, changed: bool, pruned_as: dict[NativeConfig, Any] | None
    ) -> list[NativeConfig]:
        """The indexed native configs of what early_config_prune returned. One equal to an indexed config but for
        its pre_hook is noted in `pruned_as` (it keeps its own hook for this call's runs). An item of the list
        changed in place: ConfigsChanged(own=True), or ConfigChangedInPlace when this call's prune had already
        changed one (`changed`); any other config is an error: winners are cached among these configs."""
        kept = []
        for config in pruned:
            native = to_native(config, -1) if isinstance(config, triton.Config) else None
            if native is None or native not in self.triton_of:
                at = next((i for i, c in enumerate(self.configs) if c is config), None)  # identity, not equality
                if at is not None:
                    raise (
                        ConfigChangedInPlace(kernel, at, config)
                        if changed
                        else ConfigsChanged(kernel, at, config, own=True)
                    )
                raise AutotuneError(
                    f"early_config_prune on {kernel} returned {config}, which is not one of the "
                    "decorator's configs; autotune tunes (and caches winners among) those configs "
                    "only: return a subset of them"
                )
            if pruned_as is not None and config is not self.triton_of[native]:
                pruned_as[native] = config
            kept.append(native)
        return kept


class PruneFunction:
    """`early_config_prune` / `perf_model` of an Autotuner: checked when assigned, then the engine is rebuilt
    (whether it prunes at all depends on them), as Triton reads them at each tuning. Stored as `_<name>`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self if obj is None else getattr(obj, f"_{self.name}")

    def __set__(self, obj: Any, fn: Callable[..., Any] | None) -> None:
        check_callables(obj.base_fn.__name__, **{self.name: fn})
        if self.name == "perf_model":  # top_k is read (and checked) only with a perf model: now there is one
            check_top_k(obj.configs_top_k, "prune_configs_by['top_k']", perf_model=fn)
        setattr(obj, f"_{self.name}", fn)
        obj.rebuild_engine()


def triton_prune(kernel: Autotuner, kwargs: dict[str, Any], nargs: dict[str, Any]) -> list[Any]:
    """Triton's pruning of an Autotuner's `configs`: its early_config_prune, then its perf model's top_k (never
    empty), read off the kernel's public attributes as Triton reads its own."""
    pruned = list(kernel.configs)
    if kernel.early_config_prune is not None:
        pruned = list(kernel.early_config_prune(kernel.configs, nargs, **kwargs) or [])
        if not pruned:
            raise AutotunerError(
                "No valid autotuner configs after pruning. `early_config_prune` should return at least one config."
            )
    if kernel.perf_model is not None:
        check_top_k(kernel.configs_top_k, "configs_top_k", perf_model=kernel.perf_model)  # may be set after decorating
        pruned = fastest_by_model(
            pruned, kernel.configs_top_k, lambda config: kernel.perf_model(**nargs, **kwargs, **config.all_kwargs())
        )
    return pruned


def passed_key(
    names: Sequence[str],
    values: tuple,
    dtypes: tuple,
    positions: Mapping[str, int],
    n_args: int,
    kwargs: Mapping[str, Any],
) -> tuple:
    """`cache`'s key for a call, as Triton builds it: the values of the key names this call passes (by position or
    by keyword; one left to its default is not in it), then the tensor dtypes. `values` are the engine's, for
    `names`, defaults filled in."""
    return (*(v for name, v in zip(names, values) if positions[name] < n_args or name in kwargs), *dtypes)


def check_finite_key_args(kernel: str, key_names: Sequence[str], named: Mapping[str, Any]) -> None:
    """A key argument that is an infinite or NaN float is refused (KeyValueError) before the engine keys the call,
    with advice that works in the drop-in (whose key= names arguments only): triton.autotune takes it."""
    for name in key_names:
        value = named.get(name)
        if isinstance(value, float) and not math.isfinite(value):
            why = (
                "NaN never equals itself, so its cache entry would never match again"
                if value != value
                else "cache entries are stored as JSON, which has no infinity, so its entry would never match again"
            )
            raise KeyValueError(
                f"{kernel}: key argument {name}={value} is not a finite number: {why}; pass a finite {name}, or "
                f"take {name!r} out of key= (autotune.compat's key= names arguments only: to bucket or clean a "
                "value first, decorate with autotune.autotune and a key= expression or function). triton.autotune "
                "accepts it: see docs/DESIGN.md section 11"
            )


_KEY_SCALARS = frozenset({int, str, type(None)})  # two equal values of these are of one type: no 1 == True == 1.0


def shape_key(
    key_at: Sequence[bool], key_names: Collection[str], args: tuple, kwargs: Mapping[str, Any]
) -> tuple | None:
    """A call's key in the drop-in's memo of keys (`Autotuner._run`): the number of positional arguments, then per
    positional argument its value where it is a key name, else its dtype's text (None without one), then each
    keyword's name and the same. Two calls with one shape key bind alike and have one native key and one `cache`
    key, so these are memoised by it; None (not memoised) for a key value other than an int, a str or None, or a
    dtype whose text KeyBuilder has not made yet. `key_at`: per parameter, whether it is a key name."""
    out: list[Any] = [len(args)]
    append = out.append
    try:
        for is_key, value in zip(key_at, args):
            if is_key:
                if type(value) not in _KEY_SCALARS:
                    return None
                append(value)
            else:  # an int, float, bool, str or None has no dtype (KeyBuilder skips their types)
                dtype = getattr(value, "dtype", None)
                append(None if dtype is None else DTYPE_TEXTS[dtype])
        for name, value in kwargs.items():
            append(name)
            if name in key_names:
                if type(value) not in _KEY_SCALARS:
                    return None
                append(value)
            else:
                dtype = getattr(value, "dtype", None)
                append(None if dtype is None else DTYPE_TEXTS[dtype])
    except (KeyError, TypeError):  # a dtype not met yet, or an unhashable one
        return None
    return tuple(out)


def checked_prune_options(prune_configs_by: Mapping[str, Any] | None) -> dict[str, Any]:
    """`prune_configs_by` as a dict; a key Triton would silently ignore (a misspelling) is refused."""
    options = dict(prune_configs_by or {})
    for name in options:
        if name not in _PRUNE_KEYS:
            raise OptionError(
                f"prune_configs_by has no option {name!r}; it takes {', '.join(_PRUNE_KEYS)}."
                + did_you_mean(str(name), _PRUNE_KEYS)
            )
    return options


def check_callables(kernel: str, **hooks: Any) -> None:
    """Hooks, do_bench and pruning functions are callables: else every config would fail at the first call."""
    for what, hook in hooks.items():
        if hook is not None and not callable(hook):
            raise OptionError(f"{what} of {kernel} must be a callable; got {type(hook).__name__}: {hook!r}")


listener_warned = threading.Event()


def warn_listener_once() -> None:
    """triton.knobs.autotuning.listener is not called by the drop-in: say so once per process when it is set."""
    try:
        from triton import knobs

        listener = getattr(knobs.autotuning, "listener", None)
    except Exception:  # pragma: no cover - a Triton without knobs
        return
    if listener is not None and not listener_warned.is_set():
        listener_warned.set()
        warn_at_caller(
            "autotune.compat does not call triton.knobs.autotuning.listener; read the kernel's "
            "best_config, configs_timings and bench_time (or autotune's record()) after a call instead"
        )


def triton_print_enabled() -> bool:
    try:
        from triton import knobs

        return bool(knobs.autotuning.print)
    except Exception:  # pragma: no cover - a Triton without knobs
        return False
