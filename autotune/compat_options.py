"""Checks and conversions `autotune.compat` applies when decorating, so that a mistake in Triton's decorator
arguments fails at the decorator line: triton.Configs as native configs, `prune_configs_by`'s keys, hooks that
must be callables; and what the drop-in says about Triton's knobs it does not follow."""
from __future__ import annotations

import threading
from typing import Any, Dict, Mapping, Optional, Sequence

import triton

from .errors import AutotuneError, OptionError, SpaceError, did_you_mean, warn_at_caller
from .space import Config as NativeConfig
from .space_input import config_from_triton

__all__ = ["ConfigChangedInPlace", "changed_in_place", "check_callables", "checked_prune_options", "listener_warned",
           "list_changed", "passed_key", "to_native", "triton_print_enabled", "warn_listener_once"]

_PRUNE_KEYS = ("early_config_prune", "perf_model", "top_k")   # what Triton reads from prune_configs_by


def to_native(config: Any, index: int) -> NativeConfig:
    """A `triton.Config` as a native Config: its kwargs plus its non-None compile options."""
    if not isinstance(config, triton.Config):
        raise TypeError(f"configs[{index}] is {type(config).__name__} {config!r}; autotune.compat.autotune takes a "
                        "list of triton.Config (for plain dicts use autotune.autotune(space=...))")
    if config.pre_hook is not None and not callable(config.pre_hook):
        raise SpaceError(f"configs[{index}] ({config}) has a pre_hook that is not callable: "
                         f"{type(config.pre_hook).__name__} {config.pre_hook!r}; pass a function of the arguments")
    for name, value in config.kwargs.items():
        if isinstance(value, triton.language.dtype):
            raise SpaceError(f"configs[{index}] sets {name}={value}, a Triton dtype: autotune caches winners as JSON, "
                             f"so a config value is a number, a string or a bool. Tune a flag instead (e.g. "
                             f"{name}_FP32: tl.constexpr = True/False) and pick the dtype from it in the kernel")
    return config_from_triton(config, f"configs[{index}]", pre_hook_ok=True)


class ConfigChangedInPlace(AutotuneError):
    """`early_config_prune` returned one of the decorator's own triton.Configs after changing it in place (Triton's
    matmul_perf_model sets `num_stages = 2` on pre-Ampere GPUs). triton.autotune launches it as changed; the drop-in
    indexes configs by value, so `Autotuner.run` re-indexes them and runs the call again. Raised to the caller only
    when the configs change again on that second run."""

    def __init__(self, kernel: str, index: int, config: Any) -> None:
        super().__init__(f"early_config_prune on {kernel} changed configs[{index}] in place (now {config}) on a call "
                         "that had already re-indexed the configs after such a change; return the configs unchanged, "
                         "or copies of them (copy.copy(config)) with the values you want")
        self.index = index


def changed_in_place(config: Any, configs: Any) -> Optional[int]:
    """The index in `configs` of the very object `config`, if it is one of them (identity, not equality)."""
    return next((i for i, c in enumerate(configs) if c is config), None)


def list_changed(configs: Sequence[Any], indexed: Sequence[Any]) -> bool:
    """Whether the `configs` list was changed in place (an item added, removed or replaced) since `indexed` was
    taken of it: Triton reads the list at each tuning, so the drop-in then indexes it again."""
    return len(configs) != len(indexed) or any(a is not b for a, b in zip(configs, indexed))


def passed_key(names: Sequence[str], values: tuple, dtypes: tuple, positions: Mapping[str, int], n_args: int,
               kwargs: Mapping[str, Any]) -> tuple:
    """`cache`'s key for a call, as Triton builds it: the values of the key names this call passes (by position or
    by keyword; one left to its default is not in it), then the tensor dtypes. `values` are the engine's, for
    `names`, defaults filled in."""
    return (*(v for name, v in zip(names, values) if positions[name] < n_args or name in kwargs), *dtypes)


def checked_prune_options(prune_configs_by: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """`prune_configs_by` as a dict; a key Triton would silently ignore (a misspelling) is refused."""
    options = dict(prune_configs_by or {})
    for name in options:
        if name not in _PRUNE_KEYS:
            raise OptionError(f"prune_configs_by has no option {name!r}; it takes {', '.join(_PRUNE_KEYS)}."
                              + did_you_mean(str(name), _PRUNE_KEYS))
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
        warn_at_caller("autotune.compat does not call triton.knobs.autotuning.listener; read the kernel's "
                       "best_config, configs_timings and bench_time (or autotune's record()) after a call instead")


def triton_print_enabled() -> bool:
    try:
        from triton import knobs

        return bool(knobs.autotuning.print)
    except Exception:  # pragma: no cover - a Triton without knobs
        return False
