"""qbench.tp.table: speedup against tp_size 1 from hand-made rows."""

from qbench.tp.table import markdown, speedup_rows
from tests.rows import make_row


def _row(tp, split, e2e, status="ok"):
    return make_row(scheme="bf16", m=1, k=64, n=32, tp_size=tp, split=split, status=status, reason=None,
                    end_to_end_us={"median": e2e} if e2e else None, local_gemm_us=None, collective_us=None,
                    collective_bytes=0, collective_busbw_gbps=None, error={"rel_fro": 0.003})


def test_speedup_against_tp1():
    rows = [_row(2, "row", 25.0), _row(1, "none", 40.0), _row(2, "column", 20.0), _row(8, "row", None, "skipped")]
    table = speedup_rows(rows)
    assert [(r[2], r[3], r[7]) for r in table] == [("none", 1, "1.00"), ("column", 2, "2.00"), ("row", 2, "1.60"),
                                                   ("row", 8, "-")]
    assert markdown(rows).count("\n") == 5
