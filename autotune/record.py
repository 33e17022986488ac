"""What a tuning produced: one `Trial` per config and the `TuningRecord` that the cache stores.

Both are `msgspec.Struct`s: typed, with their constraints declared here and checked whenever one is read back
(`codec.from_json`, `TuningRecord.from_json`; with `check_decoded`, what types cannot say); made in this process
they are trusted as built.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from enum import Enum
from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType, field, structs

from . import codec
from .space.spaces import Config

SCHEMA_VERSION = 1

Ms = Annotated[float, Meta(ge=0)]  # a time in milliseconds or seconds: never negative (nor NaN)
Count = Annotated[int, Meta(ge=0)]


class TrialStatus(str, Enum):
    """How a config's trial ended."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    TIMEOUT = "timeout"
    RUNTIME_ERROR = "runtime_error"
    VERIFY_FAILED = "verify_failed"
    OUT_OF_RESOURCES = "out_of_resources"  # needs more shared memory / registers than the device has
    CRASHED = "crashed"  # killed its worker process (a signal, os._exit, a poisoned device)
    SKIPPED = "skipped"


class Trial(Struct, kw_only=True, forbid_unknown_fields=True):
    """One config's measurement: its samples, median and min in milliseconds, or its error."""

    config: Config
    status: TrialStatus = TrialStatus.SKIPPED
    median_ms: Ms | None = None
    min_ms: Ms | None = None
    samples_ms: list[Ms] = field(default_factory=list)
    error: str | None = None
    compile_s: Ms | None = None
    # What the config's occupancy became when compiled ({"maxnreg": 128} on NVIDIA, {"waves_per_eu": 2} on AMD, the
    # knob None where it is met unconstrained, {} under the interpreter; occupancy.py). UNSET (falsy, and not
    # written, so entries without occupancy are stored as before) for a config without one.
    lowered: dict[str, int | None] | UnsetType = UNSET
    # Under a multi-call objective (`Tuning.objective`), the config's first-pass median on each call, in the order of the
    # record's `calls`; the trial's own times are their geometric mean or max. UNSET (not written) otherwise.
    calls_ms: list[Ms] | UnsetType = UNSET

    def check_decoded(self, at: str = "$") -> None:
        """Refuse, read back (`codec`), what the field types allow but no tuning writes: an "ok" trial without its
        median (hand-edited, another writer), which would read "ok" here and "failed" in the summaries."""
        if self.status == TrialStatus.OK and self.median_ms is None:
            raise codec.ValidationError(
                f'a trial of status "ok" has no median_ms (a measured trial has one) - at `{at}`'
            )

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.OK


class PriorNote(Struct, kw_only=True, forbid_unknown_fields=True):
    """The prior a search started from (another device kind's record of the kernel, `search.prior`): its device,
    where it came from, and the winner's 1-based rank in its order (None: the prior never ran the winner)."""

    device: str
    source: str
    winner_rank: Count | None = None


Where = Literal["in-process", "worker process"]  # where a tuning's trials ran


class Search(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The search that found a winner: its strategy ("exhaustive", "random", "local", "model"), its budget and
    how many configs it measured. A later, stronger search tunes the key again (`stronger_search`)."""

    strategy: str
    max_configs: Annotated[int, Meta(ge=1)] | None = None  # the budget of a strategy (None: exhaustive)
    max_seconds: Ms | None = None
    measured: Count = 0  # configs compiled and run (failures included), not the ones skipped


def stronger_search(wanted: Search, had: Search, space_size: int | None = None) -> str | None:
    """Why `wanted` would search harder than the search `had` did (so the key is tuned again), or None: an
    exhaustive search over a budgeted one, or a larger `max_configs` or `max_seconds`. A search that measured the
    whole space (`space_size` configs) is never beaten."""
    if space_size is not None and had.measured >= space_size:
        return None
    if wanted.strategy == "exhaustive" and had.strategy != "exhaustive":
        return f"an exhaustive search, where its winner came from a {had.strategy} search of {had.measured} configs"
    if wanted.max_configs is not None and had.max_configs is not None and wanted.max_configs > had.max_configs:
        return f"max_configs={wanted.max_configs}, where its winner was searched with max_configs={had.max_configs}"
    if had.max_seconds is not None and (wanted.max_seconds is None or wanted.max_seconds > had.max_seconds):
        given = "no max_seconds" if wanted.max_seconds is None else f"max_seconds={wanted.max_seconds:g}"
        return f"{given}, where its winner was searched within max_seconds={had.max_seconds:g}"
    return None


class TuningRecord(Struct, kw_only=True, forbid_unknown_fields=True):
    """Everything one tuning of one key produced; the JSON body of a disk cache entry."""

    schema_version: int = SCHEMA_VERSION
    kernel: str
    kernel_id: str | None = None  # "module:qualname": tells apart kernels that share a short name
    source_hash: str
    device: str
    triton_version: str
    torch_version: str
    space_checksum: str
    key: list[Any]
    dtypes: list[str] = field(default_factory=list)
    winner: Config
    trials: list[Trial]
    candidates: str | None = None  # checksum of the configs prune= kept for this key (None: no prune=)
    strategy: str | None = None  # the search strategy when not every config was tried (None: exhaustive)
    space_size: Count | None = None  # configs in the space (its product when lazy)
    prior: PriorNote | None = None  # the other device kind's record the search started from (None: none)
    search: Search | None = None  # the search that found the winner (None: an entry from before it was kept)
    where: Where | None = None  # where the trials ran (None: an entry from before it was kept)
    remeasured: list[Config] | None = None  # the best few re-measured side by side, in that order (winner first)
    # "geomean" | "max": one config tuned for the set of calls in `calls` (`Tuning.objective`); UNSET (not written,
    # so entries stay as they were): tuned on the one call that met the key. An entry serves only its objective.
    objective: str | UnsetType = UNSET
    calls: list[str] | UnsetType = UNSET  # each call the objective was measured on (its arguments' shapes)
    tuning_s: Ms
    timestamp: Ms = field(default_factory=time.time)

    def __post_init__(self) -> None:
        # A key is stored as a JSON list whatever sequence the tuning had it in; a winner is always a Config.
        if not isinstance(self.key, list):
            structs.force_setattr(self, "key", list(self.key))
        if not isinstance(self.winner, Config):
            structs.force_setattr(self, "winner", Config(self.winner))
        if self.remeasured is not None and not all(isinstance(c, Config) for c in self.remeasured):
            structs.force_setattr(self, "remeasured", [Config(c) for c in self.remeasured])

    # A record reads as the documented sequence of trials (`len(record)`, `for t in record`, `record[0]`),
    # one per config of the space; its metadata stays available as fields (`to_dict()` for a dict).
    def __len__(self) -> int:
        return len(self.trials)

    def __iter__(self) -> Iterator[Trial]:
        return iter(self.trials)

    def __getitem__(self, index: int | slice) -> Trial | list[Trial]:
        if isinstance(index, str):
            raise TypeError(f"a TuningRecord is indexed by trial position; use record.{index} for a field")
        return self.trials[index]

    def trial_for(self, config: Config) -> Trial | None:
        """The trial of `config`, or None."""
        for trial in self.trials:
            if trial.config == config:
                return trial
        return None

    @property
    def winner_trial(self) -> Trial | None:
        return self.trial_for(self.winner)

    def check_decoded(self) -> None:
        """Each trial's `Trial.check_decoded`, naming the trial (`trials[3]`) in the ValidationError."""
        for i, trial in enumerate(self.trials):
            trial.check_decoded(f"$.trials[{i}]")

    def to_dict(self) -> dict[str, Any]:
        """The record as plain data (what its JSON holds)."""
        return codec.to_builtins(self)

    def to_json(self, indent: int | None = None) -> str:
        """The record as JSON text (the fields a cache entry stores)."""
        return codec.to_json(self, indent=indent).decode("utf-8")

    @classmethod
    def from_json(cls, data: str | bytes) -> TuningRecord:
        """A record from JSON text, validated (unknown fields, wrong types and negative times are refused;
        raises `codec.ValidationError`, a ValueError)."""
        return codec.from_json(data, cls)

    def replace(self, **changes: Any) -> TuningRecord:
        """A copy with some fields changed."""
        return structs.replace(self, **changes)
