"""The remote tier: the tuning cache shared by a fleet in one Redis (the `redis` extra), behind the local disk.

Keys (`<prefix>` is "autotune")::

    <prefix>:entry:<kernel dir>:<entry id>   one TuningRecord as JSON, the bytes a disk entry holds (TTL optional)
    <prefix>:lease:<kernel dir>:<entry id>   the single-flight lease: who tunes that entry now (SET NX PX)

A lease is taken with `SET NX PX` and renewed by a thread of its holder every third of its life; it is only
extended or deleted by the holder that set it (compare-and-set in a Lua script). A holder that dies stops
renewing, the lease expires, and one waiter (whichever `SET NX` succeeds) takes it over.

Redis is never on the critical path of a launch: commands time out after `timeout_s`, and after a connection
failure the tier answers every call as a miss without touching the network for `retry_s`, after one
`CacheWarning` per outage. Nothing read from Redis is unpickled or evaluated: records are bounded JSON,
validated like a disk entry, and one that fails is ignored with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import CacheEntryError, OptionError, did_you_mean
from ..record import TuningRecord
from .entries import (
    MAX_ENTRY_BYTES,
    as_key_tuple,
    entry_json,
    is_dir_of,
    is_newer_schema,
    kernel_matches,
    key_text,
    location_pattern,
    parse_record,
    wanted_key_text,
)
from .protocol import ANY, LOCK_TIMEOUT_ADVICE, EntryRef, StoredEntry, every_slot_newer, warn

__all__ = ["RedisCache", "RedisLease", "safe_url"]

logger = logging.getLogger("autotune")
T = TypeVar("T")

_RENEW = """if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"""
_RELEASE = """if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"""
# Run when `SET NX PX` found a lease held: take it over when it is broken. A lease without an expiry (written by
# hand, or by a client that dropped PX) would otherwise stall every node for the lock timeout, forever after; one
# that is not a string, is oversized or is not a holder's JSON cannot be a live holder's. Returns "ok" (it had
# gone: taken), "held", or why the broken lease was replaced (SET replaces a key of any type). Atomic: Redis runs
# a script alone.
_TAKEOVER = """
local kind = redis.call('TYPE', KEYS[1]).ok
local why = nil
if kind == 'none' then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 'ok' end
  return 'held'
elseif kind ~= 'string' then why = 'is not a string'
elseif redis.call('PTTL', KEYS[1]) == -1 then why = 'has no expiry'
elseif redis.call('STRLEN', KEYS[1]) > tonumber(ARGV[3]) then why = 'is over ' .. ARGV[3] .. ' bytes'
else
  local ok, info = pcall(cjson.decode, redis.call('GET', KEYS[1]))
  if not ok or type(info) ~= 'table' or info['token'] == nil then why = 'is not a holder record' end
end
if why == nil then return 'held' end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return why
"""
MAX_LEASE_BYTES = 4096  # a lease value is a holder's token, pid, host and time: ~100 bytes
_NOTICE_S = 2.0
_AUTH_FIX = (
    "set AUTOTUNE_REMOTE_CACHE_PASSWORD (or the password in the URL, redis://:PASSWORD@host:6379/0) to the "
    "one this Redis expects"
)


class _Unavailable(Exception):
    """Redis cannot be used right now (down, or a fault already warned about): answer as a miss. `reason`: why,
    in words, for a caller that reports it (an explicit clear, the CLI); `cause`: the client's error alone."""

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args and self.args[0] else "Redis is being left alone after a failure"

    @property
    def cause(self) -> str:
        return str(self.args[1]) if len(self.args) > 1 and self.args[1] else self.reason


class _Refused(_Unavailable):
    """Redis answered one command with an error (a key of another type, OOM, READONLY): that command failed,
    Redis itself is up, so a listing goes on with the next key."""


class RedisLease:
    """A held Redis lease, renewed in the background until released (or lost to an expiry)."""

    def __init__(self, tier: RedisCache, key: str, value: str) -> None:
        self._tier, self._key, self._value = tier, key, value
        self._stop = threading.Event()
        self._lost = False
        self._thread = threading.Thread(target=self._keep, name="autotune-redis-lease", daemon=True)
        self._thread.start()

    def _keep(self) -> None:
        while not self._stop.wait(self._tier.lease_s / 3):
            if not self.renew():
                return

    def renew(self) -> bool:
        """Extend the lease to a full `lease_s`; False once it expired and may belong to another node."""
        if self._lost or self._stop.is_set():
            return not self._lost
        try:
            kept = self._tier.call(
                lambda c: c.eval(_RENEW, 1, self._key, self._value, int(self._tier.lease_s * 1000)), always=True
            )
        except _Unavailable:
            return True  # cannot tell: keep tuning; a takeover at worst costs one duplicate tuning
        if not kept:
            self._lost = True
            logger.warning(
                "autotune cache: the Redis lease %s expired while this process tuned; another node "
                "may be tuning the same key",
                self._key,
            )
        return bool(kept)

    def release(self) -> None:
        """Stop renewing and delete the lease if this holder still has it; idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            self._tier.call(lambda c: c.eval(_RELEASE, 1, self._key, self._value), always=True)
        except _Unavailable:
            pass  # it expires by itself


class RedisCache:
    """Entries in one Redis database, shared by every process and machine that points at it."""

    name = "remote"
    persistent = True

    def __init__(
        self,
        url: str,
        *,
        password: str | None = None,
        ttl_s: float | None = None,
        timeout_s: float = 1.0,
        lease_s: float = 30.0,
        retry_s: float = 30.0,
        prefix: str = "autotune",
    ) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise OptionError("a Redis cache needs the redis client: pip install 'autotune[redis]'") from None
        try:
            self.client = redis.Redis.from_url(
                url,
                password=password,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry=Retry(NoBackoff(), 0),
                health_check_interval=0,
            )
        except ValueError as exc:
            raise OptionError(
                f"{safe_url(url)!r} is not a Redis URL ({exc}); use redis://host:6379/0 or rediss://host:6380/0 (TLS)"
            ) from None
        _check_connection_options(self.client, url, redis.exceptions.RedisError)
        self.url = safe_url(url)
        self.ttl_s, self.timeout_s, self.lease_s, self.retry_s, self.prefix = ttl_s, timeout_s, lease_s, retry_s, prefix
        self._errors = redis.exceptions
        self._down_until = 0.0
        self._down_reason = ""  # why Redis is being left alone (for an explicit clear's message)
        self._down_cause = ""  # the client's error that began it ("TimeoutError: ...")
        self._in_outage = False  # warned about the current outage; cleared by a command that works
        self._warned: set[str] = set()
        self._guard = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisCache({self.url!r})"

    # -- faults -------------------------------------------------------------------------------------

    def call(self, command: Callable[[Any], T], *, always: bool = False, report: bool = True) -> T:
        """Run `command(client)`; on a fault warn (once per outage or message) and raise _Unavailable (_Refused when
        Redis answered this one command with an error). After a connection failure, a refused password or any
        other fault of the client, Redis is left alone for `retry_s`, except for `always` commands (a lease's
        renewal and release, which run off the launch path and must not let a short stall lose the lease, and an
        explicit clear, which must try now). `report=False`: the caller reports the fault itself (no warning)."""
        if not always and time.monotonic() < self._down_until:
            raise _Unavailable(self._down_reason or None, self._down_cause or self._down_reason or None)
        try:
            result = command(self.client)
        except self._errors.AuthenticationError as exc:  # a ConnectionError, but the password is what to fix
            self._outage(
                _auth_text(self.url, exc),
                report,
                f"{_AUTH_FIX}; using the local cache only, trying Redis again every {self.retry_s:g} s",
                exc,
            )
        except (self._errors.ConnectionError, self._errors.TimeoutError) as exc:
            self._outage(
                f"the Redis cache at {self.url} is unreachable ({exc.__class__.__name__}: {exc})",
                report,
                f"using the local cache only, trying Redis again every {self.retry_s:g} s",
                exc,
            )
        except self._errors.RedisError as exc:  # OOM (full), READONLY, NOPERM, WRONGTYPE, ...
            text = f"the Redis cache at {self.url} refused a command ({exc.__class__.__name__}: {exc})"
            if report:
                self.warn_once(f"autotune cache: {text}; the local cache goes on without it")
            raise _Refused(text) from None
        except Exception as exc:  # anything else out of the client (a bug, a setting it rejects late): a fault too
            self._outage(
                f"the Redis client failed talking to {self.url} ({exc.__class__.__name__}: {exc})",
                report,
                f"using the local cache only, trying Redis again every {self.retry_s:g} s",
                exc,
            )
        self._in_outage = False
        return result

    def _outage(self, text: str, report: bool, advice: str, exc: Exception) -> None:
        """Leave Redis alone for `retry_s` after `text` (caused by `exc`), warn once per outage (unless the caller
        reports it), and raise _Unavailable."""
        cause = f"{exc.__class__.__name__}: {exc}"
        with self._guard:
            first, self._in_outage = not self._in_outage, True
            self._down_until = time.monotonic() + self.retry_s
            self._down_reason, self._down_cause = text, cause
        if first and report:
            warn(f"autotune cache: {text}; {advice}")
        raise _Unavailable(text, cause) from None

    def warn_once(self, message: str) -> None:
        with self._guard:
            if message in self._warned:
                return
            self._warned.add(message)
        warn(message)

    def ping(self) -> str | None:
        """None when Redis answers now (whatever the back-off after an earlier failure, which then ends), else why
        not, as a sentence naming the URL and what to fix (for the CLI, which reports it instead of listing
        nothing)."""
        try:
            self.client.ping()
        except self._errors.AuthenticationError as exc:
            return f"{_auth_text(self.url, exc)}; {_AUTH_FIX}"
        except Exception as exc:  # whatever the client raises: an answer, never an exception
            return f"cannot reach the Redis cache at {self.url} ({exc.__class__.__name__}: {exc})"
        with self._guard:
            self._down_until, self._in_outage = 0.0, False
        return None

    # -- entries ------------------------------------------------------------------------------------

    def key_of(self, location: str, entry_id: str, kind: str = "entry") -> str:
        """The Redis key of an entry (or of its lease)."""
        return f"{self.prefix}:{kind}:{location}:{entry_id}"

    def _read(
        self, key: str, *, always: bool = False, report: bool = True, future_ok: bool = False, quiet: bool = False
    ) -> TuningRecord | None:
        """The record at `key`, or None (warned when refused, unless `quiet`: a clear of everything deletes it);
        `future_ok`: one dated ahead too (a clear's read)."""
        size = self.call(lambda c: c.strlen(key), always=always, report=report)  # never download an oversized value
        data = b""
        if 0 < size <= MAX_ENTRY_BYTES:  # bounded: a value grown since STRLEN reads one byte over the limit
            data = self.call(lambda c: c.getrange(key, 0, MAX_ENTRY_BYTES), always=always, report=report) or b""
        if size > MAX_ENTRY_BYTES or len(data) > MAX_ENTRY_BYTES:
            what = f"{size} bytes" if size > MAX_ENTRY_BYTES else "it grew past it while being read"
            if not quiet:
                self.warn_once(
                    f"autotune cache: refused Redis key {key}: over the {MAX_ENTRY_BYTES}-byte limit of an entry "
                    f"({what})"
                )
            return None
        if not data:
            return None
        try:
            return parse_record(data, f"Redis key {key}", future_ok=future_ok)
        except CacheEntryError as exc:
            if exc.kind == "schema" and is_newer_schema(exc.schema_version):
                # a newer autotune sharing the server: not a fault; its entry stays (`slot_for` skips it)
                logger.debug("autotune cache: %s; written by a newer autotune, left in place", exc)
            elif not quiet:
                self.warn_once(f"autotune cache: refused a record from Redis ({exc}); ignoring it")
            return None

    def get(self, entry: EntryRef) -> TuningRecord | None:
        try:
            return self._read(self.key_of(entry.location, entry.entry_id))
        except _Unavailable:
            return None

    def newer_at(self, entry: EntryRef) -> bool:
        try:
            return self._newer_at(self.key_of(entry.location, entry.entry_id))
        except _Unavailable:
            return False

    def _newer_at(self, key: str) -> bool:
        head = self.call(lambda c: c.getrange(key, 0, 63))  # a record's JSON starts with its schema_version
        return bool(head) and _newer_schema(head)

    def put(self, entry: EntryRef, record: TuningRecord) -> bool:
        key = self.key_of(entry.location, entry.entry_id)
        try:
            if self._newer_at(key):  # `slot_for` chose it: a newer autotune wrote every slot of the key
                self.warn_once(every_slot_newer(entry.what, f"Redis at {self.url}"))
                return False
            data = entry_json(record, entry.what)
            ttl_ms = int(self.ttl_s * 1000) if self.ttl_s else None
            self.call(lambda c: c.set(key, data, px=ttl_ms))
        except _Unavailable:
            return False
        except CacheEntryError as exc:  # too large for any reader: not written, rather than written unreadable
            self.warn_once(f"autotune cache: {exc} (Redis key {key})")
            return False
        logger.debug("autotune cache: wrote Redis key %s", key)
        return True

    def lock(self, entry: EntryRef, *, timeout_s: float | None) -> RedisLease | None:
        key = self.key_of(entry.location, entry.entry_id, "lease")
        value = json.dumps(
            {"token": secrets.token_hex(8), "pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        )
        start = time.monotonic()
        pause, noticed = 0.02, False
        while True:
            try:
                if self._acquired(key, value, entry):
                    return RedisLease(self, key, value)
                waited = time.monotonic() - start
                if timeout_s is not None and waited >= timeout_s:
                    warn(
                        f"autotune cache: another node has held the Redis lease of {entry.what} for over "
                        f"{timeout_s:g} s ({self.holder(key)}): it may be stopped or hung. Not writing "
                        f"{entry.what} to Redis this time (a tuning still uses its winner){LOCK_TIMEOUT_ADVICE}"
                    )
                    return None
                if waited >= _NOTICE_S and not noticed:
                    noticed = True
                    logger.info(
                        "waiting for another node tuning %s (Redis lease %s; %s)", entry.what, key, self.holder(key)
                    )
            except _Unavailable:
                return None
            time.sleep(pause if timeout_s is None else max(0.0, min(pause, timeout_s - waited)))
            pause = min(pause * 2, 0.5)

    def _acquired(self, key: str, value: str, entry: EntryRef) -> bool:
        """Whether this call took the lease `key` (a broken one is taken over, warned once per key)."""
        if self.call(lambda c: c.set(key, value, nx=True, px=int(self.lease_s * 1000))):
            return True
        answer = self.call(lambda c: c.eval(_TAKEOVER, 1, key, value, int(self.lease_s * 1000), MAX_LEASE_BYTES))
        answer = answer.decode("utf-8", "replace") if isinstance(answer, bytes) else str(answer)
        if answer not in ("ok", "held"):
            self.warn_once(
                f"autotune cache: the Redis lease {key} {answer}, so no live node can be holding it (a lease is "
                f"set with an expiry by the node tuning {entry.what}); took it over. Whatever wrote it should "
                "not write under the autotune prefix"
            )
        return answer != "held"

    def lease_holder(self, entry: EntryRef) -> str | None:
        key = self.key_of(entry.location, entry.entry_id, "lease")
        try:
            alive = self.call(lambda c: c.pttl(key)) > 0  # -2: none; -1: no expiry, a broken lease (taken over)
        except _Unavailable:
            return None
        return self.holder(key) if alive else None

    def holder(self, lease_key: str) -> str:
        """Who holds a lease, in words (for waiters' messages); an oversized value is not downloaded."""
        try:
            if self.call(lambda c: c.strlen(lease_key)) > MAX_LEASE_BYTES:
                return "holder unknown"
            info = json.loads(self.call(lambda c: c.get(lease_key)) or b"null")
            return f"pid {int(info['pid'])} on host {str(info['host'])[:255]}"
        except Exception:
            return "holder unknown"

    # -- listing and removing -----------------------------------------------------------------------

    def _scan(self, kernel: str | None, *, always: bool = False, report: bool = True) -> list[tuple[str, str, str]]:
        """(redis key, location, entry id) of every entry key (of `kernel`: a short name or a "module:qualname",
        see `entries.is_dir_of`; or all)."""
        pattern = self.key_of(location_pattern(kernel) if kernel else "*", "*")
        keys = self.call(lambda c: list(c.scan_iter(match=pattern, count=500)), always=always, report=report)
        out = []
        for raw in keys:
            key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            location, _, entry_id = key[len(self.prefix) + len(":entry:") :].rpartition(":")
            if kernel is None or is_dir_of(location, kernel):
                out.append((key, location, entry_id))
        return sorted(out)

    def _listing(
        self,
        kernel: str | None,
        *,
        always: bool = False,
        report: bool = True,
        future_ok: bool = False,
        quiet: bool = False,
    ) -> tuple[list[StoredEntry], _Unavailable | None]:
        """(every readable entry, of `kernel` (`entries.kernel_matches`) or all; why the listing stopped early, or
        None). A key Redis will not read as a string (a hash someone stored under the prefix: WRONGTYPE) is skipped
        with a warning naming it: one stray key must not hide the entries after it. Only Redis going away stops it.
        `future_ok`: entries dated ahead are listed too (a clear's listing); `quiet`: keys not read are not warned
        about (a clear of everything, which deletes them)."""
        out: list[StoredEntry] = []
        try:
            for key, location, entry_id in self._scan(kernel, always=always, report=report):
                try:
                    record = self._read(key, always=always, report=False, future_ok=future_ok, quiet=quiet)
                except _Refused as exc:
                    if quiet:
                        continue
                    self.warn_once(
                        f"autotune cache: skipped Redis key {key}: {exc.reason}; it is not an entry "
                        "autotune wrote (delete it, or clear everything with `autotune cache clear "
                        "--remote`)"
                    )
                    continue
                except _Unavailable as exc:  # read unreported (a refusal is said above): said here, or never
                    if report:
                        warn(
                            f"autotune cache: {exc.reason}; the listing of {self.url} stopped after "
                            f"{len(out)} of its entries, the others were not read"
                        )
                    raise
                if record is not None and (kernel is None or kernel_matches(record.kernel, record.kernel_id, kernel)):
                    out.append(StoredEntry(self.name, location, entry_id, record))
        except _Unavailable as exc:
            return out, exc
        return out, None

    def entries(self, kernel: str | None = None) -> list[StoredEntry]:
        return self._listing(kernel)[0]

    def listing(self, kernel: str | None = None) -> tuple[list[StoredEntry], str | None]:
        """(the entries `entries` gives, why the listing stopped early or None), warning nothing about that stop:
        for the CLI, which must not report a partial listing as the whole. The reason says whether Redis refused a
        command (`refused a command (...)`) or stopped answering (the client's error alone)."""
        found, stopped = self._listing(kernel, report=False)
        if stopped is None:
            return found, None
        return found, stopped.reason if isinstance(stopped, _Refused) else stopped.cause

    def remove(self, kernel: str | None = None, key: tuple | None = None, identity: object = ANY) -> list[StoredEntry]:
        """Remove entries (see `remove_now`); when Redis cannot be reached or fails during it, warn naming why and
        that the others stay (they would be read back by the next process that misses)."""
        removed, problem = self.remove_now(kernel, key, identity)
        if problem is not None:
            warn(
                f"autotune cache: could not clear the Redis cache at {self.url} ({problem}); "
                f"{len(removed)} removed, the others stay there (the next process that misses reads them back)"
            )
        return removed

    def remove_now(
        self, kernel: str | None = None, key: tuple | None = None, identity: object = ANY
    ) -> tuple[list[StoredEntry], str | None]:
        """An explicit clear: remove entries (of `kernel`, a short name or a "module:qualname"; of one kernel by
        `identity`; of one key; or all, with every unreadable key under the prefix: `clear_all_now`) trying Redis
        now, whatever the back-off after an earlier failure. Returns (what was removed, why the rest could not be,
        or None); it warns nothing itself."""
        if kernel is None and key is None and identity is ANY:
            removed, _, problem = self.clear_all_now()
            return removed, problem
        wanted = wanted_key_text(key)
        entries, stopped = self._listing(kernel, always=True, report=False, future_ok=True)
        chosen = [
            e
            for e in entries
            if (identity is ANY or e.record.kernel_id == identity)
            and (wanted is None or key_text(as_key_tuple(e.record.key)) == wanted)
        ]
        removed, problem = self._delete(chosen)
        return removed, problem or (stopped.reason if stopped is not None else None)

    def clear_all_now(self) -> tuple[list[StoredEntry], int, str | None]:
        """An explicit clear of everything under the prefix, trying Redis now: (the entries removed, how many other
        keys under it were deleted (unreadable, or not entries autotune wrote), why the rest could not be, or None).
        Warns nothing: a key it cannot read is deleted, not skipped."""
        entries, stopped = self._listing(None, always=True, report=False, future_ok=True, quiet=True)
        removed, problem = self._delete(entries)
        problem = problem or (stopped.reason if stopped is not None else None)
        others = 0
        if problem is None:
            try:
                for stale, _, _ in self._scan(None, always=True, report=False):
                    others += int(self.call(lambda c: c.delete(stale), always=True, report=False) or 0)  # noqa: B023 (called at once)
            except _Unavailable as exc:
                problem = exc.reason
        return removed, others, problem

    def _delete(self, entries: list[StoredEntry]) -> tuple[list[StoredEntry], str | None]:
        """Delete `entries` now: (those deleted, why one could not be, or None); Redis going away stops it."""
        removed, problem = [], None
        for e in entries:
            try:
                if self.call(lambda c: c.delete(self.key_of(e.location, e.entry_id)), always=True, report=False):  # noqa: B023 (called at once)
                    removed.append(e)
            except _Refused as exc:
                problem = exc.reason
            except _Unavailable as exc:
                return removed, exc.reason
        return removed, problem


def _newer_schema(head: bytes) -> bool:
    """Whether the start of a stored value names a schema newer than this autotune's."""
    match = re.match(rb'\s*\{\s*"schema_version"\s*:\s*(\d+)', head)
    return match is not None and is_newer_schema(int(match.group(1)))


def safe_url(url: str) -> str:
    """The URL without its credentials (user:password@ and a password= query parameter), for messages; one that
    cannot even be split (an unclosed IPv6 bracket) keeps its scheme and what follows the credentials, no query."""
    try:
        parts = urlsplit(url)
    except ValueError:
        scheme, sep, rest = url.partition("://")
        return scheme + sep + ("***@" if "@" in rest else "") + rest.rsplit("@", 1)[-1].split("?", 1)[0]
    netloc = parts.netloc.rsplit("@", 1)[1] if "@" in parts.netloc else parts.netloc
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "password"])
    return urlunsplit((parts.scheme, ("***@" if "@" in parts.netloc else "") + netloc, parts.path, query, ""))


def _auth_text(url: str, exc: Exception) -> str:
    """A refused password in words: the credentials are what to fix, not the network."""
    return f"the Redis cache at {url} refused the credentials ({exc.__class__.__name__}: {exc})"


def _check_connection_options(client: Any, url: str, redis_error: type[BaseException]) -> None:
    """Build one connection object from the URL's options without connecting, so that a query parameter the
    client does not know (`?socket_timeot=2`) is an OptionError now, at configuration, not a TypeError at every
    launch that reads Redis."""
    pool = client.connection_pool
    try:
        pool.connection_class(**pool.connection_kwargs).disconnect()
    except TypeError as exc:
        match = re.search(r"argument '([^']+)'", str(exc))
        name = match.group(1) if match else None
        if name is None:
            raise OptionError(f"{safe_url(url)!r}: the Redis client refused its options ({exc})") from None
        known = {
            p for cls in pool.connection_class.__mro__ if "__init__" in vars(cls) for p in _parameters(cls.__init__)
        }
        raise OptionError(
            f"{safe_url(url)!r} has a query parameter the Redis client does not know: {name!r}; remove "
            f"it or correct its spelling.{did_you_mean(name, known)}"
        ) from None
    except (ValueError, redis_error) as exc:
        raise OptionError(f"{safe_url(url)!r}: the Redis client refused its options ({exc})") from None


def _parameters(fn: Any) -> list[str]:
    import inspect

    try:
        return [p for p in inspect.signature(fn).parameters if p != "self"]
    except (TypeError, ValueError):
        return []
