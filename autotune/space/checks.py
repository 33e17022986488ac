"""Checking a search space against its kernel when decorating: fields, static options, emptiness."""

from __future__ import annotations

import numbers
import random
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ..errors import AutotuneError, OptionError, SpaceError, did_you_mean
from ..kernel.occupancy import FIELD as OCCUPANCY
from ..kernel.occupancy import LOWERED_KNOBS
from .expressions import WhereString
from .spaces import CartesianSpace, Config, SearchSpace, UnionSpace

__all__ = ["validate_space", "compile_option_problem", "CHECKED_OPTIONS"]


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)  # np.int32(4) too


# Triton's common compile options checked here: what a valid value is, and what to say of any other.
_OPTION_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "num_warps": (
        lambda v: _is_int(v) and v >= 1 and v & (v - 1) == 0,
        "num_warps must be a power of two (1, 2, 4, 8, 16 or 32), as Triton requires",
    ),
    "num_stages": (
        lambda v: _is_int(v) and v >= 0,
        "num_stages must be an int >= 0 (pipelining depth; 2 to 5 is usual)",
    ),
    "num_ctas": (
        lambda v: _is_int(v) and v >= 1,
        "num_ctas must be an int >= 1 (CTAs per cluster; 1 unless you use clusters on sm_90+)",
    ),
    "maxnreg": (
        lambda v: v is None or (_is_int(v) and v >= 1),
        "maxnreg must be None or an int >= 1 (registers per thread)",
    ),
    OCCUPANCY: (
        lambda v: v is None or (_is_int(v) and v >= 1),
        "occupancy must be None (no hint) or an int >= 1 (resident blocks per SM, per CU on AMD)",
    ),
}


CHECKED_OPTIONS = frozenset(_OPTION_RULES)  # the compile options whose values compile_option_problem checks


def compile_option_problem(name: str, value: Any) -> str | None:
    """What is wrong with a value of one of Triton's common compile options (None: nothing, or an option not
    checked here). The interpreter ignores these options, so without this check a space developed on a CPU
    fails config by config on the GPU."""
    rule = _OPTION_RULES.get(name)
    return None if rule is None or rule[0](value) else rule[1]


def _option_values(space: SearchSpace, configs: list) -> list[tuple[str, Any]]:
    """The (option, value) pairs to check: every listed config's, a lazy Cartesian space's axis values that its
    filters do not rule out alone, each part of a lazy union so, else the sample; only the options
    compile_option_problem checks, each pair once (by repr: 1 and True are two)."""
    pairs = [(name, value) for name, value in _option_pairs(space, configs) if name in _OPTION_RULES]
    return list({(name, repr(value)): (name, value) for name, value in pairs}.values())


def _option_pairs(space: SearchSpace, configs: list) -> list[tuple[str, Any]]:
    pairs: list[tuple[str, Any]] = []
    for part, listed, outer in _parts_to_check(space, configs):
        if part.lazy and isinstance(part, CartesianSpace):
            pairs += [(name, value) for name, values in _possible_options(part, outer).items() for value in values]
        else:
            pairs += [(name, value) for config in listed for name, value in config.items()]
    return pairs


def _possible_options(space: CartesianSpace, outer: tuple) -> dict[str, tuple[Any, ...]]:
    """Each checked option axis's values that some config may take, without listing the space: a value that a `$X`
    clause reading that axis alone refuses (`.where("$num_warps & ($num_warps - 1) == 0")`) is dropped, as listing
    the space would drop it; a filter that reads more axes is left to the compiles."""
    clauses = [c for f in (*space.filters, *outer) if isinstance(f, WhereString) for c in f.clauses()]
    out: dict[str, tuple[Any, ...]] = {}
    for name, values in space.axes.items():
        if name in _OPTION_RULES:
            alone = [c for c in clauses if c.fields_read == {name}]
            out[name] = tuple(v for v in values if all(_keeps(c, name, v) for c in alone))
    return out


def _keeps(clause: WhereString, name: str, value: Any) -> bool:
    """Whether a one-field clause keeps the value; one that raises on it keeps it (the value is then checked)."""
    try:
        return clause(Config({name: value}))
    except Exception:
        return True


def _parts_to_check(space: SearchSpace, configs: list, outer: tuple = ()) -> list[tuple[SearchSpace, list, tuple]]:
    """(space, its configs to check, the filters of the lazy unions around it): a lazy union's parts, each listed
    one with all its configs (a lazy one with none: its axes are checked), else the space itself with `configs`
    (all, or a lazy space's sample)."""
    if space.lazy and isinstance(space, UnionSpace):
        around = outer + space.filters
        return [
            leaf for part in space.parts for leaf in _parts_to_check(part, [] if part.lazy else part.configs(), around)
        ]
    return [(space, configs, outer)]


def _check_option_values(space: SearchSpace, configs: list, static_options: Mapping[str, Any], kernel: str) -> None:
    for name, value in sorted(static_options.items()):
        problem = compile_option_problem(name, value)
        if problem:
            raise OptionError(f"static option {name}={value!r} of {kernel}: {problem}")
    for name, value in _option_values(space, configs):
        problem = compile_option_problem(name, value)
        if problem:
            raise SpaceError(
                f"the search space of {kernel} has {name}={value!r}: {problem}; fix or remove that "
                "value (the interpreter ignores it, a GPU compile refuses it)"
            )


def _sets(values: Collection[Any], name: str) -> bool:
    """Whether one of these values of `name` sets it (occupancy=None is no hint, waves_per_eu=0 Triton's unset)."""
    return any(v is not None and not (name == "waves_per_eu" and v == 0) for v in values)


def _check_occupancy_knobs(space: SearchSpace, configs: list, static_options: Mapping[str, Any], kernel: str) -> None:
    """Refuse a config that sets occupancy and a knob occupancy lowers to: one would override the other."""
    static = {name: (value,) for name, value in static_options.items()}
    candidates = [(c, {**static, **values}) for c, values in _knob_candidates(space, configs)]
    for config, values in candidates:
        knob = next((k for k in LOWERED_KNOBS if _sets(values.get(k, ()), k)), None)
        if knob is None or not _sets(values.get(OCCUPANCY, ()), OCCUPANCY):
            continue
        which = f"the config {dict(config)}" if config is not None else "the search space"
        raise SpaceError(
            f"{which} of {kernel} sets both occupancy and {knob}: occupancy is lowered to {knob} when "
            f"compiled, so one would override the other; keep occupancy or {knob}, not both"
        )


def _knob_candidates(space: SearchSpace, configs: list) -> list[tuple[Config | None, dict[str, Collection[Any]]]]:
    """(config or None, the values each field may take together): a listed config's own; a lazy Cartesian space's
    axes (every pair of values is a config) unless a filter on it, or on a union around it, may keep them apart (a
    callable, or a `$X` string reading occupancy or a knob: then left to its configs' compiles); each part of a lazy
    union so."""
    candidates: list[tuple[Config | None, dict[str, Collection[Any]]]] = []
    for part, listed, outer in _parts_to_check(space, configs):
        if part.lazy and isinstance(part, CartesianSpace):
            candidates += [] if _may_part_knobs((*part.filters, *outer)) else [(None, dict(part.axes))]
        else:
            candidates += [(c, {name: (value,) for name, value in c.items()}) for c in listed]
    return candidates


def _may_part_knobs(filters: tuple) -> bool:
    """Whether one of these filters may remove the configs that set both occupancy and a knob it is lowered to: a
    callable (what it reads is not known), or a `$X` string that reads one of them (`$BLOCK >= 16` cannot)."""
    watched = {OCCUPANCY, *LOWERED_KNOBS}
    return any(not isinstance(f, WhereString) or f.fields_read & watched for f in filters)


def validate_space(
    space: SearchSpace,
    *,
    kernel_name: str,
    constexpr_names: Collection[str],
    compile_options: Collection[str],
    static_options: Mapping[str, Any],
    derived_names: Collection[str] = (),
) -> None:
    """Check a space against its kernel when decorating; raise SpaceError/OptionError naming problem and fix."""
    configs = _configs_to_check(space, kernel_name)
    fields = space.fields()
    options = frozenset(compile_options)
    _check_static_options(static_options, fields, options, kernel_name)
    _check_option_values(space, configs, static_options, kernel_name)
    _check_occupancy_knobs(space, configs, static_options, kernel_name)
    constexprs = frozenset(constexpr_names)
    if OCCUPANCY in constexprs and (OCCUPANCY in fields or OCCUPANCY in static_options):
        raise SpaceError(
            f"{kernel_name} has a tl.constexpr parameter named occupancy, and autotune's occupancy (blocks per SM, "
            "lowered to a compile option) takes that name in a config: rename the kernel's parameter"
        )
    _check_field_names(fields, constexprs, options, frozenset(derived_names), kernel_name)


def _configs_to_check(space: SearchSpace, kernel_name: str) -> list[Config]:
    # A lazy space is not listed: one sampled config shows it is not empty (sampling raises when it cannot tell).
    try:
        _check_union_parts(space, f"the search space of {kernel_name}")
        configs = [space.sample(random.Random(0))] if space.lazy else space.configs()
    except AutotuneError:
        raise
    except Exception as exc:  # a callable filter that raised: its own error, said to be the filter's
        if not _has_filters(space):
            raise
        field = _missing_name(exc)
        hint = did_you_mean(field, space.fields()) if field is not None and field not in space.fields() else ""
        raise SpaceError(
            f"a where() filter of the search space of {kernel_name} raised {type(exc).__name__} "
            f"({exc}) while checking the space at decoration: a filter must answer True or False for "
            f"every config of the product (the traceback above shows where it failed).{hint}"
        ) from exc
    if not configs:
        if space.is_filtered and space.unfiltered_len() > 0:
            raise SpaceError(
                f"the search space of {kernel_name} is empty: its where() filters removed all "
                f"{space.unfiltered_len()} configs of {space.outline()}; loosen the predicates"
            )
        raise SpaceError(f"the search space of {kernel_name} is empty; give it at least one config")
    return configs


def _union_parts(space: SearchSpace) -> list[SearchSpace]:
    """A union's parts in order, an unfiltered union part opened (a + b + c: three parts); none for another space."""
    if not isinstance(space, UnionSpace):
        return []
    opened = [_union_parts(p) if isinstance(p, UnionSpace) and not p.is_filtered else [p] for p in space.parts]
    return [part for parts in opened for part in parts]


def _check_union_parts(space: SearchSpace, where: str) -> None:
    """Refuse a union part that has no config (`_a_config`), naming it by its position: sampling the union would
    otherwise fail when it first drew that part, mid-tuning."""
    parts = _union_parts(space)
    for i, part in enumerate(parts, 1):
        label = f"part {i} of {len(parts)} of the union that is {where}"
        _check_union_parts(part, label)  # a filtered union part: its own parts first
        try:
            found = _a_config(part)
        except SpaceError as exc:
            raise SpaceError(f"{label}: {exc}; or remove the part") from exc
        if found is None:
            why = (
                f"its where() filters keep none of its {part.unfiltered_len():,} configs; remove the part or "
                "loosen the filters"
                if part.is_filtered
                else "it has no config; remove the part"
            )
            raise SpaceError(f"{label} ({part.outline()}): {why}")


def _a_config(part: SearchSpace) -> Config | None:
    """One config of a union part, or None for none: sampled (a lazy part; a Cartesian one, whose sampler the union's
    draws reuse, and which lists a part only when its draws all fail), else its first."""
    if part.lazy:
        return part.sample(random.Random(0))  # raises when it finds none
    if isinstance(part, CartesianSpace):
        try:
            return part.sample(random.Random(0))
        except SpaceError:  # a listed space with no config (now listed and kept: the line below reads that)
            pass
    return next(iter(part), None)


def _check_static_options(
    static_options: Mapping[str, Any], fields: Collection[str], options: frozenset[str], kernel_name: str
) -> None:
    for name in sorted(static_options):
        if name in fields:
            raise OptionError(
                f"{name!r} is both a static option and a space field of {kernel_name}; pick one: "
                f"drop {name}= from @autotune(...) or remove the {name!r} field from the space"
            )
    for name in sorted(static_options):
        if name not in options:
            hint = did_you_mean(name, options)
            raise OptionError(
                f"static option {name}= of {kernel_name} is not a Triton compile option (such as "
                f"num_warps, num_stages, num_ctas, maxnreg).{hint}"
            )


def _check_field_names(
    fields: Collection[str],
    constexprs: frozenset[str],
    options: frozenset[str],
    derived: frozenset[str],
    kernel_name: str,
) -> None:
    for name in sorted(fields):
        if name in derived:
            raise SpaceError(
                f"{name!r} is both a space field and a derive= name of {kernel_name}; remove it from one of them"
            )
        if name not in constexprs and name not in options:
            hint = did_you_mean(name, constexprs | options)
            listed = ", ".join(sorted(constexprs)) if constexprs else "(none)"
            raise SpaceError(
                f"space field {name!r} is neither a tl.constexpr parameter of {kernel_name} nor a "
                f"compile option.{hint} The kernel's constexpr parameters: {listed}; compile options "
                "are e.g. num_warps, num_stages. Rename the field or add it to the kernel as "
                f"`{name}: tl.constexpr`"
            )


def _missing_name(exc: Exception) -> str | None:
    """The field a filter's KeyError or AttributeError names (c["BLOK"], c.BLOK), else None."""
    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str):
        return exc.args[0]
    if isinstance(exc, AttributeError):
        if isinstance(getattr(exc, "name", None), str):
            return exc.name
        quoted = re.search(r"no field '([A-Za-z_][A-Za-z0-9_]*)'", str(exc))  # Config's own message
        return quoted.group(1) if quoted else None
    return None


def _has_filters(space: SearchSpace) -> bool:
    """Whether a where() filter applies anywhere in the space (itself, or a part of a union)."""
    return space.is_filtered or (isinstance(space, UnionSpace) and any(_has_filters(p) for p in space.parts))


def check_required_fields(space: SearchSpace, *, kernel_name: str, required: Collection[str]) -> None:
    """Refuse a space where some configs set a kernel parameter that has no default and others do not: the
    call cannot pass a tuned field, so the configs without it could never launch."""
    missing = sorted((space.fields() - space.common_fields()) & frozenset(required))
    if not missing:
        return
    name = missing[0]
    example = "" if space.lazy else next((f" (e.g. {dict(c)})" for c in space if name not in c), "")
    raise SpaceError(
        f"some configs of the search space of {kernel_name} set {name!r} and others do not{example}; "
        f"{name} has no default in {kernel_name} and a call cannot pass a field the space tunes, so those "
        f"configs could never launch: give every config a {name} value, or give the parameter a default "
        f"(`{name}: tl.constexpr = ...`)"
    )
