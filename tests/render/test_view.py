"""render.view: a declared table (View) picks its layout by format, and show() prints every job's
table in one layout, its prose on stderr when the format is data."""

import pytest

from qbench.render.columns import Column
from qbench.render.view import View, column_keys, show

VIEW = View("toy", [Column("a", "A long", lambda r: r["a"], str, True), Column("b", "B", lambda r: r["b"]),
                    Column("c", "C", lambda r: r["c"])],
            narrow=["a", "b"], wide=["a", "b", "c"], data=["a", "c"], short={"a": "A"})
ROWS = [{"a": 1, "b": "x", "c": None}]


@pytest.mark.parametrize("fmt, wide, keys, headers", [
    ("simple", False, None, ["A", "B"]),            # a terminal table: narrow, short headers
    ("simple", True, None, ["A long", "B", "C"]),  # --wide
    ("github", False, None, ["A long", "B", "C"]),  # Markdown keeps every column
    ("csv", False, None, ["A long", "C"]),          # data: its own keys
    ("simple", False, ["c", "a"], ["C", "A long"]),  # --columns, in their order
])
def test_the_layout_follows_the_format(fmt, wide, keys, headers):
    assert [c.header for c in VIEW.columns(fmt, wide, keys)] == headers


def test_an_unknown_key_is_one_line_naming_the_table():
    with pytest.raises(ValueError, match=r"^unknown column 'd' for a toy table; allowed: a, b, c$"):
        VIEW.select(["d"])
    assert column_keys(" a, ,c ") == ["a", "c"] and column_keys(None) == []


def test_show_prints_prose_table_notes_and_sends_prose_to_stderr_for_data(capsys):
    show(ROWS, VIEW.columns("simple"), "simple", describe=["what"], warning="incomplete", notes=["n1"])
    out = capsys.readouterr().out
    assert out == "what\nincomplete\n\n  A  B\n---  ---\n  1  x\n\nn1\n"
    show(ROWS, VIEW.columns("csv"), "csv", describe=["what"], notes=["n1"])
    cap = capsys.readouterr()
    assert cap.out == "a,c\n1,\n" and cap.err == "what\nn1\n"
