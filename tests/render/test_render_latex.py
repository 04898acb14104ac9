"""render: LaTeX output compiles without inputenc tricks: µ and empty-cell dashes escaped, the notes
under the table as LaTeX comments (issue 13 item 9)."""

from qbench.render import render
from tests.rows import typed_row


def test_latex_escapes_micro_and_dash_and_comments_the_notes():
    rows = [typed_row(scheme="bf16", m=1, k=8, n=8, status="ok", latency_us={"cpu": {"median": 12.0, "cv": 0.5}},
                      stored_bytes=2048),
            typed_row(scheme="tf32", m=1, k=8, n=8, status="skipped", reason="tf32 has no CPU kernel: needs CUDA",
                      latency_us={})]
    text = render(rows, ["scheme", "m", "cpu", "stored_mib", "status"], fmt="latex")
    assert "µ" not in text and "—" not in text
    assert r"cpu \textmu{}s" in text and "---" in text
    body, _, notes = text.partition(r"\end{tabular}")
    assert notes.strip() and all(line.startswith("%") for line in notes.strip().splitlines() if line.strip())
    assert "% " in notes and "tf32 (M=1) skipped" in notes
