"""Options several subcommands take, declared once so they read and parse the same everywhere."""
from __future__ import annotations

import argparse
from typing import Any, Callable, Sequence

__all__ = ["KEY_SYNTAX", "KERNEL_SYNTAX", "add_command", "add_kernel_filter", "add_key_option"]

KEY_SYNTAX = "4096, 4096,1024, '(4096, 1024)' or '[4096]' (the same syntax in every subcommand; see keyspec)"
KERNEL_SYNTAX = ("its function name (every module's kernel of that name) or module:qualname, e.g. mypkg.ops:add_kernel "
                 "(that kernel alone; `autotune cache list` shows it where two modules share a name)")


def add_kernel_filter(parser: argparse.ArgumentParser) -> None:
    """`--kernel K`: only the entries of this kernel, named as `storage.entries.kernel_matches` reads it."""
    parser.add_argument("--kernel", metavar="K", help=f"only this kernel: {KERNEL_SYNTAX}")


def add_key_option(parser: argparse.ArgumentParser, of: str = "") -> None:
    """`--key KEY`: only this key (every dtype variant of it), parsed by `keyspec.parse_key`."""
    parser.add_argument("--key", metavar="KEY", default=None, help=f"only this key{of}: {KEY_SYNTAX}")



def add_command(subparsers: Any, name: str, run: Callable[[argparse.Namespace], int], *, help: str,
                description: str, parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
    """A subcommand `name` whose parsed namespace's `func` is `run` (args -> exit status): every subcommand is
    declared this one way, with a one-line `help` for the command list and a `description` for its own --help."""
    parser = subparsers.add_parser(name, parents=list(parents), help=help, description=description)
    parser.set_defaults(func=run)
    return parser
