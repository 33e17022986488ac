"""`autotune report KERNEL [--key K] [--png F] [--csv F] [--json F]`: a kernel's cached trials as a table and files."""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter
from pathlib import Path
from typing import TextIO

from ..errors import AutotuneError
from ..format import format_record_key, safe_text
from ..keyspec import parse_key
from ..record import TuningRecord
from ..reporting.lookup import cache_entries, normalise, select_records
from ..reporting.table import render_report
from ..storage.entries import is_dir_of, is_kernel_id, kernel_matches, kernel_suggestion
from .arguments import (
    KERNEL_SYNTAX,
    add_command,
    add_key_option,
    checked_cache_dir,
    kernel_name,
    output_file_problem,
)
from .rows import kernel_labels

__all__ = ["run_report_command", "register"]


def _tag(record: TuningRecord) -> str:
    """`1024_float32`: the record's key and dtypes as a file-name part."""
    parts = [str(v) for v in normalise(record.key)] + [d.removeprefix("torch.") for d in record.dtypes]
    return "_".join("".join(c if c.isalnum() or c in "-." else "-" for c in p) for p in parts) or "nokey"


def _tags(records: list[TuningRecord]) -> list[str]:
    """One file-name tag per record. Tags that would collide (two kernels of one name in different modules, keys
    that differ only in characters a file name cannot hold, or in type, one key tuned on two device kinds, or for
    two sources or spaces) get a short hash of the record's identity; any still alike are numbered, so no file
    overwrites another's."""
    tags = [_tag(r) for r in records]
    seen = Counter(tags)
    tags = [f"{tag}-{_identity_hash(r)}" if seen[tag] > 1 else tag for tag, r in zip(tags, records)]
    seen, numbered = Counter(tags), Counter[str]()
    for i, tag in enumerate(tags):
        if seen[tag] > 1:
            numbered[tag] += 1
            tags[i] = f"{tag}-{numbered[tag]}"
    return tags


def _identity_hash(record: TuningRecord) -> str:
    """8 hex digits of what tells two records of one kernel name and key apart."""
    identity = (record.kernel_id, record.key, record.dtypes, record.device, record.source_hash, record.space_checksum)
    return hashlib.sha256(repr(identity).encode()).hexdigest()[:8]


def _path_for(path: str, tag: str, many: bool) -> Path:
    """With several records to write, `out.png` becomes `out-<tag>.png` per record (`out-1024_float32.png`)."""
    target = Path(path)
    if not many:
        return target
    return target.with_name(f"{target.stem}-{tag}{target.suffix}")


def run_report_command(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """`autotune report KERNEL [--key K] [--png F] [--csv F] [--json F]`: exit status 0, 1 if nothing matched,
    2 if the cache directory cannot be read (`arguments.checked_cache_dir`)."""
    out = out if out is not None else sys.stdout
    root = checked_cache_dir(args, "report")  # a file, an unreadable or a missing --cache-dir: said, exit 2
    if root is None:
        return 2
    for option in ("png", "csv", "json"):  # checked before anything is written
        value = getattr(args, option)
        problem = output_file_problem(option, value, f"report.{option}") if value else None
        if problem:
            print(f"autotune report: {problem}", file=sys.stderr)
            return 2
    try:
        if args.key is not None:
            parse_key(args.key)  # a value no key can hold (`--key '{1: 2}'`) is a mistake, not a miss
    except ValueError as exc:
        print(f"autotune report: {exc}", file=sys.stderr)
        return 2
    entries = cache_entries(root)
    for entry in entries:  # an unreadable file has no record: its kernel is the directory it lies in
        if entry.record is None and is_dir_of(entry.path.parent.name, args.kernel):
            print(f"autotune report: skipping unreadable entry: {safe_text(entry.error)}", file=sys.stderr)
    records = select_records(entries, args.kernel, args.key)
    if not records:
        what = f"kernel {args.kernel!r}" + (f" key {args.key!r}" if args.key else "")
        readable = [e.record for e in entries if e.record is not None]
        # a module:qualname that matched nothing: the cached kernels' module:qualnames, a typo's likely fix
        known = sorted({(r.kernel_id or r.kernel) if is_kernel_id(args.kernel) else r.kernel for r in readable})
        hint = f"; cached kernels: {', '.join(known)}" if known else f"; {root} has no records"
        mine = [r for r in readable if kernel_matches(r.kernel, r.kernel_id, args.kernel)]
        if args.key and mine:
            keys = sorted({format_record_key(r).removeprefix("key=") for r in mine})
            hint = f"; its cached keys: {'; '.join(keys)}"
        elif not mine:  # the kernel itself is unknown: end with the closest cached one, in the form written
            hint += kernel_suggestion(args.kernel, [(r.kernel, r.kernel_id) for r in readable])
        print(f"autotune report: no cached tuning for {safe_text(what + hint)}", file=sys.stderr)
        return 1
    many = len(records) > 1
    tags = _tags(records)
    names = kernel_labels(records)  # module:qualname where two modules' kernels of one name are reported
    for i, (record, tag, name) in enumerate(zip(records, tags, names)):
        if i:
            out.write("\n")
        paths = {o: _path_for(getattr(args, o), tag, many) for o in ("png", "csv", "json") if getattr(args, o)}
        try:
            table = render_report(record, png=paths.get("png"), csv=paths.get("csv"), json=paths.get("json"), name=name)
        except AutotuneError as exc:  # matplotlib missing, or a chart it cannot draw: one line, its text escaped
            print(f"autotune report: {safe_text(exc)}", file=sys.stderr)
            return 1
        except OSError as exc:  # `--csv /proc/version`: a path that exists but cannot be written
            where = safe_text(" or ".join(str(p) for p in paths.values()))
            print(
                f"autotune report: cannot write {where}: {exc.strerror or exc}; give a writable file", file=sys.stderr
            )
            return 2
        # format_table escaped the cells; the header line above them shows the entry's kernel, key and device too
        out.write("\n".join(safe_text(line) for line in table.split("\n")) + "\n")
        for option in ("png", "csv", "json"):
            value = getattr(args, option)
            if value:
                out.write(f"wrote {_path_for(value, tag, many)}\n")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add `report` to the CLI's subparsers; the parsed namespace's `func` runs it.

    `func(args) -> int` is `run_report_command` (the exit status).
    """
    parser = add_command(
        subparsers,
        "report",
        run_report_command,
        help="show a kernel's cached trials as a table, optionally as PNG/CSV/JSON",
        description="Print every trial of a kernel's cached tunings (one table per key) from the disk cache "
        "(AUTOTUNE_CACHE_DIR), and optionally write a PNG bar chart, a CSV and the JSON record. "
        "With several keys and a file option, each file name gets the key appended.",
    )
    parser.add_argument("kernel", metavar="KERNEL", type=kernel_name, help=f"the kernel: {KERNEL_SYNTAX}")
    add_key_option(parser, of=" (every dtype variant of it)")
    parser.add_argument(
        "--png", metavar="FILE", default=None, help="write a bar chart of trial times (needs autotune[plot])"
    )
    parser.add_argument("--csv", metavar="FILE", default=None, help="write the trials as CSV")
    parser.add_argument("--json", metavar="FILE", default=None, help="write the whole tuning record as JSON")
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="cache directory (default: AUTOTUNE_CACHE_DIR, else $XDG_CACHE_HOME/autotune, else ~/.cache/autotune)",
    )
    return parser
