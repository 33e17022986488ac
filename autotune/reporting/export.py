"""A record's trials as CSV (one row per trial, read back by `records_from_csv`) and the whole record as JSON."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import msgspec

from .. import codec
from ..errors import AutotuneError
from ..record import SCHEMA_VERSION, Trial, TuningRecord
from ..storage.entries import MAX_ENTRY_BYTES, finite_float, no_constant
from . import ranking
from .ranking import ranked, reference_ms

PathLike = str | os.PathLike

__all__ = ["PathLike", "record_to_csv", "records_from_csv", "record_to_json", "record_from_json", "open_regular"]


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
    columns (the others are derived and ignored). An empty `error` cell reads as None. Each row is validated as a
    `Trial` is (no negative, NaN or infinite time); a file is read only when regular and at most
    `MAX_ENTRY_BYTES` long. AutotuneError names the line that is not a trial.
    """
    text = _read_text(path_or_file, "trials CSV")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    trials: list[Trial] = []
    # a cell may be as long as the file (many samples, a compiler's long error), past csv's 128 KiB default
    default_limit = csv.field_size_limit(MAX_ENTRY_BYTES)
    try:
        for row in reader:
            trials.append(codec.from_builtins(_trial_fields(row), Trial))
    except (KeyError, ValueError, TypeError, RecursionError, csv.Error) as exc:
        why = codec.error_text(exc) if isinstance(exc, codec.ValidationError) else f"{exc.__class__.__name__}: {exc}"
        raise AutotuneError(
            f"not an autotune trials CSV (line {reader.reader.line_num}): {why}; give a file record_to_csv wrote"
        ) from None
    finally:
        csv.field_size_limit(default_limit)
    return trials


def _trial_fields(row: dict[str, str]) -> dict[str, Any]:
    """One CSV row as the plain data of a Trial (validated by `codec.from_builtins`)."""
    return {
        "config": _json_cell(row["config"]),
        "status": row["status"],
        "median_ms": _float_cell(row, "median_ms"),
        "min_ms": _float_cell(row, "min_ms"),
        "samples_ms": _json_cell(row["samples_ms"]) if row.get("samples_ms") else [],
        "error": row.get("error") or None,
        "compile_s": _float_cell(row, "compile_s"),
    }


def _float_cell(row: dict[str, str], column: str) -> float | None:
    """A number cell (empty or absent: None); NaN and infinities are refused, as in a record."""
    text = row.get(column)
    try:
        return finite_float(text) if text else None
    except ValueError as exc:
        raise ValueError(f"{column}: {exc}") from None


def _json_cell(text: str) -> Any:
    """A JSON cell; NaN, Infinity and numbers too large for a float are refused, as in a record."""
    return json.loads(text, parse_constant=no_constant, parse_float=finite_float)


def open_regular(path: PathLike, what: str) -> BinaryIO:
    """`path` opened to read bytes, where it is a regular file (a FIFO would block, /dev/zero never ends);
    AutotuneError `cannot read {what} PATH: ...` otherwise, OSError where it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AutotuneError(f"cannot read {what} {path}: not a regular file (a directory, FIFO or device)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_text(path_or_file: PathLike | TextIO, what: str) -> str:
    """The text of a file (UTF-8, regular) or of an open file: at most MAX_ENTRY_BYTES, what a cache entry may be."""
    try:
        if hasattr(path_or_file, "read"):
            data = path_or_file.read(MAX_ENTRY_BYTES + 1)
        else:
            with open_regular(path_or_file, what) as fh:
                data = fh.read(MAX_ENTRY_BYTES + 1)
        if len(data) > MAX_ENTRY_BYTES:
            raise AutotuneError(f"{what} {path_or_file} is over {MAX_ENTRY_BYTES} bytes, the limit of a cache entry")
        return data if isinstance(data, str) else data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AutotuneError(f"{what} {path_or_file} is not UTF-8 text: {exc}") from None


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
    """Read a record written by `record_to_json` (validated as a TuningRecord, raising `codec.ValidationError`;
    nothing is evaluated). A file is read only when regular and at most `MAX_ENTRY_BYTES` long (AutotuneError)."""
    text = _read_text(path_or_file, "record JSON")
    try:
        version = codec.from_json(text, _SchemaVersion).schema_version  # first: another version's fields differ
        if version != SCHEMA_VERSION:
            raise AutotuneError(
                f"this record JSON has schema version {version}, and this autotune reads version "
                f"{SCHEMA_VERSION}: read it with the autotune version that wrote it"
                + (", or upgrade autotune" if version > SCHEMA_VERSION else "")
            )
        return TuningRecord.from_json(text)
    except RecursionError:
        raise AutotuneError(
            "not an autotune record: its JSON is nested too deeply; give a file record_to_json wrote"
        ) from None


class _SchemaVersion(msgspec.Struct):
    """The one field of a record JSON read before the rest (other fields ignored)."""

    schema_version: int = SCHEMA_VERSION
