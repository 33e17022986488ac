"""What a sweep did: one `KeyOutcome` per (key, device kind) job, one `WorkerStats` per worker, and the summary
table (keys tuned / skipped / failed by device kind, wall time, configs measured per second per worker) that
`str(report)`, AUTOTUNE_PRINT and `autotune sweep` print, and `to_json()` / `--json` write."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..format import format_table, one_line, safe_text

__all__ = ["KeyOutcome", "WorkerStats", "SweepReport", "SweepInterrupted", "Status"]

Status = Literal["tuned", "cached", "leased", "failed", "interrupted"]
SKIPPED: tuple[Status, ...] = ("cached", "leased")


class KeyOutcome(msgspec.Struct, kw_only=True):
    """One key on one device kind: `tuned` here, skipped (`cached`: an entry this Tuning reuses; `leased`: a live
    process holds its lease and is tuning it), `failed` (`error` says why) or `interrupted` (stopped with the sweep
    by Ctrl-C, or never started)."""

    job: int  # the maker's position in `calls`; under `Tuning.objective`, the set's (one per key, in order)
    calls: list[int] | None = None  # under `Tuning.objective`: the positions in `calls` of the set's makers
    device: str
    status: Status
    key: list[Any] | None = None
    dtypes: list[str] | None = None
    winner: dict[str, Any] | None = None
    worker: int | None = None  # the worker that tuned it (the last one tried)
    attempts: int = 0  # workers it was started on (more than 1: a worker died under it)
    split_over: list[int] | None = None  # a within-key split: the workers that measured its configs
    refined_on: int | None = None  # and the one that re-measured the best of them side by side
    configs_measured: int = 0
    seconds: float = 0.0
    error: str | None = None


class WorkerStats(msgspec.Struct, kw_only=True):
    index: int
    device: str
    jobs: int = 0
    configs_measured: int = 0
    busy_s: float = 0.0
    restarts: int = 0
    lost: str | None = None  # why this worker was given up: it died and no new one started in its place

    @property
    def configs_per_s(self) -> float:
        return self.configs_measured / self.busy_s if self.busy_s > 0 else 0.0


class SweepReport(msgspec.Struct, kw_only=True):
    """The outcome of `autotune.sweep`: every job's `KeyOutcome` (`keys`), every worker's `WorkerStats`."""

    kernel: str
    executor: str
    wall_s: float  # the whole sweep, the workers' start included
    start_s: float  # starting the workers (a fresh interpreter each, importing torch, Triton and the kernel)
    keys: list[KeyOutcome]
    workers: list[WorkerStats]

    def with_status(self, *statuses: Status) -> list[KeyOutcome]:
        return [k for k in self.keys if k.status in statuses]

    @property
    def tuned(self) -> list[KeyOutcome]:
        return self.with_status("tuned")

    @property
    def skipped(self) -> list[KeyOutcome]:
        return self.with_status(*SKIPPED)

    @property
    def failed(self) -> list[KeyOutcome]:
        return self.with_status("failed", "interrupted")

    def by_device(self) -> dict[str, dict[str, int]]:
        """{device kind: {"tuned": n, "skipped": n, "failed": n}}."""
        table: dict[str, dict[str, int]] = {}
        for outcome in self.keys:
            counts = table.setdefault(outcome.device, {"tuned": 0, "skipped": 0, "failed": 0})
            group = "skipped" if outcome.status in SKIPPED else "tuned" if outcome.status == "tuned" else "failed"
            counts[group] += 1
        return table

    def to_json(self) -> bytes:
        """The report as JSON: the fields above plus the per-device summary (`by_device`)."""
        data = msgspec.to_builtins(self)
        data["by_device"] = self.by_device()
        for stats, row in zip(self.workers, data["workers"]):
            row["configs_per_s"] = stats.configs_per_s
        return msgspec.json.encode(data)

    def __str__(self) -> str:
        lines = [
            f"autotune sweep {safe_text(self.kernel)} ({safe_text(self.executor)}, {len(self.workers)} workers): "
            f"{self.wall_s:.1f} s "
            f"(workers started in {self.start_s:.1f} s)"
        ]
        devices = self.by_device()
        lines.append(
            format_table(
                ["device", "tuned", "skipped", "failed"],
                [[d, c["tuned"], c["skipped"], c["failed"]] for d, c in sorted(devices.items())],
                right=(1, 2, 3),
            )
        )
        lines.append(
            format_table(
                ["worker", "device", "keys", "configs", "busy s", "configs/s", "restarts"],
                [
                    [
                        w.index,
                        w.device,
                        w.jobs,
                        w.configs_measured,
                        f"{w.busy_s:.1f}",
                        f"{w.configs_per_s:.2f}",
                        w.restarts,
                    ]
                    for w in self.workers
                ],
                right=(0, 2, 3, 4, 5, 6),
            )
        )
        for w in self.workers:
            if w.lost is not None:
                lines.append(
                    f"  worker {w.index} on {safe_text(w.device)}: given up: {safe_text(one_line(w.lost, 160))}"
                )
        for outcome in self.keys:
            what = f"key {safe_text(outcome.key)}" if outcome.key is not None else f"call {outcome.job}"
            device = safe_text(outcome.device)
            if outcome.split_over:
                workers = ", ".join(map(str, outcome.split_over))
                lines.append(f"  {what} on {device}: split over workers {workers}, refined on {outcome.refined_on}")
            elif outcome.status != "tuned":
                why = f": {safe_text(one_line(outcome.error, 160))}" if outcome.error else ""
                lines.append(f"  {what} on {device}: {outcome.status}{why}")
        return "\n".join(lines)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep. A `KeyboardInterrupt` that carries the `report` of what it did: the keys tuned or
    found cached are stored, the others are `interrupted`; running the sweep again resumes where it stopped."""

    def __init__(self, report: SweepReport) -> None:
        super().__init__("the sweep was interrupted: report.keys say which keys were tuned and which were not")
        self.report = report
