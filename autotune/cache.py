"""The tuning cache: in memory per decorated kernel, and on disk as one JSON file per entry.

On-disk layout (under `options.cache_dir()`, i.e. AUTOTUNE_CACHE_DIR, else $XDG_CACHE_HOME/autotune,
else ~/.cache/autotune)::

    <cache dir>/
      <kernel dir>/                 the kernel name, sanitised (see `kernel_dirname`)
        <entry id>.json             one TuningRecord as JSON; entry id = sha256(device, key, dtypes)[:32]
        <entry id>.lock             the entry's file lock: writes and single-flight tuning
        .<entry id>.json.<pid>.<rand>.tmp   a write in progress (then os.replace'd onto the .json)

The kernel source hash, the Triton version and the space checksum are *not* part of the file name:
they are checked when an entry is read, and an entry that no longer matches is tuned again and
replaced in place, so editing a kernel does not leave stale files behind. The device is part of the
name, so GPUs of different kinds sharing one cache directory (a shared file system) keep their own
winners side by side.

Nothing in a cache directory is ever unpickled or evaluated: entries are parsed with `json` and
validated by the pydantic `TuningRecord` model.

Faults (a corrupt, truncated or unreadable entry, an entry of another schema version, a read-only
directory, a full disk) never crash a launch: they raise a `CacheWarning` naming the file and what
was done, tuning goes on in memory, and an existing good entry is never overwritten by a failed write
(writes go to a temporary file that is `os.replace`d onto the entry only once fully written).
"""
from __future__ import annotations

import errno
import functools
import hashlib
import inspect
import json
import logging
import math
import os
import re
import secrets
import socket
import stat
import textwrap
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import filelock
from pydantic import ValidationError

from .errors import AutotuneError, CacheEntryError, CacheWarning, NoValidConfigError, warn_at_caller
from .options import cache_dir
from .options import lock_timeout_s as configured_lock_timeout_s
from .record import SCHEMA_VERSION, TrialStatus, TuningRecord
from .space import Config

__all__ = [
    "CacheWarning", "CacheEntryError", "KernelCache", "DiskEntry",
    "device_fingerprint", "source_hash", "runtime_versions",
    "clear_autotune_cache", "stats", "reset_stats", "count", "count_tuning", "failed_configs", "key_text",
    "kernel_dirname", "entry_id", "entry_path", "disk_entries", "load_record", "store_record",
]

logger = logging.getLogger("autotune")

_ENTRY_SUFFIX = ".json"
_LOCK_SUFFIX = ".lock"
_ENTRY_NAME = re.compile(r"^[0-9a-f]{32}\.json$")               # only files named like ours are ever listed or removed
# `.<entry>.<host tag>.<pid>.<random>.tmp`; names without the host tag (older writers) are swept by age only
_TMP_NAME = re.compile(r"^\.[0-9a-f]{32}\.json\.(?:(?P<host>[0-9a-f]{8})\.)?(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")
_HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_STALE_TMP_S = 600.0          # temporary files older than this are debris of a killed writer
_LOCK_NOTICE_S = 2.0          # after this long waiting for a key's lock, say so in the log
_STAT_FIELDS = ("hits", "disk_hits", "misses", "tunings", "failed_tunings", "failed_configs", "tuning_s")




# --------------------------------------------------------------------------------------------------
# Warnings and logging


def _warn(message: str) -> None:
    """Warn with CacheWarning, attributed to the first caller outside the autotune package, and log it."""
    warn_at_caller(message, CacheWarning)
    # Without any handler configured, logging's last-resort handler would print the same text a second time.
    if logger.hasHandlers():
        logger.warning(message)


# --------------------------------------------------------------------------------------------------
# Fingerprints


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


@functools.lru_cache(maxsize=None)
def _cuda_fingerprint(index: int) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return f"{torch.cuda.get_device_name(index)} sm{major}{minor}"


def device_fingerprint() -> str:
    """The device a winner is valid for: "interpreter" under TRITON_INTERPRET=1 or without CUDA,
    else "<device name> sm<major><minor>" of the current CUDA device.

    Why: timings (and which configs compile at all) depend on the GPU model, so entries are kept per
    device and an entry tuned on another device is never used.
    """
    if _interpreting():
        return "interpreter"
    try:
        import torch

        if not torch.cuda.is_available():
            return "interpreter"
        return _cuda_fingerprint(torch.cuda.current_device())
    except Exception:  # pragma: no cover - a broken CUDA setup; Triton will complain at launch
        return "interpreter"


def _innermost_function(kernel: Any) -> tuple[Any, Optional[str]]:
    """Unwrap autotune/heuristics/JIT layers (`.fn`) down to the Python function; also return the
    first `src` string seen on the way (a JITFunction's source, exactly what Triton compiles)."""
    obj, src = kernel, None
    for _ in range(16):
        if src is None:
            candidate = getattr(type(obj), "src", None)
            if candidate is not None:  # a property on JITFunction; don't trigger __getattr__ magic elsewhere
                value = getattr(obj, "src", None)
                if isinstance(value, str):
                    src = value
        if inspect.isfunction(obj):
            break
        nxt = getattr(obj, "fn", None)
        if nxt is None or nxt is obj:
            break
        obj = nxt
    return obj, src


def _source_text(kernel: Any) -> str:
    fn, src = _innermost_function(kernel)
    if src is not None:
        return src
    try:
        raw = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise ValueError(f"cannot read the source of kernel {kernel!r}: {exc}") from None
    # As triton.JITFunction does: drop decorators, keep from `def name(` on, so the hash is the same
    # through the interpreter (no `.src`) and the JIT.
    match = re.search(r"^def\s+\w+\s*\(", raw, re.MULTILINE)
    return raw[match.start():] if match else raw


def source_hash(kernel: Any) -> str:
    """sha256 (hex) of a Triton kernel's source: `JITFunction.src`, else the source of the innermost
    Python function with its decorators stripped (the same text, so JIT and interpreter agree).

    Why: a winner tuned for an older version of the kernel body may be wrong or slow for the new one,
    so a changed source invalidates the kernel's cache entries.
    """
    return hashlib.sha256(_source_text(kernel).encode("utf-8")).hexdigest()


def runtime_versions() -> tuple[str, str]:
    """(triton.__version__, torch.__version__): recorded in every entry; a Triton upgrade invalidates."""
    import torch
    import triton

    return str(triton.__version__), str(torch.__version__)


def _triton_version() -> str:
    return runtime_versions()[0]


# --------------------------------------------------------------------------------------------------
# Keys, file names


def _jsonable(value: Any) -> Any:
    """The JSON form of a key value: tuples become lists; numpy/torch scalars their Python value;
    non-finite floats and anything else its `str` (so e.g. a torch.dtype reads `torch.float16`)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):  # numpy / torch scalars
        try:
            return _jsonable(value.item())
        except Exception:
            pass
    return str(value)


def key_text(key: Iterable[Any]) -> str:
    """Canonical text of a key: equal for a key tuple in memory and its JSON list on disk."""
    return json.dumps(_jsonable(list(key)), sort_keys=True, separators=(",", ":"))


_key_text = key_text   # the name other modules used first


def _as_key_tuple(key: Any) -> tuple:
    """A key given by a user (`clear_autotune_cache(kernel, key=...)`): a tuple/list as is, else `(key,)`."""
    if isinstance(key, (tuple, list)):
        return tuple(key)
    return (key,)


def kernel_dirname(kernel_name: str, identity: Optional[str] = None) -> str:
    """The directory name of a kernel's entries: the name itself when it is made of [A-Za-z0-9._-]
    (and doesn't start with a dot), else a sanitised form plus 8 hex digits of its hash, so that two
    different names never share a directory. With the kernel's `identity` ("module:qualname"), a dot and 8 hex
    digits of it follow, so that same-named kernels of different modules keep apart (`add_kernel.1a2b3c4d`)."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", kernel_name)[:80]
    if clean.startswith("."):
        clean = "_" + clean[1:]
    if clean != kernel_name or not clean:
        clean = f"{clean}-{hashlib.sha256(kernel_name.encode('utf-8')).hexdigest()[:8]}"
    if identity is not None:
        clean = f"{clean}.{hashlib.sha256(identity.encode('utf-8')).hexdigest()[:8]}"
    return clean


def _is_dir_of(dirname: str, kernel_name: str) -> bool:
    """Whether a cache sub-directory holds entries of a kernel of this short name (any module)."""
    base = kernel_dirname(kernel_name)
    return dirname == base or re.fullmatch(re.escape(base) + r"\.[0-9a-f]{8}", dirname) is not None


def entry_id(device: str, key: Iterable[Any], dtypes: Iterable[str]) -> str:
    """The file stem of the entry of (device, key, dtypes): 32 hex digits of a sha256."""
    text = json.dumps([device, json.loads(_key_text(key)), [str(d) for d in dtypes]],
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _root(directory: str | os.PathLike | None = None) -> Path:
    return Path(directory) if directory is not None else Path(cache_dir())


def entry_path(kernel_name: str, device: str, key: Iterable[Any], dtypes: Iterable[str],
               directory: str | os.PathLike | None = None, identity: Optional[str] = None) -> Path:
    """Where the entry of (kernel, device, key, dtypes) lives (the file may not exist)."""
    return (_root(directory) / kernel_dirname(kernel_name, identity)
            / (entry_id(device, key, dtypes) + _ENTRY_SUFFIX))


def record_path(record: TuningRecord, directory: str | os.PathLike | None = None) -> Path:
    """Where `record` is filed: by its kernel (name and identity), device, key and dtypes."""
    return entry_path(record.kernel, record.device, record.key, record.dtypes, directory, record.kernel_id)


def _lock_path(path: Path) -> Path:
    return path.with_suffix(_LOCK_SUFFIX)


# --------------------------------------------------------------------------------------------------
# Reading and writing one entry


MAX_ENTRY_BYTES = 16 << 20   # a real entry is a few KB to a few MB (one trial per config); anything larger is not one


def read_entry_bytes(path: Path, limit: int = MAX_ENTRY_BYTES) -> bytes:
    """The bytes of an entry file, read safely: a symbolic link is not followed, only a regular file is read
    (a FIFO would block, a device such as /dev/zero never ends), and at most `limit` bytes. Raises
    FileNotFoundError when absent, CacheEntryError for what is not an entry, OSError when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CacheEntryError(f"{path} is a symbolic link; cache entries are regular files and links are "
                                  "never followed") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CacheEntryError(f"{path} is not a regular file (a FIFO, device or directory); cache entries are "
                                  "regular files")
        if st.st_size > limit:
            raise CacheEntryError(f"{path} is {st.st_size} bytes, over the {limit}-byte limit of a cache entry")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise CacheEntryError(f"{path} grew over the {limit}-byte limit of a cache entry while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a cache entry may hold")


def _parse(data: bytes, path: Path) -> TuningRecord:
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise CacheEntryError(f"{path} nests too deeply to be a tuning record") from None
    except (UnicodeDecodeError, ValueError) as exc:
        what = "empty" if not data.strip() else f"not valid JSON ({exc})"
        raise CacheEntryError(f"{path} is {what}") from None
    if not isinstance(obj, dict):
        raise CacheEntryError(f"{path} is not a JSON object")
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CacheEntryError(f"{path} has schema version {version!r}, this autotune reads {SCHEMA_VERSION}",
                              kind="schema", schema_version=version)
    try:
        return TuningRecord.model_validate(obj)
    except RecursionError:
        raise CacheEntryError(f"{path} nests too deeply to be a tuning record") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "record"
        raise CacheEntryError(f"{path} is not a valid tuning record ({exc.error_count()} errors; "
                              f"{loc}: {first['msg']})") from None


def load_record(path: str | os.PathLike) -> TuningRecord:
    """Read and validate one cache file. Raises OSError when unreadable and CacheEntryError when corrupt,
    truncated or of another schema version (`.kind == "schema"`). JSON only; nothing is evaluated."""
    path = Path(path)
    return _parse(read_entry_bytes(path), path)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (a seam: tests make it raise OSError(ENOSPC) to play a full disk)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def record_json(record: TuningRecord) -> bytes:
    """An entry file's bytes for `record`: indented JSON, key values and dtypes in their stored text form."""
    clean = record.model_copy(update={"key": _jsonable(list(record.key)),
                                      "dtypes": [str(d) for d in record.dtypes]})
    # Optional fields left unset are not written, so such files stay readable by older readers.
    exclude = {name for name in ("candidates", "kernel_id") if getattr(clean, name) is None} or None
    return (clean.model_dump_json(indent=1, exclude=exclude) + "\n").encode("utf-8")


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file next to `path`, fsync it, then os.replace it onto `path`.
    A reader sees the old file or the new one, never half of one; on any error the temporary file is
    removed and `path` is untouched. The caller holds the entry's lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_tmp(path.parent)
    tmp = path.parent / f".{path.name}.{_HOST_TAG}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def acquire_entry_lock(path: Path, what: str,
                       timeout_s: Optional[float] = None) -> Optional[filelock.BaseFileLock]:
    """Take the entry's file lock and write who holds it beside it; log when another process holds it for a
    while. Returns None when `timeout_s` passes first (the holder is stopped or hung). Raises OSError when the
    lock file cannot be created (read-only or missing directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(_lock_path(path)))
    notice = _LOCK_NOTICE_S if timeout_s is None else min(_LOCK_NOTICE_S, timeout_s)
    try:
        lock.acquire(timeout=notice)
    except filelock.Timeout:
        logger.info("waiting for another process tuning %s (lock %s; holder %s)", what, _lock_path(path),
                    lock_holder(path) or "unknown")
        try:
            lock.acquire(timeout=-1 if timeout_s is None else max(0.0, timeout_s - notice))
        except filelock.Timeout:
            return None
    try:
        atomic_write(_holder_path(path), json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                      "since": time.time()}).encode())
    except OSError:
        pass  # who holds the lock is a courtesy for waiters' messages; the lock itself is what counts
    return lock


def _holder_path(path: Path) -> Path:
    return path.with_name(path.name + ".holder")


def lock_holder(path: Path) -> Optional[str]:
    """Who holds (or last held) the tuning lock of the entry at `path`: "pid 123 on host h since <time>"."""
    try:
        info = json.loads(read_entry_bytes(_holder_path(path), limit=4096), parse_constant=_no_constant)
        pid, host, since = int(info["pid"]), str(info["host"])[:255], float(info["since"])
    except Exception:  # absent, unreadable or not ours: the message says "unknown"
        return None
    return f"pid {pid} on host {host} since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"


def store_record(record: TuningRecord, directory: str | os.PathLike | None = None) -> Path:
    """Write `record` as the entry of its (kernel, device, key, dtypes), atomically and under the
    entry's lock, replacing what was there. For importers (`autotune import`); raises OSError on failure."""
    path = record_path(record, directory)
    lock = acquire_entry_lock(path, f"{record.kernel} key {_key_text(record.key)}")
    try:
        atomic_write(path, record_json(record))
    finally:
        lock.release()
    return path


@dataclass(frozen=True)
class DiskEntry:
    """One file of the disk cache as found by `disk_entries`: its record, or why it could not be read."""

    path: Path
    kernel: str                       # the record's kernel name; the directory name when unreadable
    record: Optional[TuningRecord]
    error: Optional[str]


def _kernel_dirs(root: Path, kernel: Optional[str]) -> list[Path]:
    try:
        return sorted(p for p in root.iterdir() if _is_real_dir(p) and not p.name.startswith(".")
                      and (kernel is None or _is_dir_of(p.name, kernel)))
    except OSError:
        return []


def _is_real_dir(p: Path) -> bool:
    """A directory that is not a symbolic link: listing and clearing never leave the cache directory."""
    try:
        return stat.S_ISDIR(p.lstat().st_mode)
    except OSError:
        return False


def _is_regular_file(p: Path) -> bool:
    try:
        return stat.S_ISREG(p.lstat().st_mode)
    except OSError:
        return False


def _entry_files(d: Path) -> list[Path]:
    try:
        return sorted(p for p in d.iterdir() if _ENTRY_NAME.match(p.name) and _is_regular_file(p))
    except OSError:
        return []


def disk_entries(kernel: Optional[str] = None, directory: str | os.PathLike | None = None) -> list[DiskEntry]:
    """Every entry file under the cache directory (or of one kernel, by name), parsed but not validated
    against any kernel: for the CLI and for export. Unreadable files come back with `error` set."""
    out = []
    for d in _kernel_dirs(_root(directory), kernel):
        for path in _entry_files(d):
            try:
                record = load_record(path)
            except (OSError, CacheEntryError) as exc:
                out.append(DiskEntry(path, kernel or d.name, None, str(exc)))
                continue
            if kernel is not None and record.kernel != kernel:
                continue
            out.append(DiskEntry(path, record.kernel, record, None))
    return out


# --------------------------------------------------------------------------------------------------
# Process-wide state: live caches (for clear_autotune_cache) and stats


_REGISTRY_LOCK = threading.Lock()
_LIVE: "weakref.WeakSet[KernelCache]" = weakref.WeakSet()
_STATS: dict[str, dict[str, float]] = {}
_TLS = threading.local()


def _new_stats() -> dict[str, float]:
    return {name: (0.0 if name == "tuning_s" else 0) for name in _STAT_FIELDS}


def _bump(kernel_name: str, **increments: float) -> None:
    with _REGISTRY_LOCK:
        counters = _STATS.setdefault(kernel_name, _new_stats())
        for name, inc in increments.items():
            counters[name] += inc


def count(kernel_name: str, **increments: float) -> None:
    """Add to this process's counters of a kernel (`hits=1`, `disk_hits=1`, ...): for code that finds a
    record outside `KernelCache.get_or_tune` (e.g. a rank that received its winner from rank 0)."""
    unknown = set(increments) - set(_STAT_FIELDS)
    if unknown:
        raise ValueError(f"unknown counters {sorted(unknown)}; counters: {list(_STAT_FIELDS)}")
    _bump(kernel_name, **increments)


def count_hit(kernel_name: str) -> None:
    """Count one memory hit: the decorated kernel's hot path, kept to one locked increment."""
    with _REGISTRY_LOCK:
        counters = _STATS.get(kernel_name)
        if counters is None:
            counters = _STATS[kernel_name] = _new_stats()
        counters["hits"] += 1


def failed_configs(record: TuningRecord) -> int:
    """How many trials of `record` failed: not "ok", and not "skipped" (pruned or a lone candidate, never run);
    what `stats()["failed_configs"]` adds up."""
    return sum(1 for t in record.trials if t.status not in (TrialStatus.OK, TrialStatus.SKIPPED))


def count_tuning(kernel_name: str, record: TuningRecord) -> None:
    """Count one tuning that produced `record`: misses, tunings, failed_configs and tuning_s."""
    _bump(kernel_name, misses=1, tunings=1, failed_configs=failed_configs(record), tuning_s=float(record.tuning_s))


def stats() -> dict[str, dict[str, float]]:
    """Counters of this process, per kernel name: hits (memory), disk_hits, misses (tuned, tried to tune, or
    missed offline), tunings (that found a winner), failed_tunings (where every config failed), failed_configs
    (trials not "ok" in this process's tunings, failed ones included) and tuning_s."""
    with _REGISTRY_LOCK:
        return {name: dict(counters) for name, counters in _STATS.items()}


def reset_stats() -> None:
    """Zero every counter of `stats()` (kernels stay listed)."""
    with _REGISTRY_LOCK:
        for name in _STATS:
            _STATS[name] = _new_stats()


def _live_caches() -> list["KernelCache"]:
    with _REGISTRY_LOCK:
        return list(_LIVE)


# --------------------------------------------------------------------------------------------------
# The per-kernel cache

Ident = tuple[tuple, tuple[str, ...]]


class KernelCache:
    """Memory + disk cache of one decorated kernel. Thread-safe.

    Memory maps (key, dtypes) to the TuningRecord in use. On a memory miss the disk entry is read and
    used if it still matches this kernel (source hash, space checksum, winner in the space) and this
    machine (device fingerprint, Triton version). Otherwise the key is tuned once: across threads by
    a per-key lock, across processes by the entry's file lock, held for the whole tuning.
    """

    def __init__(self, kernel_name: str, source_hash: str, space_checksum: str,
                 space_contains: Callable[[Config], bool], identity: Optional[str] = None) -> None:
        self.kernel_name = kernel_name
        self.identity = identity        # "module:qualname" of the kernel; None: the short name alone
        self.source_hash = source_hash
        self.space_checksum = space_checksum
        self.space_contains = space_contains
        self._memory: dict[Ident, TuningRecord] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[Ident, threading.Lock] = {}
        self._offline_missed: set[Ident] = set()
        self._warned: set[tuple] = set()
        with _REGISTRY_LOCK:
            _LIVE.add(self)
            _STATS.setdefault(kernel_name, _new_stats())

    def __repr__(self) -> str:
        return f"KernelCache({self.kernel_name!r}, entries={len(self._memory)})"

    # -- paths ------------------------------------------------------------------------------------

    def entry_path(self, key: tuple, dtypes: tuple[str, ...]) -> Path:
        """The disk entry of `key` on this device (the file may not exist)."""
        return entry_path(self.kernel_name, device_fingerprint(), key, dtypes, identity=self.identity)

    # -- validity ---------------------------------------------------------------------------------

    def stale_reason(self, record: TuningRecord, key: tuple, dtypes: tuple[str, ...],
                     candidates: Optional[str] = None) -> Optional[str]:
        """Why `record` may not be used for `key` here, or None when it may. `candidates` is the checksum of
        the configs this call's prune= kept: an entry tuned among other candidates is not this call's winner."""
        if record.candidates != candidates:
            return "prune= kept other configs for it"
        if record.kernel != self.kernel_name:
            return f"it belongs to kernel {record.kernel!r}"
        if record.kernel_id != self.identity:
            return f"it belongs to another kernel named {record.kernel!r} ({record.kernel_id or 'unknown module'})"
        if record.source_hash != self.source_hash:
            return "the kernel source changed"
        device = device_fingerprint()
        if record.device != device:
            return f"it was tuned on {record.device!r}, this is {device!r}"
        triton_version = _triton_version()
        if record.triton_version != triton_version:
            return f"it was tuned with Triton {record.triton_version}, this is {triton_version}"
        if record.space_checksum != self.space_checksum:
            return "the search space changed"
        if _key_text(record.key) != _key_text(key) or [str(d) for d in record.dtypes] != [str(d) for d in dtypes]:
            return "its key differs"
        try:
            contained = bool(self.space_contains(record.winner))
        except Exception as exc:  # a predicate that chokes on the stored config: not usable
            return f"checking its winner against the space failed ({exc})"
        if not contained:
            return f"its winner {record.winner!r} is not in the search space"
        return None

    # -- disk reads -------------------------------------------------------------------------------

    def _warn_once(self, path: Path, message: str) -> None:
        """Warn about a file once per state of that file (the same bad file is read twice per miss)."""
        try:
            st = path.stat()
            sig = (str(path), st.st_mtime_ns, st.st_size, message)
        except OSError:
            sig = (str(path), None, None, message)
        with self._lock:
            if sig in self._warned:
                return
            self._warned.add(sig)
        _warn(message)

    def _read(self, key: tuple, dtypes: tuple[str, ...], path: Path,
              candidates: Optional[str] = None) -> tuple[Optional[TuningRecord], str]:
        """The usable record at `path` and the file's state: "valid", "absent", "stale", "corrupt",
        "unreadable", "schema_newer", "schema_older". Warns (once per file state) on faults."""
        what = f"{self.kernel_name} key {_key_text(key)}"
        try:
            data = read_entry_bytes(path)
        except FileNotFoundError:
            return None, "absent"
        except CacheEntryError as exc:
            self._warn_once(path, f"autotune cache: cannot read an entry ({exc}); ignoring it and tuning {what}")
            return None, "corrupt"
        except OSError as exc:
            self._warn_once(path, f"autotune cache: cannot read {path} ({exc.__class__.__name__}: "
                                  f"{exc.strerror or exc}); ignoring it and tuning {what}")
            return None, "unreadable"
        try:
            record = _parse(data, path)
        except CacheEntryError as exc:
            if exc.kind == "schema":
                newer = isinstance(exc.schema_version, int) and exc.schema_version > SCHEMA_VERSION
                if newer:
                    self._warn_once(path, f"autotune cache: {exc}; it was written by a newer autotune and is "
                                          f"left in place; tuning {what} with the winner kept in memory only")
                    return None, "schema_newer"
                self._warn_once(path, f"autotune cache: {exc}; ignoring it, tuning {what} and replacing it")
                return None, "schema_older"
            self._warn_once(path, f"autotune cache: {exc}; ignoring it, tuning {what} and replacing it")
            return None, "corrupt"
        reason = self.stale_reason(record, key, dtypes, candidates)
        if reason is not None:
            logger.info("autotune cache: %s is out of date (%s); tuning %s again", path, reason, what)
            return None, "stale"
        return record, "valid"

    def _remember(self, ident: Ident, record: TuningRecord) -> None:
        with self._lock:
            self._memory[ident] = record

    def remember(self, key: tuple, dtypes: tuple[str, ...], record: TuningRecord) -> None:
        """Put `record` in memory for (key, dtypes), without touching the disk or the counters (a record
        agreed on with other ranks, say)."""
        self._remember((key, tuple(dtypes)), record)

    def in_memory(self, key: tuple, dtypes: tuple[str, ...]) -> Optional[TuningRecord]:
        """The record in memory for (key, dtypes), or None; reads no disk, counts nothing."""
        return self._memory.get((key, tuple(dtypes)))

    # -- the main entry point ---------------------------------------------------------------------

    def get_or_tune(self, key: tuple, dtypes: tuple[str, ...], tune: Callable[[], TuningRecord], *,
                    force: bool = False, lock_timeout_s: Optional[float] = None,
                    candidates: Optional[str] = None) -> tuple[TuningRecord, str]:
        """The record for (key, dtypes), and how it was found: "memory", "disk" or "tuned".

        Single flight: at most one thread per process and one process per cache directory tunes a key at
        a time; the others wait and use its winner. `force=True` ignores entries that existed before this
        call (but takes a winner another thread or process produced while this call waited). If `tune()`
        raises, nothing is stored, the locks are released and the exception propagates.
        """
        dtypes = tuple(dtypes)
        ident: Ident = (key, dtypes)
        if not force:
            record = self._memory.get(ident)
            if record is not None:
                _bump(self.kernel_name, hits=1)
                return record, "memory"
            record, _ = self._read(key, dtypes, self.entry_path(key, dtypes), candidates)
            if record is not None:
                self._remember(ident, record)
                _bump(self.kernel_name, disk_hits=1)
                return record, "disk"

        tuning_now: set = getattr(_TLS, "tuning", None) or set()
        _TLS.tuning = tuning_now
        if (id(self), ident) in tuning_now:
            raise AutotuneError(f"{self.kernel_name}: key {key} is already being tuned by this thread "
                                "(a tuning launched the autotuned kernel itself?)")

        # With force, only a winner produced while this call waited counts: one that replaced what memory held
        # and what the entry file was when this call started (compared by identity, not by timestamps, which a
        # skewed clock on a shared file system would make lie).
        path = self.entry_path(key, dtypes)
        seen_in_memory = self._memory.get(ident)
        seen_on_disk = _file_signature(path)

        def fresh(rec: Optional[TuningRecord], on_disk: bool = False) -> bool:
            if rec is None or not force:
                return rec is not None
            return _file_signature(path) != seen_on_disk if on_disk else rec is not seen_in_memory

        with self._key_lock(ident):
            record = self._memory.get(ident)
            if fresh(record):
                _bump(self.kernel_name, hits=1)
                return record, "memory"
            what = f"{self.kernel_name} key {_key_text(key)}"
            if str(path) in tuning_now:  # another KernelCache of the same kernel name, re-entered: flock would hang
                raise AutotuneError(f"{what} is already being tuned by this thread")
            timeout_s = lock_timeout_s if lock_timeout_s is not None else configured_lock_timeout_s()
            try:
                file_lock: Optional[filelock.BaseFileLock] = acquire_entry_lock(path, what, timeout_s)
                lock_error: Optional[OSError] = None
            except OSError as exc:
                file_lock, lock_error = None, exc
            try:
                state = "unlocked"
                if file_lock is not None:
                    record, state = self._read(key, dtypes, path, candidates)
                    if fresh(record, on_disk=True):
                        self._remember(ident, record)
                        _bump(self.kernel_name, disk_hits=1)
                        return record, "disk"
                elif lock_error is None:
                    _warn(f"autotune cache: another process has held the tuning lock of {what} for over "
                          f"{timeout_s:g} s ({lock_holder(path) or 'holder unknown'}; lock {_lock_path(path)}): "
                          "it may be stopped or hung. Tuning in memory without writing the entry; raise "
                          "AUTOTUNE_LOCK_TIMEOUT_S (or Tuning(lock_timeout_s=...)) if tunings take longer")
                else:
                    self._warn_once(_lock_path(path),
                                    f"autotune cache: cannot lock {_lock_path(path)} ({lock_error.__class__.__name__}: "
                                    f"{lock_error.strerror or lock_error}); tuning {what} without cross-process "
                                    "single flight, the winner is kept in memory only")
                marks = ((id(self), ident), str(path))
                tuning_now.update(marks)
                try:
                    record = tune()
                except NoValidConfigError as exc:  # a tuning that found nothing is still a miss and a tuning
                    failed = sum(1 for t in exc.trials if t.status is not TrialStatus.SKIPPED)
                    _bump(self.kernel_name, misses=1, failed_tunings=1, failed_configs=failed)
                    raise
                finally:
                    tuning_now.difference_update(marks)
                if not isinstance(record, TuningRecord):
                    raise TypeError(f"tune() must return a TuningRecord, got {type(record).__name__}")
                self._remember(ident, record)
                count_tuning(self.kernel_name, record)
                mismatch = self.stale_reason(record, key, dtypes, candidates)
                if mismatch is not None:
                    _warn(f"autotune cache: the record tuned for {what} would not be accepted when read back "
                          f"({mismatch}); it is used now but will be tuned again by the next process")
                if file_lock is not None:
                    if state == "schema_newer":
                        pass  # warned when read: a newer autotune's entry is left alone
                    else:
                        self._write(path, record, what)
                return record, "tuned"
            finally:
                if file_lock is not None:
                    file_lock.release()

    def _key_lock(self, ident: Ident) -> threading.Lock:
        with self._lock:
            lock = self._key_locks.get(ident)
            if lock is None:
                lock = self._key_locks[ident] = threading.Lock()
            return lock

    def _write(self, path: Path, record: TuningRecord, what: str) -> None:
        try:
            data = record_json(record)
        except Exception as exc:  # a key value pydantic cannot serialise, say
            _warn(f"autotune cache: cannot serialise the record of {what} ({exc}); "
                  "the winner is kept in memory only")
            return
        try:
            atomic_write(path, data)
        except OSError as exc:
            reason = "the disk is full" if exc.errno == errno.ENOSPC else f"{exc.__class__.__name__}: {exc.strerror or exc}"
            _warn(f"autotune cache: could not write {path} ({reason}); the winner of {what} is kept in memory "
                  "only and any previous entry is unchanged")
            return
        logger.debug("autotune cache: wrote %s", path)

    # -- offline mode, introspection, clearing ------------------------------------------------------

    def peek(self, key: tuple, dtypes: tuple[str, ...], candidates: Optional[str] = None) -> Optional[TuningRecord]:
        """The record in memory, else a valid disk entry (then kept in memory), else None; never tunes.
        Counts hits / disk_hits. For AUTOTUNE_OFFLINE."""
        dtypes = tuple(dtypes)
        ident: Ident = (key, dtypes)
        record = self._memory.get(ident)
        if record is not None:
            _bump(self.kernel_name, hits=1)
            return record
        record, _ = self._read(key, dtypes, self.entry_path(key, dtypes), candidates)
        if record is not None:
            self._remember(ident, record)
            _bump(self.kernel_name, disk_hits=1)
        return record

    def count_offline_miss(self, key: tuple, dtypes: tuple[str, ...]) -> bool:
        """Count a miss in stats (offline mode); True the first time for (key, dtypes), so the caller warns
        once per key."""
        ident: Ident = (key, tuple(dtypes))
        _bump(self.kernel_name, misses=1)
        with self._lock:
            first = ident not in self._offline_missed
            self._offline_missed.add(ident)
        return first

    def records(self) -> dict[Ident, TuningRecord]:
        """A copy of what is in memory: {(key, dtypes): record}."""
        with self._lock:
            return dict(self._memory)

    def _clear_memory(self, key: Optional[tuple]) -> set[str]:
        """Drop memory entries (of `key`, all dtypes, or all); return the entry ids dropped."""
        wanted = None if key is None else _key_text(key)
        device = device_fingerprint()
        removed = set()
        with self._lock:
            for ident in list(self._memory):
                if wanted is None or _key_text(ident[0]) == wanted:
                    del self._memory[ident]
                    removed.add(entry_id(device, ident[0], ident[1]))
            self._offline_missed = {i for i in self._offline_missed if wanted is not None and _key_text(i[0]) != wanted}
        return removed

    def clear(self, key: Optional[tuple] = None) -> int:
        """Remove this kernel's entries, memory and disk (of `key`, every dtype variant and device, or
        all); return how many distinct entries were removed."""
        if key is not None:
            key = _as_key_tuple(key)
        removed = {(self.dirname, i) for i in self._clear_memory(key)}
        removed |= _clear_disk(self.kernel_name, key, only=self)
        return len(removed)

    @property
    def dirname(self) -> str:
        """The cache sub-directory of this kernel's entries."""
        return kernel_dirname(self.kernel_name, self.identity)


# --------------------------------------------------------------------------------------------------
# Clearing


def _remove(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
    except OSError as exc:
        _warn(f"autotune cache: could not remove {path} ({exc.__class__.__name__}: {exc.strerror or exc}); "
              "it stays")
        return False


def _sweep_tmp(d: Path) -> None:
    """Remove temporary files left by writers killed mid-write (old enough not to be in flight)."""
    try:
        names = list(d.iterdir())
    except OSError:
        return
    now = time.time()
    for p in names:
        match = _TMP_NAME.match(p.name)
        if match is None or not _is_regular_file(p):
            continue
        try:  # left by a writer of this host that is gone, or old enough that no writer anywhere still owns it
            mine = match.group("host") == _HOST_TAG
            if (mine and not _pid_alive(int(match.group("pid")))) or now - p.lstat().st_mtime > _STALE_TMP_S:
                p.unlink()
        except OSError:
            pass


def _file_signature(path: Path) -> Optional[tuple]:
    """What identifies one version of a file (a rename onto it makes a new one), or None when absent."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this machine."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _clear_disk(kernel_name: Optional[str], key: Optional[tuple], *, only: Optional[KernelCache] = None,
                kernels: Optional[set] = None) -> set[tuple[str, str]]:
    """Remove entry files (of every kernel of a short name, or of the one kernel `only`; optionally of one key;
    or all), adding the identities of the kernels cleared to `kernels`. Lock files stay, as removing a lock
    file another process holds would break its mutual exclusion."""
    wanted = None if key is None else _key_text(key)
    removed = set()
    for d in _kernel_dirs(_root(), kernel_name):
        for path in _entry_files(d):
            try:  # only a file that reads as an entry of what was asked is removed; anything else stays
                record = load_record(path)
            except (OSError, CacheEntryError):
                continue
            if kernel_name is not None and record.kernel != kernel_name:
                continue
            if only is not None and record.kernel_id != only.identity:
                continue
            if wanted is not None and _key_text(_as_key_tuple(record.key)) != wanted:
                continue
            if _remove(path):
                removed.add((d.name, path.name[: -len(_ENTRY_SUFFIX)]))
                if kernels is not None:
                    kernels.add(record.kernel_id or record.kernel)
        _sweep_tmp(d)
    return removed


def _kernel_name_of(kernel: Any) -> tuple[str, Optional[KernelCache]]:
    if isinstance(kernel, str):
        return kernel, None
    cache = getattr(kernel, "cache", None)
    if isinstance(cache, KernelCache):
        return cache.kernel_name, cache
    name = getattr(kernel, "name", None)
    if isinstance(name, str):
        return name, None
    raise TypeError(f"clear_autotune_cache(kernel=...) takes an autotuned kernel or a kernel name, "
                    f"got {type(kernel).__name__}")


def clear_autotune_cache(kernel: Any = None, key: Any = None) -> int:
    """Remove tuned winners from memory (every kernel loaded in this process) and disk.

    - no arguments: everything, every kernel, on disk also those not loaded in this process;
    - `kernel` (the decorated object or its name): that kernel's entries;
    - `kernel` and `key`: the entries of that key, every dtype variant (and device) of it. `key` is
      the tuple the `key=` spec computes, e.g. `(1024,)` for `key=["n"]`; a single value means a
      1-tuple. `key` without `kernel` raises ValueError.

    Returns the number of distinct entries removed (one in memory and on disk counts once).
    """
    if key is not None and kernel is None:
        raise ValueError("clear_autotune_cache(key=...) needs kernel= as well: keys are per kernel")
    if key is not None:
        key = _as_key_tuple(key)
    removed: set[tuple[str, str]] = set()
    if kernel is None:
        for cache in _live_caches():
            removed |= {(cache.dirname, i) for i in cache._clear_memory(None)}
        removed |= _clear_disk(None, None)
        return len(removed)
    name, own = _kernel_name_of(kernel)
    if own is not None:  # the object: that kernel alone, whatever other kernels share its short name
        return own.clear(key)
    kernels: set = set()
    for cache in _live_caches():
        if cache.kernel_name == name:
            dropped = cache._clear_memory(key)
            removed |= {(cache.dirname, i) for i in dropped}
            if dropped:
                kernels.add(cache.identity or name)
    removed |= _clear_disk(name, key, kernels=kernels)
    if len(kernels) > 1:
        warn_at_caller(f"clear_autotune_cache(kernel={name!r}) cleared {len(kernels)} kernels of that name: "
                       f"{', '.join(sorted(kernels))}; pass the kernel object to clear one of them")
    return len(removed)
