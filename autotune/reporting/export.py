"""A record's trials as CSV (one row per trial, read back by `records_from_csv`) and the whole record as JSON."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, TextIO

from ..errors import AutotuneError
from ..record import Trial, TrialStatus, TuningRecord
from ..space.spaces import Config
from . import ranking
from .ranking import ranked, reference_ms

PathLike = str | os.PathLike

__all__ = ["PathLike", "record_to_csv", "records_from_csv", "record_to_json", "record_from_json"]


_CSV_COLUMNS = [
    "kernel",
    "key",
    "rank",
    "winner",
    "config",
    "status",
    "median_ms",
    "min_ms",
    "x_winner",
    "samples_ms",
    "error",
    "compile_s",
]


def record_to_csv(record: TuningRecord, path_or_file: PathLike | TextIO) -> None:
    """Write one row per trial, in the record's order, as CSV (header row first).

    Columns: `kernel`, `key` (JSON), `rank` (empty for failures), `winner` (`1`/`0`), `config`
    (the config as JSON, the column `records_from_csv` reads back), `status`, `median_ms`, `min_ms`,
    `x_winner`, `samples_ms` (JSON list), `error`, `compile_s`, then one `cfg.FIELD` column per
    config field (the union over trials) for spreadsheets. Floats are written with `repr`, so
    they read back exactly; None is an empty cell.
    """
    ranks = {id(t): r for r, t in ranked(record)}
    reference = reference_ms(record)
    fields: list[str] = []
    for trial in record.trials:
        for name in trial.config:
            if name not in fields:
                fields.append(name)
    header = _CSV_COLUMNS + [f"cfg.{f}" for f in fields]
    key_json = json.dumps(list(record.key))

    def cell(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return repr(value)
        return str(value)

    def write(fh: TextIO) -> None:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        for trial in record.trials:
            rank = ranks.get(id(trial))
            ratio = ranking.ratio(trial, reference)
            row = [
                record.kernel,
                key_json,
                cell(rank),
                "1" if trial.config == record.winner else "0",
                trial.config.canonical(),
                trial.status.value,
                cell(trial.median_ms),
                cell(trial.min_ms),
                cell(ratio),
                json.dumps(trial.samples_ms),
                cell(trial.error),
                cell(trial.compile_s),
            ]
            row += [json.dumps(trial.config[f]) if f in trial.config else "" for f in fields]
            writer.writerow(row)

    if hasattr(path_or_file, "write"):
        write(path_or_file)  # type: ignore[arg-type]
    else:
        target = Path(path_or_file)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", newline="", encoding="utf-8") as fh:
            write(fh)


def records_from_csv(path_or_file: PathLike | TextIO) -> list[Trial]:
    """Read the trials back from a CSV written by `record_to_csv`, in file order.

    Uses the `config`, `status`, `median_ms`, `min_ms`, `samples_ms`, `error` and `compile_s`
    columns (the others are derived and ignored). An empty `error` cell reads as None.
    """

    def parse_float(text: str) -> float | None:
        return float(text) if text != "" else None

    def read(fh: TextIO) -> list[Trial]:
        trials = []
        for row in csv.DictReader(fh):
            try:
                trials.append(
                    Trial(
                        config=Config.from_json(json.loads(row["config"])),
                        status=TrialStatus(row["status"]),
                        median_ms=parse_float(row.get("median_ms", "")),
                        min_ms=parse_float(row.get("min_ms", "")),
                        samples_ms=json.loads(row["samples_ms"]) if row.get("samples_ms") else [],
                        error=row.get("error") or None,
                        compile_s=parse_float(row.get("compile_s", "") or ""),
                    )
                )
            except (KeyError, ValueError, TypeError) as exc:
                raise AutotuneError(f"not an autotune trials CSV (line {len(trials) + 2}): {exc}") from None
        return trials

    if hasattr(path_or_file, "read"):
        return read(path_or_file)  # type: ignore[arg-type]
    with open(path_or_file, newline="", encoding="utf-8") as fh:
        return read(fh)


def record_to_json(record: TuningRecord, path_or_file: PathLike | TextIO) -> None:
    """Write the whole record (every field the disk cache stores) as indented JSON."""
    text = record.to_json(indent=2)
    if hasattr(path_or_file, "write"):
        path_or_file.write(text)
        return
    target = Path(path_or_file)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "\n", encoding="utf-8")


def record_from_json(path_or_file: PathLike | TextIO) -> TuningRecord:
    """Read a record written by `record_to_json` (validated as a TuningRecord; nothing is evaluated)."""
    if hasattr(path_or_file, "read"):
        text = path_or_file.read()
    else:
        text = Path(path_or_file).read_text(encoding="utf-8")
    return TuningRecord.from_json(text)
