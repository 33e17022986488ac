"""What an entry is, whatever stores it: its name (kernel directory, entry id, key text) and its bytes
(JSON written by `record_json`, read back by `parse_record`, bounded and validated; never unpickled or
evaluated). The disk store and any remote store name and encode entries the same way.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Iterable
from typing import Any

import msgspec

from .. import codec
from ..errors import CacheEntryError, did_you_mean
from ..format import format_timestamp
from ..keys import normalise_key
from ..keyspec import MAX_KEY_DEPTH  # a stored key nests no deeper than a typed one
from ..record import SCHEMA_VERSION, TuningRecord

__all__ = [
    "MAX_ENTRY_BYTES",
    "FUTURE_TOLERANCE_S",
    "key_text",
    "as_key_tuple",
    "wanted_key_text",
    "kernel_dirname",
    "is_dir_of",
    "entry_id",
    "is_kernel_id",
    "kernel_matches",
    "kernel_suggestion",
    "location_pattern",
    "short_name",
    "base_identity",
    "record_json",
    "entry_json",
    "parse_record",
    "no_constant",
    "is_newer_schema",
]

MAX_ENTRY_BYTES = 16 << 20  # a real entry is a few KB to a few MB (one trial per config); anything larger is not one
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_HEX8 = re.compile(r"[0-9a-f]{8}")  # a variant as `kernel.source.kernel_identity` writes it
# An entry dated further ahead of this machine's clock than this was stamped by a clock set wrong; trusted, it
# would win every newer-wins comparison (import, push, pull) for as long as it is ahead: it is refused instead.
FUTURE_TOLERANCE_S = 24 * 3600.0


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


def as_key_tuple(key: Any) -> tuple:
    """A key given by a user (`clear_autotune_cache(kernel, key=...)`): a tuple/list as is, else `(key,)`."""
    if isinstance(key, (tuple, list)):
        return tuple(key)
    return (key,)


def wanted_key_text(key: Any) -> str | None:
    """The `key_text` of the stored entries that a key given to a clear matches (None: `key` is None, every key).
    `key` is the tuple the `key=` spec computes (`(1024,)`), or one value; it is normalised as a call's key is
    (`keys.normalise_key`: a `tl.float32` or an IntEnum reads as it was stored), so every tier's clear matches
    what the tuning stored. Raises KeyValueError for a value that cannot be a key (a tensor, NaN)."""
    if key is None:
        return None
    return key_text(normalise_key(as_key_tuple(key), "clear_autotune_cache(key=...)"))


def _identity_tag(identity: str) -> str:
    """The 8 hex digits of a kernel's "module:qualname" that its directory name ends with."""
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:8]


def _split_variant(identity: str) -> tuple[str, str | None]:
    """A kernel identity's "module:qualname" and its variant ("#<8 hex>" of a factory-made kernel's closure values,
    `kernel.source.kernel_identity`), None for a kernel without one."""
    base, sep, variant = identity.partition("#")
    return base, variant if sep else None


def base_identity(identity: str) -> str:
    """A kernel identity without its factory variant: "mod:make.<locals>.k#1a2b3c4d" -> "mod:make.<locals>.k"."""
    return _split_variant(identity)[0]


def _identity_suffix(identity: str) -> str:
    """What a kernel directory's name ends with for `identity`: ".<tag of module:qualname>", then ".<variant>" for a
    factory-made variant (hashed unless it is the 8 hex digits it is written with, as a stored kernel_id is read
    from a file)."""
    base, variant = _split_variant(identity)
    suffix = "." + _identity_tag(base)
    if variant is None:
        return suffix
    return f"{suffix}.{variant if _HEX8.fullmatch(variant) else _identity_tag(variant)}"


def kernel_dirname(kernel_name: str, identity: str | None = None) -> str:
    """The directory name of a kernel's entries: the name itself when it is made of [A-Za-z0-9._-]
    (and doesn't start with a dot), else a sanitised form plus 8 hex digits of its hash, so that two
    different names never share a directory. With the kernel's `identity` ("module:qualname"), a dot and 8 hex
    digits of it follow, so that same-named kernels of different modules keep apart (`add_kernel.1a2b3c4d`); a
    factory-made variant ("module:qualname#<8 hex>") adds its own 8 (`add_kernel.1a2b3c4d.5e6f7a8b`), so that each
    variant has its own directory and slots."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", kernel_name)[:80]
    if clean.startswith("."):
        clean = "_" + clean[1:]
    if clean != kernel_name or not clean:
        clean = f"{clean}-{hashlib.sha256(kernel_name.encode('utf-8')).hexdigest()[:8]}"
    if identity is not None:
        clean += _identity_suffix(identity)
    return clean


def is_kernel_id(kernel: str) -> bool:
    """Whether a kernel as a user names it (`--kernel K`, `clear_autotune_cache(kernel="...")`) is one kernel's
    "module:qualname" (a record's `kernel_id`) rather than a short name: a function name has no colon."""
    return ":" in kernel


def short_name(kernel: str) -> str:
    """The function name a kernel as a user names it stands for: "pkg.mod:Cls.add" -> "add", "add" -> "add",
    "mod:make.<locals>.add#1a2b3c4d" -> "add"."""
    return _split_variant(kernel)[0].rpartition(":")[2].rpartition(".")[2] if is_kernel_id(kernel) else kernel


def kernel_matches(kernel: str, kernel_id: str | None, wanted: str) -> bool:
    """Whether the kernel of short name `kernel` and identity `kernel_id` ("module:qualname", None for an entry
    written before identities were recorded) is what `wanted` names: a short name names every module's kernel of
    that name, a "module:qualname" the one kernel whose `kernel_id` it is and every factory-made variant of it
    ("module:qualname#<8 hex>"), which a "module:qualname#<8 hex>" names alone. The one rule every tier's listing
    and clear, the CLI's `--kernel`, `cache show`, `report`, `export` and `clear_autotune_cache(kernel="...")`
    follow."""
    if not is_kernel_id(wanted):
        return kernel == wanted
    if kernel_id is None:
        return False
    return kernel_id == wanted or ("#" not in wanted and _split_variant(kernel_id)[0] == wanted)


def kernel_suggestion(wanted: str, known: Iterable[tuple[str, str | None]]) -> str:
    """`errors.did_you_mean` for a kernel name `wanted` that matched nothing, over the `known` kernels ((short name,
    kernel_id or None) pairs, e.g. of the cached records), in the form `wanted` is written in: the closest
    "module:qualname" for a module:qualname, the closest short name for a short name. It ends a message that does
    not end with a full stop: ". Did you mean 'x'?", or "" when none is close, and "" when `wanted` is one of the
    `known` kernels (then what matched nothing was a key, not the name)."""
    known = list(known)
    if any(kernel_matches(kernel, kernel_id, wanted) for kernel, kernel_id in known):
        return ""
    if is_kernel_id(wanted):
        names = {kernel_id for _, kernel_id in known if kernel_id}
    else:
        names = {kernel for kernel, _ in known if kernel}
    close = did_you_mean(wanted, names)
    return f".{close}" if close else ""


def is_dir_of(dirname: str, kernel: str) -> bool:
    """Whether a cache sub-directory (or a remote tier's location) may hold entries of `kernel`: a short name
    (every module's kernel of that name, variants too), a "module:qualname" (the directory tagged with its hash and
    those of its factory-made variants) or a "module:qualname#<8 hex>" (that variant's). A reader still checks each
    record with `kernel_matches`."""
    if is_kernel_id(kernel):
        suffix = _identity_suffix(kernel)
        if dirname.endswith(suffix):
            return True
        return "#" not in kernel and re.search(re.escape(suffix) + r"\.[0-9a-f]{8}\Z", dirname) is not None
    base = kernel_dirname(kernel)
    return dirname == base or re.fullmatch(re.escape(base) + r"(\.[0-9a-f]{8}){1,2}", dirname) is not None


def location_pattern(kernel: str) -> str:
    """A glob over locations (`is_dir_of`'s names) that covers every location of `kernel` (a remote tier's scan);
    the caller still checks each with `is_dir_of`."""
    if not is_kernel_id(kernel):
        return kernel_dirname(kernel) + "*"
    return "*" + _identity_suffix(kernel) + ("" if "#" in kernel else "*")


def entry_id(device: str, key: Iterable[Any], dtypes: Iterable[str], slot: int = 0) -> str:
    """The file stem of the entry of (device, key, dtypes): 32 hex digits of a sha256. `slot` > 0 names another
    kernel source's entry of the same key (`protocol.EntryRef.slots`); slot 0 is the name entries always had."""
    parts: list[Any] = [device, json.loads(key_text(key)), [str(d) for d in dtypes]]
    text = json.dumps(parts + [slot] if slot else parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def no_constant(name: str) -> Any:
    """`json.loads(parse_constant=...)`: NaN and Infinity are not numbers an entry may hold."""
    raise ValueError(f"{name} is not a number a cache entry may hold")


def finite_float(text: str) -> float:
    """`json.loads(parse_float=...)`: a number too large for a float (1e999) is not one an entry may hold."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a number a cache entry may hold")
    return value


def _nesting(value: Any) -> int:
    """How deep lists and objects nest in the JSON value `value` (1 for a flat list), without recursing."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _unencodable_text(value: Any) -> str | None:
    """The first text (an object's name or a string) in the JSON value `value` that does not encode to UTF-8 (a
    lone surrogate such as "\\udcff", which JSON can spell), else None; without recursing."""
    stack = [value]
    while stack:
        item = stack.pop()
        texts = [item] if isinstance(item, str) else list(item) if isinstance(item, dict) else []
        for text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return text
        if isinstance(item, (list, dict)):
            stack.extend(item.values() if isinstance(item, dict) else item)
    return None


def _check_shape(obj: dict, data: bytes, origin: object) -> None:
    """Refuse what the record's schema allows but nothing downstream can handle: a key nested deeper than
    MAX_KEY_DEPTH (its readers recurse once per level) and text that does not encode to UTF-8 (names, files and
    Redis keys are made from it)."""
    key = obj.get("key")
    if isinstance(key, list) and _nesting(key) > MAX_KEY_DEPTH:
        raise CacheEntryError(f"{origin} has a key nested deeper than {MAX_KEY_DEPTH} levels, deeper than any key")
    if _SURROGATE_ESCAPE.search(data) is None:  # a lone surrogate can only come from a \u escape
        return
    bad = _unencodable_text(obj)
    if bad is not None:
        raise CacheEntryError(f"{origin} holds text that is not valid Unicode ({bad[:60]!r}: a lone surrogate)")


def parse_record(data: bytes, origin: object, *, future_ok: bool = False) -> TuningRecord:
    """The TuningRecord in `data` (an entry's bytes; `origin` names where they came from in messages).
    Raises CacheEntryError when they are not JSON, not an object, of another schema version
    (`.kind == "schema"`), not a valid record, or (unless `future_ok`: a clear, which only removes it) dated over
    `FUTURE_TOLERANCE_S` ahead of this machine's clock (`.kind == "future"`)."""
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=no_constant, parse_float=finite_float)
    except RecursionError:
        raise CacheEntryError(f"{origin} nests too deeply to be a tuning record") from None
    except (UnicodeDecodeError, ValueError) as exc:
        what = "empty" if not data.strip() else f"not valid JSON ({exc})"
        raise CacheEntryError(f"{origin} is {what}") from None
    if not isinstance(obj, dict):
        raise CacheEntryError(f"{origin} is not a JSON object")
    _check_shape(obj, data, origin)
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CacheEntryError(
            f"{origin} has schema version {version!r}, this autotune reads {SCHEMA_VERSION}",
            kind="schema",
            schema_version=version,
        )
    try:
        record = codec.from_builtins(obj, TuningRecord)
    except RecursionError:
        raise CacheEntryError(f"{origin} nests too deeply to be a tuning record") from None
    except codec.ValidationError as exc:
        raise CacheEntryError(f"{origin} is not a valid tuning record ({codec.error_text(exc)})") from None
    if not future_ok and record.timestamp > time.time() + FUTURE_TOLERANCE_S:
        raise CacheEntryError(
            f"{origin} is dated {format_timestamp(record.timestamp)}, over {FUTURE_TOLERANCE_S / 3600:g} hours "
            "ahead of this machine's clock (a clock set wrong where it was tuned), and would win every comparison "
            "by date",
            kind="future",
        )
    return record


def is_newer_schema(version: object) -> bool:
    """Whether `version` (a stored entry's schema_version) is newer than this autotune's: such an entry is
    left in place, never replaced."""
    return isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION


def entry_json(record: TuningRecord, what: str) -> bytes:
    """`record_json` of `record` (of `what`) as a tier stores it: within MAX_ENTRY_BYTES, the size every reader
    accepts. Over it, the samples of the trials other than the winner and the re-measured ones are left out (their
    median and min stay); still over, a CacheEntryError (kind "size") naming the size, the limit and the cause, as
    storing it would make an entry no reader takes (every process would tune the key again)."""
    data = record_json(record)
    if len(data) <= MAX_ENTRY_BYTES:
        return data
    kept = {record.winner, *(record.remeasured or ())}
    trimmed = msgspec.structs.replace(
        record,
        trials=[t if t.config in kept else msgspec.structs.replace(t, samples_ms=[]) for t in record.trials],
    )
    smaller = record_json(trimmed)
    if len(smaller) <= MAX_ENTRY_BYTES:
        return smaller
    raise CacheEntryError(
        f"the record of {what} is {len(smaller)} bytes even without the samples of all but the winner and the "
        f"re-measured configs, over the {MAX_ENTRY_BYTES}-byte limit of an entry: its {len(record.trials)} trials "
        "are too many to store, so it is not written and the winner is kept in memory only; tune fewer configs "
        "(a search strategy, a smaller space or prune=)",
        kind="size",
    )


def record_json(record: TuningRecord) -> bytes:
    """An entry file's bytes for `record`: indented JSON, key values and dtypes in their stored text form."""
    data = record.to_dict()
    data["key"] = _jsonable(list(record.key))
    data["dtypes"] = [str(d) for d in record.dtypes]
    # Optional fields left unset are not written, so such files stay readable by older readers.
    for name in ("candidates", "kernel_id", "strategy", "space_size", "prior"):
        if data.get(name) is None:
            data.pop(name, None)
    return codec.to_json(data, indent=1) + b"\n"
