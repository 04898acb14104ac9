"""Tests for qbench.render.safe: strings from result files are made harmless in every text
output (break review 2026-12-01, #16), and well-formed names are left exactly as they are."""

from __future__ import annotations

import csv
import io

import pytest

from qbench.render import Column, render, render_header
from qbench.render.safe import TerminalStream, csv_text, markdown_cell, visible
from tests.rows import HOSTILE_DEVICE, HOSTILE_SCHEMES, hostile_doc

PLAIN = ["fp8-dynamic[kernel_preference=mslk]", "int4-weight-only+compiled", "nf4-bnb", "w8a8 (per-row) µ—×"]


@pytest.mark.parametrize("name", PLAIN)
def test_well_formed_names_are_unchanged(name):
    assert visible(name) == name and markdown_cell(name) == name and csv_text(name) == name


def test_visible_escapes_every_control_character():
    assert visible("\x1b]0;pwned\x07\x1b[2J") == "\\x1b]0;pwned\\x07\\x1b[2J"
    assert visible("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert visible("\x00\x7f\x85\x9f") == "\\x00\\x7f\\x85\\x9f"  # C0, DEL, C1
    assert visible("x\u202ey\u2028z") == "x\\u202ey\\u2028z"  # a bidi override, a line separator
    assert visible(-1.5) == -1.5 and visible(None) is None  # not text: as it is


def test_markdown_cell_escapes_pipe_and_newline():
    assert markdown_cell("a|b\nc") == "a\\|b\\nc"


@pytest.mark.parametrize("text, want", [('=HYPERLINK("x")', '\'=HYPERLINK("x")'), ("+1", "'+1"), ("-2+3", "'-2+3"),
                                        ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\\tx"), ("\rx", "'\\rx"),
                                        ("a=b", "a=b"), ("bf16", "bf16")])
def test_csv_text_neutralises_formula_cells(text, want):
    assert csv_text(text) == want


def test_terminal_stream_keeps_newlines_and_tabs_and_escapes_the_rest():
    buf = io.StringIO()
    print("a\x1b[2J\tb\x07\r", file=TerminalStream(buf))
    assert buf.getvalue() == "a\\x1b[2J\tb\\x07\\r\n"


def _rows():
    from qbench.results import ResultDoc

    return ResultDoc.of(hostile_doc()).rows


def test_github_table_has_one_line_per_row_and_no_control_bytes():
    text = render(_rows(), ["scheme", "m", "stream"], "github")
    lines = text.splitlines()
    assert len(lines) == 2 + 4  # header, separator, bf16 and the three hostile rows
    assert all(line.startswith("|") and line.count("|") - line.count("\\|") == 4 for line in lines)
    assert "| a\\|b\\nc " in text and "\\x1b]0;pwned\\x07\\x1b[2J" in text
    assert "\x1b" not in text and "\x07" not in text


@pytest.mark.parametrize("fmt", ["simple", "plain", "grid", "pipe", "tsv", "html", "latex"])
def test_no_table_format_emits_a_control_character(fmt):
    text = render(_rows(), ["scheme", "m", "stream"], fmt)
    assert not any(ord(c) < 0x20 and c not in "\n\t" for c in text)
    assert len(text.splitlines()) >= 4


def test_csv_neutralises_text_cells_and_keeps_negative_numbers():
    cols = ["scheme", "m", Column("delta", "delta", lambda r: -2.5 if r.scheme == "bf16" else -1)]
    text = render(_rows(), cols, "csv")
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["scheme", "m", "delta"]
    assert [r[0] for r in rows[1:]] == ["bf16", "\\x1b]0;pwned\\x07\\x1b[2J", "a|b\\nc", '\'=HYPERLINK("x")']
    assert [r[2] for r in rows[1:]] == ["-2.5", "-1", "-1", "-1"]  # numbers: never prefixed
    assert float(rows[1][2]) == -2.5 and len(rows) == 5
    assert "\x1b" not in text and "\x07" not in text


def test_json_keeps_the_strings_as_they_are():
    import json

    back = json.loads(render(_rows(), ["scheme"], "json"))
    assert [r["scheme"] for r in back] == ["bf16", *HOSTILE_SCHEMES]


def test_header_shows_the_device_name_escaped_on_one_line():
    head = render_header(hostile_doc())
    first = head.splitlines()[0]
    assert first.startswith("<img src=x onerror=alert(1)>\\x1b[31m (cpu) | ")
    assert "\x1b" not in head and HOSTILE_DEVICE not in head


def test_footnotes_escape_reasons():
    from qbench.results import ResultDoc
    from tests.rows import make_row

    doc = hostile_doc()
    doc["rows"].append(make_row(scheme="x\x1b[31m", m=1, k=256, n=128, device="cpu", status="failed",
                                reason="boom\x07|\nnext"))
    text = render(ResultDoc.of(doc).rows, ["scheme", "m", "status"], "simple")
    assert text.splitlines()[-1] == "  x\\x1b[31m (M=1) failed: boom\\x07|\\nnext"
    assert "\x1b" not in text and "\x07" not in text
