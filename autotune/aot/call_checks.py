"""precompile()'s arguments checked against the kernel once, before any compile.

Why: a mistake that no config can fix (a misspelt `space=` field, a constexpr missing from `signature=`, a
tuned field given there) would otherwise fail every (config, target) job with the same error, or end in a
`TypeError` / `OptionError` traceback worded for a launch, not for `precompile` or `autotune precompile`.
Each check raises the error the decorator would (`SpaceError`, through `space_checks.validate_space`) or a
`PrecompileError` naming the argument and the fix.
"""
from __future__ import annotations

import inspect
from typing import Any, Optional

from ..compilers import compile_option_names
from ..errors import PrecompileError
from ..kernel_ref import heuristics_layers, python_function
from ..space_checks import validate_space
from ..space_input import as_space

__all__ = ["check_space", "check_arguments", "check_timeout", "derived_names"]


def derived_names(tuned: Any) -> frozenset[str]:
    """The constexprs the kernel's `derive=` computes per config."""
    return frozenset(tuned.recipe.get("derive") or ())


def check_space(tuned: Any, space: Any) -> None:
    """Validate `precompile(space=...)` against the kernel as `@autotune(space=...)` would: every field a
    constexpr of the kernel or a compile option, no field that is also a static option or derived, not empty.
    Raises SpaceError / OptionError (the decorator's own errors)."""
    if space is None:
        return
    validate_space(as_space(space), kernel_name=tuned.name, constexpr_names=tuned.constexpr_names,
                   compile_options=compile_option_names(), static_options=tuned.static_options,
                   derived_names=derived_names(tuned))


def check_timeout(timeout_s: Optional[float]) -> None:
    """A per-compile timeout must be a positive number of seconds (None: no limit)."""
    if timeout_s is not None and not timeout_s > 0:
        raise PrecompileError(f"timeout_s={timeout_s!r} (--timeout): give a positive number of seconds per compile, "
                              "or leave it unset for no limit")


def check_arguments(tuned: Any, args: tuple, kwargs: dict, space: Any) -> None:
    """Fail fast, once, on arguments that cannot bind whatever the config: unknown names, a field the search
    space sets, a missing argument (a constexpr that neither the space, derive= nor triton.heuristics sets
    included)."""
    unknown = sorted(set(kwargs) - set(tuned.arg_names))
    if unknown:
        raise PrecompileError(f"signature names {unknown}, which are not arguments of {tuned.name}; "
                              f"arguments: {tuned.arg_names}")
    tuned_fields = (tuned.space.fields() | derived_names(tuned)) & set(tuned.arg_names)
    given_tuned = [name for name in kwargs if name in tuned_fields]
    if given_tuned:
        name = given_tuned[0]
        raise PrecompileError(f"{tuned.name}: the signature gives {', '.join(given_tuned)}, which the search space "
                              f"sets for each config: drop {name}={kwargs[name]!r} from the signature (--signature, "
                              f"signature=); to compile only {name}={kwargs[name]!r}, precompile a narrower space "
                              f"(space=)")
    fields = as_space(space).fields() if space is not None else tuned.space.fields()
    provided = set(fields) | derived_names(tuned) | {name for layer in heuristics_layers(tuned.fn, tuned.base_fn)
                                                     for name in layer.values}
    params = inspect.signature(python_function(tuned.base_fn)).parameters
    given = set(tuned.arg_names[:len(args)]) | set(kwargs)
    missing = [name for name, p in params.items() if name not in given and name not in provided
               and p.default is inspect.Parameter.empty]
    constexprs = set(tuned.constexpr_names)
    plain = [name for name in missing if name not in constexprs]
    if plain:
        raise PrecompileError(f"{tuned.name}: no value for {plain}; give every non-constexpr argument "
                              f"(arguments: {tuned.arg_names})")
    if missing:
        name = missing[0]
        raise PrecompileError(f"{tuned.name}: no value for the constexpr {', '.join(missing)}, which neither the "
                              f"search space, derive= nor triton.heuristics sets: add {name}=<value> to --signature "
                              f"(signature={{'{name}': <value>}}) or to the space, or give it with the example "
                              "arguments")
