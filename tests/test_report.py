"""Seeing what a tuning did: AUTOTUNE_PRINT lines, logging, the trial table, the PNG chart, CSV/JSON, the CLI."""

from __future__ import annotations

import argparse
import io
import logging
import re
import struct
import sys

import pytest

from autotune.cli.report import register as register_report_command
from autotune.errors import AutotuneError
from autotune.record import Trial, TrialStatus, TuningRecord
from autotune.reporting import (
    emit,
    find_records,
    format_summary,
    format_trials,
    plot_trials,
    record_from_json,
    record_to_csv,
    record_to_json,
    records_from_csv,
    render_report,
    report_table,
)
from autotune.space import Config

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def ok(config: Config, median: float, spread: float = 0.9) -> Trial:
    samples = [median * spread, median, median * 1.1]
    return Trial(
        config=config, status=TrialStatus.OK, median_ms=median, min_ms=min(samples), samples_ms=samples, compile_s=0.25
    )


def make_record(trials: list[Trial], winner: Config | None = None, **fields) -> TuningRecord:
    if winner is None:
        winner = min((t for t in trials if t.ok), key=lambda t: t.median_ms).config
    base = dict(
        kernel="add",
        source_hash="abc",
        device="interpreter",
        triton_version="3.9.0",
        torch_version="2.13.0",
        space_checksum="sum",
        key=[1024],
        dtypes=["torch.float32"],
        winner=winner,
        trials=trials,
        tuning_s=1.234,
        timestamp=1700000000.0,
    )
    base.update(fields)
    return TuningRecord(**base)


@pytest.fixture
def record() -> TuningRecord:
    """Four configs in space order: two OK, one compile error (multi-line), one more OK."""
    return make_record(
        [
            ok(Config(BLOCK=32, num_warps=4), 0.02),
            ok(Config(BLOCK=64, num_warps=4), 0.012),
            Trial(
                config=Config(BLOCK=256, num_warps=8),
                status=TrialStatus.COMPILE_ERROR,
                error="CompilationError: at 3:8:\n    x = tl.load(p)\n        ^\nValueError('out of resources')",
            ),
            ok(Config(BLOCK=128, num_warps=4), 0.015),
        ]
    )


# ------------------------------------------------------------------------------------------ print formats


def test_summary_line_has_the_documented_format(record):
    assert format_summary(record, cache_hit=False) == (
        "autotune: add key=(1024,) float32 -> Config(BLOCK=64, num_warps=4) 0.01200 ms"
        " | top3: BLOCK=64,num_warps=4 0.01200 ms (x1.00); BLOCK=128,num_warps=4 0.01500 ms (x1.25);"
        " BLOCK=32,num_warps=4 0.02000 ms (x1.67) | 3/4 ok | tuned in 1.23 s (miss)"
    )
    assert format_summary(record, cache_hit=True).endswith("| tuned in 1.23 s (cache hit)")
    assert "\n" not in format_summary(record, cache_hit=True)


def test_summary_with_fewer_than_three_ok_trials_and_several_dtypes():
    rec = make_record([ok(Config(BLOCK=16), 3.5)], key=[7, "row"], dtypes=["torch.float16", "torch.int32"])
    assert format_summary(rec, cache_hit=False) == (
        "autotune: add key=(7, 'row') float16,int32 -> Config(BLOCK=16) 3.500 ms"
        " | top3: BLOCK=16 3.500 ms (x1.00) | 1/1 ok | tuned in 1.23 s (miss)"
    )


def test_trial_lines_one_per_trial_fastest_first_failures_last_with_error(record):
    lines = format_trials(record).splitlines()
    assert lines == [
        "autotune:   #1 ok            median 0.01200 ms  min 0.01080 ms  x1.00  Config(BLOCK=64, num_warps=4)",
        "autotune:   #2 ok            median 0.01500 ms  min 0.01350 ms  x1.25  Config(BLOCK=128, num_warps=4)",
        "autotune:   #3 ok            median 0.02000 ms  min 0.01800 ms  x1.67  Config(BLOCK=32, num_warps=4)",
        "autotune:   -- compile_error Config(BLOCK=256, num_warps=8)"
        "  error: CompilationError: at 3:8: ... ValueError('out of resources')",
    ]


def test_long_errors_are_cut_to_one_short_line():
    rec = make_record(
        [ok(Config(BLOCK=16), 1.0), Trial(config=Config(BLOCK=32), status=TrialStatus.RUNTIME_ERROR, error="x" * 1000)]
    )
    last = format_trials(rec).splitlines()[-1]
    assert last.startswith("autotune:   -- runtime_error Config(BLOCK=32)  error: xxx") and last.endswith("...")
    assert len(last) < 300


def test_emit_prints_by_level_and_always_logs(record, caplog):
    caplog.set_level(logging.DEBUG, logger="autotune")
    out = io.StringIO()
    emit(record, cache_hit=False, level=0, stream=out)
    assert out.getvalue() == ""
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.DEBUG]
    assert caplog.records[0].getMessage() == format_summary(record, cache_hit=False)
    assert caplog.records[1].getMessage() == format_trials(record)
    assert all(r.name == "autotune" for r in caplog.records)

    emit(record, cache_hit=True, level=1, stream=out)
    assert out.getvalue() == format_summary(record, cache_hit=True) + "\n"

    out = io.StringIO()
    emit(record, cache_hit=False, level=2, stream=out)
    assert out.getvalue() == format_summary(record, cache_hit=False) + "\n" + format_trials(record) + "\n"


def test_emit_reads_autotune_print_and_defaults_to_stderr(record, monkeypatch, capsys):
    emit(record, cache_hit=False)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("AUTOTUNE_PRINT", "1")
    emit(record, cache_hit=False)
    assert capsys.readouterr().err.splitlines() == [format_summary(record, cache_hit=False)]
    monkeypatch.setenv("AUTOTUNE_PRINT", "2")
    emit(record, cache_hit=False)
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 + len(record.trials) and captured.out == ""


def test_emit_survives_a_closed_stream(record):
    out = io.StringIO()
    out.close()
    emit(record, cache_hit=False, level=2, stream=out)  # no exception


# ------------------------------------------------------------------------------------------ table


def test_table_lists_every_trial_sorted_with_failures_last_and_ratios(record):
    lines = report_table(record).splitlines()
    assert lines[0] == (
        "add key=(1024,) float32 on interpreter: 4 trials, 3 ok, 1 failed; "
        "winner Config(BLOCK=64, num_warps=4) 0.01200 ms; tuned in 1.23 s"
    )
    assert lines[1].split() == ["rank", "config", "median", "ms", "min", "ms", "status", "x-winner", "error"]
    rows = lines[3:]
    assert len(rows) == 4
    assert rows[0].split()[:7] == ["1*", "BLOCK=64,", "num_warps=4", "0.01200", "0.01080", "ok", "1.00"]
    assert rows[1].split()[:7] == ["2", "BLOCK=128,", "num_warps=4", "0.01500", "0.01350", "ok", "1.25"]
    assert rows[2].split()[5:7] == ["ok", "1.67"]
    assert rows[3].split()[:7] == ["-", "BLOCK=256,", "num_warps=8", "-", "-", "compile_error", "-"]
    assert "ValueError('out of resources')" in rows[3]
    # columns line up: every row puts the status at the same offset
    assert len({re.search(r"\b(ok|compile_error)\b", row).start() for row in rows}) == 1


def test_ratios_are_relative_to_the_recorded_winner():
    # refinement can pick a winner whose stored median is not the lowest first-pass one; it still ranks first
    trials = [ok(Config(BLOCK=16), 1.0), ok(Config(BLOCK=32), 2.0)]
    rec = make_record(trials, winner=Config(BLOCK=32))
    rows = report_table(rec).splitlines()[3:]
    assert rows[0].split()[:6] == ["1*", "BLOCK=32", "2.000", "1.800", "ok", "1.00"]
    assert rows[1].split()[:5] == ["2", "BLOCK=16", "1.000", "0.9000", "ok"] and rows[1].split()[5] == "0.50"


# ------------------------------------------------------------------------------------------ PNG


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_is_a_valid_image(record, tmp_path):
    path = plot_trials(record, tmp_path / "sub" / "trials.png")
    data = path.read_bytes()
    width, height = png_size(data)
    assert 600 <= width <= 3000 and 250 <= height <= 2000
    from PIL import Image

    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == (width, height)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(path))
    assert pixels.shape[:2] == (height, width)
    assert pixels.std() > 0  # not a blank canvas


def big_record(n: int, n_failed: int) -> TuningRecord:
    trials = []
    for i in range(n):
        config = Config(
            BLOCK_M=16 * (1 + i % 8), BLOCK_N=16 * (1 + (i // 8) % 8), BLOCK_K=32 * (1 + i // 64), num_warps=4
        )
        if i < n_failed:
            trials.append(Trial(config=config, status=TrialStatus.TIMEOUT, error="compile timed out"))
        else:
            trials.append(ok(config, 0.01 + 0.001 * ((i * 37) % n)))
    return make_record(trials, key=[4096, 4096, 4096], dtypes=["torch.float16"] * 3)


def test_png_for_hundreds_of_configs_grows_tall_but_stays_bounded(tmp_path):
    small = png_size(plot_trials(big_record(10, 1), tmp_path / "small.png").read_bytes())
    mid = png_size(plot_trials(big_record(150, 5), tmp_path / "mid.png").read_bytes())
    huge = png_size(plot_trials(big_record(600, 30), tmp_path / "huge.png").read_bytes())
    assert small[1] < mid[1] <= huge[1] <= 6000
    assert mid[1] >= 150 * 15  # roughly one readable row per config


def test_png_without_matplotlib_says_how_to_install(record, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(AutotuneError, match=re.escape('pip install "autotune[plot]"')):
        plot_trials(record, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


# ------------------------------------------------------------------------------------------ CSV / JSON


def awkward_record() -> TuningRecord:
    return make_record(
        [
            ok(Config(BLOCK=64, mode="fast", shape=(1, 2)), 0.1 / 3),
            Trial(
                config=Config(BLOCK=128, mode='a,b "quoted"', shape=(3, 4)),
                status=TrialStatus.RUNTIME_ERROR,
                error='line one, with comma\nline "two"\n',
            ),
            Trial(config=Config(BLOCK=256, mode="slow", shape=(5, 6)), status=TrialStatus.SKIPPED),
            Trial(
                config=Config(BLOCK=32, mode="x", shape=(7, 8), num_warps=2),
                status=TrialStatus.OK,
                median_ms=1e-7,
                min_ms=5e-8,
                samples_ms=[5e-8, 1e-7, 2.0000000000000004e-07],
                compile_s=None,
            ),
        ],
        winner=Config(BLOCK=64, mode="fast", shape=(1, 2)),
    )


def test_csv_round_trips_to_equal_trials(tmp_path):
    rec = awkward_record()
    path = tmp_path / "out" / "trials.csv"
    record_to_csv(rec, path)
    assert records_from_csv(path) == rec.trials
    buffer = io.StringIO()
    record_to_csv(rec, buffer)
    buffer.seek(0)
    assert records_from_csv(buffer) == rec.trials


def test_csv_has_spreadsheet_columns(record, tmp_path):
    import csv

    path = tmp_path / "t.csv"
    record_to_csv(record, path)
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4
    assert list(rows[0])[:12] == [
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
    assert [r["cfg.BLOCK"] for r in rows] == ["32", "64", "256", "128"]  # the record's order
    assert [r["rank"] for r in rows] == ["3", "1", "", "2"]
    assert [r["winner"] for r in rows] == ["0", "1", "0", "0"]
    assert rows[1]["x_winner"] == "1.0" and rows[0]["key"] == "[1024]"


def test_a_file_that_is_not_a_trials_csv_is_an_autotune_error(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(AutotuneError, match="not an autotune trials CSV"):
        records_from_csv(path)


def test_json_round_trips_to_an_equal_record(tmp_path):
    rec = awkward_record()
    path = tmp_path / "r.json"
    record_to_json(rec, path)
    assert record_from_json(path) == rec
    buffer = io.StringIO()
    record_to_json(rec, buffer)
    buffer.seek(0)
    assert record_from_json(buffer) == rec


def test_render_report_writes_the_files_it_is_given(record, tmp_path):
    text = render_report(record, png=tmp_path / "a.png", csv=tmp_path / "a.csv", json=tmp_path / "a.json")
    assert text == report_table(record)
    assert (tmp_path / "a.png").read_bytes()[:8] == PNG_SIGNATURE
    assert records_from_csv(tmp_path / "a.csv") == record.trials
    assert record_from_json(tmp_path / "a.json") == record


# ------------------------------------------------------------------------------------------ CLI


def cli(argv: list[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="autotune")
    subparsers = parser.add_subparsers(dest="command", required=True)
    register_report_command(subparsers)
    args = parser.parse_args(argv)
    out = io.StringIO()
    return args.func(args, out=out), out.getvalue()


@pytest.fixture
def cached(tmp_path):
    from cache_files import write_record

    records = [
        make_record(
            [ok(Config(BLOCK=32), 0.5), ok(Config(BLOCK=64), 0.25)],
            kernel="add",
            kernel_id="tests.mod:add",
            key=[1024],
            timestamp=1.0,
        ),
        make_record(
            [ok(Config(BLOCK=32), 0.5), ok(Config(BLOCK=64), 0.75)],
            kernel="add",
            kernel_id="tests.mod:add",
            key=[2048],
            timestamp=2.0,
        ),
        make_record([ok(Config(BLOCK=8), 1.0)], kernel="mul", key=[1], timestamp=3.0),
    ]
    for rec in records:
        write_record(rec)
    return records


def test_cli_report_prints_the_table_of_each_cached_key(cached, capsys):
    status, text = cli(["report", "add"])
    assert status == 0
    assert text.count("add key=") == 2
    assert report_table(cached[0]) in text and report_table(cached[1]) in text
    assert find_records("add") == cached[:2] and find_records("tests.mod:add", "2048") == [cached[1]]


def test_cli_report_one_key_with_files(cached, tmp_path):
    status, text = cli(
        [
            "report",
            "tests.mod:add",
            "--key",
            "(2048,)",
            "--png",
            str(tmp_path / "c.png"),
            "--csv",
            str(tmp_path / "c.csv"),
            "--json",
            str(tmp_path / "c.json"),
        ]
    )
    assert status == 0
    assert text.startswith(report_table(cached[1]))
    assert f"wrote {tmp_path / 'c.png'}" in text
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG_SIGNATURE
    assert records_from_csv(tmp_path / "c.csv") == cached[1].trials
    assert record_from_json(tmp_path / "c.json") == cached[1]


def test_cli_report_refuses_a_file_option_naming_a_directory_before_writing(cached, tmp_path, capsys):
    """--csv DIR wrote DIR-<key> beside it, with no extension; a missing directory failed after the table."""
    (tmp_path / "out").mkdir()
    for option, value, message in (
        (
            "--csv",
            tmp_path / "out",
            f"--csv {tmp_path / 'out'} is a directory; give a file name, e.g. {tmp_path / 'out' / 'report.csv'}",
        ),
        ("--png", tmp_path / "none" / "r.png", "is in a directory that does not exist"),
    ):
        status, text = cli(["report", "add", option, str(value)])
        assert status == 2 and text == "" and message in capsys.readouterr().err
    assert (
        not any((tmp_path / "out").iterdir()) and not list(tmp_path.glob("out-*")) and not (tmp_path / "none").exists()
    )


def test_cli_report_several_keys_get_one_file_each(cached, tmp_path):
    status, _ = cli(["report", "add", "--json", str(tmp_path / "r.json")])
    assert status == 0
    assert sorted(p.name for p in tmp_path.glob("r-*.json")) == ["r-1024_float32.json", "r-2048_float32.json"]


def test_cli_report_files_of_records_whose_names_would_collide_are_kept_apart(tmp_path):
    """Two kernels of one short name in different modules, and keys that differ only in characters a file name
    cannot hold ("a_b" / "a-b"): each record gets its own file, none overwrites another."""
    from cache_files import write_record

    records = [
        make_record([ok(Config(BLOCK=32), 0.5)], kernel="add", kernel_id="m1:add", key=[100]),
        make_record([ok(Config(BLOCK=64), 0.5)], kernel="add", kernel_id="m2:add", key=[100]),
        make_record([ok(Config(BLOCK=8), 0.5)], kernel="add", kernel_id="m1:add", key=["a_b"]),
        make_record([ok(Config(BLOCK=16), 0.5)], kernel="add", kernel_id="m1:add", key=["a-b"]),
    ]
    for rec in records:
        write_record(rec)
    out = tmp_path / "out"
    out.mkdir()
    status, text = cli(["report", "add", "--json", str(out / "r.json")])
    assert status == 0
    written = sorted(out.glob("r-*.json"))
    assert len(written) == 4 and text.count("wrote ") == 4
    assert sorted(record_from_json(p).trials[0].config["BLOCK"] for p in written) == [8, 16, 32, 64]


def test_cli_report_unknown_kernel_or_key_fails_with_a_hint(cached, capsys):
    status, text = cli(["report", "nope"])
    assert status == 1 and text == ""
    assert "no cached tuning for kernel 'nope'" in capsys.readouterr().err
    status, _ = cli(["report", "add", "--key", "999"])
    err = capsys.readouterr().err
    assert status == 1 and "(1024,) float32" in err and "(2048,) float32" in err


@pytest.mark.parametrize("text", ["2048", "(2048,)", "[2048]", "2048,", "(2048,) float32", " ( 2048 , ) "])
def test_key_may_be_written_several_ways(cached, text):
    assert find_records("add", text) == [cached[1]]


def test_string_keys_can_be_given_bare_as_with_cache_show():
    from cache_files import write_record

    rec = make_record([ok(Config(BLOCK=8), 1.0)], kernel="norm", key=[4096, "row"])
    write_record(rec)
    for text in ("4096,row", "(4096, 'row')", '[4096, "row"]'):
        assert find_records("norm", text) == [rec], text
    assert find_records("norm", "4096,col") == []


def test_the_autotune_command_line_runs_report(cached, tmp_path, capsys):
    from autotune.cli import main

    assert main(["report", "add", "--key", "1024", "--png", str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(report_table(cached[0])) and f"wrote {tmp_path / 'x.png'}" in out
    assert (tmp_path / "x.png").read_bytes()[:8] == PNG_SIGNATURE
    (tmp_path / "empty").mkdir()
    assert main(["report", "add", "--key", "1024", "--cache-dir", str(tmp_path / "empty")]) == 1
    assert f"{tmp_path / 'empty'} has no records" in capsys.readouterr().err
    assert main(["report", "add", "--key", "1024", "--cache-dir", str(tmp_path / "missing")]) == 2  # not there
    assert "(--cache-dir) does not exist" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ a real tuning

import triton  # noqa: E402  (after conftest has set TRITON_INTERPRET=1 on a machine without a GPU)
import triton.language as tl  # noqa: E402


@triton.jit
def vector_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def _tuned_add():
    """A tiny vector add, autotuned over 3 block sizes (one invalid), tuned once through the interpreter."""
    import torch

    from autotune import Tuning, autotune

    add = autotune(
        space={"BLOCK": (48, 64, 128)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(preset="fast", reps=2, warmup=0, compile_workers=2),
    )(vector_add)
    n = 200
    x, y = torch.arange(n, dtype=torch.float32), torch.ones(n)
    out = torch.empty(n)
    add(x, y, out, n)
    torch.testing.assert_close(out, x + y)
    return add


SUMMARY = re.compile(
    r"^autotune: vector_add key=\(200,\) float32,float32,float32 -> Config\(BLOCK=(64|128)\) [0-9.]+ ms"
    r" \| top3: BLOCK=(64|128) [0-9.]+ ms \(x1\.00\); BLOCK=(64|128) [0-9.]+ ms \(x[0-9.]+\)"
    r" \| 2/3 ok \| tuned in [0-9.]+ s in-process \(miss\)$"
)


def test_real_tuning_prints_nothing_by_default(capsys):
    _tuned_add()
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_real_tuning_with_autotune_print_1_prints_the_summary_line(monkeypatch, capsys):
    monkeypatch.setenv("AUTOTUNE_PRINT", "1")
    add = _tuned_add()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and SUMMARY.match(lines[0]), lines
    assert lines[0] == format_summary(add.record(), cache_hit=False)


def test_real_tuning_with_autotune_print_2_prints_every_trial(monkeypatch, capsys):
    monkeypatch.setenv("AUTOTUNE_PRINT", "2")
    add = _tuned_add()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4 and SUMMARY.match(lines[0]), lines
    assert re.match(
        r"^autotune:   #1 ok +median [0-9.]+ ms  min [0-9.]+ ms  x1\.00  Config\(BLOCK=(64|128)\)$", lines[1]
    )
    assert re.match(
        r"^autotune:   #2 ok +median [0-9.]+ ms  min [0-9.]+ ms  x[0-9.]+  Config\(BLOCK=(64|128)\)$", lines[2]
    )
    # BLOCK=48 is not a power of two: the trial fails and its error is shown
    assert lines[3].startswith("autotune:   -- runtime_error Config(BLOCK=48)  error: ")
    assert lines[1:] == format_trials(add.record()).splitlines()


def test_real_tuning_report_table_and_png(tmp_path):
    add = _tuned_add()
    table = add.report(png=str(tmp_path / "add.png"))
    assert table == report_table(add.record())
    assert len(table.splitlines()) == 3 + 3
    assert png_size((tmp_path / "add.png").read_bytes())[0] > 0


def test_failed_configs_are_marked_labels_not_bars_on_the_time_axis():
    """#12 item 24: a failed config has no time, so the chart draws no bar for it."""
    from autotune.record import Trial, TrialStatus, TuningRecord
    from autotune.reporting import trial_figure
    from autotune.space import Config

    trials = [
        Trial(config=Config(BLOCK=b), status=TrialStatus.OK, median_ms=m, min_ms=m, samples_ms=[m])
        for b, m in ((16, 1.0), (32, 2.0))
    ]
    trials += [
        Trial(config=Config(BLOCK=48), status=TrialStatus.COMPILE_ERROR, error="boom"),
        Trial(config=Config(BLOCK=96), status=TrialStatus.RUNTIME_ERROR, error="bad"),
    ]
    record = TuningRecord(
        kernel="k",
        source_hash="s",
        device="interpreter",
        triton_version="t",
        torch_version="t",
        space_checksum="c",
        key=[1],
        winner=Config(BLOCK=16),
        trials=trials,
        tuning_s=0.1,
    )
    ax = trial_figure(record).axes[0]
    bars = [p for p in ax.patches if p.get_width() > 0]
    assert sorted(round(b.get_width(), 6) for b in bars) == [1.0, 2.0]  # one bar per measured config only
    marks = [t.get_text() for t in ax.texts if "\u2717" in t.get_text()]
    assert sorted(marks) == ["\u2717 compile_error", "\u2717 runtime_error"]


def test_skipped_configs_are_counted_as_skipped_not_failed():
    """A config prune= removed (or the lone config of a one-config space, launched without a time) is no failure:
    the table, the summary line and the chart's title say "skipped", and a winner without a time keeps its '*'."""
    pruned = make_record(
        [
            ok(Config(BLOCK=32), 0.02),
            Trial(config=Config(BLOCK=64), status=TrialStatus.SKIPPED),
            ok(Config(BLOCK=128), 0.015),
            Trial(config=Config(BLOCK=256), status=TrialStatus.SKIPPED),
        ]
    )
    assert ": 4 trials, 2 ok, 0 failed, 2 skipped; winner Config(BLOCK=128)" in report_table(pruned)
    assert "| 2/2 ok, 2 skipped |" in format_summary(pruned, cache_hit=False)
    pytest.importorskip("matplotlib")
    from autotune.reporting.plot import trial_figure

    title = trial_figure(pruned)._suptitle.get_text()
    assert "2 skipped" in title and "failed" not in title
    alone = make_record([Trial(config=Config(BLOCK=64), status=TrialStatus.SKIPPED)], winner=Config(BLOCK=64))
    table = report_table(alone)
    assert ": 1 trials, 0 ok, 0 failed, 1 skipped;" in table
    assert table.splitlines()[-1].split()[0] == "*"


def test_table_cells_are_escaped_before_the_columns_are_laid_out():
    """A control character read from an entry is escaped in its cell, and the columns still line up (escaping
    the finished lines, as `autotune report` did, widened a cell after its column's width was fixed)."""
    from autotune.format import format_table

    lines = format_table(["KERNEL", "N"], [["add\x1b[2J", 1], ["mul", 22]], right={1}).splitlines()
    assert "\x1b" not in "".join(lines) and "add\\x1b[2J" in lines[2]
    assert len({len(line) for line in lines}) == 1
