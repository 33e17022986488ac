"""Options several subcommands take, declared once so they read and parse the same everywhere."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..format import safe_text

__all__ = [
    "KEY_SYNTAX",
    "KERNEL_SYNTAX",
    "CliParser",
    "add_command",
    "add_kernel_filter",
    "add_key_option",
    "checked_cache_dir",
    "kernel_name",
    "option_parent",
    "output_file_problem",
    "path_text",
]

KEY_SYNTAX = "4096, 4096,1024, '(4096, 1024)' or '[4096]' (the same syntax in every subcommand; see keyspec)"
KERNEL_SYNTAX = (
    "its function name (every module's kernel of that name) or module:qualname, e.g. mypkg.ops:add_kernel "
    "(that kernel alone; `autotune cache list` shows it where two modules share a name)"
)


class CliParser(argparse.ArgumentParser):
    """The CLI's parser class, used for the top level, every subcommand (`add_subparsers` makes its parsers of this
    class) and the shared option parents: abbreviations are off (`--remote` is never read as `--remote-url`), and
    an option naming a path refuses empty text (`add_argument`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        """As argparse's, but an option naming a file or directory (a metavar of `PATH_METAVARS`) refuses empty
        text (`path_text`): `--cache-dir "$DIR"` with DIR unset must not mean the default cache."""
        if args and str(args[0]).startswith("-") and kwargs.get("metavar") in PATH_METAVARS:
            kwargs.setdefault("type", path_text)
        return super().add_argument(*args, **kwargs)


PATH_METAVARS = frozenset({"DIR", "FILE", "OUT", "ARCHIVE", "KEYFILE"})  # options whose value is a path


def path_text(text: str) -> str:
    """A path option's value (argparse `type=`): refused when empty, which is an unset shell variable far more
    often than a choice, and would otherwise read as the option left out."""
    if not text:
        raise argparse.ArgumentTypeError("empty path (an unset shell variable?); give a path, or leave the option out")
    return text


def option_parent() -> CliParser:
    """A parent parser (`parents=[...]`) for options several subcommands share."""
    return CliParser(add_help=False)


def kernel_name(text: str) -> str:
    """A kernel name typed on the command line (argparse `type=`): refused when it is not text (bytes that are not
    UTF-8 reach Python as surrogates, which no kernel's name holds and no cache path can be made of)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"{ascii(text)} is not UTF-8 text, so no kernel's name; give the kernel's function name or module:qualname"
        ) from None
    return text


def add_kernel_filter(parser: argparse.ArgumentParser) -> None:
    """`--kernel K`: only the entries of this kernel, named as `storage.entries.kernel_matches` reads it."""
    parser.add_argument("--kernel", metavar="K", type=kernel_name, help=f"only this kernel: {KERNEL_SYNTAX}")


def add_key_option(parser: argparse.ArgumentParser, of: str = "") -> None:
    """`--key KEY`: only this key (every dtype variant of it), parsed by `keyspec.parse_key`."""
    parser.add_argument("--key", metavar="KEY", default=None, help=f"only this key{of}: {KEY_SYNTAX}")


def add_command(
    subparsers: Any,
    name: str,
    run: Callable[[argparse.Namespace], int],
    *,
    help: str,
    description: str,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> argparse.ArgumentParser:
    """A subcommand `name` whose parsed namespace's `func` is `run` (args -> exit status): every subcommand is
    declared this one way, with a one-line `help` for the command list and a `description` for its own --help."""
    parser = subparsers.add_parser(name, parents=list(parents), help=help, description=description)
    parser.set_defaults(func=run)
    return parser


def checked_cache_dir(args: argparse.Namespace, command: str, *, must_exist: bool = True) -> str | None:
    """The tuning cache directory `autotune <command>` works on (`args.cache_dir`, else AUTOTUNE_CACHE_DIR, else the
    platform default), after checking it can be read; None after printing why not, for an exit status of 2, so that
    a problem is never reported as an empty cache: a file given as the directory, a directory this user may not
    list, and, for a command that reads the cache (`must_exist`), a --cache-dir that does not exist (a typo far more
    often than an empty cache). The default directory not existing yet is fine: nothing is cached there; so is
    a --cache-dir a command writes into (`pull`, `import`), which is created."""
    from ..options import cache_dir

    explicit = getattr(args, "cache_dir", None)  # never empty: the parser refuses that (`path_text`)
    directory = os.path.expanduser(explicit) if explicit is not None else cache_dir()
    origin = (
        "--cache-dir"
        if explicit is not None
        else "AUTOTUNE_CACHE_DIR"
        if os.environ.get("AUTOTUNE_CACHE_DIR")
        else "the default cache directory"
    )
    fix = "pass --cache-dir DIR" if origin != "--cache-dir" else "pass --cache-dir a directory"
    where = f"the cache directory {safe_text(directory)} ({origin})"
    try:
        mode = os.stat(directory).st_mode
    except FileNotFoundError:
        if explicit is not None and must_exist:
            print(
                f"autotune {command}: no entries: {where} does not exist; pass --cache-dir an existing directory "
                "(`autotune cache path` prints the default one)",
                file=sys.stderr,
            )
            return None
        return directory
    except OSError as exc:
        print(
            f"autotune {command}: cannot reach {where}: {exc.strerror or exc}; run as a user that can read it, or "
            f"{fix}",
            file=sys.stderr,
        )
        return None
    if not stat.S_ISDIR(mode):
        print(f"autotune {command}: {where} is not a directory; {fix}", file=sys.stderr)
        return None
    try:
        with os.scandir(directory):
            pass
    except OSError as exc:
        print(
            f"autotune {command}: cannot read {where}: {exc.strerror or exc}; run as a user that can read it, or {fix}",
            file=sys.stderr,
        )
        return None
    return directory


def output_file_problem(option: str, value: str, example: str) -> str | None:
    """Why `--option value` cannot be written as a file (a directory, or one in a directory that does not exist),
    checked before a command computes what it would write; None when it can. `example` is a file name to suggest."""
    path = Path(value)
    if path.is_dir():
        return f"--{option} {value} is a directory; give a file name, e.g. {path / example}"
    if not path.parent.is_dir():
        return (
            f"--{option} {value} is in a directory that does not exist; create {path.parent} first, or give a "
            "file in an existing directory"
        )
    return None


def key_file(path: str | None, command: str) -> tuple[bool, bytes | None]:
    """(True, the secret in the key file `path`, None without one); (False, None) after saying why it cannot be a
    key file (`--verify /dev/zero`, a FIFO, a missing file, a short secret): a mistake, exit 2."""
    if path is None:
        return True, None
    from ..aot.archive_checks import read_key
    from ..errors import ArchiveError

    try:
        return True, read_key(path)
    except ArchiveError as exc:
        print(f"autotune {command}: {exc}", file=sys.stderr)
        return False, None


def use_cache_dir(args: argparse.Namespace) -> str:
    """Point AUTOTUNE_CACHE_DIR at --cache-dir when given (so the tiers a command opens use it): the directory."""
    from ..options import cache_dir

    if getattr(args, "cache_dir", None) is not None:
        os.environ["AUTOTUNE_CACHE_DIR"] = args.cache_dir
    return cache_dir()


def use_checked_cache_dir(args: argparse.Namespace, command: str, *, must_exist: bool = True) -> str | None:
    """`arguments.checked_cache_dir` for `autotune cache <command>`, after pointing AUTOTUNE_CACHE_DIR at
    --cache-dir (so the tiers this command opens use it): the directory, or None after printing why not (exit 2)."""
    use_cache_dir(args)
    return checked_cache_dir(args, f"cache {command}", must_exist=must_exist)
