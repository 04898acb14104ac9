"""render: row flags (what could mislead a reader) in their column and under the table."""


def test_flags_are_listed_under_the_table_and_in_their_column():
    from qbench.render.columns import COLUMNS
    from qbench.render.table import footnotes, render_table

    from qbench.row import flag_record
    from tests.rows import typed_row

    repacked = flag_record("repacked", "the weight changed on the first call (34880 -> 35328 stored bytes)")
    rows = [typed_row(scheme="nf4-bnb", m=m, k=8, n=8, status="ok", flags=[repacked]) for m in (1, 16)] + \
        [typed_row(scheme="bf16", m=1, k=8, n=8, status="ok", flags=[])]
    assert footnotes(rows) == ["nf4-bnb (M=1,16) flag: repacked: the weight changed on the first call "
                               "(34880 -> 35328 stored bytes)"]
    cols = [COLUMNS[k] for k in ("scheme", "m", "flags", "status")]
    text = render_table(rows, cols)
    assert "flag: repacked" in text
    flags = COLUMNS["flags"]
    assert flags.cell(rows[0]) == "repacked" and flags.cell(rows[2]) == "—"
