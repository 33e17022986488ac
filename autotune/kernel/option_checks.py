"""Checks of `@autotune`'s arguments other than the space (the space's are in space/checks.py), run when the
kernel is decorated: each names the argument, what is wrong and the fix, so a mistake surfaces where the kernel
is declared instead of as every config failing at its first call."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..errors import ExpressionError, OptionError, SpaceError, closest_name, did_you_mean
from ..keys import KeyBuilder
from ..reference import Reference
from ..space.expressions import to_grid
from ..space.spaces import Config
from .identity import wrapper_layers

__all__ = [
    "as_names",
    "as_derive",
    "check_argument_lists",
    "check_guarded_values",
    "check_hooks",
    "check_launch_grid",
    "check_hook_signatures",
    "check_key",
    "check_fallback",
    "check_timeouts",
    "fallback_config",
    "check_heuristic_overlap",
    "check_not_autotuned",
    "inner_autotuner",
    "unfit_signature",
]


def check_argument_lists(
    kernel: str, arg_names: Sequence[str], lists: Mapping[str, Sequence[str]], tuned_names: Collection[str] = ()
) -> None:
    """Each list (`restore_value=`, `reset_to_zero=`, a Reference's `outputs`; by what the message calls it)
    names arguments of the kernel that the call passes (not `tuned_names`, set by the space or derive=)."""
    tuned_set = set(tuned_names)
    for what, names in lists.items():
        tuned = [n for n in names if n in tuned_set]
        if tuned:
            raise OptionError(
                f"{what}={list(names)} on {kernel}: {tuned[0]!r} is set for each config by the space "
                f"(or derive=), not a tensor the call passes; drop it from {what}="
            )
        missing = [n for n in names if n not in arg_names]
        if missing:
            raise OptionError(
                f"{what}={list(names)} on {kernel}: {missing} are not arguments of the kernel; "
                f"arguments: {list(arg_names)}.{did_you_mean(missing[0], arg_names)}"
            )


def as_names(kernel: str, what: str, value: Any) -> tuple[str, ...]:
    """`restore_value=` / `reset_to_zero=` as a tuple of names: a bare string is one name (as `key="M"`), not
    its letters; anything else that is not a list of strings is refused naming the argument."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        names = (value,)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise OptionError(
            f"{what}= on {kernel} takes a list of argument names, e.g. {what}=['out']; got "
            f"{value!r}, whose item {bad[0]!r} is {type(bad[0]).__name__}, not a name"
        )
    return names


def as_derive(kernel: str, derive: Any) -> dict[str, Any]:
    """`derive=` as a dict {name: $X expression or callable(meta)}; anything else is refused naming the form."""
    if derive is None:
        return {}
    if not isinstance(derive, Mapping):
        raise OptionError(
            f"derive= on {kernel} takes a dict {{name: '$X expression' or callable(meta)}}, e.g. "
            f"derive={{'BLOCK_K': '$BLOCK * 2'}}; got {type(derive).__name__}: {derive!r}"
        )
    return dict(derive)


_GUARD_ACTIONS = {  # what the tuner does with the arguments each list names (a Reference's outputs: compared)
    "restore_value": "snapshotted and restored around each trial",
    "reset_to_zero": "zeroed before each trial",
}


def check_guarded_values(kernel: str, named_args: Mapping[str, Any], lists: Mapping[str, Sequence[str]]) -> None:
    """At a call, before tuning: each argument that `restore_value=`, `reset_to_zero=` or a Reference's `outputs`
    names is a tensor (or None, skipped), else the tuner's snapshot would fail on it with an AttributeError."""
    for what, names in lists.items():
        for name in names:
            value = named_args.get(name)
            if value is not None and not (hasattr(value, "clone") and hasattr(value, "copy_")):
                raise OptionError(
                    f"{what}={list(names)} on {kernel}: the call passed {name} as "
                    f"{type(value).__name__} {value!r:.60}, not a tensor; these arguments are "
                    f"{_GUARD_ACTIONS.get(what, 'compared with the reference after each trial')}, so only "
                    f"tensors belong there: drop {name!r} from {what}="
                )


def check_launch_grid(kernel: str, grid: Any) -> None:
    """At a call that is about to tune: a `kernel[grid]` that is not a callable is a tuple of 1-3 ints, else every
    config would fail with the same launch error and the tuning would blame them all."""
    if grid is None:
        return
    if callable(grid):
        signature = unfit_signature(grid, {})
        if signature is not None:
            raise ExpressionError(
                f"{kernel}[grid]: a grid callable is called with one argument, META (the call's "
                f"arguments and the config's fields by name); its signature {signature} cannot "
                "take that: e.g. lambda META: (triton.cdiv(META['n'], META['BLOCK']),)"
            )
        return
    if isinstance(grid, str):
        raise ExpressionError(
            f"{kernel}[{grid!r}]: a $X grid string goes in @autotune(grid={grid!r}) (then call "
            f"{kernel}(...)); {kernel}[grid] takes a tuple of ints or a callable meta -> tuple"
        )
    if not isinstance(grid, (tuple, list)):
        raise ExpressionError(
            f"{kernel}[{grid!r}]: a grid is a tuple of 1 to 3 ints, e.g. {kernel}[({grid!r},)], "
            "or a callable meta -> tuple"
        )
    to_grid(grid, f"{kernel}[{grid!r}]")


def check_hooks(kernel: str, arg_names: Sequence[str], *, verify: Any, setup: Any, do_bench: Any) -> None:
    """`verify=` is a callable or a `Reference` whose outputs are arguments; `setup=` and `do_bench=` are
    callables (else every config would fail with a TypeError that blames the config)."""
    if isinstance(verify, Reference):
        check_argument_lists(kernel, arg_names, {"verify=Reference(...) outputs": verify.outputs})
    elif verify is not None and not callable(verify):
        raise OptionError(
            f"verify= on {kernel} must be a callable(**args) -> bool or an autotune.Reference; "
            f"got {type(verify).__name__}: {verify!r}"
        )
    for what, hook in (("setup", setup), ("do_bench", do_bench)):
        if hook is not None and not callable(hook):
            raise OptionError(f"{what}= on {kernel} must be a callable; got {type(hook).__name__}: {hook!r}")
    signature = unfit_signature(do_bench, lambda: None) if do_bench is not None else None
    if signature is not None:
        raise OptionError(
            f"do_bench= on {kernel} is called as do_bench(fn), with the function to time, and "
            f"returns milliseconds; its signature {signature} cannot take that: e.g. "
            "def do_bench(fn, **_) -> float"
        )


def unfit_signature(fn: Any, *args: Any) -> inspect.Signature | None:
    """The signature of `fn` when a call `fn(*args)` cannot bind to it, else None (also for a callable without a
    signature, a builtin: not checked). A hook of the wrong shape would fail at every call, blaming the configs."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*args)
    except TypeError:
        return signature
    return None


def check_hook_signatures(
    kernel: str, passed: Sequence[str], provided: Collection[str], *, verify: Any, setup: Any, key: Any = None
) -> None:
    """`verify=`, `setup=`, a Reference's function and a callable `key=` are called with the call's kernel arguments
    by name: `passed` are those every call gives (defaults filled in); the others (`provided`: the space's fields,
    `derive=`'s, the values of triton.heuristics) never are. A function that cannot take one of `passed`, or that needs any other
    name, would fail at every call: refused here. A function without a signature (a builtin) is not checked; a
    `functools.wraps` adapter is checked as itself, not as what it wraps."""
    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    hooks = {
        "verify=": verify.fn if isinstance(verify, Reference) else verify,
        "setup=": setup,
        "key=": key if callable(key) else None,
    }
    for what, fn in hooks.items():
        if fn is None:
            continue
        try:
            signature = inspect.signature(fn, follow_wrapped=False)
        except (TypeError, ValueError):
            continue
        params = list(signature.parameters.values())
        takes = {p.name for p in params if p.kind in by_name}
        extra = [] if any(p.kind is p.VAR_KEYWORD for p in params) else [n for n in passed if n not in takes]
        needs = [
            p.name
            for p in params
            if p.default is p.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and (p.name not in passed or p.kind is p.POSITIONAL_ONLY)
        ]
        if not (extra or needs):
            continue
        problems = [f"does not take {extra}"] if extra else []
        if needs:
            tuned = [n for n in needs if n in provided]
            problems.append(
                f"needs {needs}, which no call passes by name"
                + (
                    f" ({tuned} come from the space, derive= or triton.heuristics for each config, not from the call)"
                    if tuned
                    else ""
                )
            )
        used = [n for n in passed if n in takes] + ["**_"]
        name = getattr(fn, "__name__", "hook")
        example = f"lambda {', '.join(used)}: ..." if name == "<lambda>" else f"def {name}({', '.join(used)})"
        raise OptionError(
            f"{what} on {kernel} is called with the call's arguments by name ({', '.join(passed)}), but "
            f"its signature {signature} {' and '.join(problems)}: give it parameters named as the "
            f"kernel's and add **_ for the rest, e.g. {example}"
        )


def check_key(kernel: str, key: KeyBuilder, tuned: Collection[str]) -> None:
    """`key=` reads call arguments, not the values the search space (or derive=, triton.heuristics) sets:
    those are never passed by the call, so every call would fail."""
    clash = sorted(key.argument_names & set(tuned))
    if clash:
        raise OptionError(
            f"key={key.spec!r} on {kernel} reads {clash}, which the search space (or derive=, or "
            "triton.heuristics) sets for each config, not the call: key on arguments the call passes, "
            "such as the problem sizes"
        )


def check_fallback(
    kernel: str,
    fallback: Mapping[str, Any] | None,
    fields: Collection[str],
    defaults: Collection[str],
    derived: Collection[str],
) -> None:
    """`fallback=` gives every field of the space that the kernel has no default for (it launches untuned)."""
    if fallback is None:
        return
    if not isinstance(fallback, Mapping):
        raise OptionError(
            f"fallback= on {kernel} takes one config as a dict of the space's fields, e.g. "
            f"fallback={{{', '.join(f'{f!r}: ...' for f in sorted(fields))}}}; got "
            f"{type(fallback).__name__}: {fallback!r}"
        )
    missing = sorted(f for f in fields if f not in fallback and f not in defaults and f not in derived)
    if missing:
        meant = {f: closest_name(str(f), missing) for f in fallback if f not in fields}  # a misspelt field
        example = {(meant.get(f) or f): v for f, v in fallback.items()}
        example.update({f: "..." for f in missing if f not in example})
        hint = "".join(f" {f!r} is not a field of the space. Did you mean {m!r}?" for f, m in meant.items() if m)
        raise SpaceError(
            f"fallback={dict(fallback)} on {kernel} lacks the space's fields {missing}; give a value "
            f"for each, e.g. fallback={example}.{hint}"
        )


def fallback_config(
    kernel: str,
    fallback: Mapping[str, Any],
    *,
    constexpr_names: Collection[str],
    compile_options: Collection[str],
    static_options: Mapping[str, Any],
    derived_names: Collection[str],
) -> Config:
    """`fallback=` as a Config, its fields checked as a space's are (validate_space); a problem is reported as
    fallback='s, not as the search space's, which may be fine."""
    from ..space.checks import validate_space
    from ..space.spaces import as_space

    try:
        config = Config(fallback)
        validate_space(
            as_space([config]),
            kernel_name=kernel,
            constexpr_names=constexpr_names,
            compile_options=compile_options,
            static_options=static_options,
            derived_names=derived_names,
        )
    except (SpaceError, OptionError) as exc:
        text = str(exc)
        for old, new in (
            ("the search space", "fallback="),
            ("from the space", "from fallback="),
            ("space field", "fallback= field"),
            ("config field", "fallback= field"),
        ):
            text = text.replace(old, new)
        raise type(exc)(f"fallback={dict(fallback)!r} on {kernel}: {text}") from None
    return config


def check_timeouts(kernel: str, tuning: Any, default_isolate: str = "off") -> None:
    """A timeout that nothing would apply is refused, not ignored (a hanging config would hang the call):
    `trial_timeout_s` is enforced by killing an isolated worker, so it needs isolation; `compile_timeout_s` in
    this process is enforced by abandoning a compile thread, so it needs `compile_workers >= 1`. Decided on the
    `Tuning`'s own `isolate` (or the kernel's default); a process-wide AUTOTUNE_ISOLATE=off only warns, so an
    environment switch cannot make a module's decoration fail."""
    import warnings

    from ..errors import IsolationWarning, warn_at_caller
    from ..options import env_isolate, isolate_setting

    isolating = [
        text
        for text, given in (
            ("isolate='process'", tuning.isolate == "process"),
            (f"trial_timeout_s={tuning.trial_timeout_s!r}", tuning.trial_timeout_s is not None),
        )
        if given
    ]
    if isolating and (tuning.mode == "online" or (tuning.mode is None and _env_says_online())):
        online = "mode='online'" if tuning.mode == "online" else "AUTOTUNE_MODE=online"
        given, them = (" and ".join(isolating), "them") if len(isolating) > 1 else (isolating[0], "it")
        warn_at_caller(
            f"autotune: Tuning on {kernel}: {online} times candidates on real calls in this process, so "
            f"{given} applies only when a tuning takes the blocking path (distributed tuning, force): an "
            f"online candidate that crashes or hangs reaches the caller. Drop {them}, or tune with "
            "mode='blocking', which isolates each trial",
            IsolationWarning,
        )
    mode, source = isolate_setting(tuning, default_isolate)
    problems = []
    if mode == "off" and tuning.trial_timeout_s is not None:
        problems.append(
            f"trial_timeout_s={tuning.trial_timeout_s:g} is applied only to an isolated trial and "
            f"{source} tunes in this process; use isolate='process' (or 'auto') to have it, or drop "
            "trial_timeout_s"
        )
    if mode == "off" and tuning.compile_timeout_s is not None and tuning.compile_workers == 0:
        problems.append(
            f"compile_timeout_s={tuning.compile_timeout_s:g} with compile_workers=0 compiles on the "
            f"calling thread ({source}), which cannot be interrupted; use compile_workers>=1 (or "
            "isolate='process') to have it, or drop compile_timeout_s"
        )
    if not problems:
        return
    message = f"Tuning on {kernel}: " + "; and ".join(problems)
    if tuning.isolate is None and env_isolate():
        warnings.warn(f"autotune: {message} (the timeout is ignored)", IsolationWarning, stacklevel=4)
        return
    raise OptionError(message)


def _env_says_online() -> bool:
    """Whether AUTOTUNE_MODE=online (a bad value is the call's error, raised where the mode is read, not here)."""
    from ..options import env_mode

    try:
        return env_mode() == "online"
    except OptionError:
        return False


def check_static_options(
    kernel: str, static_options: Collection[str], compile_options: Collection[str], decorator_arguments: Collection[str]
) -> None:
    """`@autotune(..., **static_options)` takes Triton compile options only (a misspelt decorator argument lands
    there too)."""
    unknown = sorted(set(static_options) - set(compile_options))
    if unknown:
        from ..options import Tuning

        tuning_fields = [u for u in unknown if u in Tuning.__struct_fields__]
        hint = (
            f" {', '.join(tuning_fields)} {'is a Tuning field' if len(tuning_fields) == 1 else 'are Tuning fields'}"
            f": pass tuning=Tuning({', '.join(f'{u}=...' for u in tuning_fields)})."
            if tuning_fields
            else did_you_mean(unknown[0], set(compile_options) | set(decorator_arguments))
        )
        raise OptionError(
            f"@autotune({', '.join(f'{u}=...' for u in unknown)}) on {kernel}: not an argument of "
            f"@autotune nor a Triton compile option; static options are compile options such as "
            f"num_warps, num_stages, num_ctas, maxnreg. Put meta-parameters in the space instead.{hint}"
        )


def check_heuristic_overlap(
    kernel: str, space_fields: Collection[str], derived: Collection[str], layers: Sequence[Any]
) -> set[str]:
    """Warn of a field that the space (or derive=) tunes and a `triton.heuristics` under the tuner also sets: it
    runs after a config is chosen and overrides its value, so unless the heuristic reads that value (a clamp such
    as `min(args["BLOCK"], ...)`, which names the field) every config launches alike, and the tuning times
    identical launches and stores a winner that never ran. A warning, not an error: a heuristic that reads the
    value through a helper is not seen here. Returns the names the heuristics set."""
    from ..errors import warn_at_caller

    for layer in layers:
        for name, heuristic in layer.values.items():
            if (name not in space_fields and name not in derived) or _reads(heuristic, name):
                continue  # not tuned, or it reads the config's value (a clamp): its result depends on the config
            where = "its search space" if name in space_fields else "its derive="
            warn_at_caller(
                f"autotune: {name!r} of {kernel} is set both by {where} and by a triton.heuristics under "
                "the autotuner, which runs after a config is chosen and overrides it without reading it: "
                f"every config would launch with the heuristic's value. Remove {name} from {where} (to let "
                "the heuristic choose it) or from the heuristic (to tune it)"
            )
    return {name for layer in layers for name in layer.values}


def _reads(fn: Any, name: str) -> bool:
    """Whether a heuristic may read `name` from the dict Triton passes it: the string is among its code's constants
    (args["BLOCK"], args.get("BLOCK"), nested functions and tuples included), its closure's or a partial's
    arguments. True when there is no code to read (a builtin, a callable object): nothing is claimed then."""
    if isinstance(fn, functools.partial):
        return name in fn.args or name in fn.keywords.values() or _reads(fn.func, name)
    code = getattr(fn, "__code__", None)
    if code is None:
        return True
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    return _names_string(code, name) or any(value == name for value in cells if isinstance(value, str))


def _names_string(code: Any, name: str) -> bool:
    """Whether `name` is a string constant of `code`, of a tuple or frozenset constant, or of a nested code object."""
    for const in code.co_consts:
        if const == name or (isinstance(const, (tuple, frozenset)) and name in const):
            return True
        if hasattr(const, "co_consts") and _names_string(const, name):
            return True
    return False


def inner_autotuner(fn: Any, base: Any, autotuned: type) -> Any:
    """The first autotuner (`autotuned`, the drop-in's, whose `.tuner` is one, or Triton's) among `fn` and the
    wrappers under it, above `base`; None when there is none."""
    from triton.runtime.autotuner import Autotuner

    for obj in wrapper_layers(fn, base):
        if isinstance(obj, (autotuned, Autotuner)) or isinstance(getattr(obj, "tuner", None), autotuned):
            return obj
    return None


def check_not_autotuned(kernel: str, fn: Any, base: Any, autotuned: type) -> None:
    """Refuse an autotuner between `fn` and its base kernel (`inner_autotuner`): it sets its fields at each
    launch, so an autotuner over it would time identical launches."""
    obj = inner_autotuner(fn, base, autotuned)
    if obj is not None:
        raise OptionError(
            f"{kernel} is already autotuned ({type(obj).__module__}.{type(obj).__name__} under "
            "this one): the inner autotuner sets its fields at each launch, so the outer one would "
            "time identical launches. Use one autotuner over both spaces (e.g. "
            "space=CartesianSpace(...) with every field)"
        )


def check_derive_names(kernel: str, derive: Mapping[str, Any], constexpr_names: Collection[str]) -> None:
    """Each `derive=` value sets a tl.constexpr parameter of the kernel."""
    bad = sorted(set(derive) - set(constexpr_names))
    if bad:
        raise SpaceError(
            f"derive={{{', '.join(map(repr, bad))}: ...}} on {kernel}: a derived value must name a "
            f"tl.constexpr parameter of the kernel; constexprs: {list(constexpr_names)}"
        )
