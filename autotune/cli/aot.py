"""The `autotune precompile`, `autotune export` and `autotune import` subcommands.

    autotune precompile MODULE:KERNEL --target cuda:90 [--target ...] --signature 'x=*fp32,n=i32:16'
                        [--winners-only] [--workers N] [--timeout S] [--json]
    autotune export ARCHIVE [--kernel NAME ...] [--target TARGET ...] [--sign KEYFILE]
    autotune import ARCHIVE [--force] [--verify KEYFILE] [--json]

Each takes `--cache-dir DIR` (the tuning cache) and `--triton-cache-dir DIR` (Triton's compile cache).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any

from ..aot.api import load_kernel, precompile
from ..aot.archive import export_archive, import_archive
from ..errors import ArchiveError, AutotuneError
from ..format import safe_text
from .arguments import add_command, checked_cache_dir, key_file, option_parent

__all__ = ["register"]


def _cmd_precompile(args: Any) -> int:
    # the tuning cache is read for --winners-only only; a file given as it is refused either way
    if checked_cache_dir(args, "precompile", must_exist=bool(args.winners_only)) is None:
        return 2
    if args.cache_dir:
        os.environ["AUTOTUNE_CACHE_DIR"] = args.cache_dir
    if args.triton_cache_dir:
        os.environ["TRITON_CACHE_DIR"] = args.triton_cache_dir
    if args.signature is None:
        try:  # the kernel first: a misspelt MODULE:KERNEL is the error to fix before its signature
            kernel = load_kernel(args.kernel)
        except AutotuneError as exc:
            print(f"autotune precompile: {exc}", file=sys.stderr)
            return 2
        names = _runtime_arg_names(kernel)
        print(
            f"autotune precompile: --signature is required: the types of {args.kernel}'s arguments"
            f"{f' ({names})' if names else ''} decide the specialization, e.g. --signature 'x=*fp32,y=*fp32,out=*fp32,n=i32:16' "
            "(pointers '*fp16'..., sizes 'i32' or 'i32:16' when a multiple of 16, literal 1 for unit strides)",
            file=sys.stderr,
        )
        return 2
    try:
        report = precompile(
            args.kernel,
            signature=args.signature,
            targets=args.targets,
            winners_only=args.winners_only,
            workers=args.workers,
            timeout_s=args.timeout,
        )
    except AutotuneError as exc:  # PrecompileError, and the decorator's errors raised on importing the kernel
        print(f"autotune precompile: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=1) if args.json else str(report))
    return _precompile_status(report, winners_only=bool(args.winners_only))


def _precompile_status(report: Any, *, winners_only: bool) -> int:
    """1 when a target got nothing, a config timed out or its helper crashed (the binaries a deploy expects are
    missing), or any winner failed under --winners-only; a full space's compile errors and configs over the
    target's limits are its normal misfits (0)."""
    compiled_targets = {c.target for c in report.compiled}
    if not all(t in compiled_targets for t in report.targets):
        return 1
    if any(f.kind in ("timeout", "crashed") for f in report.failed):
        return 1
    return 1 if winners_only and report.failed else 0


def _runtime_arg_names(kernel: object) -> str:
    """The arguments `--signature` types for `kernel` ("a, b, c, M, N, K"): its parameters less the constexprs;
    "" when the object says neither."""
    from ..kernel.identity import base_kernel, constexpr_names

    base = base_kernel(getattr(kernel, "tuner", kernel))
    names = getattr(base, "arg_names", None)
    if not names:
        return ""
    constexprs = set(constexpr_names(base))
    return ", ".join(n for n in names if n not in constexprs)


def _cmd_export(args: Any) -> int:
    directory = checked_cache_dir(args, "export")  # a file, an unreadable or a missing --cache-dir: exit 2
    if directory is None:
        return 2
    if args.targets is not None:
        from ..aot.targets import parse_target

        try:
            for target in args.targets:
                parse_target(target)
        except AutotuneError as exc:  # PrecompileError: an unknown backend or arch, said with the forms
            print(f"autotune export: {exc}", file=sys.stderr)
            return 2
    ok, secret = key_file(args.sign, "export")
    if not ok:
        return 2
    try:
        manifest = export_archive(
            args.archive,
            args.kernels,
            cache_dir=directory,
            triton_cache_dir=args.triton_cache_dir,
            sign_key=secret,
            targets=args.targets,
        )
    except (ArchiveError, OSError) as exc:  # OSError: a file system fault export_archive did not name itself
        print(f"autotune export: {exc}", file=sys.stderr)
        return 1
    print(
        f"wrote {args.archive}: {len(manifest.records)} records and {len(manifest.binaries)} compiled kernels of "
        f"{', '.join(manifest.kernels)} for {', '.join(manifest.targets) or 'no target'} "
        f"(Triton {manifest.triton_version})"
    )
    return 0


def _cmd_import(args: Any) -> int:
    directory = checked_cache_dir(args, "import", must_exist=False)  # a --cache-dir that does not exist is made
    if directory is None:
        return 2
    ok, secret = key_file(args.verify, "import")
    if not ok:
        return 2
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = import_archive(
                args.archive,
                force=args.force,
                cache_dir=directory,
                triton_cache_dir=args.triton_cache_dir,
                verify_key=secret,
            )
    except (ArchiveError, OSError) as exc:  # OSError: a file system fault import_archive did not name itself
        print(f"autotune import: {safe_text(exc)}", file=sys.stderr)  # it may quote the archive's text
        return 1
    except AutotuneError as exc:  # OptionError: a bad AUTOTUNE_LOCK_TIMEOUT_S, refused before the archive is read
        print(f"autotune import: {exc}", file=sys.stderr)
        return 2
    for warning in caught:  # the report prints them (e.g. a --force import's other-Triton warning)
        text = str(warning.message)
        if not any(text in known for known in report.warnings):
            report.warnings.append(text)
    print(json.dumps(report.to_dict(), indent=1, default=str) if args.json else str(report))
    if not report.complete:  # a deploy script checks $?: a cache left short of the archive is a failed step
        print(
            f"autotune import: {len(report.records_failed)} records and {len(report.binaries_failed)} compiled "
            "kernels of the archive were not installed (FAILED above); a process that needs them will tune "
            "again",
            file=sys.stderr,
        )
        return 1
    return 0


def register(subparsers: Any) -> None:
    """Add `autotune precompile`, `autotune export`, `autotune import` to the CLI (named in autotune.cli)."""
    dirs = _argparse_parent()
    _register_precompile(subparsers, dirs)
    _register_export(subparsers, dirs)
    _register_import(subparsers, dirs)


def _register_precompile(subparsers: Any, dirs: Any) -> None:
    p = add_command(
        subparsers,
        "precompile",
        _cmd_precompile,
        parents=[dirs],
        help="compile a kernel's configs for GPU targets ahead of time",
        description="Compile every config of an @autotune kernel's space (or only its cached winners) for each "
        "--target into Triton's cache, without a GPU. Exits 1 when a target got no config compiled, a config "
        "timed out (--timeout) or its compile helper crashed, or, with --winners-only, any winner failed; a full "
        "space's compile errors and configs over a target's limits are listed but exit 0. Example: autotune precompile "
        "mypkg.kernels:matmul --target cuda:90 --target cuda:80 --signature "
        "'a=*fp16,b=*fp16,c=*fp16,M=i32,N=i32,K=i32,stride_am=i32:16,stride_ak=1,...'",
    )
    p.add_argument("kernel", metavar="MODULE:KERNEL", help="the decorated kernel, e.g. mypkg.kernels:matmul")
    p.add_argument(
        "--target",
        dest="targets",
        action="append",
        metavar="TARGET",
        help="cuda:90, cuda:80, hip:gfx942, ...; repeat for several (default: the active GPU)",
    )
    p.add_argument(
        "--signature",
        metavar="SIG",
        help="argument types: 'x=*fp32,y=*fp32,n=i32:16' (pointers '*fp16', '*bf16', '*fp32'...; "
        "sizes 'i32', or 'i32:16' when a multiple of 16; 1 for a unit stride) or the same as a JSON "
        "object",
    )
    p.add_argument("--winners-only", action="store_true", help="only the winners in the tuning cache")
    p.add_argument("--workers", type=int, default=None, help="compile threads (0: serial)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per compile, counted once a compile helper is ready (a config past it fails: exit 1)",
    )
    p.add_argument("--json", action="store_true", help="the report as JSON")


def _register_export(subparsers: Any, dirs: Any) -> None:
    p = add_command(
        subparsers,
        "export",
        _cmd_export,
        parents=[dirs],
        help="write tuned winners and compiled kernels to an archive",
        description="Write the tuning cache's records and the kernels' compiled binaries from Triton's "
        "cache to ARCHIVE (.tar.gz) with a manifest.",
    )
    p.add_argument("archive", metavar="ARCHIVE")
    p.add_argument(
        "--kernel",
        dest="kernels",
        action="append",
        metavar="NAME",
        help="only this kernel: a short name takes every module's kernel of it, module:qualname that "
        "one, with the binaries compiled from it (repeat for several; default: every kernel of the "
        "tuning cache)",
    )
    p.add_argument(
        "--sign",
        metavar="KEYFILE",
        default=None,
        help="sign the manifest (HMAC-SHA256) with the secret in KEYFILE, for `import --verify`",
    )
    p.add_argument(
        "--target",
        dest="targets",
        action="append",
        metavar="TARGET",
        help="only the binaries compiled for this target (cuda:90, hip:gfx942; repeat for several; "
        "default: every target in Triton's cache), and only the winners tuned on a device of that target",
    )


def _register_import(subparsers: Any, dirs: Any) -> None:
    p = add_command(
        subparsers,
        "import",
        _cmd_import,
        parents=[dirs],
        help="install an archive made by `autotune export`",
        description="Install ARCHIVE's records into the tuning cache (a newer local entry is kept) and "
        "its binaries into Triton's cache. An archive is code from whoever built it: every "
        "member is checked before anything is written, and --verify refuses an archive not "
        "signed with your key.",
    )
    p.add_argument("archive", metavar="ARCHIVE")
    p.add_argument("--force", action="store_true", help="import even if the archive was made with another Triton")
    p.add_argument(
        "--verify",
        metavar="KEYFILE",
        default=None,
        help="refuse the archive unless it was signed with the secret in KEYFILE (`export --sign`)",
    )
    p.add_argument("--json", action="store_true", help="the report as JSON")


def _argparse_parent() -> Any:
    parent = option_parent()
    parent.add_argument("--cache-dir", metavar="DIR", help="the tuning cache (default: AUTOTUNE_CACHE_DIR, ...)")
    parent.add_argument(
        "--triton-cache-dir",
        metavar="DIR",
        help="Triton's compile cache (default: TRITON_CACHE_DIR, else ~/.triton/cache)",
    )
    return parent
