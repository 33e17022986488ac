"""The shared Redis tier from a shell: `autotune cache list --remote`, `clear --remote`, `push` and `pull`.

The tier is the one `AUTOTUNE_REMOTE_CACHE` names, or `--remote-url URL`. `push` copies the local disk's
entries to Redis and `pull` Redis's entries to the local disk; neither replaces a newer entry.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from ..format import format_key, plural, safe_text
from .arguments import add_command, add_kernel_filter
from .rows import entries_table, sortable

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


@contextlib.contextmanager
def _warnings_said(command: str) -> Iterator[None]:
    """Within it, the tiers' CacheWarnings are caught; after it, each is said once on stderr as this command's own
    line, escaped (`_reasons`: a Redis key or an entry's text is anyone's to write), not by Python's warning printer
    ("<frozen runpy>:88: CacheWarning: ...")."""
    from ..errors import CacheWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CacheWarning)
        try:
            yield
        finally:
            for reason in _reasons(caught):
                print(f"autotune cache {command}: {reason}", file=sys.stderr)


def list_remote(args: argparse.Namespace) -> int:
    """`autotune cache list --remote`: one line per entry in Redis; exit 1 when Redis stopped answering during it,
    or when a --kernel matches nothing (with --json too, as the disk's list)."""
    with _warnings_said("list"):
        return _list(args)


def _list(args: argparse.Namespace) -> int:
    tier = remote_or_exit(args, "list")
    if tier is None:
        return 2
    found, stopped = tier.listing(args.kernel)
    entries = sorted(found, key=lambda e: _order(e.record))
    if not entries and stopped is None and args.kernel is not None:  # a filter that matches nothing: exit 1
        if args.json:
            print("[]")
        print(
            f"no entries for kernel {safe_text(repr(args.kernel))} in {tier.url} (`autotune cache list "
            f"--remote` lists every kernel){safe_text(_suggestion(tier, args.kernel))}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps([_json_of(tier, e) for e in entries], indent=1))
    elif entries:
        print(entries_table(e.record for e in entries))
        print(f"\n{plural(len(entries), 'entry', 'entries')} in {tier.url}")
    elif stopped is None:
        print(f"no entries in {tier.url}")
    return _stopped("list --remote", tier, len(entries), stopped, "only those are listed")


def _order(record: Any) -> tuple:
    """How `list --remote` orders entries: as the disk's list (kernel, its module, key by value, dtypes, device)."""
    return (record.kernel, record.kernel_id or "", sortable(record.key), record.dtypes, record.device)


def _json_of(tier: Any, entry: Any) -> dict[str, Any]:
    """An entry of `list --remote --json`: its Redis key, kernel, kernel_id and record."""
    return {
        "key": tier.key_of(entry.location, entry.entry_id),
        "kernel": entry.record.kernel,
        "kernel_id": entry.record.kernel_id,
        "record": entry.record.to_dict(),
    }


def clear_remote(args: argparse.Namespace, key: tuple | None) -> int:
    """`autotune cache clear --remote`: remove entries from Redis (the whole fleet's)."""
    with _warnings_said("clear"):
        return _clear(args, key)


def _clear(args: argparse.Namespace, key: tuple | None) -> int:
    tier = remote_or_exit(args, "clear")
    if tier is None:
        return 2
    others = 0  # keys under the prefix that were not readable entries, deleted by a clear of everything
    if args.kernel is None and key is None:
        removed, others, problem = tier.clear_all_now()
    else:
        removed, problem = tier.remove_now(args.kernel, key)
    if problem is not None:
        print(
            f"autotune cache clear: the Redis cache at {tier.url} failed during the clear ({safe_text(problem)}); "
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
    stray = (
        f" and {plural(others, 'other key', 'other keys')} under its prefix (unreadable, or not autotune's)"
        if others
        else ""
    )
    print(f"removed {plural(len(removed), 'entry', 'entries')} ({safe_text(what)}){stray} from {tier.url}")
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
        if command == "pull":
            found, stopped = tier.listing(args.kernel)
        else:  # the disk's unreadable entries are said, as pull says Redis's, not left out unsaid
            found, unreadable = disk.listing(args.kernel)
            stopped = None
            _say_unreadable(command, unreadable)
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
        for reason in _reasons(caught):  # entries the listing skipped (unreadable, another schema): said, not fatal
            print(f"autotune cache {command}: {reason}", file=sys.stderr)
        del caught[:]  # what follows is the copy's own
        counts = _copy_entries(found, target, args.lock_timeout)
    status = _report_copy(command, tier.url, counts, caught, args.lock_timeout)
    return max(status, _stopped(command, tier, len(found), stopped, f"{counts['copied']} copied"))


def _say_unreadable(command: str, unreadable: Sequence[str]) -> None:
    """Print the entries a listing could not read ("N entries could not be read: ..."); not fatal, as pull's."""
    if unreadable:
        print(
            f"autotune cache {command}: {plural(len(unreadable), 'entry', 'entries')} could not be read and "
            f"{'is' if len(unreadable) == 1 else 'are'} not copied: {safe_text('; '.join(unreadable))}",
            file=sys.stderr,
        )


def _copy_entries(found: Sequence[Any], target: Any, lock_timeout: float) -> dict[str, int]:
    """Copy each entry under the target's lease (as a tuning writes): {"copied", "kept", "failed", "busy",
    "unlockable"}: "busy" a lease held by another process past `lock_timeout` (its holder, as the tier reports it
    after the wait), "unlockable" one that could not be taken at all (an error the tier warned, such as a kernel
    directory that is a file, or Redis unreachable): told by the tier, not by how long the wait took."""
    from ..storage import EntryRef
    from ..storage.kernel_cache import same_slot, slot_for

    counts = dict.fromkeys(("copied", "kept", "failed", "busy", "unlockable"), 0)
    for e in found:
        entry = EntryRef.of(e.record)
        # as a tuning: written only under the target's lease, so a node tuning this entry now (or one
        # that wrote a newer winner between our read and our write) never has its entry replaced
        lease = target.lock(entry, timeout_s=lock_timeout)
        if lease is None:  # the tier says whether a holder has it: busy, else it could not be locked at all
            counts["busy" if target.lease_holder(entry) is not None else "unlockable"] += 1
            continue
        try:
            slot = slot_for(target, entry, e.record)  # its kernel version's entry there: another version's stays
            there = target.get(slot)  # another version's (the oldest, evicted as a tuning would) is no newer copy
            if there is not None and same_slot(there, e.record) and there.timestamp >= e.record.timestamp:
                counts["kept"] += 1
            elif target.put(slot, e.record):
                counts["copied"] += 1
            else:
                counts["failed"] += 1
        finally:
            lease.release()
    return counts


def _reasons(caught: Sequence[Any]) -> list[str]:
    """The distinct CacheWarnings of `caught`, escaped, in this command's words: without the "autotune cache: "
    prefix, the advice for a tuning's lock timeout (AUTOTUNE_LOCK_TIMEOUT_S; a copy's is --lock-timeout) and what a
    tuning does without its lock (a copy writes nothing then)."""
    from ..errors import CacheWarning
    from ..storage.protocol import LOCK_TIMEOUT_ADVICE

    texts = (
        str(w.message).removeprefix("autotune cache: ").replace(LOCK_TIMEOUT_ADVICE, "").split("; tuning ")[0]
        for w in caught
        if issubclass(w.category, CacheWarning)
    )
    return [safe_text(text) for text in dict.fromkeys(texts)]


def _report_copy(command: str, url: str, counts: dict[str, int], caught: Sequence[Any], lock_timeout: float) -> int:
    copied, kept, failed = counts["copied"], counts["kept"], counts["failed"]
    reasons = _reasons(caught)
    where = f"{'to' if command == 'push' else 'from'} {url}"
    print(
        f"{command}: copied {plural(copied, 'entry', 'entries')} {where}"
        + (f"; {kept} already there and as new or newer" if kept else "")
    )
    not_copied = failed + counts["busy"] + counts["unlockable"]
    if not_copied:
        not_written = (["the target refused the write"] if failed and not reasons else []) + _lock_failures(
            command, counts, lock_timeout
        )
        print(
            f"autotune cache {command}: {plural(not_copied, 'entry', 'entries')} could not be copied "
            f"({'; '.join(reasons + not_written)})",
            file=sys.stderr,
        )
        return 1
    for reason in reasons:  # entries skipped on the way (another schema): said, not fatal
        print(f"autotune cache {command}: {reason}", file=sys.stderr)
    return 0


def _lock_failures(command: str, counts: dict[str, int], lock_timeout: float) -> list[str]:
    """What became of the entries whose lock (a Redis lease for push) was not had: held by another process past
    --lock-timeout, or not taken at all (the warnings before say why)."""
    lock = "Redis lease" if command == "push" else "lock"
    busy, unlockable = counts["busy"], counts["unlockable"]
    said = []
    if busy:
        said.append(
            f"{plural(busy, 'entry', 'entries')} not written: {'its' if busy == 1 else 'their'} {lock} stayed held "
            f"by another process for over {lock_timeout:g} s (--lock-timeout); run the command again once the "
            "tuning is done"
        )
    if unlockable:
        said.append(
            f"{plural(unlockable, 'entry', 'entries')} not written: {'its' if unlockable == 1 else 'their'} {lock} "
            "could not be taken, for the reason given; fix that and run the command again"
        )
    return said


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
