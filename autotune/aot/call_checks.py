"""precompile()'s arguments checked against the kernel once, before any compile.

Why: a mistake that no config can fix (a misspelt `space=` field, a constexpr missing from `signature=`, a
tuned field given there) would otherwise fail every (config, target) job with the same error, or end in a
`TypeError` / `OptionError` traceback worded for a launch, not for `precompile` or `autotune precompile`.
Each check raises the error the decorator would (`SpaceError`, through `space_checks.validate_space`) or a
`PrecompileError` naming the argument and the fix.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import PrecompileError
from ..kernel.compile_options import compile_option_names
from ..kernel.identity import heuristics_layers, python_function
from ..space.checks import validate_space
from ..space.spaces import as_space
from .specialize import launch_values

__all__ = ["check_space", "check_arguments", "check_timeout", "derived_names", "standin_notes"]


def derived_names(tuned: Any) -> frozenset[str]:
    """The constexprs the kernel's `derive=` computes per config."""
    return frozenset(tuned.recipe.get("derive") or ())


def check_space(tuned: Any, space: Any) -> None:
    """Validate `precompile(space=...)` against the kernel as `@autotune(space=...)` would: every field a
    constexpr of the kernel or a compile option, no field that is also a static option or derived, not empty.
    Raises SpaceError / OptionError (the decorator's own errors)."""
    if space is None:
        return
    validate_space(
        as_space(space),
        kernel_name=tuned.name,
        constexpr_names=tuned.constexpr_names,
        compile_options=compile_option_names(),
        static_options=tuned.static_options,
        derived_names=derived_names(tuned),
    )


def check_timeout(timeout_s: float | None, workers: int) -> None:
    """A per-compile timeout must be a positive number of seconds (None: no limit), and needs a pool: a compile on
    the calling thread (`workers=0`) cannot be given up on."""
    if timeout_s is not None and not timeout_s > 0:
        raise PrecompileError(
            f"timeout_s={timeout_s!r} (--timeout): give a positive number of seconds per compile, "
            "or leave it unset for no limit"
        )
    if timeout_s is not None and workers == 0:
        raise PrecompileError(
            f"timeout_s={timeout_s:g} (--timeout) with workers=0 (--workers 0): a compile on the calling thread "
            "cannot be given up on; give workers=1 or more, or drop the timeout"
        )


def check_arguments(tuned: Any, args: tuple, kwargs: dict, space: Any) -> None:
    """Fail fast, once, on arguments that cannot bind whatever the config: unknown names, a field the search
    space sets, a missing argument (a constexpr that neither the space, derive= nor triton.heuristics sets
    included)."""
    unknown = sorted(set(kwargs) - set(tuned.arg_names))
    if unknown:
        raise PrecompileError(
            f"signature names {unknown}, which are not arguments of {tuned.name}; arguments: {tuned.arg_names}"
        )
    tuned_fields = (tuned.space.fields() | derived_names(tuned)) & set(tuned.arg_names)
    if len(args) > len(tuned.arg_names):
        raise PrecompileError(
            f"{tuned.name} takes {len(tuned.arg_names)} arguments ({tuned.arg_names}); the example "
            f"arguments are {len(args)}"
        )
    by_position = [name for name in tuned.arg_names[: len(args)] if name in tuned_fields]
    if by_position:
        raise PrecompileError(
            f"{tuned.name}: the example arguments give {', '.join(by_position)} by position, which "
            "the search space sets for each config: pass only the arguments before it, or give the whole call "
            f"as signature= with {by_position[0]} left out (to compile one value of {by_position[0]}, precompile "
            "a narrower space, space=)"
        )
    given_tuned = [name for name in kwargs if name in tuned_fields]
    if given_tuned:
        name = given_tuned[0]
        raise PrecompileError(
            f"{tuned.name}: the signature gives {', '.join(given_tuned)}, which the search space "
            f"sets for each config: drop {name}={kwargs[name]!r} from the signature (--signature, "
            f"signature=); to compile only {name}={kwargs[name]!r}, precompile a narrower space "
            f"(space=)"
        )
    fields = as_space(space).fields() if space is not None else tuned.space.fields()
    provided = (
        set(fields)
        | derived_names(tuned)
        | {name for layer in heuristics_layers(tuned.fn, tuned.base_fn) for name in layer.values}
    )
    params = inspect.signature(python_function(tuned.base_fn)).parameters
    given = set(tuned.arg_names[: len(args)]) | set(kwargs)
    missing = [
        name
        for name, p in params.items()
        if name not in given and name not in provided and p.default is inspect.Parameter.empty
    ]
    constexprs = set(tuned.constexpr_names)
    plain = [name for name in missing if name not in constexprs]
    if plain:
        raise PrecompileError(
            f"{tuned.name}: no value for {plain}; give every non-constexpr argument (arguments: {tuned.arg_names})"
        )
    if missing:
        name = missing[0]
        how = (
            "give the whole call as signature= instead (a constexpr after a tuned field cannot be an example "
            f"argument): signature={{..., '{name}': <value>}}"
            if args
            else f"add {name}=<value> to --signature (signature={{'{name}': <value>}})"
        )
        raise PrecompileError(
            f"{tuned.name}: no value for the constexpr {', '.join(missing)}, which neither the "
            f"search space, derive= nor triton.heuristics sets: {how}, or set it in the space"
        )


def standin_notes(
    tuned: Any, kwargs: dict, scalars: Mapping[str, tuple[str, Any, tuple[Any, ...]]], configs: Sequence[Any]
) -> list[str]:
    """A note for each argument that `signature=` gives only by type (`scalars`, from
    `standins.scalar_standins`) and from which a `triton.heuristics` or `derive=` value is computed: that
    value, so the variant compiled, comes from the stand-in, and a launch with another value of the argument
    compiles another variant. Found by recomputing those values, config by config, with other values the JIT
    specializes exactly like the stand-in; nothing is compiled."""
    layers = heuristics_layers(tuned.fn, tuned.base_fn)
    computed = derived_names(tuned) | {name for layer in layers for name in layer.values}
    if not scalars or not computed:
        return []
    notes = []
    for name, (type_name, standin, alternatives) in scalars.items():
        change = _first_change(tuned, layers, kwargs, computed, name, alternatives, configs)
        if change is None:
            continue
        field, value, alternative, other = change
        source = "derive=" if field in derived_names(tuned) else "triton.heuristics"
        example = f"{name}=1024" if type_name[0] in "iu" and type_name not in ("i1", "u1") else f"{name}=<value>"
        notes.append(
            f"note: signature= gives {name} only as a type ('{type_name}'), and {field} ({source}) is "
            f"computed from its value: compiled with the stand-in {name}={standin!r} ({field}={value!r}); a "
            f"launch with {name}={alternative!r} needs {field}={other!r}, another variant, not precompiled. "
            f"Give {name} the value production launches with ({example} in signature= / --signature), or "
            "precompile from example arguments"
        )
    return notes


def _first_change(
    tuned: Any,
    layers: list[Any],
    kwargs: dict,
    computed: frozenset[str] | set[str],
    name: str,
    alternatives: tuple[Any, ...],
    configs: Sequence[Any],
) -> tuple[str, Any, Any, Any] | None:
    """(field, its value from the stand-in, the other argument value, the field's value from it) for the first
    config where changing argument `name` changes a computed field; None when none does."""

    def values(call_kwargs: dict, config: Any) -> dict | None:
        try:
            _, launch = launch_values(tuned, layers, tuned.bind((), call_kwargs), config)
        except Exception:  # noqa: BLE001 - a heuristic that cannot run on stand-ins fails in the compile itself
            return None
        return {field: launch.get(field) for field in computed}

    for config in configs:
        base = values(kwargs, config)
        if base is None:
            continue
        for alternative in alternatives:
            other = values({**kwargs, name: alternative}, config)
            for field in sorted(computed):
                if other is not None and _differs(base[field], other[field]):
                    return field, base[field], alternative, other[field]
    return None


def _differs(a: Any, b: Any) -> bool:
    try:
        return bool(a != b)
    except Exception:  # noqa: BLE001 - values without a plain comparison (arrays): not told apart
        return False
