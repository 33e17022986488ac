"""`prune=`: which configs of a space are worth measuring for a call, decided before any is compiled.

Both the native `prune=` and compat's `prune_configs_by` go through here: an `early_config_prune` filter, then
a `perf_model` estimate of which `top_k` configs to keep (triton.autotune's semantics).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import AutotuneError, OptionError, UserCodeError
from ..space.spaces import Config, configs_checksum
from .option_checks import unfit_signature

__all__ = [
    "PruneSpec",
    "RerunCall",
    "TopKError",
    "as_pruner",
    "check_top_k",
    "fastest_by_model",
    "top_k_count",
    "kept_configs",
    "untuned_config",
]

# `prune=`: a callable `(configs, named_args) -> kept configs`, or a dict with triton.autotune's
# `prune_configs_by` keys: {"early_config_prune": callable, "perf_model": callable, "top_k": int | float}.
PruneSpec = Callable[[list[Config], dict], Sequence[Any]] | Mapping[str, Any] | None
_PRUNE_KEYS = ("early_config_prune", "perf_model", "top_k")


class TopKError(OptionError, TypeError):
    """A `top_k` of the wrong type: an OptionError, and a TypeError as triton.autotune raises for it."""


MAX_RERUNS = 8  # runs of one call whose configs keep changing under it (a prune that never settles): then raise


class RerunCall(AutotuneError):
    """Raised by a prune= callable to have its caller run the call again from the start, on an engine rebuilt over
    configs that changed (autotune.compat, when an early_config_prune changed one in place). A request, not a prune
    error: under distributed tuning it is raised at once on its rank, which runs its call again and then joins the
    agreement, instead of being raised inside the agreement as a prune error is."""


def check_top_k(top_k: Any, where: str = "top_k", *, perf_model: Any) -> None:
    """Validate a perf-model `top_k` as triton.autotune reads it: an int >= 1, or a float <= 1.0 (a fraction). As
    Triton reads `top_k` only with a perf model, it is checked only then (`"top_k": None` is common without)."""
    if perf_model is None:
        return
    if isinstance(top_k, bool) or not isinstance(top_k, (int, float)) or (isinstance(top_k, float) and top_k > 1.0):
        raise TopKError(
            f"{where}={top_k!r}: top_k must be either 1) a float <= 1.0 (the fraction of configs to "
            "keep) or 2) an int (how many to keep)"
        )
    if isinstance(top_k, int) and top_k < 1:
        raise OptionError(f"{where}={top_k!r}: an int top_k must be >= 1; pruning must keep at least one config")


def top_k_count(n: int, top_k: int | float) -> int:
    """How many of `n` configs a perf model keeps: an int as is, a float as that fraction of `n`; never 0."""
    if isinstance(top_k, float):
        return max(1, int(n * top_k))
    return max(1, int(top_k))


def fastest_by_model(configs: list[Any], top_k: int | float, estimate: Callable[[Any], Any]) -> list[Any]:
    """The `top_k` (`top_k_count`) of `configs` a perf model rates fastest, fastest first (ties in list order); all of
    them, in their order, when they are no more than that. Triton's rule, for the native `prune=` dict and the
    drop-in alike."""
    k = top_k_count(len(configs), top_k)
    if len(configs) <= k:
        return configs
    estimates = [estimate(config) for config in configs]
    return [configs[i] for i in sorted(range(len(configs)), key=estimates.__getitem__)[:k]]


def as_pruner(
    prune: PruneSpec, kernel_name: str = "kernel", static_options: Mapping[str, Any] | None = None
) -> Callable[[list[Config], dict], Sequence[Any]] | None:
    """Normalise `prune=` to one callable `(configs, named_args) -> kept configs`.

    The dict form is triton.autotune's `prune_configs_by` for the native decorator: `early_config_prune(configs,
    named_args)` filters first; then, if `perf_model` is given, each config is estimated as Triton does, with
    `perf_model(**named_args, **options)`, the options being the config's over the decorator's static options over
    what a `triton.Config` holds unset (num_warps 4, num_stages 3, num_ctas 1); the `top_k` lowest estimates are
    kept (`top_k` an int, or a float <= 1.0 meaning that fraction of the configs; at least one is always kept;
    default 1.0, i.e. all).
    """
    if prune is None:
        return None
    if callable(prune):
        _check_prune_signature(prune, "prune=", kernel_name)
        return prune
    if not isinstance(prune, Mapping):
        raise OptionError(
            f"prune= on {kernel_name} takes a callable (configs, named_args) -> configs or a dict with "
            f"keys {list(_PRUNE_KEYS)}; got {type(prune).__name__}"
        )
    unknown = sorted(set(prune) - set(_PRUNE_KEYS))
    if unknown:
        raise OptionError(f"prune= on {kernel_name}: unknown keys {unknown}; the keys are {list(_PRUNE_KEYS)}")
    early = prune.get("early_config_prune")
    perf_model = prune.get("perf_model")
    top_k = prune.get("top_k", 1.0)
    for name, fn in (("early_config_prune", early), ("perf_model", perf_model)):
        if fn is not None and not callable(fn):
            raise OptionError(f"prune={{'{name}': ...}} on {kernel_name} must be callable; got {fn!r}")
    check_top_k(top_k, "prune['top_k']", perf_model=perf_model)
    if early is not None:
        _check_prune_signature(early, "prune={'early_config_prune': ...}", kernel_name)

    unset = {**_TRITON_CONFIG_DEFAULTS, **(static_options or {})}

    def pruner(configs: list[Config], named: dict) -> list[Any]:
        kept = list(early(configs, named)) if early is not None else list(configs)
        if perf_model is None or not kept:
            return kept
        _check_perf_model_takes(perf_model, {**named, **unset, **Config(kept[0])}, kernel_name)
        return fastest_by_model(kept, top_k, lambda c: perf_model(**{**named, **unset, **Config(c)}))

    return pruner


_TRITON_CONFIG_DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1}  # a triton.Config's, in all_kwargs()


def _check_perf_model_takes(perf_model: Callable[..., Any], values: Mapping[str, Any], kernel_name: str) -> None:
    """A perf model that cannot take a config's values would raise a bare TypeError at the call, naming no prune=."""
    try:
        signature = inspect.signature(perf_model)
    except (TypeError, ValueError):  # a builtin: not checked
        return
    try:
        signature.bind(**values)
    except TypeError as exc:
        raise OptionError(
            f"prune={{'perf_model': ...}} on {kernel_name} is called as perf_model(**named_args, **config options) "
            f"with {sorted(values)}; its signature {signature} cannot take that ({exc}): give it **kwargs for "
            "the names it does not use"
        ) from None


def _check_prune_signature(fn: Callable[..., Any], what: str, kernel_name: str) -> None:
    """A prune function is called as fn(configs, named_args): one that cannot take that would fail at every call,
    raising a bare TypeError that never names prune=."""
    signature = unfit_signature(fn, [], {})
    if signature is not None:
        raise OptionError(
            f"{what} on {kernel_name} is called as fn(configs, named_args) and returns the configs to "
            f"keep; its signature {signature} cannot take that: e.g. "
            "lambda configs, named_args: configs[:4]"
        )


_RUNNING = threading.local()  # `depth`: (prune, kernel name) -> how deep this thread is inside that prune=
_MAX_DEPTH = 32  # prune= launching its own kernel nested this deep: stopped before Python's recursion limit


@contextmanager
def _pruning(prune: Callable[..., Any], kernel_name: str) -> Iterator[None]:
    """Count `prune` running for `kernel_name` in this thread. A prune= may launch its own kernel (at a key whose
    prune= launches nothing, or that is tuned); one that does so at every new key never ends, and is refused with
    the fix before Python's recursion limit."""
    depth: dict[tuple[int, str], int] = _RUNNING.__dict__.setdefault("depth", {})
    mark = (id(prune), kernel_name)
    if depth.get(mark, 0) >= _MAX_DEPTH:
        raise AutotuneError(
            f"{kernel_name}'s prune= launched {kernel_name} nested {_MAX_DEPTH} deep in this thread (each launch at a "
            "key whose prune= launches it again); autotune stops there, before Python's recursion limit: launch the "
            "plain @triton.jit kernel there (kernel.fn), or decide from the arguments without launching"
        )
    depth[mark] = depth.get(mark, 0) + 1
    try:
        yield
    finally:
        depth[mark] -= 1
        if not depth[mark]:
            del depth[mark]


def _called(
    prune: Callable[..., Any], configs: Sequence[Config], named_args: Mapping[str, Any], kernel_name: str
) -> Any:
    """`prune`'s answer. Its own error (a bug in it: it runs at each new key, before any config) is a
    UserCodeError naming it, which autotune.compat raises as the original, as triton.autotune does; an error of
    autotune's own, memory running out and interrupts pass as they are."""
    try:
        return prune(list(configs), dict(named_args))
    except (AutotuneError, MemoryError):  # RerunCall is an AutotuneError: a request, passed on
        raise
    except Exception as exc:
        raise UserCodeError(
            f"prune= ({getattr(prune, '__name__', type(prune).__name__)}) on {kernel_name} raised "
            f"{type(exc).__name__}: {exc}; it runs at each new key before any config: fix prune=",
            exc,
        ) from exc


def kept_configs(
    prune: Callable[[list[Config], dict], Sequence[Any]],
    configs: Sequence[Config],
    named_args: Mapping[str, Any],
    kernel_name: str,
) -> tuple[list[Config], str]:
    """(the configs `prune` keeps for this call, in its order, without repeats; the checksum of the kept ones, in
    the space's order). What it returns is checked: not None, not empty, only configs of the space."""
    with _pruning(prune, kernel_name):
        returned = _called(prune, configs, named_args, kernel_name)
    if returned is None:
        raise OptionError(
            f"prune= on {kernel_name} returned None; return the configs to keep (a list, a subset of those it receives)"
        )
    if isinstance(returned, (Mapping, str)) or not hasattr(returned, "__iter__"):
        raise OptionError(
            f"prune= on {kernel_name} returned {type(returned).__name__} {returned!r}, not a list of "
            "configs: return the configs to keep as a list (`[config]` for one)"
        )
    kept = [Config(c) for c in returned]
    if not kept:
        raise OptionError(
            f"prune= on {kernel_name} removed every config for this call; it must keep at least one "
            "(return the best guess when none fits)"
        )
    in_space = set(configs)
    unknown = [c for c in kept if c not in in_space]
    if unknown:
        raise OptionError(
            f"prune= on {kernel_name} returned configs that are not in the space: {unknown}; return a "
            "subset of the configs it receives (add new configs to the space instead)"
        )
    kept = list(dict.fromkeys(kept))
    kept_set = set(kept)
    return kept, configs_checksum(c for c in configs if c in kept_set)


def untuned_config(
    fallback: Config | None, kept: Sequence[Config], checksum: str | None, in_space: Callable[[Config], bool]
) -> Config | None:
    """The config a call launches untuned (AUTOTUNE_OFFLINE/DISABLE, a capture, an online key before any
    measurement): `fallback=`, unless prune= (`checksum` set) left it out for this call (a config wrong for these
    arguments; a `fallback=` outside the space, `in_space` false, prune= never saw), else the first config kept;
    None for a lazy space without `fallback=` (no configs listed)."""
    if fallback is not None and (checksum is None or fallback in kept or not in_space(fallback)):
        return fallback
    return kept[0] if kept else None
