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


def test_one_flag_on_many_schemes_is_written_out_once():
    """On the CPU most rows carried a two-line above-ceiling flag, which swamped the table: the flag
    is written out once, the other schemes named on one line."""
    from qbench.render.table import footnotes

    from qbench.row import flag_record
    from tests.rows import typed_row

    def above(us):
        return flag_record("above-ceiling", f"stream {us} µs is below the measured roofline (300 µs): that ceiling "
                                            "underestimates this device")

    rows = [typed_row(scheme=s, m=1, k=8, n=8, status="ok", flags=[above(us)])
            for s, us in (("int8-bnb", 194), ("nf4-bnb", 175), ("fp4-bnb", 175))]
    assert footnotes(rows) == ["int8-bnb (M=1) flag: above-ceiling: stream 194 µs is below the measured roofline "
                               "(300 µs): that ceiling underestimates this device",
                               "flag above-ceiling also on: nf4-bnb (M=1), fp4-bnb (M=1) (each row's figures: --format json)"]


def test_a_format_stored_wider_than_its_bits_is_said_under_the_table():
    """int4-intx holds its int4 values in int8 (8.19 bits per weight): the table says so under it, since its name
    reads as a 4-bit footprint; int4 with its group scales (4.25 bits) and a failed row are not named."""
    from qbench.render.table import footnotes

    from tests.rows import typed_row

    def row(scheme, bits, status="ok", m=1):
        return typed_row(scheme=scheme, m=m, k=8, n=8, status=status, nominal_bits=4, bits_per_weight=bits,
                         weight_dtype="int4 (in int8)", flags=[])

    rows = [row("int4-intx", 8.1875), row("int4-intx", 8.1875, m=16), row("int4-weight-only", 4.25),
            row("int4-other", 8.5, status="failed")]
    notes = [n for n in footnotes(rows) if "bits per weight" in n]
    assert notes == ["int4-intx (M=1,16): stores 8.19 bits per weight for a 4-bit format (weight dtype: int4 (in "
                     "int8)): the footprint of 8-bit weights"]
