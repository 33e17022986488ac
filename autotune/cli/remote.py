"""The shared Redis tier from a shell: `autotune cache list --remote`, `clear --remote`, `push` and `pull`.

The tier is the one `AUTOTUNE_REMOTE_CACHE` names, or `--remote-url URL`. `push` copies the local disk's
entries to Redis and `pull` Redis's entries to the local disk; neither replaces a newer entry.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from ..format import format_key, plural, safe_text
from .arguments import add_command, add_kernel_filter
from .rows import entries_table

__all__ = ["remote_or_exit", "list_remote", "clear_remote", "register"]


def remote_or_exit(args: argparse.Namespace, command: str) -> Any | None:
    """The remote tier this command works on, reachable; None after printing why not (exit status 2)."""
    from ..errors import OptionError
    from ..storage.remote_config import NO_REMOTE, remote_tier, remote_tier_at

    try:
        url = getattr(args, "remote_url", None)
        tier = remote_tier_at(url, "--remote-url") if url else remote_tier()
    except OptionError as exc:
        print(f"autotune cache {command}: {exc}", file=sys.stderr)
        return None
    if tier is None:
        print(f"autotune cache {command}: {NO_REMOTE} or pass --remote-url", file=sys.stderr)
        return None
    problem = tier.ping()
    if problem is not None:
        print(f"autotune cache {command}: {safe_text(problem)}", file=sys.stderr)
        return None
    return tier


def _suggestion(tier: Any, kernel: str) -> str:
    """ " Did you mean 'x'?" for a `kernel` none of whose entries `tier` (the remote tier, or the disk) holds,
    naming its closest cached kernel (`storage.entries.kernel_suggestion`); "" when `tier` holds some of `kernel`
    (a key matched nothing) or none is close."""
    from ..storage.entries import kernel_suggestion

    return kernel_suggestion(kernel, [(e.record.kernel, e.record.kernel_id) for e in tier.entries(None)])


def _stopped(command: str, tier: Any, listed: int, stopped: str | None, done: str) -> int:
    """Exit status 1 after saying that the listing stopped early (`stopped`: why, `done`: what became of the
    `listed` entries); 0, saying nothing, when the listing was whole."""
    if stopped is None:
        return 0
    again = f"run `autotune cache {command}` again"
    if "refused a command" in stopped:  # Redis is up but will not do what the listing needs (an ACL, a setting)
        why = safe_text(stopped)
        fix = f"give the Redis URL's user the right to SCAN and GETRANGE the cache's keys, then {again}"
    else:
        why = f"the Redis cache at {tier.url} stopped answering ({safe_text(stopped)})"
        fix = f"{again}, or raise AUTOTUNE_REMOTE_CACHE_TIMEOUT_S (now {tier.timeout_s:g} s) if Redis is slow, not down"
    print(
        f"autotune cache {command}: {why} after listing {plural(listed, 'entry', 'entries')}; {done}, the rest were "
        f"not read; {fix}",
        file=sys.stderr,
    )
    return 1


def list_remote(args: argparse.Namespace) -> int:
    """`autotune cache list --remote`: one line per entry in Redis; exit 1 when Redis stopped answering during it."""
    tier = remote_or_exit(args, "list")
    if tier is None:
        return 2
    found, stopped = tier.listing(args.kernel)
    done = "only those are listed"
    entries = sorted(
        found,
        key=lambda e: (
            e.record.kernel,
            e.record.kernel_id or "",
            format_key(e.record.key),
            e.record.dtypes,
            e.record.device,
        ),
    )
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "key": tier.key_of(e.location, e.entry_id),
                        "kernel": e.record.kernel,
                        "kernel_id": e.record.kernel_id,
                        "record": e.record.to_dict(),
                    }
                    for e in entries
                ],
                indent=1,
            )
        )
        return _stopped("list", tier, len(entries), stopped, done)
    if not entries and stopped is None:
        if args.kernel is not None:  # as the disk's list: a filter that matches nothing is said, exit 1
            print(
                f"no entries for kernel {safe_text(repr(args.kernel))} in {tier.url} (`autotune cache list "
                f"--remote` lists every kernel){safe_text(_suggestion(tier, args.kernel))}",
                file=sys.stderr,
            )
            return 1
        print(f"no entries in {tier.url}")
        return 0
    if entries:
        print(entries_table(e.record for e in entries))
        print(f"\n{plural(len(entries), 'entry', 'entries')} in {tier.url}")
    return _stopped("list", tier, len(entries), stopped, done)


def clear_remote(args: argparse.Namespace, key: tuple | None) -> int:
    """`autotune cache clear --remote`: remove entries from Redis (the whole fleet's)."""
    tier = remote_or_exit(args, "clear")
    if tier is None:
        return 2
    removed, problem = tier.remove_now(args.kernel, key)
    if problem is not None:
        print(
            f"autotune cache clear: the Redis cache at {tier.url} failed during the clear ({problem}); "
            f"{plural(len(removed), 'entry was', 'entries were')} removed, others may remain",
            file=sys.stderr,
        )
        return 1
    what = (
        "all kernels"
        if args.kernel is None
        else f"kernel {args.kernel!r}" + (f" key {format_key(list(key))}" if key is not None else "")
    )
    if not removed and args.kernel is not None:
        print(
            f"autotune cache clear: nothing matched {safe_text(what)} in {tier.url}"
            f"{safe_text(_suggestion(tier, args.kernel))}",
            file=sys.stderr,
        )
        return 1
    print(f"removed {plural(len(removed), 'entry', 'entries')} ({what}) from {tier.url}")
    return 0


COPY_LOCK_TIMEOUT_S = 30.0


def _seconds(text: str) -> float:
    """`--lock-timeout`'s value: a positive, finite number of seconds, at most a day."""
    from ..options import MAX_SECONDS

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds, at most {MAX_SECONDS:g}")
    return value


def _copy(args: argparse.Namespace, command: str) -> int:
    """`push` (disk -> Redis) or `pull` (Redis -> disk); exits 1 when an entry could not be copied, saying why."""
    from ..errors import CacheWarning
    from ..storage import DiskCache
    from .arguments import use_checked_cache_dir

    # applies --cache-dir; a file, an unreadable directory, or (push) a --cache-dir that does not exist: exit 2
    directory = use_checked_cache_dir(args, command, must_exist=command == "push")
    if directory is None:
        return 2
    tier = remote_or_exit(args, command)
    if tier is None:
        return 2
    disk = DiskCache()
    source, target = (disk, tier) if command == "push" else (tier, disk)
    with warnings.catch_warnings(record=True) as caught:  # the tiers' warnings are this command's report
        warnings.simplefilter("always", CacheWarning)
        found, stopped = tier.listing(args.kernel) if command == "pull" else (disk.entries(args.kernel), None)
        # as `cache list --kernel`: a filter that matches nothing, exit 1 (unless Redis stopped before it was read)
        if not found and args.kernel is not None and stopped is None:
            origin = tier.url if command == "pull" else safe_text(directory)
            print(
                f"autotune cache {command}: no entries for kernel {safe_text(repr(args.kernel))} in {origin}, "
                f"nothing copied (`autotune cache list{' --remote' if command == 'pull' else ''}` lists every "
                f"kernel){safe_text(_suggestion(source, args.kernel))}",
                file=sys.stderr,
            )
            for w in caught:  # what the listing warned (a read error may be why nothing matched): said too
                if issubclass(w.category, CacheWarning):
                    print(f"  {safe_text(str(w.message).removeprefix('autotune cache: '))}", file=sys.stderr)
            return 1
        counts = _copy_entries(found, target, args.lock_timeout)
    status = _report_copy(command, tier.url, counts, caught, args.lock_timeout)
    return max(status, _stopped(command, tier, len(found), stopped, f"{counts['copied']} copied"))


def _copy_entries(found: Sequence[Any], target: Any, lock_timeout: float) -> dict[str, int]:
    """Copy each entry under the target's lease (as a tuning writes): {"copied", "kept", "failed", "busy"}."""
    from ..storage import EntryRef
    from ..storage.kernel_cache import slot_for

    counts = dict.fromkeys(("copied", "kept", "failed", "busy"), 0)
    for e in found:
        entry = EntryRef.of(e.record)
        # as a tuning: written only under the target's lease, so a node tuning this entry now (or one
        # that wrote a newer winner between our read and our write) never has its entry replaced
        lease = target.lock(entry, timeout_s=lock_timeout)
        if lease is None:  # held past --lock-timeout (the tier warned, naming the holder), or unreachable
            counts["busy"] += 1
            continue
        try:
            slot = slot_for(target, entry, e.record)  # its kernel source's entry there: another source's stays
            there = target.get(slot)
            if there is not None and there.timestamp >= e.record.timestamp:
                counts["kept"] += 1
            elif target.put(slot, e.record):
                counts["copied"] += 1
            else:
                counts["failed"] += 1
        finally:
            lease.release()
    return counts


def _report_copy(command: str, url: str, counts: dict[str, int], caught: Sequence[Any], lock_timeout: float) -> int:
    from ..errors import CacheWarning
    from ..storage.protocol import LOCK_TIMEOUT_ADVICE

    copied, kept, failed, busy = counts["copied"], counts["kept"], counts["failed"], counts["busy"]
    # a lock timeout's advice is a tuning's (AUTOTUNE_LOCK_TIMEOUT_S): this command's own is --lock-timeout, below
    reasons = list(
        dict.fromkeys(
            safe_text(str(w.message).removeprefix("autotune cache: ").replace(LOCK_TIMEOUT_ADVICE, ""))
            for w in caught
            if issubclass(w.category, CacheWarning)
        )
    )
    where = f"{'to' if command == 'push' else 'from'} {url}"
    print(
        f"{command}: copied {plural(copied, 'entry', 'entries')} {where}"
        + (f"; {kept} already there and as new or newer" if kept else "")
    )
    if failed or busy:
        not_written = (["the target refused the write"] if failed and not reasons else []) + (
            [
                f"{plural(busy, 'entry', 'entries')} not written: {'its' if busy == 1 else 'their'} "
                f"{'Redis lease' if command == 'push' else 'lock'} stayed held for over {lock_timeout:g} s "
                "(--lock-timeout) or could not be taken; run the command again once the tuning is done"
            ]
            if busy
            else []
        )
        print(
            f"autotune cache {command}: {plural(failed + busy, 'entry', 'entries')} could not be copied "
            f"({'; '.join(reasons + not_written)})",
            file=sys.stderr,
        )
        return 1
    for reason in reasons:  # entries skipped on the way (unreadable, another schema): said, not fatal
        print(f"autotune cache {command}: {reason}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction, common: Sequence[argparse.ArgumentParser]) -> None:
    """Add `push` and `pull` to `autotune cache`."""
    for command, text in (
        ("push", "copy the local disk cache's entries to the Redis cache"),
        ("pull", "copy the Redis cache's entries to the local disk cache"),
    ):
        p = add_command(
            sub,
            command,
            functools.partial(_copy, command=command),
            parents=common,
            help=text,
            description=text[0].upper() + text[1:] + " (AUTOTUNE_REMOTE_CACHE or "
            "--remote-url); an entry already there and as new is left alone.",
        )
        add_kernel_filter(p)
        p.add_argument(
            "--lock-timeout",
            type=_seconds,
            default=COPY_LOCK_TIMEOUT_S,
            metavar="SECONDS",
            help="wait this long for an entry another process is tuning, then leave it uncopied "
            f"(exit 1; default {COPY_LOCK_TIMEOUT_S:g})",
        )
