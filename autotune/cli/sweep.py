"""The `autotune sweep` subcommand: tune every key a function's argument makers produce, on worker processes or a
Ray cluster, then print the summary (and write it as JSON, and a deployment archive).

    autotune sweep MODULE:KERNEL --calls MODULE:FUNCTION [--workers N] [--ray [ADDRESS]]
                   [--device-kind KIND ...] [--export ARCHIVE [--sign KEYFILE]] [--json OUT] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import AutotuneError
from .arguments import add_command, checked_cache_dir, key_file, output_file_problem, use_cache_dir

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
    except Exception as exc:  # the module's own code failed as it was imported
        raise AutotuneError(f"{option} {spec!r}: importing it raised {type(exc).__name__}: {exc}") from None


def _kernel(spec: str) -> Any:
    """The @autotune kernel KERNEL names; an AutotuneError in the command line's words when it names another
    object (a plain @triton.jit function, a number), said before any worker starts."""
    from triton.runtime import KernelInterface

    from ..kernel.identity import tuned_under

    kernel = _load(spec, "KERNEL")
    if tuned_under(kernel) is not None:
        return kernel
    if isinstance(kernel, KernelInterface):
        what = "a plain @triton.jit kernel: decorate it with @autotune (above @triton.jit) where it is defined"
    else:
        what = f"an object of type {type(kernel).__name__}, not a kernel: give MODULE:NAME of an @autotune kernel"
    raise AutotuneError(f"KERNEL {spec!r} is {what}")


def _makers(spec: str) -> list:
    """The argument makers --calls names: a list of them, or a function returning or yielding them; none is a
    mistake (a sweep of nothing), said before any worker starts."""
    from ..kernel.call import argument_makers

    source = _load(spec, "--calls")
    made = _raising_named(source, spec, "calling it") if callable(source) else source
    if isinstance(made, Iterator):  # a generator's body runs as it is read: read here, where it can fail
        made = _raising_named(functools.partial(list, made), spec, "reading what it yields")
    makers = argument_makers(made, f"--calls {spec!r}")
    if not makers:
        raise AutotuneError(f"--calls {spec!r} returned no argument makers: nothing to sweep; give at least one")
    return makers


def _raising_named(step: Callable[[], Any], spec: str, doing: str) -> Any:
    """`step()`, its exception an AutotuneError saying what `doing` with --calls `spec` raised."""
    try:
        return step()
    except Exception as exc:
        raise AutotuneError(f"--calls {spec!r}: {doing} raised {type(exc).__name__}: {exc}") from exc


def _cmd_sweep(args: Any) -> int:
    ok, secret = _checked_options(args)
    if not ok:
        return 2
    from ..sweeps import SweepInterrupted, sweep

    try:
        kernel = _kernel(args.kernel)
        makers = _makers(args.calls)
        executor = "local" if args.ray is None else args.ray
        report = sweep(kernel, makers, executor=executor, workers=args.workers, device_kinds=args.device_kinds)
    except AutotuneError as exc:
        print(f"autotune sweep: {_in_cli_words(str(exc), args)}", file=sys.stderr)
        return 2
    except SweepInterrupted as stopped:
        return _interrupted(stopped.report, args)
    print(report)
    written = _write_json(args.json, report) if args.json else True
    exported = _export(args.export, kernel, secret) if args.export else True
    return 1 if report.failed or not (written and exported) else 0


def _interrupted(report: Any, args: Any) -> int:
    """Ctrl-C: the summary of what finished, and --json of it; no --export (it would miss the keys left)."""
    print(report)
    if args.json:
        _write_json(args.json, report, "was interrupted")
    done = len(report.tuned) + len(report.skipped)
    left = "; --export was not written" if args.export else ""
    print(
        f"autotune sweep: interrupted: {done} of {len(report.keys)} keys are in the tuning cache{left}; "
        "run the same command again to tune the rest",
        file=sys.stderr,
    )
    return 130


def _write_json(path: str, report: Any, ended: str = "finished") -> bool:
    """Write the summary to --json's `path`; False after saying why it could not be (the sweep's work is cached)."""
    try:
        Path(path).write_bytes(report.to_json())
    except OSError as exc:
        print(
            f"autotune sweep: the sweep {ended}, but --json {path} could not be written: {exc.strerror or exc}; "
            "its winners are in the tuning cache",
            file=sys.stderr,
        )
        return False
    return True


def _export(archive: str, kernel: Any, secret: bytes | None) -> bool:
    """Write the --export archive of `kernel`'s records; False after saying why it could not be."""
    from ..aot.archive import export_archive

    try:
        manifest = export_archive(archive, [kernel], sign_key=secret)
    except (AutotuneError, OSError) as exc:  # ArchiveError, a file system fault
        print(f"autotune sweep: the sweep finished, but --export failed: {exc}", file=sys.stderr)
        return False
    print(f"wrote {archive}: {len(manifest.records)} records of {', '.join(manifest.kernels)}")
    return True


def _in_cli_words(message: str, args: Any) -> str:
    """An error of the `sweep` API in the words of the command line: the options typed, not the keyword arguments
    they became (`sweep(executor='ray')` is `--ray`)."""
    words = [("or use executor='local'", "or drop --ray to tune on worker processes here")]
    if args.workers is not None:
        words += [
            (f"sweep(workers={args.workers})", f"--workers {args.workers}"),
            ("or None for", "or leave it out for"),
        ]
    if args.ray is not None:
        words.append((f"sweep(executor={args.ray!r})", "--ray" if args.ray == "ray" else f"--ray {args.ray}"))
    if args.device_kinds:
        words.append(
            (f"sweep(device_kinds={args.device_kinds!r})", " ".join(f"--device-kind {k}" for k in args.device_kinds))
        )
    for api, cli in words:
        message = message.replace(api, cli)
    return message


def _checked_options(args: Any) -> tuple[bool, bytes | None]:
    """(True, the --sign secret or None) when the output options can be used, else (False, None) after saying why:
    checked before sweeping, so that a mistake costs no sweep. Points AUTOTUNE_CACHE_DIR at --cache-dir."""
    if args.sign and not args.export:
        print("autotune sweep: --sign KEYFILE signs the --export archive; give --export ARCHIVE too", file=sys.stderr)
        return False, None
    for option, value, example in (("json", args.json, "sweep.json"), ("export", args.export, "sweep.tar.gz")):
        problem = value and output_file_problem(option, value, example)
        if problem:
            print(f"autotune sweep: {problem}", file=sys.stderr)
            return False, None
    use_cache_dir(args)  # the driver writes every winner, so its cache is the sweep's
    if checked_cache_dir(args, "sweep", must_exist=False) is None:  # a file, an unreadable directory: exit 2
        return False, None
    return key_file(args.sign, "sweep")


def _workers(text: str) -> int:
    """`--workers`'s value: a positive number of worker processes (or Ray actors)."""
    from ..sweeps.api import MAX_LOCAL_WORKERS, MAX_RAY_WORKERS

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers") from None
    if not 1 <= value <= MAX_RAY_WORKERS:
        raise argparse.ArgumentTypeError(
            f"{text} is not a number of workers from 1 to {MAX_RAY_WORKERS} (at most {MAX_LOCAL_WORKERS} without "
            "--ray); leave --workers out for one per GPU"
        )
    return value


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
            "by a live process, are skipped, so an interrupted sweep resumes. Exit status 1 when a key failed; "
            "130 on Ctrl-C, after the summary (and --json) of what finished."
        ),
    )
    parser.add_argument("kernel", metavar="MODULE:KERNEL", help="the @autotune kernel")
    parser.add_argument("--calls", required=True, metavar="MODULE:FUNCTION", help="returns or yields the makers")
    parser.add_argument("--workers", type=_workers, metavar="N", help="workers (default: one per GPU, else 1)")
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
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="the tuning cache the winners are written to (default: AUTOTUNE_CACHE_DIR, else "
        "$XDG_CACHE_HOME/autotune, else ~/.cache/autotune)",
    )
