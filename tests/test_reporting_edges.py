"""Reporting and replay on awkward input: text matplotlib would parse, runs that chose nothing, records whose file
names collide, landscapes and trial files that are broken, huge, duplicated or not files at all. Each is a clean
AutotuneError (exit 2 on the command line) or works; none is a traceback, a hang or a file overwritten."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import threading
from pathlib import Path

import pytest
from test_report import PNG_SIGNATURE, make_record, ok

from autotune.cli import main
from autotune.errors import AutotuneError
from autotune.record import Trial, TrialStatus
from autotune.reporting import plot_trials, record_from_json, record_to_csv, record_to_json, records_from_csv
from autotune.reporting import replay as replay_module
from autotune.reporting.plot import trial_figure
from autotune.reporting.replay import load_landscape, replay, replay_once
from autotune.space import Config
from autotune.storage.entries import MAX_ENTRY_BYTES

MATH = "$x^$"  # mathtext that does not parse: savefig raised ValueError


def landscape_file(path: Path, cache: dict, tune_params: dict | None = None, **doc) -> Path:
    """A landscape in kernel_tuner's format: `cache` maps entry names to entries."""
    axes = {"a": [1, 2]} if tune_params is None else tune_params
    body = {"tune_params": axes, "cache": cache, "kernel_name": "k", **doc}
    path.write_text(json.dumps(body))
    return path


def entry(a, time, **fields) -> dict:
    return {
        "a": a,
        "time": time,
        "times": [time] * 3 if isinstance(time, float) else [],
        "compile_time": 10.0,
        **fields,
    }


# ------------------------------------------------------------------------------------------ the chart's text


def test_dollar_signs_in_config_key_kernel_and_device_are_drawn_as_written(tmp_path):
    from matplotlib.text import Text

    record = make_record(
        [ok(Config(BLOCK=8, mode=MATH), 1.0), ok(Config(BLOCK=16, mode="b$"), 2.0)],
        kernel="k$\\sqrt{$",
        key=[MATH],
        device="gpu $\\frac{$",
    )
    assert plot_trials(record, tmp_path / "c.png").read_bytes()[:8] == PNG_SIGNATURE
    texts = [t for t in trial_figure(record).findobj(Text) if "$" in t.get_text()]
    assert len(texts) >= 3 and not any(t.get_parse_math() for t in texts)  # the title and both tick labels


def test_a_chart_matplotlib_cannot_draw_is_an_autotune_error_naming_the_record(tmp_path):
    record = make_record([ok(Config(BLOCK=8), 1.0)], device="gpu\x1b[31m")
    with pytest.raises(AutotuneError, match=r"cannot draw the chart of add key=\(1024,\) .*too large.*leave out"):
        plot_trials(record, tmp_path / "huge.png", dpi=10**6)  # 9,000,000 px wide: Agg refuses, a ValueError


def test_report_png_of_a_cached_key_holding_mathtext_is_written(tmp_path, capsys):
    from cache_files import write_record

    write_record(make_record([ok(Config(BLOCK=32), 0.5)], kernel="add", key=[MATH]))
    assert main(["report", "add", "--png", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG_SIGNATURE
    assert "Traceback" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ report's file names


def test_report_files_of_one_key_on_two_device_kinds_are_kept_apart(tmp_path, capsys):
    from cache_files import write_record

    for device, block in (("NVIDIA A100", 32), ("NVIDIA H100", 64)):
        record = make_record([ok(Config(BLOCK=block), 0.5)], kernel="add", kernel_id="m:add", key=[100], device=device)
        write_record(record)
    assert main(["report", "add", "--json", str(tmp_path / "r.json")]) == 0
    written = sorted(tmp_path.glob("r-100_float32-*.json"))
    assert len(written) == 2 and capsys.readouterr().out.count("wrote ") == 2
    assert sorted(record_from_json(p).device for p in written) == ["NVIDIA A100", "NVIDIA H100"]


# ------------------------------------------------------------------------------------------ replay: runs that fail


@pytest.fixture
def mostly_failed(tmp_path) -> Path:
    """Ten configs, two that ran: a budget of 2 often draws only recorded failures."""
    failures = ("CompilationFailedConfig", "RuntimeFailedConfig")
    cache = {str(a): entry(a, float(a) if a <= 2 else failures[a % 2]) for a in range(1, 11)}
    return landscape_file(tmp_path / "failing.json", cache, {"a": list(range(1, 11))})


def test_a_run_that_measured_only_failures_chose_nothing_and_the_others_still_count(mostly_failed):
    landscape = load_landscape(mostly_failed)
    result = replay(landscape, "random", budget=2, seeds=10)
    empty = [r for r in result["runs"] if r["chosen"] is None]
    chose = [r for r in result["runs"] if r["chosen"] is not None]
    assert empty and chose  # both kinds among ten seeds
    assert all(r["chosen_ms"] is None and r["ratio"] is None and r["evaluations"] == 2 for r in empty)
    assert result["worst_ratio"] == max(r["ratio"] for r in chose)
    json.dumps(result, allow_nan=False)  # what --json writes
    alone = replay_once(landscape, "random", 2, empty[0]["seed"])
    assert alone["chosen"] is None and alone["prior_rank"] is None and len(alone["evaluated"]) == 2


def test_replay_cli_keeps_every_run_when_some_chose_nothing(mostly_failed, tmp_path, capsys):
    out = tmp_path / "out.json"
    argv = ["replay", str(mostly_failed), "--strategy", "random", "--budget", "2", "--seeds", "10"]
    assert main([*argv, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "- (every config failed)" in text and "runs measured only recorded failures" in text
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == 10 and any(r["chosen"] is None for r in runs)


# ------------------------------------------------------------------------------------------ replay: bad landscapes


def huge_int_landscape(path: Path, field: str) -> Path:
    text = json.dumps({"tune_params": {"a": [1, 2]}, "cache": {"1": entry(1, 1.0), "2": entry(2, 2.0)}})
    old = '"time": 1.0' if field == "time" else '"times": [1.0, 1.0, 1.0]'
    path.write_text(
        text.replace(old, old.split(":")[0] + ": " + ("[1%s]" if field == "times" else "1%s") % ("0" * 400))
    )
    return path


def corrupt_gzip(path: Path) -> Path:
    data = bytearray(gzip.compress(json.dumps({"tune_params": {"a": [1]}, "cache": {}}).encode()))
    for i in range(12, len(data) - 8):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: huge_int_landscape(p, "time"), "not a landscape .*OverflowError"),
        (lambda p: huge_int_landscape(p, "times"), "not a landscape .*OverflowError"),
        (corrupt_gzip, "not a landscape .*gzip data is corrupt"),
    ],
    ids=["400-digit time", "400-digit repetition", "corrupt deflate stream"],
)
def test_a_landscape_python_cannot_decode_is_not_a_landscape(tmp_path, capsys, make, message):
    path = make(tmp_path / "bad.json")
    with pytest.raises(AutotuneError, match=message):
        load_landscape(path)
    assert main(["replay", str(path), "--strategy", "random", "--budget", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a landscape" in err


def test_a_config_recorded_twice_or_a_landscape_without_axes_is_refused(tmp_path):
    twice = {"1": entry(1, 1.0), "1b": entry(1, 5.0), "2": entry(2, 2.0)}
    with pytest.raises(AutotuneError, match=r"records \{'a': 1\} twice, as cache entries '1' and '1b'"):
        load_landscape(landscape_file(tmp_path / "twice.json", twice))
    no_axes = {"x": {"time": 1.0}, "y": {"time": 2.0}}  # every entry would be the one empty config
    with pytest.raises(AutotuneError, match="has empty tune_params"):
        load_landscape(landscape_file(tmp_path / "no_axes.json", no_axes, tune_params={}))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"time": 1e-300, "times": [1e-300]}, "its time 1e-300 is not a positive number of ms within 1e-09..1e"),
        ({"time": 1e300, "times": [1e300]}, "its time 1e[+]300 is not a positive number of ms within"),
        ({"times": [1.0, 1e10]}, "it has 10000000000.0 among its times or compile time"),
        ({"compile_time": 1.7e308}, "it has 1.7e[+]308 among its times or compile time"),
    ],
)
def test_a_time_outside_what_a_gpu_measures_is_refused_at_load(tmp_path, capsys, fields, message):
    """1e-300 against 1e300 made the ratio infinite and --json raised after every run; a compile time of 1.7e308
    made the simulated clock infinite."""
    path = landscape_file(tmp_path / "extreme.json", {"1": entry(1, 1.0) | fields, "2": entry(2, 2.0)})
    with pytest.raises(AutotuneError, match=message):
        load_landscape(path)
    assert main(["replay", str(path), "--strategy", "exhaustive", "--budget", "2", "--seeds", "1"]) == 2


def test_the_extremes_of_the_time_range_replay_with_finite_ratios(tmp_path):
    cache = {"1": entry(1, 1e-9), "2": entry(2, 1e9, compile_time=1e9)}
    result = replay(load_landscape(landscape_file(tmp_path / "edge.json", cache)), "exhaustive", 2, 1)
    assert result["worst_ratio"] == 1.0 and json.dumps(result, allow_nan=False)


# ------------------------------------------------------------------------------------------ replay: the CLI's text


def test_replay_prints_the_landscape_s_names_escaped(tmp_path, capsys):
    cache = {"1": entry(1, 1.0), "2": entry(2, 2.0)}
    path = landscape_file(tmp_path / "esc.json", cache, kernel_name="k\x1b[31mRED", device_name="gpu\u202eX")
    assert main(["replay", str(path), "--strategy", "random", "--budget", "1", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "k\\x1b[31mRED on gpu\\u202eX" in out


def test_a_prior_that_shares_no_config_with_the_landscape_is_refused(tmp_path, capsys):
    landscape = landscape_file(tmp_path / "l.json", {"1": entry(1, 1.0), "2": entry(2, 2.0)})
    other = {"1": {"b": 1, "time": 1.0}, "2": {"b": 2, "time": 2.0}}
    prior = landscape_file(tmp_path / "p.json", other, tune_params={"b": [1, 2]})
    with pytest.raises(AutotuneError, match="shares no config that ran"):
        replay(load_landscape(landscape), "model", 2, 1, prior=load_landscape(prior))
    argv = ["replay", str(landscape), "--strategy", "model", "--budget", "2", "--prior", str(prior)]
    assert main(argv) == 2
    assert "shares no config that ran" in capsys.readouterr().err
    assert main([*argv[:-2], "--prior", str(landscape)]) == 0  # the same landscape as its own prior shares all


def test_a_prior_without_the_model_strategy_is_refused_before_reading_a_file(tmp_path, capsys):
    missing = str(tmp_path / "absent.json")
    assert (
        main(["replay", missing, "--strategy", "random", "--budget", "2", "--prior", missing]) == 2
    )  # a usage mistake
    err = capsys.readouterr().err
    assert "--prior is used by --strategy model only" in err and "cannot read" not in err


# ------------------------------------------------------------------------------------------ trials CSV


def csv_text(**row_changes) -> str:
    """A trials CSV of two rows (the first with a three-line error cell), the second row's cells changed."""
    failed = Trial(config=Config(BLOCK=8), status=TrialStatus.COMPILE_ERROR, error="at 1:2\nboom\nend")
    buffer = io.StringIO()
    record_to_csv(make_record([failed, ok(Config(BLOCK=16), 0.5)]), buffer)
    rows = list(csv.DictReader(io.StringIO(buffer.getvalue())))
    rows[1].update(row_changes)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"median_ms": "nan"}, "median_ms: nan is not a number"),
        ({"median_ms": "inf"}, "median_ms: inf is not a number"),
        ({"min_ms": "-1.0"}, "min_ms: Expected `float` >= 0"),
        ({"samples_ms": "[NaN, 0.5]"}, "NaN is not a number"),
        ({"samples_ms": "[-0.5]"}, r"samples_ms\[0\]: Expected `float` >= 0"),
        ({"status": "great"}, "status: Invalid enum value 'great'"),
        ({"config": "[" * 30_000 + "]" * 30_000}, "RecursionError"),
    ],
)
def test_a_trial_row_that_is_not_one_is_refused_naming_its_line(tmp_path, changes, message):
    """The second row starts on line 5: the header, then a row of three lines."""
    path = tmp_path / "t.csv"
    path.write_text(csv_text(**changes))
    assert len(records_from_csv(io.StringIO(csv_text()))) == 2
    with pytest.raises(AutotuneError, match=rf"not an autotune trials CSV \(line 5\): .*{message}"):
        records_from_csv(path)


def test_a_trials_csv_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(csv_text().encode() + b"\xff\n")
    with pytest.raises(AutotuneError, match="is not UTF-8 text"):
        records_from_csv(path)


# ------------------------------------------------------------------------------------------ bounded reads


READERS = {"trials CSV": records_from_csv, "record JSON": record_from_json, "landscape": load_landscape}


@pytest.mark.parametrize("what", ["trials CSV", "record JSON", "landscape"])
def test_a_directory_or_a_device_is_not_read(tmp_path, what):
    read = READERS[what]
    targets = [tmp_path] + ([Path("/dev/zero")] if Path("/dev/zero").exists() else [])
    for target in targets:
        with pytest.raises(AutotuneError, match=rf"cannot read {what} {target}: not a regular file"):
            read(target)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("what", ["trials CSV", "record JSON", "landscape"])
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, what):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    raised: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(raised, READERS[what], fifo), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # it blocked: a writer that closes at once lets it end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"reading the {what} FIFO blocked")
    assert len(raised) == 1 and "not a regular file" in str(raised[0])


def _catch(raised: list, read, path: Path) -> None:
    try:
        read(path)
    except AutotuneError as exc:
        raised.append(exc)


@pytest.mark.parametrize("read", [records_from_csv, record_from_json], ids=["csv", "json"])
def test_a_trials_csv_or_record_json_over_the_entry_limit_is_refused(tmp_path, read):
    path = tmp_path / "big"
    path.write_bytes(b" " * (MAX_ENTRY_BYTES + 1))
    with pytest.raises(AutotuneError, match=f"is over {MAX_ENTRY_BYTES} bytes"):
        read(path)
    with pytest.raises(AutotuneError, match=f"is over {MAX_ENTRY_BYTES} bytes"):
        read(io.StringIO(" " * (MAX_ENTRY_BYTES + 1)))


def test_a_record_json_within_the_limit_still_round_trips(tmp_path):
    record = make_record([ok(Config(BLOCK=8), 1.0)])
    record_to_json(record, tmp_path / "r.json")
    assert record_from_json(tmp_path / "r.json") == record


def test_a_landscape_over_the_limit_decompressed_is_refused(tmp_path, monkeypatch):
    """The limit (256 MiB) counts the JSON a gzip file holds, not its compressed size."""
    assert replay_module.MAX_LANDSCAPE_BYTES == 256 << 20
    path = tmp_path / "bomb.json.gz"
    body = {"tune_params": {"a": [1]}, "cache": {"1": {"a": 1, "time": 1.0, "times": [1.0] * 10_000}}}
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    assert load_landscape(path).best_ms == 1.0
    monkeypatch.setattr(replay_module, "MAX_LANDSCAPE_BYTES", 20_000)  # the file is 300 bytes, its JSON 60,000
    assert path.stat().st_size < 20_000
    with pytest.raises(AutotuneError, match="is over 20000 bytes of JSON"):
        load_landscape(path)


ESCAPE = "\x1b[2J\x1b]0;title\x07"


def test_text_read_from_an_entry_reaches_the_terminal_escaped_in_autotune_print_and_the_report_header():
    """A kernel name, dtype, device or trial error from a shared cache (or a compiler's coloured message) is shown
    with its control characters escaped, as the report's table cells already were."""
    from autotune.reporting.lines import emit
    from autotune.reporting.table import report_table

    failed = Trial(config=Config(BLOCK=2), status=TrialStatus.COMPILE_ERROR, error="boom" + ESCAPE)
    record = make_record(
        [ok(Config(BLOCK=1), 1.0), failed], kernel="add" + ESCAPE, device="dev" + ESCAPE, dtypes=["f32" + ESCAPE]
    )
    out = io.StringIO()
    emit(record, cache_hit=True, level=2, stream=out)
    shown = out.getvalue() + report_table(record)
    assert "\x1b" not in shown and "\x07" not in shown
    assert "add\\x1b[2J" in shown and "boom\\x1b[2J" in shown


def test_a_trials_csv_with_cells_past_csvs_default_limit_reads_back(tmp_path):
    """csv's field limit (128 KiB) is below what record_to_csv writes for many samples or a long compiler error."""
    samples = [1.0 + i / 1e4 for i in range(20000)]
    trial = Trial(config=Config(BLOCK=1), status=TrialStatus.OK, median_ms=1.0, min_ms=1.0, samples_ms=samples)
    failed = Trial(config=Config(BLOCK=2), status=TrialStatus.COMPILE_ERROR, error="x" * 200_000)
    path = tmp_path / "trials.csv"
    record_to_csv(make_record([trial, failed]), path)
    back = records_from_csv(path)
    assert back[0].samples_ms == samples and back[1].error == "x" * 200_000
    assert csv.field_size_limit() == 131072  # put back as it was


def test_a_record_json_nested_too_deeply_is_an_autotune_error_not_a_recursion_error(tmp_path):
    path = tmp_path / "deep.json"
    record_to_json(make_record([ok(Config(BLOCK=1), 1.0)]), path)
    record = json.loads(path.read_text())
    record["key"] = "NESTED"
    path.write_text(json.dumps(record).replace('"NESTED"', "[" * 3000 + "]" * 3000))
    with pytest.raises(AutotuneError, match="nested too deeply"):
        record_from_json(path)


@pytest.mark.parametrize("version", [0, 2])
def test_a_record_json_of_another_schema_version_is_refused_by_name(tmp_path, version):
    """The fields may still decode, but what they mean is another version's: it is not read as this one's."""
    path = tmp_path / "record.json"
    record_to_json(make_record([ok(Config(BLOCK=1), 1.0)]), path)
    record = json.loads(path.read_text())
    record["schema_version"] = version
    path.write_text(json.dumps(record))
    with pytest.raises(AutotuneError, match=f"schema version {version}, and this autotune reads version 1") as info:
        record_from_json(path)
    assert ("upgrade autotune" in str(info.value)) == (version == 2)


def test_a_newer_record_json_with_a_field_this_version_lacks_names_the_versions(tmp_path):
    """A newer schema adds fields: the version is read before the fields are validated."""
    path = tmp_path / "record.json"
    record_to_json(make_record([ok(Config(BLOCK=1), 1.0)]), path)
    record = json.loads(path.read_text())
    record.update(schema_version=2, a_field_of_version_2=[1, 2], key="no longer a list")
    path.write_text(json.dumps(record))
    with pytest.raises(AutotuneError, match="schema version 2, and this autotune reads version 1.*upgrade autotune"):
        record_from_json(path)
