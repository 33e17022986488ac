"""What the library prints of text it read (a cache entry's kernel, dtype, device, error): one line, no escape
sequence, and no character a terminal's encoding cannot write."""

from __future__ import annotations

import json

from cache_files import write_record
from test_cli import record, run_cli

from autotune.format import safe_text


def test_safe_text_escapes_control_format_and_surrogate_characters_and_keeps_the_rest():
    assert safe_text("BLOCK=64 é 漢") == "BLOCK=64 é 漢"
    assert safe_text("a\x1b[31mb\n") == "a\\x1b[31mb\\x0a"
    assert safe_text("\u202e") == "\\u202e"
    assert safe_text("a\ud800b") == "a\\ud800b"  # a lone surrogate: a valid JSON escape, but no UTF-8 text
    assert safe_text("x\U000e0001y") == "x\\U000e0001y"  # a format character beyond 16 bits, unambiguous


def test_the_cli_names_an_entry_holding_a_lone_surrogate_unusable_without_a_traceback():
    """Such an entry is refused as it is read (no file name or Redis key can be made of its text): each command
    names it unusable, the surrogate escaped; `report`, left with no record, exits 1 saying so."""
    path = write_record(record("add", [40]))
    data = json.loads(path.read_text())
    data["dtypes"] = ["\ud800", "torch.float32"]
    data["device"] = "gpu\udfff"
    path.write_text(json.dumps(data))  # ASCII JSON: the surrogates are escapes, as a hostile writer would put them
    for args, code in ((["cache", "show", "add"], 0), (["cache", "list"], 0), (["report", "add"], 1)):
        res = run_cli(*args)
        assert res.returncode == code and "Traceback" not in res.stderr, res.stderr
        assert "not valid Unicode ('\\ud800'" in res.stdout + res.stderr, res.stdout
