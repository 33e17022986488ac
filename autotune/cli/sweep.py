"""The `autotune sweep` subcommand: tune every key a function's argument makers produce, on worker processes or a
Ray cluster, then print the summary (and write it as JSON, and a deployment archive).

    autotune sweep MODULE:KERNEL --calls MODULE:FUNCTION [--workers N] [--ray [ADDRESS]]
                   [--device-kind KIND ...] [--export ARCHIVE [--sign KEYFILE]] [--json OUT]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..errors import AutotuneError
from .arguments import add_command, key_file, output_file_problem

__all__ = ["register"]


def _load(spec: str, option: str) -> Any:
    """The object "module:name" names, imported as the kernel's worker imports it."""
    from ..kernel.identity import KernelRef, import_object

    module, _, qualname = spec.partition(":")
    if not module or not qualname:
        raise AutotuneError(f"{option} {spec!r}: give MODULE:NAME, e.g. mypkg.kernels:matmul")
    if "" not in sys.path:  # a module of the current directory, as `python -m` would find it
        sys.path.insert(0, "")
    try:
        return import_object(KernelRef(module=module, qualname=qualname, file=None, line=None))
    except ImportError as exc:
        raise AutotuneError(f"{option} {spec!r}: {exc}") from None


def _makers(spec: str) -> list:
    """The argument makers --calls names: a list of them, or a function returning one."""
    from ..kernel.call import argument_makers

    source = _load(spec, "--calls")
    if callable(source):
        try:
            source = source()
        except Exception as exc:
            raise AutotuneError(f"--calls {spec!r}: calling it raised {type(exc).__name__}: {exc}") from exc
    return argument_makers(source, f"--calls {spec!r}")


def _cmd_sweep(args: Any) -> int:
    ok, secret = _checked_options(args)
    if not ok:
        return 2
    from ..sweeps import sweep

    try:
        kernel = _load(args.kernel, "KERNEL")
        makers = _makers(args.calls)
        executor = "local" if args.ray is None else args.ray
        report = sweep(kernel, makers, executor=executor, workers=args.workers, device_kinds=args.device_kinds)
    except AutotuneError as exc:
        print(f"autotune sweep: {exc}", file=sys.stderr)
        return 2
    print(report)
    if args.json:
        Path(args.json).write_bytes(report.to_json())
    if args.export:
        from ..aot.archive import export_archive

        try:
            manifest = export_archive(args.export, [kernel], sign_key=secret)
        except (AutotuneError, OSError) as exc:  # ArchiveError, a file system fault
            print(f"autotune sweep: the sweep finished, but --export failed: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.export}: {len(manifest.records)} records of {', '.join(manifest.kernels)}")
    return 1 if report.failed else 0


def _checked_options(args: Any) -> tuple[bool, bytes | None]:
    """(True, the --sign secret or None) when the output options can be used, else (False, None) after saying why:
    checked before sweeping, so that a mistake costs no sweep."""
    if args.sign and not args.export:
        print("autotune sweep: --sign KEYFILE signs the --export archive; give --export ARCHIVE too", file=sys.stderr)
        return False, None
    for option, value, example in (("json", args.json, "sweep.json"), ("export", args.export, "sweep.tar.gz")):
        problem = value and output_file_problem(option, value, example)
        if problem:
            print(f"autotune sweep: {problem}", file=sys.stderr)
            return False, None
    return key_file(args.sign, "sweep")


def register(subparsers: Any) -> None:
    """Add `autotune sweep` to the CLI (named in autotune.cli)."""
    parser = add_command(
        subparsers,
        "sweep",
        _cmd_sweep,
        help="tune every key of a list of calls on worker processes or a Ray cluster",
        description=(
            "Tune every key FUNCTION's argument makers produce (FUNCTION returns or yields picklable callables, "
            "each returning (args, kwargs) for one shape), once per device kind of the pool, writing each "
            "winner to the cache (and Redis with AUTOTUNE_REMOTE_CACHE). Keys already cached, or being tuned "
            "by a live process, are skipped, so an interrupted sweep resumes. Exit status 1 when a key failed."
        ),
    )
    parser.add_argument("kernel", metavar="MODULE:KERNEL", help="the @autotune kernel")
    parser.add_argument("--calls", required=True, metavar="MODULE:FUNCTION", help="returns or yields the makers")
    parser.add_argument("--workers", type=int, metavar="N", help="workers (default: one per GPU, else 1)")
    parser.add_argument(
        "--ray",
        nargs="?",
        const="ray",
        metavar="ADDRESS",
        help="run on Ray: the cluster at ADDRESS, else RAY_ADDRESS, else a local one",
    )
    parser.add_argument(
        "--device-kind",
        dest="device_kinds",
        action="append",
        metavar="KIND",
        help="tune only for this device fingerprint (repeatable; default: every kind in the pool)",
    )
    parser.add_argument("--export", metavar="ARCHIVE", help="write a deployment archive (.tar.gz) at the end")
    parser.add_argument("--sign", metavar="KEYFILE", help="sign the --export archive with the secret in KEYFILE")
    parser.add_argument("--json", metavar="OUT", help="write the summary as JSON to OUT")
