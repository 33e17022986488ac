"""Checks of `@autotune`'s arguments other than the space (the space's are in space_checks.py), run when the
kernel is decorated: each names the argument, what is wrong and the fix, so a mistake surfaces where the kernel
is declared instead of as every config failing at its first call."""
from __future__ import annotations

from typing import Any, Collection, Mapping, Optional, Sequence

from .errors import OptionError, SpaceError, did_you_mean
from .keys import KeyBuilder
from .reference import Reference

__all__ = ["check_argument_lists", "check_hooks", "check_key", "check_fallback"]


def check_argument_lists(kernel: str, arg_names: Sequence[str], lists: Mapping[str, Sequence[str]]) -> None:
    """Each list (`restore_value=`, `reset_to_zero=`, a Reference's `outputs`; by what the message calls it)
    names arguments of the kernel."""
    for what, names in lists.items():
        missing = [n for n in names if n not in arg_names]
        if missing:
            raise OptionError(f"{what}={list(names)} on {kernel}: {missing} are not arguments of the kernel; "
                              f"arguments: {list(arg_names)}.{did_you_mean(missing[0], arg_names)}")


def check_hooks(kernel: str, arg_names: Sequence[str], *, verify: Any, setup: Any, do_bench: Any) -> None:
    """`verify=` is a callable or a `Reference` whose outputs are arguments; `setup=` and `do_bench=` are
    callables (else every config would fail with a TypeError that blames the config)."""
    if isinstance(verify, Reference):
        check_argument_lists(kernel, arg_names, {"verify=Reference(...) outputs": verify.outputs})
    elif verify is not None and not callable(verify):
        raise OptionError(f"verify= on {kernel} must be a callable(**args) -> bool or an autotune.Reference; "
                          f"got {type(verify).__name__}: {verify!r}")
    for what, hook in (("setup", setup), ("do_bench", do_bench)):
        if hook is not None and not callable(hook):
            raise OptionError(f"{what}= on {kernel} must be a callable; got {type(hook).__name__}: {hook!r}")


def check_key(kernel: str, key: KeyBuilder, tuned: Collection[str]) -> None:
    """`key=` reads call arguments, not the values the search space (or derive=, triton.heuristics) sets:
    those are never passed by the call, so every call would fail."""
    clash = sorted(key.argument_names & set(tuned))
    if clash:
        raise OptionError(f"key={key.spec!r} on {kernel} reads {clash}, which the search space (or derive=, or "
                          "triton.heuristics) sets for each config, not the call: key on arguments the call passes, "
                          "such as the problem sizes")


def check_fallback(kernel: str, fallback: Optional[Mapping[str, Any]], fields: Collection[str],
                   defaults: Collection[str], derived: Collection[str]) -> None:
    """`fallback=` gives every field of the space that the kernel has no default for (it launches untuned)."""
    if fallback is None:
        return
    missing = sorted(f for f in fields if f not in fallback and f not in defaults and f not in derived)
    if missing:
        example = {**dict(fallback), **{f: "..." for f in missing}}
        raise SpaceError(f"fallback={dict(fallback)} on {kernel} lacks the space's fields {missing}; give a value "
                         f"for each, e.g. fallback={example}")
