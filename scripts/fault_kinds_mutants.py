"""The faults that survived every test in issue 16's mutation run, planted one at a time in a copy
of the committed tree (git archive HEAD) and run against tests/test_fault_kinds.py; each must be
killed (exit status 1 if one survives). Hand-written mutants, beside mutmut's (scripts/mutation.sh):
these are the faults qbench must never have, named in the issue.

    python scripts/fault_kinds_mutants.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = "tests/test_fault_kinds.py"
#: (file, original text, mutated text, what the fault is)
MUTANTS = [
    ("qbench/measure.py", "weight_bytes=self.book.stored_bytes, act_itemsize=act",
     "weight_bytes=self.book.payload_bytes, act_itemsize=act", "min_bytes / AI from the payload, not the stored bytes"),
    ("qbench/schemes/float_schemes.py", "            if now != self.expect:", "            if False:",
     "the fp32 / tf32 call-time precision guard off"),
    ("qbench/timing/cold.py", "                torch.cuda._sleep(cycles)\n                flusher.flush()",
     "                torch.cuda._sleep(cycles)", "no L2 flush in the cold loop"),
    ("qbench/timing/cold.py", "                flusher.flush()\n                start.record()\n                fn()",
     "                start.record()\n                flusher.flush()\n                fn()", "the flush after the start event"),
    ("qbench/timing/cold.py", "            flusher.flush()\n            torch.cuda.synchronize()\n            start.record()",
     "            torch.cuda.synchronize()\n            start.record()", "no flush in the host-sync cold loop"),
    ("qbench/readers/compare.py", "sb.median > threshold * sa.median", "sb.median >= threshold * sa.median",
     "compare threshold > -> >="),
    ("qbench/lifecycle.py", '    if code is None:\n        what = f"worker timed out', '    if False:\n        what = f"worker timed out',
     "a worker timeout reported as an exit"),
    ("qbench/runner.py", "        if code == 0 and os.path.exists(rows_path):", "        if os.path.exists(rows_path):",
     "a non-zero worker exit with a rows file accepted"),
    ("qbench/tp/shard.py", 'multiple=lambda options: options.blocksize, why_multiple="blocksize",',
     'why_multiple="blocksize",', "bnb row shards need no whole blocks"),
    ("qbench/tp/shard.py", 'same_as_slice=lambda options: not options.double_quant),\n        "row"',
     'same_as_slice=lambda options: True),\n        "row"', "bnb double-quant column shard called same-as-slice"),
    ("qbench/render/columns.py", '_get("compile", "first_call_s")', '_get("compile", "compile_s")',
     "the compile_s column reads a key no row carries"),
]


def main() -> int:
    survived = 0
    with tempfile.TemporaryDirectory(prefix="qbench-fault-kinds-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        pytest = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", TESTS]
        if subprocess.run(pytest, cwd=tmp, capture_output=True).returncode != 0:
            print(f"{TESTS} fails without any mutant: fix it first")
            return 2
        for path, old, new, what in MUTANTS:
            file = Path(tmp) / path
            text = file.read_text()
            if old not in text:
                print(f"NOT FOUND  {path}: {what} (the code changed: update this list)")
                survived += 1
                continue
            file.write_text(text.replace(old, new, 1))
            try:
                result = subprocess.run(pytest, cwd=tmp, capture_output=True, text=True)
            finally:
                file.write_text(text)
            killed = result.returncode != 0
            survived += not killed
            print(f"{'killed  ' if killed else 'SURVIVED'}  {path}: {what}")
    print(f"{len(MUTANTS) - survived} of {len(MUTANTS)} killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
