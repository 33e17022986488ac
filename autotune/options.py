"""`Tuning`: how hard to tune (plain, checked data), its presets, and the AUTOTUNE_* environment switches."""

from __future__ import annotations

import functools
import os
import warnings
from typing import Annotated, Any, Literal, cast, get_args, get_origin, get_type_hints

import msgspec
from msgspec import Meta, Struct, field, structs

from .errors import OptionError, did_you_mean

Preset = Literal["fast", "default", "thorough"]
Strategy = Literal["auto", "exhaustive", "random", "local", "model"]
Objective = Literal["geomean", "max"]

# max_configs: the search budget, and under strategy="auto" the largest space tuned exhaustively.
PRESETS: dict[str, dict[str, Any]] = {
    "fast": {"warmup": 1, "reps": 5, "refine_topk": 0, "refine_reps": 0, "max_configs": 64},
    "default": {"warmup": 2, "reps": 10, "refine_topk": 3, "refine_reps": 10, "max_configs": 256},
    "thorough": {"warmup": 5, "reps": 50, "refine_topk": 5, "refine_reps": 50, "max_configs": 1024},
}

AtLeast0 = Annotated[int, Meta(ge=0)]
AtLeast1 = Annotated[int, Meta(ge=1)]
# A timeout or time budget: positive and finite, at most a day (inf or 1e300 overflowed the waits; a longer
# limit is a mistake, and None already means no limit).
MAX_SECONDS = 86400.0
Seconds = Annotated[float, Meta(gt=0, le=MAX_SECONDS)]
DEFAULT_ISOLATE_MAX_BYTES = 1 << 30  # Tuning.isolate_max_bytes: 1 GiB of tensors
# Tuning.compile_workers: a compile thread each, or under isolation a worker process each (a Python with torch and
# copies of the call's arguments), started as configs are queued: 10**9 started one per config in flight.
MAX_COMPILE_WORKERS = 256


def _default_workers() -> int:
    return min(8, os.cpu_count() or 1)


class _TuningMeta(type(Struct)):  # type: ignore[misc]
    """Checks the arguments of `Tuning(...)` before msgspec does: a Struct may not define `__init__`."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if args:
            example = f"preset={args[0]!r}" if isinstance(args[0], str) else "reps=20"
            raise OptionError(
                f"Tuning takes keyword arguments only, e.g. Tuning({example}); got {len(args)} positional"
            )
        _check_field_names(kwargs)
        return super().__call__(**kwargs)


class Tuning(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, dict=True, metaclass=_TuningMeta):
    """How to tune a key. Frozen; unknown fields are rejected; explicit fields win over the preset.

    Checked when made, against the constraints declared here: a value of the wrong type or range raises
    OptionError naming the field. Which preset fields were given explicitly is remembered, so
    `replace(preset=...)` refills the others from the new preset instead of keeping the old preset's numbers."""

    preset: Preset = "default"
    # None until filled from the preset (the annotation is the filled value's)
    warmup: AtLeast0 = None  # type: ignore[assignment]
    reps: AtLeast1 = None  # type: ignore[assignment]
    refine_topk: AtLeast0 = None  # type: ignore[assignment]
    refine_reps: AtLeast0 = None  # type: ignore[assignment]
    seed: int | None = None
    force: bool = False
    compile_workers: Annotated[int, Meta(ge=0, le=MAX_COMPILE_WORKERS)] = field(default_factory=_default_workers)
    compile_timeout_s: Seconds | None = None
    flush_l2: bool = True
    cuda_graph: bool = False
    distributed: Literal["shard", "rank0", "off"] | None = None
    lock_timeout_s: Seconds | None = None  # None: AUTOTUNE_LOCK_TIMEOUT_S, else 600 s
    strategy: Strategy = "auto"
    max_configs: AtLeast1 = None  # type: ignore[assignment]  # filled from the preset
    max_seconds: Seconds | None = None  # stop proposing configs after this long
    mode: Literal["blocking", "online"] | None = None  # None: AUTOTUNE_MODE, else "blocking"
    isolate: Literal["auto", "process", "off"] | None = None  # None: AUTOTUNE_ISOLATE, else "off"
    trial_timeout_s: Seconds | None = None  # one config's compile + measure, isolated (and each re-measurement run)
    transfer: bool = True  # the model search starts from another device kind's record of the key, where one exists
    # A call whose tensors add up to more than this is tuned in-process (one IsolationWarning says why): a worker
    # holds copies of every argument, ~3x its bytes at the peak. None: no bound.
    isolate_max_bytes: AtLeast1 | None = DEFAULT_ISOLATE_MAX_BYTES
    # One config for a set of calls (sweep/warmup), scored by the geometric mean or the max of its per-call
    # medians; None: each key is tuned on the call that meets it
    objective: Objective | None = None

    def __post_init__(self) -> None:
        _check_field("preset", self.preset)  # first: it names the other fields' defaults
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if value is not None or name not in PRESETS[self.preset]:
                _check_field(name, value)
        # not a field (never encoded, not compared): the instance's own __dict__ (`dict=True`)
        self.__dict__["_explicit"] = frozenset(name for name in PRESETS[self.preset] if getattr(self, name) is not None)
        for name, value in PRESETS[self.preset].items():
            if getattr(self, name) is None:
                structs.force_setattr(self, name, value)
        if self.refine_topk >= 2 and self.refine_reps == 0:
            self._refuse_empty_refinement()

    def _refuse_empty_refinement(self) -> None:
        """refine_topk >= 2 with refine_reps=0 (one of them given, the other the preset's: the presets agree) would
        re-measure nothing without a word: an OptionError naming where each number came from."""
        explicit = self.explicit_fields()
        topk = f"refine_topk={self.refine_topk}"
        reps = "refine_reps=0"
        if "refine_topk" not in explicit:
            topk, no_refinement = f"the {self.preset} preset's {topk}", "or also refine_topk=0"
        else:
            no_refinement = "or refine_topk=0"
        if "refine_reps" not in explicit:
            reps = f"the {self.preset} preset's {reps}"
        raise OptionError(
            f"invalid tuning options: {topk} asks to re-measure the best {self.refine_topk} configs, but {reps} "
            f"re-measures none; give refine_reps >= 1 (e.g. refine_reps=10), {no_refinement} for no re-measurement"
        )

    def explicit_fields(self) -> frozenset[str]:
        """The preset fields (warmup, reps, ...) given explicitly rather than filled from the preset."""
        return self.__dict__.get("_explicit", frozenset(PRESETS[self.preset]))

    def replace(self, **changes: Any) -> Tuning:
        """A copy with some fields changed (checked like a new Tuning). Preset fields the user never set are
        refilled from the copy's preset: `Tuning(preset="fast").replace(preset="thorough")` is thorough's
        numbers, while an explicit `reps=` (given before or in `changes`) is kept."""
        _check_field_names(changes)
        explicit = self.explicit_fields()
        for name in PRESETS[self.preset]:
            if name not in changes and name not in explicit:
                changes[name] = None
        return structs.replace(self, **changes)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled (a worker's copy) and copied as made: the preset fields not given explicitly stay implicit, so
        the copy's `replace(preset=...)` refills them as the original's would."""
        implicit = set(PRESETS[self.preset]) - self.explicit_fields()
        fields = {name: getattr(self, name) for name in self.__struct_fields__ if name not in implicit}
        return _tuning_of, (fields,)

    def __copy__(self) -> Tuning:
        return self  # frozen: a copy is the same value

    @classmethod
    def coerce(cls, value: Tuning | str | dict | None) -> Tuning:
        """Accept a Tuning, a preset name, a dict of fields, or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, Tuning):
            return value
        if isinstance(value, str):
            return cls(preset=cast(Preset, value))  # any str: __post_init__ refuses one that is not a preset
        if isinstance(value, dict):
            _check_field_names(value)
            return cls(**value)
        raise OptionError(
            f"tuning= takes a Tuning, a preset name ({', '.join(PRESETS)}) or a dict; got {type(value).__name__}"
        )


def _tuning_of(fields: dict[str, Any]) -> Tuning:
    return Tuning(**fields)


@functools.cache
def _field_types() -> dict[str, Any]:
    return get_type_hints(Tuning, include_extras=True)


def _check_field(name: str, value: Any) -> None:
    """`value` against the field's declared type and constraints, else an OptionError naming the field."""
    hint = _field_types()[name]
    try:
        msgspec.convert(value, hint)
    except msgspec.ValidationError as exc:
        choices = [v for a in get_args(hint) for v in (get_args(a) or [a]) if v is not type(None)]
        if get_origin(hint) is Literal or any(get_origin(a) is Literal for a in get_args(hint)):
            hint_text = f"; use one of: {', '.join(map(repr, choices))}"
        else:
            hint_text = f" (got {value!r})"
        if name == "compile_workers" and isinstance(value, int) and value > MAX_COMPILE_WORKERS:
            hint_text += (
                f"; the most is {MAX_COMPILE_WORKERS} (a compile thread each, or under isolation a worker process "
                f"each): give at most {MAX_COMPILE_WORKERS}, or leave compile_workers unset for min(8, CPUs)"
            )
        if Seconds in (hint, *get_args(hint)) and isinstance(value, (int, float)) and value > MAX_SECONDS:
            unset = "the default" if name == "lock_timeout_s" else "no limit"
            hint_text += (
                f"; the most is {MAX_SECONDS:g} s (a day): give a finite number of seconds, or leave "
                f"{name} unset (None) for {unset}"
            )
        raise OptionError(f"invalid tuning options: {name}: {exc}{hint_text}") from None


def _check_field_names(names: Any) -> None:
    """Each name is a field of Tuning, else an OptionError naming the closest one (not msgspec's bare TypeError)."""
    known = Tuning.__struct_fields__
    unknown = [name for name in names if name not in known]
    if unknown:
        raise OptionError(
            f"invalid tuning options: {unknown[0]!r} is not a Tuning field."
            f"{did_you_mean(str(unknown[0]), known)} The fields: {', '.join(known)}"
        )


_OFF = ("", "0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


def _switch(raw: str) -> bool | None:
    """An on/off word of an AUTOTUNE_* switch read (unset or empty is off, a number other than 0 on); None when
    it is neither."""
    word = raw.strip().lower()
    if word in _OFF:
        return False
    if word.isascii() and word.isdigit():
        return int(word) != 0
    return True if word in _ON else None


def _env_flag(name: str) -> bool:
    """An on/off AUTOTUNE_* switch; a value that is neither (AUTOTUNE_OFFLINE=flase) is an OptionError, not "on"."""
    value = _switch(os.environ.get(name, ""))
    if value is None:
        raise OptionError(
            f"{name}={os.environ[name]!r} is neither on nor off; set {name}=1 (on) or {name}=0 (off), or unset it"
        )
    return value


def env_force() -> bool:
    """AUTOTUNE_FORCE=1: retune every key, ignoring cached winners."""
    return _env_flag("AUTOTUNE_FORCE")


def env_offline() -> bool:
    """AUTOTUNE_OFFLINE=1: never tune; a miss launches the fallback config."""
    return _env_flag("AUTOTUNE_OFFLINE")


def env_mode() -> str | None:
    """AUTOTUNE_MODE=online|blocking: how a whole process tunes kernels whose Tuning leaves mode unset."""
    raw = os.environ.get("AUTOTUNE_MODE", "").strip().lower()
    if not raw:
        return None
    if raw not in ("online", "blocking"):
        also = "; to launch stored winners only, never tuning, set AUTOTUNE_OFFLINE=1" if raw == "offline" else ""
        raise OptionError(
            f"AUTOTUNE_MODE={raw!r} is not a mode; use AUTOTUNE_MODE=online (tune across real calls) "
            f"or AUTOTUNE_MODE=blocking (tune on the first call), or unset it{also}"
        )
    return raw


def online_mode(tuning: Tuning) -> bool:
    """Whether a kernel tunes online: `Tuning(mode=...)`, else AUTOTUNE_MODE, else blocking."""
    mode = tuning.mode if tuning.mode is not None else env_mode()
    return mode == "online"


def env_isolate() -> str | None:
    """AUTOTUNE_ISOLATE=auto|process|off: where a whole process tunes kernels whose Tuning leaves isolate unset."""
    raw = os.environ.get("AUTOTUNE_ISOLATE", "").strip().lower()
    if not raw:
        return None
    if raw not in ("auto", "process", "off"):
        raise OptionError(
            f"AUTOTUNE_ISOLATE={raw!r} is not an isolation mode; use auto (a worker process when the "
            "kernel is importable), process (always a worker) or off (in this process), or unset it"
        )
    return raw


def isolate_setting(tuning: Tuning, default: str) -> tuple[str, str]:
    """(the isolation mode, what set it): `Tuning(isolate=...)`, else AUTOTUNE_ISOLATE, else the kernel's default
    ("off": in the caller's process, as triton.autotune)."""
    if tuning.isolate is not None:
        return tuning.isolate, f"isolate={tuning.isolate!r}"
    env = env_isolate()
    return (env, f"AUTOTUNE_ISOLATE={env}") if env else (default, f"the default isolate={default!r}")


def env_disable() -> bool:
    """AUTOTUNE_DISABLE=1: launch `fallback=`, else the first config, with no tuning at all."""
    return _env_flag("AUTOTUNE_DISABLE")


DEFAULT_LOCK_TIMEOUT_S = 600.0


def lock_timeout_s(tuning: Tuning | None = None) -> float:
    """How long a process waits for another one tuning the same key before it tunes in memory itself:
    `Tuning(lock_timeout_s=...)`, else AUTOTUNE_LOCK_TIMEOUT_S, else 600 s."""
    if tuning is not None and tuning.lock_timeout_s is not None:
        return tuning.lock_timeout_s
    raw = os.environ.get("AUTOTUNE_LOCK_TIMEOUT_S", "").strip()
    if not raw:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(
            f"AUTOTUNE_LOCK_TIMEOUT_S={raw!r} is not a number of seconds; unset it or set e.g. "
            "AUTOTUNE_LOCK_TIMEOUT_S=600"
        ) from None
    if not 0 < value <= MAX_SECONDS:
        raise OptionError(
            f"AUTOTUNE_LOCK_TIMEOUT_S={raw!r} must be a positive number of seconds, at most "
            f"{MAX_SECONDS:g} (a day); unset it for the default ({DEFAULT_LOCK_TIMEOUT_S:g} s)"
        )
    return value


_WARNED: set = set()


def _warn_unread(name: str, raw: str, reading: str, values: str) -> None:
    """Warn once per value that a display switch was not understood (it is read after a tuning, which an error
    there would throw away, so it is not an OptionError as the behaviour switches are)."""
    if (name, raw) not in _WARNED:
        _WARNED.add((name, raw))
        warnings.warn(
            f"{name}={raw!r} is not understood; read as {reading}. Set {values}, or unset it", UserWarning, stacklevel=3
        )


def env_print_level() -> int:
    """AUTOTUNE_PRINT: 0 silent, 1 one line per tuning, 2 every trial (on/off words are 1/0)."""
    raw = os.environ.get("AUTOTUNE_PRINT", "0").strip()
    if raw.isascii() and raw.isdigit():  # not int()'s wider reading: "-1", "1_0", other scripts' digits
        return int(raw)
    value = _switch(raw)
    if value is None:
        _warn_unread("AUTOTUNE_PRINT", raw, "1", "0 (silent), 1 (a line per tuning) or 2 (every trial)")
        return 1
    return int(value)


def env_progress() -> bool:
    """AUTOTUNE_PROGRESS=0 turns the progress bar off (on when unset)."""
    raw = os.environ.get("AUTOTUNE_PROGRESS", "").strip()
    if not raw:
        return True
    value = _switch(raw)
    if value is None:
        _warn_unread("AUTOTUNE_PROGRESS", raw, "on (the bar is shown)", "AUTOTUNE_PROGRESS=0 (off) or 1 (on)")
        return True
    return value


def cache_dir() -> str:
    """AUTOTUNE_CACHE_DIR, else $XDG_CACHE_HOME/autotune, else ~/.cache/autotune."""
    explicit = os.environ.get("AUTOTUNE_CACHE_DIR")
    if explicit:
        return os.path.expanduser(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = xdg if xdg else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "autotune")


# Every AUTOTUNE_* variable the library reads (tests/test_user_mistakes.py checks this against the sources).
ENV_NAMES = frozenset(
    {
        "AUTOTUNE_CACHE_DIR",
        "AUTOTUNE_DEVICE_KIND",
        "AUTOTUNE_DISABLE",
        "AUTOTUNE_FORCE",
        "AUTOTUNE_ISOLATE",
        "AUTOTUNE_LOCK_TIMEOUT_S",
        "AUTOTUNE_MODE",
        "AUTOTUNE_OFFLINE",
        "AUTOTUNE_PRINT",
        "AUTOTUNE_PROGRESS",
        "AUTOTUNE_REMOTE_CACHE",
        "AUTOTUNE_REMOTE_CACHE_LEASE_S",
        "AUTOTUNE_REMOTE_CACHE_PASSWORD",
        "AUTOTUNE_REMOTE_CACHE_TIMEOUT_S",
        "AUTOTUNE_REMOTE_CACHE_TTL_S",
        "AUTOTUNE_REMOTE_PREFIX",
    }
)
_ENV_WARNED: set[str] = set()


def warn_misspelt_env() -> None:
    """Warn (once per name and process) of an AUTOTUNE_* variable that autotune does not read but that is close to
    one it does (a misspelt AUTOTUNE_OFFLINE): a misspelt switch is otherwise ignored without a word. Names close to
    none (a project's own AUTOTUNE_* settings) are left alone."""
    import difflib

    from .errors import warn_at_caller

    for name in os.environ:
        if name.startswith("AUTOTUNE_") and name not in ENV_NAMES and name not in _ENV_WARNED:
            _ENV_WARNED.add(name)
            upper = name.upper()  # a typo or the wrong case, not merely another AUTOTUNE_ name
            # the part after the prefix: the shared AUTOTUNE_ would make any two names look close
            suffixes = {n.removeprefix("AUTOTUNE_"): n for n in ENV_NAMES}
            near = difflib.get_close_matches(upper.removeprefix("AUTOTUNE_"), suffixes, n=1, cutoff=0.85)
            close = [n for n in ENV_NAMES if n == upper] or [suffixes[s] for s in near]
            if close:
                warn_at_caller(
                    f"autotune: the environment variable {name} is not one autotune reads, so it has no "
                    f"effect. Did you mean {close[0]!r}?"
                )
