"""render: row flags (what could mislead a reader) in their column and under the table."""


def test_flags_are_listed_under_the_table_and_in_their_column():
    from qbench.render.columns import COLUMNS
    from qbench.render.table import footnotes, render_table

    rows = [{"scheme": "nf4-bnb", "m": m, "status": "ok",
             "flags": ["repacked: the weight changed on the first call (34880 -> 35328 stored bytes)"]}
            for m in (1, 16)] + [{"scheme": "bf16", "m": 1, "status": "ok", "flags": []}]
    assert footnotes(rows) == ["nf4-bnb (M=1,16) flag: repacked: the weight changed on the first call "
                               "(34880 -> 35328 stored bytes)"]
    cols = [COLUMNS[k] for k in ("scheme", "m", "flags", "status")]
    text = render_table(rows, cols)
    assert "flag: repacked" in text
    flags = COLUMNS["flags"]
    assert flags.cell(rows[0]) == "repacked" and flags.cell(rows[2]) == "—"
