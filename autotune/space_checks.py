"""Checking a search space against its kernel when decorating: fields, static options, emptiness."""
from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from typing import Any

from .errors import OptionError, SpaceError, did_you_mean
from .space import SearchSpace

__all__ = ["validate_space"]


def validate_space(space: SearchSpace, *, kernel_name: str, constexpr_names: Collection[str],
                   compile_options: Collection[str], static_options: Mapping[str, Any],
                   derived_names: Collection[str] = ()) -> None:
    """Check a space against its kernel when decorating; raise SpaceError/OptionError naming problem and fix."""
    # A lazy space is not listed: one sampled config shows it is not empty (sampling raises when it cannot tell).
    configs = [space.sample(random.Random(0))] if space.lazy else space.configs()
    if not configs:
        if space.is_filtered and space.unfiltered_len() > 0:
            raise SpaceError(f"the search space of {kernel_name} is empty: its where() filters removed all "
                             f"{space.unfiltered_len()} configs of {space!r}; loosen the predicates")
        raise SpaceError(f"the search space of {kernel_name} is empty; give it at least one config")
    fields = space.fields()
    for name in sorted(static_options):
        if name in fields:
            raise OptionError(f"{name!r} is both a static option and a space field of {kernel_name}; pick one: "
                              f"drop {name}= from @autotune(...) or remove the {name!r} field from the space")
    options = frozenset(compile_options)
    for name in sorted(static_options):
        if name not in options:
            hint = did_you_mean(name, options)
            raise OptionError(f"static option {name}= of {kernel_name} is not a Triton compile option (such as "
                              f"num_warps, num_stages, num_ctas, maxnreg).{hint}")
    derived = frozenset(derived_names)
    constexprs = frozenset(constexpr_names)
    for name in sorted(fields):
        if name in derived:
            raise SpaceError(f"{name!r} is both a space field and a derive= name of {kernel_name}; remove it from "
                             "one of them")
        if name not in constexprs and name not in options:
            hint = did_you_mean(name, constexprs | options)
            listed = ", ".join(sorted(constexprs)) if constexprs else "(none)"
            raise SpaceError(f"space field {name!r} is neither a tl.constexpr parameter of {kernel_name} nor a "
                             f"compile option.{hint} The kernel's constexpr parameters: {listed}; compile options "
                             "are e.g. num_warps, num_stages. Rename the field or add it to the kernel as "
                             f"`{name}: tl.constexpr`")
