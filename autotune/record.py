"""What a tuning produced: one `Trial` per config and the `TuningRecord` that the cache stores."""
from __future__ import annotations

import time
from enum import Enum
from typing import Any, Iterator, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from .space import Config

SCHEMA_VERSION = 1


class TrialStatus(str, Enum):
    """How a config's trial ended."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    TIMEOUT = "timeout"
    RUNTIME_ERROR = "runtime_error"
    VERIFY_FAILED = "verify_failed"
    OUT_OF_RESOURCES = "out_of_resources"   # needs more shared memory / registers than the device has
    CRASHED = "crashed"                     # killed its worker process (a signal, os._exit, a poisoned device)
    SKIPPED = "skipped"


class Trial(BaseModel):
    """One config's measurement: its samples, median and min in milliseconds, or its error."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # NaN/inf never come from a tuning

    config: Config
    status: TrialStatus = TrialStatus.SKIPPED
    median_ms: Optional[float] = Field(default=None, ge=0)
    min_ms: Optional[float] = Field(default=None, ge=0)
    samples_ms: list[float] = Field(default_factory=list)
    error: Optional[str] = None
    compile_s: Optional[float] = Field(default=None, ge=0)

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.OK


class TuningRecord(BaseModel):
    """Everything one tuning of one key produced; the JSON body of a disk cache entry."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # NaN/inf never come from a tuning

    schema_version: int = SCHEMA_VERSION
    kernel: str
    kernel_id: Optional[str] = None      # "module:qualname": tells apart kernels that share a short name
    source_hash: str
    device: str
    triton_version: str
    torch_version: str
    space_checksum: str
    key: list[Any]
    dtypes: list[str] = Field(default_factory=list)
    winner: Config
    trials: list[Trial]
    candidates: Optional[str] = None     # checksum of the configs prune= kept for this key (None: no prune=)
    strategy: Optional[str] = None       # the search strategy when not every config was tried (None: exhaustive)
    space_size: Optional[int] = Field(default=None, ge=0)   # configs in the space (its product when lazy)
    tuning_s: float = Field(ge=0)
    timestamp: float = Field(default_factory=time.time, ge=0)

    # A record reads as the documented sequence of trials (`len(record)`, `for t in record`, `record[0]`),
    # one per config of the space; its metadata stays available as fields. Pydantic's own iteration over
    # (field, value) pairs is replaced on purpose: use `model_dump()` for a dict.
    def __len__(self) -> int:
        return len(self.trials)

    def __iter__(self) -> Iterator[Trial]:  # type: ignore[override]
        return iter(self.trials)

    def __getitem__(self, index: Union[int, slice]) -> Union[Trial, list[Trial]]:
        if isinstance(index, str):
            raise TypeError(f"a TuningRecord is indexed by trial position; use record.{index} for a field")
        return self.trials[index]

    def trial_for(self, config: Config) -> Optional[Trial]:
        """The trial of `config`, or None."""
        for trial in self.trials:
            if trial.config == config:
                return trial
        return None

    @property
    def winner_trial(self) -> Optional[Trial]:
        return self.trial_for(self.winner)
