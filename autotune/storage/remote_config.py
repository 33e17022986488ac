"""Which remote tier, if any, sits behind the local disk: `AUTOTUNE_REMOTE_CACHE=redis://host:port/db` (or
`rediss://` for TLS), or `set_remote_cache(url, ...)` in code, which takes precedence over the environment.

    AUTOTUNE_REMOTE_CACHE            redis://[user[:password]@]host:port/db, rediss://..., unix:///path.sock
    AUTOTUNE_REMOTE_CACHE_PASSWORD   the password, when it is not in the URL
    AUTOTUNE_REMOTE_CACHE_TTL_S      entries expire this long after they are written (default: never)
    AUTOTUNE_REMOTE_CACHE_TIMEOUT_S  connect and command timeout (default 1 s)
    AUTOTUNE_REMOTE_CACHE_LEASE_S    a tuning node's lease, renewed every third of it (default 30 s)
"""

from __future__ import annotations

import os
import re
import threading
from typing import TYPE_CHECKING, Any

from ..errors import OptionError
from .protocol import Cache

if TYPE_CHECKING:  # imported when a tier is made: it needs the optional `redis` client
    from .redis_tier import RedisCache

__all__ = [
    "set_remote_cache",
    "clear_remote_settings",
    "remote_tiers",
    "remote_tier",
    "remote_tier_at",
    "required_remote_tier",
    "NO_REMOTE",
]

_SCHEMES = ("redis://", "rediss://", "unix://")
NO_REMOTE = "no remote cache: set AUTOTUNE_REMOTE_CACHE=redis://host:6379/0"
_lock = threading.Lock()
_in_code: dict[str, Any] | None = None  # set_remote_cache's settings; None: read the environment
_tiers: dict[tuple, RedisCache] = {}  # one client (and its connection pool) per settings


def set_remote_cache(
    url: str | None,
    *,
    password: str | None = None,
    ttl_s: float | None = None,
    timeout_s: float | None = None,
    lease_s: float | None = None,
) -> None:
    """Use the Redis at `url` as the shared tier behind the local disk cache (None: none, whatever the
    environment says). Checked now: a malformed URL or a missing `redis` client raises OptionError."""
    global _in_code
    settings = {"url": url, "password": password, "ttl_s": ttl_s, "timeout_s": timeout_s, "lease_s": lease_s}
    settings["prefix"] = _prefix_env()  # a deployment's setting, whoever names the URL
    if url is not None:
        _tier(_checked(settings, "set_remote_cache"), "set_remote_cache")
    _in_code = settings


def clear_remote_settings() -> None:
    """Forget what `set_remote_cache` set: the environment decides again."""
    global _in_code
    _in_code = None


def _float_env(name: str) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"{name}={raw!r} is not a number of seconds; unset it or set e.g. {name}=30") from None
    if not 0.001 <= value < float("inf"):
        raise OptionError(f"{name}={raw!r} must be a number of seconds, at least 0.001")
    return value


def _settings() -> tuple[dict[str, Any], str] | None:
    """(the remote cache's settings, where they came from: set_remote_cache or the environment), or None."""
    in_code = _in_code
    if in_code is not None:
        return (in_code, "set_remote_cache") if in_code["url"] is not None else None
    url = os.environ.get("AUTOTUNE_REMOTE_CACHE", "").strip()
    if not url:
        return None
    where = "AUTOTUNE_REMOTE_CACHE"
    return _checked({"url": url, **_env_options()}, where), where


def _env_options() -> dict[str, Any]:
    """The remote cache's settings other than its URL, from the environment."""
    return {
        "password": os.environ.get("AUTOTUNE_REMOTE_CACHE_PASSWORD") or None,
        "ttl_s": _float_env("AUTOTUNE_REMOTE_CACHE_TTL_S"),
        "timeout_s": _float_env("AUTOTUNE_REMOTE_CACHE_TIMEOUT_S"),
        "lease_s": _float_env("AUTOTUNE_REMOTE_CACHE_LEASE_S"),
        "prefix": _prefix_env(),
    }


def _prefix_env() -> str | None:
    """AUTOTUNE_REMOTE_PREFIX: the Redis key prefix (default "autotune"), so that deployments sharing one Redis keep
    their entries apart. Letters, digits and `._-:` only (it is matched by SCAN patterns)."""
    raw = os.environ.get("AUTOTUNE_REMOTE_PREFIX", "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", raw):
        raise OptionError(
            f"AUTOTUNE_REMOTE_PREFIX={raw[:100]!r} is not a key prefix: use up to 100 letters, digits, '.', '_', "
            "'-' or ':' (e.g. AUTOTUNE_REMOTE_PREFIX=autotune-prod), or unset it for 'autotune'"
        )
    return raw


def _checked(settings: dict[str, Any], where: str) -> dict[str, Any]:
    url = settings["url"]
    if not isinstance(url, str) or not url.startswith(_SCHEMES):
        from .redis_tier import safe_url  # no credentials in messages, a password= query parameter's included

        shown = safe_url(url) if isinstance(url, str) else url
        raise OptionError(
            f"{where}: {shown!r} is not a Redis URL; use redis://host:6379/0, rediss://host:6380/0 "
            "(TLS) or unix:///path/to/redis.sock"
        )
    for name in ("ttl_s", "timeout_s", "lease_s"):
        value = settings[name]
        if value is not None and not (isinstance(value, (int, float)) and 0.001 <= value < float("inf")):
            raise OptionError(f"{where}: {name}={value!r} must be a number of seconds, at least 0.001")
    return settings


def _tier(settings: dict[str, Any], where: str) -> RedisCache:
    """The tier for these settings (one per distinct settings); `where` they came from names the culprit."""
    from .redis_tier import RedisCache

    ident = tuple(sorted(settings.items()))
    with _lock:
        tier = _tiers.get(ident)
        if tier is None:
            options = {k: v for k, v in settings.items() if k != "url" and v is not None}
            try:
                tier = _tiers[ident] = RedisCache(settings["url"], **options)
            except OptionError as exc:
                raise OptionError(f"{where}: {exc}") from None
        return tier


def remote_tier() -> RedisCache | None:
    """The configured remote tier, or None. Raises OptionError when the configuration is wrong."""
    found = _settings()
    return _tier(*found) if found is not None else None


def remote_tier_at(url: str, where: str) -> RedisCache:
    """The tier at `url`, with the other settings from the environment (AUTOTUNE_REMOTE_CACHE_PASSWORD, ..._TTL_S,
    ...): the CLI's `--remote-url`. A malformed `url` is an OptionError that names `where` it came from."""
    return _tier(_checked({"url": url, **_env_options()}, where), where)


def required_remote_tier(what: str) -> RedisCache:
    """The configured remote tier, for a request that is about it (`clear_autotune_cache(remote=True)`): when none
    is configured, an OptionError saying how to configure one (`what` names the request), rather than doing the
    local part alone as if the remote part were done."""
    tier = remote_tier()
    if tier is None:
        raise OptionError(f"{what}: {NO_REMOTE} or call autotune.set_remote_cache(url); nothing was cleared")
    return tier


def remote_tiers() -> list[Cache]:
    """[the remote tier] when one is configured, else []: what goes behind the disk in every KernelCache."""
    tier = remote_tier()
    return [tier] if tier is not None else []
