"""Which commits hold the qbench code a result was measured with?

``env.source_digest`` (:func:`qbench.env.source_digest`) hashes the git blob ids of every
``qbench/**/*.py``. This script computes the same digest for each commit of ``git rev-list HEAD``
from ``git ls-tree`` (no checkout) and prints the commits that match.

Usage: python scripts/find_commit.py RESULT.json | DIGEST [--max-count 500]
Exit status: 0 found; 1 no commit matches; 2 the file has no digest, is not readable, or git failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys


def digest_at(commit: str) -> str:
    """The source digest of ``commit``'s ``qbench/`` tree."""
    out = subprocess.run(["git", "ls-tree", "-r", commit, "--", "qbench"], capture_output=True, text=True,
                         check=True).stdout
    lines = []
    for line in out.splitlines():
        meta, path = line.split("\t", 1)
        if path.endswith(".py"):
            lines.append((path, meta.split()[2]))
    return hashlib.sha256("\n".join(f"{p} {b}" for p, b in sorted(lines)).encode()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a result JSON (its env.source_digest) or a digest")
    parser.add_argument("--max-count", type=int, default=500)
    args = parser.parse_args()
    target = args.target
    if target.endswith(".json"):
        try:
            with open(target, encoding="utf-8") as f:
                doc = json.load(f)
            target = (doc.get("env") or {}).get("source_digest") if isinstance(doc, dict) else None
        except (OSError, ValueError) as exc:
            print(f"find_commit: {args.target}: cannot read a JSON result file ({type(exc).__name__})", file=sys.stderr)
            return 2
        if not target:
            print(f"find_commit: {args.target}: env.source_digest: absent (a file written before 2026-12-01 or not a "
                  "result file)", file=sys.stderr)
            return 2
    try:
        commits = subprocess.run(["git", "rev-list", f"--max-count={args.max_count}", "HEAD"], capture_output=True,
                                 text=True, check=True).stdout.split()
        found = [c for c in commits if digest_at(c) == target]
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"find_commit: git failed ({type(exc).__name__}); run it inside the qbench checkout", file=sys.stderr)
        return 2
    for c in found:
        print(c)
    if not found:
        print(f"find_commit: no commit of the last {args.max_count} has qbench/ with digest {target[:16]}...",
              file=sys.stderr)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
