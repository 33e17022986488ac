"""The `autotune` command line (also `python -m autotune`).

    autotune cache list  [--kernel K] [--json]          one line per disk entry
    autotune cache show  KERNEL [--key KEY]             entries of a kernel with their trials
    autotune cache clear [--kernel K [--key KEY]]       remove entries; prints how many
    autotune cache path                                 the cache directory in use

Every `cache` subcommand takes `--cache-dir DIR` (default: AUTOTUNE_CACHE_DIR, else
$XDG_CACHE_HOME/autotune, else ~/.cache/autotune).

Adding a subcommand: write `register(subparsers)` that adds a parser and sets
`func=handler` (handler(args) -> int exit status) with `parser.set_defaults`, then either append it to
`REGISTRARS` below, or, from another module of the package, define the registrar there and add
"module:function" (or just "module" for a function named `register_cli`) to `SUBCOMMAND_MODULES`:
those are imported only when the CLI runs, and one that does not exist (yet) is skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Iterable, Optional, Sequence

from .keyspec import parse_key  # noqa: F401  (one key syntax for every subcommand; `cli.parse_key` too)

Registrar = Callable[["argparse._SubParsersAction"], None]

# Registrars living in other modules: "module:function", or "module" for `module.register_cli`.
SUBCOMMAND_MODULES: list[str] = ["autotune.report:register_report_command", "autotune.aot.cli_commands:register"]


# ---------------------------------------------------------------------------------------------- formatting


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = ()) -> str:
    """Plain aligned columns with a header and a rule; columns whose index is in `right` align right."""
    text_rows = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    right = set(right)

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in text_rows]
    return "\n".join(out)


def format_config(config: Any) -> str:
    """`BLOCK=64 num_warps=4` for a Config (or any mapping)."""
    return " ".join(f"{k}={v}" for k, v in dict(config).items()) if config is not None else "-"


def format_ms(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def format_age(seconds: float) -> str:
    """A short age: 42s, 7m, 3h, 12d."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def format_key(key: Any) -> str:
    return json.dumps(key, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------- cache commands


def _use_cache_dir(args: argparse.Namespace) -> str:
    from .options import cache_dir

    if getattr(args, "cache_dir", None):
        os.environ["AUTOTUNE_CACHE_DIR"] = args.cache_dir
    return cache_dir()


def _entries(kernel: Optional[str]):
    from .cache import disk_entries

    entries = disk_entries(kernel)
    return sorted(entries, key=lambda e: (e.kernel, e.record is None, _sortable(e.record.key) if e.record else [],
                                          e.record.dtypes if e.record else [], e.record.device if e.record else "",
                                          str(e.path)))


def _sortable(value: Any) -> Any:
    """Order keys naturally (numbers by value, 256 before 1000) even when they mix types."""
    if isinstance(value, list):
        return [_sortable(v) for v in value]
    if isinstance(value, bool) or value is None:
        return (1, str(value), 0)
    if isinstance(value, (int, float)):
        return (0, "", value)
    return (2, str(value), 0)


def _cmd_list(args: argparse.Namespace) -> int:
    directory = _use_cache_dir(args)
    entries = _entries(args.kernel)
    if args.json:
        out = [{"path": str(e.path), "kernel": e.kernel, "error": e.error,
                "record": json.loads(e.record.model_dump_json()) if e.record else None} for e in entries]
        print(json.dumps(out, indent=1))
        return 0
    good = [e for e in entries if e.record is not None]
    bad = [e for e in entries if e.record is None]
    if not entries:
        print(f"no entries in {directory}")
        return 0
    now = time.time()
    rows = []
    for e in good:
        r = e.record
        wt = r.winner_trial
        rows.append([r.kernel, format_key(r.key), ",".join(_short_dtype(d) for d in r.dtypes) or "-", r.device,
                     format_config(r.winner), format_ms(wt.median_ms if wt else None), format_age(now - r.timestamp)])
    if rows:
        print(format_table(["KERNEL", "KEY", "DTYPES", "DEVICE", "WINNER", "MEDIAN_MS", "AGE"], rows, right={5, 6}))
    if bad:
        print()
        print(format_table(["KERNEL", "UNUSABLE FILE", "PROBLEM"],
                           [[e.kernel, e.path.name, _problem(e.error, e.path)] for e in bad]))
    print(f"\n{_plural(len(good), 'entry', 'entries')}" + (f", {len(bad)} unusable" if bad else "")
          + f" in {directory}")
    return 0


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _short_dtype(dtype: str) -> str:
    return dtype[len("torch."):] if dtype.startswith("torch.") else dtype


def _problem(error: Optional[str], path: Any) -> str:
    text = (error or "").replace(str(path), "").strip()
    return text if len(text) <= 80 else text[:77] + "..."


def _cmd_show(args: argparse.Namespace) -> int:
    directory = _use_cache_dir(args)
    entries = _entries(args.kernel)
    if args.key is not None:
        from .cache import key_text

        wanted = key_text(parse_key(args.key))
        entries = [e for e in entries if e.record is not None and key_text(e.record.key) == wanted]
    if not entries:
        what = f"kernel {args.kernel!r}" + (f" key {args.key}" if args.key is not None else "")
        print(f"no entries for {what} in {directory}", file=sys.stderr)
        return 1
    now = time.time()
    blocks = []
    for e in entries:
        if e.record is None:
            blocks.append(f"{e.path}\n  unusable: {e.error}")
            continue
        r = e.record
        head = [
            f"{r.kernel}  key={format_key(r.key)}  dtypes={','.join(_short_dtype(d) for d in r.dtypes) or '-'}",
            f"  file:      {e.path}",
            f"  device:    {r.device}",
            f"  versions:  triton {r.triton_version}, torch {r.torch_version}",
            f"  source:    {r.source_hash[:16]}   space: {r.space_checksum[:16]}",
            f"  tuned:     {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r.timestamp))} "
            f"({format_age(now - r.timestamp)} ago) in {r.tuning_s:.2f} s",
            f"  winner:    {format_config(r.winner)}",
        ]
        trials = sorted(r.trials, key=lambda t: (t.median_ms is None, t.median_ms or 0.0))
        rows = []
        for t in trials:
            error = (t.error or "").strip().splitlines()[0] if t.error else ""
            rows.append(["*" if t.config == r.winner else "", format_config(t.config), t.status.value,
                         format_ms(t.median_ms), format_ms(t.min_ms), len(t.samples_ms),
                         error if len(error) <= 60 else error[:57] + "..."])
        table = format_table(["", "CONFIG", "STATUS", "MEDIAN_MS", "MIN_MS", "N", "ERROR"], rows, right={3, 4, 5})
        blocks.append("\n".join(head) + "\n\n" + "\n".join("  " + line for line in table.splitlines()))
    print("\n\n".join(blocks))
    return 0


def _cmd_clear(args: argparse.Namespace) -> int:
    directory = _use_cache_dir(args)
    if args.key is not None and args.kernel is None:
        print("autotune cache clear: --key needs --kernel (keys are per kernel)", file=sys.stderr)
        return 2
    from .cache import clear_autotune_cache

    key = parse_key(args.key) if args.key is not None else None
    removed = clear_autotune_cache(args.kernel, key)
    what = "all kernels" if args.kernel is None else f"kernel {args.kernel!r}" + (
        f" key {format_key(list(key))}" if key is not None else "")
    if removed == 0 and args.kernel is not None:
        print(f"autotune cache clear: nothing matched {what} in {directory} (see `autotune cache list`)",
              file=sys.stderr)
        return 1
    print(f"removed {_plural(removed, 'entry', 'entries')} ({what}) from {directory}")
    return 0


def _cmd_path(args: argparse.Namespace) -> int:
    print(_use_cache_dir(args))
    return 0


def register_cache(subparsers: "argparse._SubParsersAction") -> None:
    """`autotune cache {list,show,clear,path}`."""
    cache = subparsers.add_parser("cache", help="inspect or clear the tuning cache on disk",
                                  description="Inspect or clear the tuning cache on disk.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", metavar="DIR",
                        help="cache directory (default: AUTOTUNE_CACHE_DIR, else $XDG_CACHE_HOME/autotune, "
                             "else ~/.cache/autotune)")
    sub = cache.add_subparsers(dest="cache_command", metavar="{list,show,clear,path}", required=True)

    p = sub.add_parser("list", parents=[common], help="one line per cached entry",
                       description="List every entry of the tuning cache on disk, one line each: kernel, key, "
                                   "dtypes, device, winner, its time and the entry's age; unusable files are listed "
                                   "with the reason.")
    p.add_argument("--kernel", metavar="K", help="only this kernel")
    p.add_argument("--json", action="store_true", help="the entries as JSON")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", parents=[common], help="a kernel's entries with every trial",
                       description="Show a kernel's cache entries (or one key's) with the device, versions, winner "
                                   "and every trial's status and timings. Exits 1 when nothing matches.")
    p.add_argument("kernel", metavar="KERNEL")
    p.add_argument("--key", metavar="KEY", help="only this key: 4096, 4096,1024, '(4096, 1024)' or '[4096]' "
                                                "(the same syntax in every subcommand)")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("clear", parents=[common], help="remove entries (all, a kernel's, or a key's)",
                       description="Remove cache entries: all of them, a kernel's (--kernel, its short name: every "
                                   "kernel of that name), or one key's (--kernel and --key, every dtype variant). Only "
                                   "files that read as entries of what was asked are removed. Exits 1 when a "
                                   "--kernel or --key matches nothing.")
    p.add_argument("--kernel", metavar="K", help="only this kernel")
    p.add_argument("--key", metavar="KEY", help="only this key of --kernel: 4096, 4096,1024, '(4096, 1024)' or "
                                                "'[4096]' (the same syntax in every subcommand)")
    p.set_defaults(func=_cmd_clear)

    p = sub.add_parser("path", parents=[common], help="print the cache directory",
                       description="Print the tuning cache directory in use: --cache-dir, else AUTOTUNE_CACHE_DIR, "
                                   "else $XDG_CACHE_HOME/autotune, else ~/.cache/autotune.")
    p.set_defaults(func=_cmd_path)


REGISTRARS: list[Registrar] = [register_cache]


def register(fn: Registrar) -> Registrar:
    """Decorator: add a subcommand registrar (for modules that import cli)."""
    REGISTRARS.append(fn)
    return fn


# ---------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The full parser: built-in registrars plus those of SUBCOMMAND_MODULES that exist."""
    parser = argparse.ArgumentParser(prog="autotune", description="autotune: Triton kernel autotuning tools.")
    parser.add_argument("--version", action="version", version=f"autotune {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for registrar in REGISTRARS:
        registrar(subparsers)
    for name in SUBCOMMAND_MODULES:
        registrar = _module_registrar(name)
        if registrar is not None and registrar not in REGISTRARS:
            registrar(subparsers)
    return parser


def _module_registrar(spec: str) -> Optional[Registrar]:
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
        print(f"autotune: the subcommands of {name} are unavailable: {exc.__class__.__name__}: {exc}",
              file=sys.stderr)
        return None
    return getattr(module, attr or "register_cli", None)


def _version() -> str:
    try:
        from . import __version__

        return __version__
    except Exception:  # pragma: no cover
        return "unknown"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(argv)
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
