"""`autotune cache {list,show,clear,path,push,pull}`: the tuning cache, from a shell.

    autotune cache list  [--kernel K] [--json] [--remote]      one line per disk (or Redis) entry
    autotune cache show  KERNEL [--key KEY]                    entries of a kernel with their trials
    autotune cache clear [--kernel K [--key KEY]] [--remote]   remove entries; prints how many
    autotune cache path                                        the cache directory in use
    autotune cache push|pull [--kernel K]                      copy entries disk -> Redis / Redis -> disk

Every subcommand takes `--cache-dir DIR` (default: AUTOTUNE_CACHE_DIR, else $XDG_CACHE_HOME/autotune, else
~/.cache/autotune) and all but `path` `--remote-url URL` (default: AUTOTUNE_REMOTE_CACHE; `show`, which has no
`--remote`, refuses it with what to run instead).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..format import (
    format_config,
    format_dtypes,
    format_key,
    format_ms,
    format_record_key,
    format_table,
    format_timestamp,
    plural,
    safe_text,
    shorten,
)
from ..keyspec import parse_key
from .arguments import (
    KERNEL_SYNTAX,
    add_command,
    add_kernel_filter,
    add_key_option,
    kernel_name,
    option_parent,
    use_cache_dir,
    use_checked_cache_dir,
)
from .remote import clear_remote, list_remote
from .remote import register as register_remote
from .rows import age_of, entries_table, kernel_labels, sortable

__all__ = ["register"]


def _key_or_none(args: argparse.Namespace, command: str) -> tuple[tuple | None, bool]:
    """(the parsed --key, or None when not given; False after printing why the given one is not a key): parsed
    (`keyspec.parse_key`) and normalised as every tier's clear matches it (`wanted_key_text`), so that a value no
    key can hold is this usage error (exit 2), never a traceback from the tier."""
    from ..errors import KeyValueError
    from ..storage.entries import wanted_key_text

    if args.key is None:
        return None, True
    try:
        key = parse_key(args.key)
        wanted_key_text(key)
    except KeyValueError as exc:
        print(f"autotune cache {command}: --key {safe_text(repr(args.key[:40]))} is not a key: {exc}", file=sys.stderr)
        return None, False
    except ValueError as exc:
        print(f"autotune cache {command}: {safe_text(exc)}", file=sys.stderr)
        return None, False
    return key, True


def _entries(kernel: str | None):
    from ..storage import disk_entries

    entries = disk_entries(kernel)  # a short name or a module:qualname (storage.entries.kernel_matches)
    return sorted(
        entries,
        key=lambda e: (
            e.kernel,
            e.record is None,
            e.record.kernel_id or "" if e.record else "",
            sortable(e.record.key if e.record else []),
            e.record.dtypes if e.record else [],
            e.record.device if e.record else "",
            str(e.path),
        ),
    )


def _unknown_kernel_hint(kernel: str) -> str:
    """What follows "no entries for kernel K": for a module:qualname, "; kernels named add_kernel: a:add_kernel,
    b:add_kernel" (the kernel_ids cached under its short name); then, when no entry at all is of `kernel`, " Did you
    mean 'x'?" naming the closest cached kernel in the form `kernel` is written in (`kernel_suggestion`); else ""."""
    from ..storage import disk_entries
    from ..storage.entries import is_kernel_id, kernel_suggestion, short_name

    records = [e.record for e in disk_entries(None, on_error=lambda path, exc: None) if e.record is not None]
    hint = ""
    if is_kernel_id(kernel):
        name = short_name(kernel)
        ids = sorted({r.kernel_id for r in records if r.kernel == name and r.kernel_id})
        hint = f"; kernels named {name}: {', '.join(ids)}" if ids else ""
    return hint + kernel_suggestion(kernel, [(r.kernel, r.kernel_id) for r in records])  # "" for a cached one


def _no_match_hint(kernel: str, key_given: bool) -> str:
    """What follows "no entries for kernel K key X": the kernel's cached keys when it has some (the key is what
    did not match), else `_unknown_kernel_hint`."""
    mine = [e.record for e in _entries(kernel) if e.record is not None] if key_given else []
    if not mine:
        return _unknown_kernel_hint(kernel)
    mine.sort(key=lambda r: sortable(list(r.key)))
    keys = list(dict.fromkeys(format_record_key(r).removeprefix("key=") for r in mine))
    return f"; its cached keys: {'; '.join(keys[:_KEYS_SHOWN])}" + ("; ..." if len(keys) > _KEYS_SHOWN else "")


_KEYS_SHOWN = 20


def _remote_url_ignored(args: argparse.Namespace, command: str) -> bool:
    """A --remote-url on a command that works on the local disk would be silently ignored (the disk's entries
    shown as if they were the fleet's): said, and True, so the command exits 2."""
    if not getattr(args, "remote_url", None) or getattr(args, "remote", False):
        return False
    fix = (
        f"add --remote to {command} the Redis cache's entries"
        if command in ("list", "clear")
        else "`autotune cache list --remote` lists the Redis cache's entries"
    )
    print(
        f"autotune cache {command}: --remote-url is used with --remote (and by push and pull); {fix}, or drop "
        "--remote-url to work on the disk",
        file=sys.stderr,
    )
    return True


def _cmd_list(args: argparse.Namespace) -> int:
    if args.remote:
        use_cache_dir(args)
        return list_remote(args)
    if _remote_url_ignored(args, "list"):
        return 2
    directory = use_checked_cache_dir(args, "list")
    if directory is None:
        return 2
    entries, crashes = _entries(args.kernel), _crash_notes(args.kernel)
    if not entries and not crashes and args.kernel is not None:  # likely a typo: said and exit 1 (--json too)
        if args.json:
            print("[]")
        print(
            f"no entries for kernel {safe_text(repr(args.kernel))} in {safe_text(directory)} (`autotune cache "
            f"list` lists every kernel){safe_text(_unknown_kernel_hint(args.kernel))}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps([_entry_json(e) for e in entries], indent=1))
        return 0
    if not entries:
        print(_crash_notes_table(crashes) if crashes else f"no entries in {safe_text(directory)}")
        return 0
    good = [e for e in entries if e.record is not None]
    bad = [e for e in entries if e.record is None]
    if good:
        print(entries_table(e.record for e in good))
    if bad:
        print()
        print(
            format_table(
                ["KERNEL", "UNUSABLE FILE", "PROBLEM"],
                [[e.kernel, e.path.name, _problem(e.error, e.path)] for e in bad],
            )
        )
    print(
        f"\n{plural(len(good), 'entry', 'entries')}"
        + (f", {len(bad)} unusable" if bad else "")
        + f" in {safe_text(directory)}"
    )
    if crashes:
        print(f"\n{_crash_notes_table(crashes)}")
    return 0


def _entry_json(entry: Any) -> dict[str, Any]:
    """An entry of `cache list --json`: its path, kernel, kernel_id, why it is unusable (or None) and record."""
    return {
        "path": str(entry.path),
        "kernel": entry.kernel,
        "kernel_id": entry.record.kernel_id if entry.record else None,
        "error": entry.error,
        "record": entry.record.to_dict() if entry.record else None,
    }


def _crash_notes(kernel: str | None) -> list[Any]:
    from ..storage import journal
    from ..storage.entries import kernel_matches, short_name

    notes = journal.crashes()
    return [n for n in notes if kernel is None or kernel_matches(short_name(n.kernel), n.kernel, kernel)]


def _crash_notes_table(notes: list[Any]) -> str:
    """The configs the crash journal holds as having ended a process (or left its GPU unusable): a note is
    dropped when a tuning of its key records the config."""
    rows = [
        [
            safe_text(n.kernel),
            safe_text(n.key),
            safe_text(format_dtypes(n.dtypes)),
            safe_text(format_config(n.config, " ")),
            format_timestamp(n.since),
            "the process ended" if n.error is None else shorten(f"left the GPU unusable: {safe_text(n.error)}", 70),
        ]
        for n in sorted(notes, key=lambda n: (n.kernel, n.key, n.since))
    ]
    table = format_table(["KERNEL", "KEY", "DTYPES", "CRASHED CONFIG", "NOTED", "WHAT HAPPENED"], rows)
    return (
        f"{table}\n\n{plural(len(notes), 'config', 'configs')} noted by the crash journal: the next tuning of "
        "each key records them as crashed and tunes the others (`autotune cache clear` has them tried again)"
    )


def _problem(error: str | None, path: Any) -> str:
    return shorten(safe_text((error or "").replace(str(path), "").strip()), 80)


def _cmd_show(args: argparse.Namespace) -> int:
    key, ok = _key_or_none(args, "show")
    if not ok or _remote_url_ignored(args, "show"):
        return 2
    directory = use_checked_cache_dir(args, "show")
    if directory is None:
        return 2
    entries = _entries(args.kernel)
    if key is not None:
        from ..storage.entries import key_text

        wanted = key_text(key)
        entries = [e for e in entries if e.record is not None and key_text(e.record.key) == wanted]
    if not entries:
        what = f"kernel {args.kernel!r}" + (f" key {args.key}" if args.key is not None else "")
        print(
            f"no entries for {safe_text(what)} in {safe_text(directory)}"
            f"{safe_text(_no_match_hint(args.kernel, key is not None))}",
            file=sys.stderr,
        )
        return 1
    now = time.time()
    blocks = []
    labels = iter(kernel_labels([e.record for e in entries if e.record is not None]))
    for e in entries:
        if e.record is None:
            blocks.append(f"{safe_text(e.path)}\n  unusable: {safe_text(e.error)}")
            continue
        r = e.record
        head = [
            f"{safe_text(next(labels))}  key={safe_text(format_key(r.key))}  "
            f"dtypes={safe_text(format_dtypes(r.dtypes))}",
            f"  file:      {safe_text(e.path)}",
            f"  device:    {safe_text(r.device)}",
            f"  versions:  triton {safe_text(r.triton_version)}, torch {safe_text(r.torch_version)}",
            f"  source:    {safe_text(r.source_hash[:16])}   space: {safe_text(r.space_checksum[:16])}",
            f"  tuned:     {format_timestamp(r.timestamp)} ({age_of(r.timestamp, now)} ago) in {r.tuning_s:.2f} s",
            f"  winner:    {safe_text(format_config(r.winner, sep=' '))}",
        ]
        trials = sorted(r.trials, key=lambda t: (t.median_ms is None, t.median_ms or 0.0))
        rows = []
        for t in trials:
            error = safe_text((t.error or "").strip().splitlines()[0]) if t.error and t.error.strip() else ""
            rows.append(
                [
                    "*" if t.config == r.winner else "",
                    format_config(t.config, sep=" "),
                    t.status.value,
                    format_ms(t.median_ms),
                    format_ms(t.min_ms),
                    len(t.samples_ms),
                    error if len(error) <= 60 else error[:57] + "...",
                ]
            )
        table = format_table(["", "CONFIG", "STATUS", "MEDIAN_MS", "MIN_MS", "N", "ERROR"], rows, right={3, 4, 5})
        blocks.append("\n".join(head) + "\n\n" + "\n".join("  " + line for line in table.splitlines()))
    print("\n\n".join(blocks))
    return 0


def _cmd_clear(args: argparse.Namespace) -> int:
    if args.key is not None and args.kernel is None:
        print("autotune cache clear: --key needs --kernel (keys are per kernel)", file=sys.stderr)
        return 2
    key, ok = _key_or_none(args, "clear")
    if not ok or _remote_url_ignored(args, "clear"):
        return 2
    if args.remote:
        use_cache_dir(args)
        return clear_remote(args, key)
    directory = use_checked_cache_dir(args, "clear")
    if directory is None:
        return 2
    from ..storage import DiskCache

    failures: list[tuple[Path, OSError]] = []
    cleared = DiskCache().remove(args.kernel, key, on_error=lambda path, exc: failures.append((path, exc)))
    removed, forgotten = len(cleared), _forget_crashes(args.kernel, key, cleared)
    what = (
        "all kernels"
        if args.kernel is None
        else f"kernel {args.kernel!r}" + (f" key {format_key(list(key))}" if key is not None else "")
    )
    what, where = safe_text(what), safe_text(directory)
    if failures:
        return _report_failures(failures, removed, what, where, forgotten)
    # what `cache list` flags as unusable stays (only what reads as an entry is removed): named, not left silent
    left = [e for e in _entries(args.kernel) if e.record is None] if key is None else []
    if removed == 0 and not left and not forgotten and args.kernel is not None:
        print(
            f"autotune cache clear: nothing matched {what} in {where} (see `autotune cache list`)"
            f"{safe_text(_no_match_hint(args.kernel, key is not None))}",
            file=sys.stderr,
        )
        return 1
    print(f"removed {plural(removed, 'entry', 'entries')} ({what}) from {where}")
    if forgotten:
        print(
            f"forgot {plural(forgotten, 'crash note', 'crash notes')}: the configs that ended a process are tried "
            "again at the next tuning"
        )
    if left:
        print(
            f"{plural(len(left), 'unusable file stays', 'unusable files stay')} (a clear removes only files that "
            "read as entries of this autotune: remove a corrupt one by hand or let the next tuning of its key "
            "replace it; a newer autotune's entry is kept for that autotune):"
        )
        for e in left[:10]:
            print(f"  {safe_text(e.path)}: {_problem(e.error, e.path)}")
        if len(left) > 10:
            print(f"  ... and {len(left) - 10} more")
    return 0


def _report_failures(failures: list[tuple[Path, OSError]], removed: int, what: str, where: str, forgotten: int) -> int:
    """Exit status 1 after saying which entries a clear could not remove, and why (and the crash notes it forgot)."""
    reasons = ", ".join(dict.fromkeys(exc.strerror or exc.__class__.__name__ for _, exc in failures))
    print(
        f"autotune cache clear: found {plural(removed + len(failures), 'entry', 'entries')} ({what}) in "
        f"{where}, removed {removed}, could not remove {len(failures)} ({reasons}); run as a user that may "
        "write the cache directory:",
        file=sys.stderr,
    )
    for path, exc in failures[:10]:
        print(f"  {safe_text(path)}: {exc.strerror or exc}", file=sys.stderr)
    if len(failures) > 10:
        print(f"  ... and {len(failures) - 10} more", file=sys.stderr)
    if forgotten:
        print(f"forgot {plural(forgotten, 'crash note', 'crash notes')} all the same", file=sys.stderr)
    return 1


def _forget_crashes(kernel: str | None, key: tuple | None, cleared: list[Any]) -> int:
    """Forget the crash journal's notes of what a clear asked for, by the rule `clear_autotune_cache` follows
    (`storage.clear.forget_crashes`): also the notes of the kernels of the `cleared` entries; how many went."""
    from ..storage.clear import forget_crashes

    return forget_crashes(kernel, key, {e.record.kernel_id or e.record.kernel for e in cleared})


def _cmd_path(args: argparse.Namespace) -> int:
    print(use_cache_dir(args))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """`autotune cache {list,show,clear,path}`."""
    cache = subparsers.add_parser(
        "cache",
        help="inspect or clear the tuning cache on disk",
        description="Inspect or clear the tuning cache on disk.",
        allow_abbrev=False,
    )
    directory, remote = _option_parents()
    common = [directory, remote]
    sub = cache.add_subparsers(dest="cache_command", metavar="{list,show,clear,path,push,pull}", required=True)
    _register_list(sub, common)
    _register_show(sub, common)
    _register_clear(sub, common)
    add_command(
        sub,
        "path",
        _cmd_path,
        parents=[directory],
        help="print the cache directory",
        description="Print the tuning cache directory in use: --cache-dir, else AUTOTUNE_CACHE_DIR, else "
        "$XDG_CACHE_HOME/autotune, else ~/.cache/autotune.",
    )
    register_remote(sub, common)


def _option_parents() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """(--cache-dir, --remote-url): the options the subcommands share."""
    directory = option_parent()
    directory.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="cache directory (default: AUTOTUNE_CACHE_DIR, else $XDG_CACHE_HOME/autotune, else ~/.cache/autotune)",
    )
    remote = option_parent()  # not `path`'s: an option a command would ignore is not offered to it
    remote.add_argument(
        "--remote-url",
        metavar="URL",
        help="the Redis cache for --remote, push and pull (default: AUTOTUNE_REMOTE_CACHE)",
    )
    return directory, remote


def _register_list(sub: argparse._SubParsersAction, common: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "list",
        _cmd_list,
        parents=common,
        help="one line per cached entry",
        description="List every entry of the tuning cache on disk, one line each: kernel, key, "
        "dtypes, device, winner, its time and the entry's age; unusable files are listed "
        "with the reason, and then the configs the crash journal holds as having ended a process (text only: "
        "--json lists the entries).",
    )
    add_kernel_filter(p)
    p.add_argument("--json", action="store_true", help="the entries as JSON")
    p.add_argument("--remote", action="store_true", help="list the Redis cache's entries instead of the disk's")


def _register_show(sub: argparse._SubParsersAction, common: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "show",
        _cmd_show,
        parents=common,
        help="a kernel's entries with every trial",
        description="Show a kernel's cache entries (or one key's) with the device, versions, winner "
        "and every trial's status and timings. Exits 1 when nothing matches.",
    )
    p.add_argument("kernel", metavar="KERNEL", type=kernel_name, help=f"the kernel: {KERNEL_SYNTAX}")
    add_key_option(p)


def _register_clear(sub: argparse._SubParsersAction, common: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "clear",
        _cmd_clear,
        parents=common,
        help="remove entries (all, a kernel's, or a key's)",
        description="Remove cache entries: all of them, a kernel's (--kernel: its short name clears "
        "every kernel of that name, module:qualname that one), or one key's (--kernel and "
        "--key, every dtype variant). Only files that read as entries of what was asked are "
        "removed. Exits 1 when a "
        "--kernel or --key matches nothing.",
    )
    add_kernel_filter(p)
    add_key_option(p, of=" of --kernel")
    p.add_argument(
        "--remote", action="store_true", help="clear the Redis cache's entries (every node's) instead of the disk's"
    )
