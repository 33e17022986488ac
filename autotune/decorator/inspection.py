"""What a decorated kernel tells about its tunings: `record(key)`, `cache_info()`, `report(key, png=)`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import NoRecordError
from ..keys import normalise_key
from ..record import TuningRecord
from ..storage.counters import stats

if TYPE_CHECKING:
    from ..modes.online import OnlineTuner
    from ..storage.kernel_cache import KernelCache

__all__ = ["KernelInspection"]


class KernelInspection:
    """Mixed into `Autotuned`: reads its cache (`self.cache`), its name and its last call's key."""

    cache: KernelCache
    name: str
    _last_key: tuple | None

    def record(self, key: Sequence[Any] | None = None) -> TuningRecord:
        """The tuning record of `key` (the tuple the key spec computes), or of the last call's key."""
        records = self.cache.records()
        if key is None:
            if self._last_key is None:
                raise NoRecordError(
                    f"{self.name} has no tuning record in this process yet: call the kernel first (a "
                    f"stored winner is read at that call), or pass key="
                )
            if self._last_key not in records:
                raise NoRecordError(
                    f"{self.name}'s last call (key {self._last_key[0]}) has no tuning record: it "
                    f"launched without one (a space of one config, AUTOTUNE_DISABLE, or "
                    f"AUTOTUNE_OFFLINE's fallback), or its key is being tuned online "
                    f"({self._online_progress() or 'no session'}); record() has one once a tuning "
                    f"or a stored winner decided it"
                )
            return records[self._last_key]
        # normalised as a call's key is stored (an enum as `Type.NAME`, a tl.dtype as its text), as a clear's is
        wanted = normalise_key(tuple(key) if isinstance(key, (tuple, list)) else (key,), f"{self.name}.record(key)")
        matches = [rec for (k, _), rec in records.items() if k == wanted]
        if not matches:
            raise NoRecordError(
                f"{self.name} has no record for key {wanted} in this process; the keys it has: "
                f"{sorted({k for k, _ in records}, key=repr) or 'none yet'} (a key is the tuple its "
                f"key= spec computes, without the dtypes; call the kernel with that key first)"
            )
        if self._last_key is not None and self._last_key[0] == wanted and self._last_key in records:
            return records[self._last_key]
        return matches[-1]

    def cache_info(self) -> dict[str, Any]:
        """Entries in memory and this process's hit/miss/tuning counters for this kernel."""
        counters = stats().get(self.name, {})
        info: dict[str, Any] = {"entries": len(self.cache.records()), **counters}
        online = self._online_progress()
        if online:
            info["online"] = online
        return info

    @property
    def online_started(self) -> OnlineTuner | None:
        """The kernel's online sessions if a call has made them, without making them (`Autotuned.online` does)."""
        return self.__dict__.get("_online")

    def _online_progress(self) -> dict[str, str] | None:
        """The online sessions' progress, or None when the kernel never tuned online: asking must not start the
        online machinery (`self.online` makes it)."""
        tuner = self.online_started
        return tuner.progress() if tuner is not None else None

    def report(self, key: Sequence[Any] | None = None, png: str | None = None) -> str:
        """The trial table of `key` as text; with `png=`, also a bar chart of the trial times."""
        from ..reporting import plot_trials, report_table

        record = self.record(key)
        if png is not None:
            plot_trials(record, png)
        return report_table(record)
