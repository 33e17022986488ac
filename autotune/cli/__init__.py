"""The `autotune` command line (also `python -m autotune`): the parser and the subcommand registry.

    autotune cache {list,show,clear,path,push,pull}   the tuning cache on disk, and Redis   (cli/cache.py, remote.py)
    autotune report KERNEL                            a kernel's cached trials              (cli/report.py)
    autotune precompile|export|import                 ahead-of-time compiles, archives      (cli/aot.py)
    autotune replay LANDSCAPE                         a strategy over a recorded landscape  (cli/replay.py)
    autotune sweep MODULE:KERNEL --calls M:F          tune many keys on workers or Ray      (cli/sweep.py)

Adding a subcommand: write `register(subparsers)` that declares it with `arguments.add_command(subparsers,
name, handler, help=..., description=...)` (handler(args) -> int exit status), then either append it to
`REGISTRARS` below, or, from another module of the package, define the registrar there and add
"module:function" (or just "module" for a function named `register_cli`) to `SUBCOMMAND_MODULES`:
those are imported only when the CLI runs, and one that does not exist (yet) is skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from ..keyspec import parse_key  # noqa: F401  (one key syntax for every subcommand; `cli.parse_key` too)
from .arguments import CliParser
from .cache import register as register_cache

__all__ = ["main", "build_parser", "register", "parse_key", "REGISTRARS", "SUBCOMMAND_MODULES"]

Registrar = Callable[["argparse._SubParsersAction"], None]

# Registrars living in other modules: "module:function", or "module" for `module.register_cli`.
SUBCOMMAND_MODULES: list[str] = [
    "autotune.cli.report:register",
    "autotune.cli.aot:register",
    "autotune.cli.replay:register",
    "autotune.cli.sweep:register",
]


REGISTRARS: list[Registrar] = [register_cache]


def register(fn: Registrar) -> Registrar:
    """Decorator: add a subcommand registrar (for modules that import cli)."""
    REGISTRARS.append(fn)
    return fn


# ---------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The full parser: built-in registrars plus those of SUBCOMMAND_MODULES that exist. It is a `CliParser`, and so
    is every subcommand's (`add_subparsers` makes parsers of its parser's class): no option is taken by an
    abbreviation. `main` reports an unknown option with the usage of the subcommand it follows (`_parser_of`)."""
    parser = CliParser(prog="autotune", description="autotune: Triton kernel autotuning tools.")
    parser.add_argument("--version", action="version", version=f"autotune {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for registrar in REGISTRARS:
        registrar(subparsers)
    for name in SUBCOMMAND_MODULES:
        found = _module_registrar(name)
        if found is not None and found not in REGISTRARS:
            found(subparsers)
    return parser


def _module_registrar(spec: str) -> Registrar | None:
    import importlib

    name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        print(f"autotune: the subcommands of {name} are unavailable: {exc}", file=sys.stderr)
        return None
    except Exception as exc:  # a broken optional module must not take `autotune cache` down with it
        print(f"autotune: the subcommands of {name} are unavailable: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return None
    return getattr(module, attr or "register_cli", None)


def _version() -> str:
    """The package's version, as `autotune --version` prints it."""
    from .. import __version__

    return __version__


def _parser_of(
    top: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str], argv: list[str]
) -> argparse.ArgumentParser:
    """The parser whose usage an unknown argument is reported with: the innermost (sub)command whose name precedes
    it (`autotune cache list --bogus`: `cache list`'s; `autotune cache --bogus list`: `cache`'s; `autotune --bogus
    cache list`: the top level's)."""
    where = argv.index(unknown[0]) if unknown[0] in argv else len(argv)
    parser = top
    while True:
        action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, action.dest, None) if action is not None else None
        if action is None or name is None or name not in argv or argv.index(name) > where:
            return parser
        parser = action.choices[name]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    parser = build_parser()
    # parse_args would report an option the subcommand does not take with the top level's usage ("usage: autotune
    # [-h] [--version] COMMAND ..."); the subcommand that was parsed reports it, with its own usage
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _parser_of(parser, args, unknown, list(sys.argv[1:] if argv is None else argv)).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `autotune cache list | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
