"""Merge a run that was cut off with the runs that completed it (``qbench run ... --schemes``) into one
result file.

    python scripts/merge_results.py BASE.partial.json REST.json [REST.json ...] --out MERGED.json [--force]

``BASE`` is the run of the whole scenario (its ``scenario.schemes`` lists every scheme); each ``REST``
is a run of the same scenario on the same kind of machine restricted to some of those schemes. The
merged document is ``BASE`` with:

- ``rows``: every row of every input, in the scenario's scheme order, then by M (then as written);
- ``complete``: true only when every (scheme label, M) of ``BASE``'s scenario has a row;
- ``wall_s``: the sum of the inputs' ``wall_s`` (s); ``created``: the latest input's;
- ``merged_from``: one entry per input, in the order given (an input that is itself a merged file
  contributes its own ``merged_from`` entries, so a third run can complete a merged file): ``file`` (the path as given), ``sha256``
  (of its bytes: find it in git history), ``complete``, ``created``, ``wall_s``, ``schemes`` (the labels
  its scenario asked for), ``rows``, ``env`` and ``ceilings`` (the ``env`` and ``ceilings`` at the top of
  the merged document are ``BASE``'s; each row's derived figures were computed with its own run's).

Refused, with one line naming the file, the key and the value, exit status 2: an input that is not a
qbench result; a scenario whose name, layer, M values, timing or any other key but ``schemes`` and
``output`` differs from ``BASE``'s; a scheme label ``BASE``'s scenario does not have; another machine
(``env.device`` kind and ``env.device_name``); a row (scheme, M, K, N, ...) present in two inputs.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from qbench.results import Env, ResultsError, read_results, row_key, write_results  # noqa: E402

#: Scenario keys that may differ between the runs of one scenario (``--schemes`` narrows ``schemes``;
#: ``--out`` is recorded in ``output``).
FREE_SCENARIO_KEYS = ("schemes", "output")


class MergeError(ValueError):
    """Inputs that are not one scenario on one machine; the message names the file, key and value."""


def _read(path: str) -> dict:
    """The document at ``path`` as written (its rows in their own schema version), after
    :func:`qbench.results.read_results` checked it."""
    read_results(path)
    return json.loads(Path(path).read_text(encoding="utf-8"))


def machine_of(doc: dict) -> str:
    """The machine of a document, as one label (:attr:`qbench.results.Env.machine`)."""
    return Env.model_validate(doc.get("env") or {}).machine


def scheme_labels(doc: dict, source: str) -> list[str]:
    """The row labels of ``doc``'s scenario, in its order (``qbench.scenario`` makes them)."""
    from qbench.scenario import ScenarioError, from_dict

    scenario = {k: v for k, v in doc["scenario"].items() if k != "source"}
    try:
        return [entry.label for entry in from_dict(scenario, source).schemes]
    except ScenarioError as exc:
        raise MergeError(f"{source}: scenario: {exc}") from None


def merge(paths: list[str]) -> dict:
    """The merged document of result files ``paths`` (the first is the base run; see the module
    docstring).

    Raises:
        MergeError: the inputs are not runs of one scenario on one machine, or two rows repeat.
        ResultsError: an input is not a qbench result file.
    """
    if len(paths) < 2:
        raise MergeError("merge_results: give the base run and at least one run that completes it")
    docs = [(p, _read(p)) for p in paths]
    versions = {d["schema_version"] for _, d in docs}
    if len(versions) > 1:
        raise MergeError(f"schema_version: the files are of schema versions {sorted(versions)}: merge runs of one "
                         "qbench version")
    base_path, base = docs[0]
    labels = scheme_labels(base, base_path)
    order = {label: i for i, label in enumerate(labels)}
    base_scenario = {k: v for k, v in base["scenario"].items() if k not in FREE_SCENARIO_KEYS}
    rows, seen = [], {}
    for path, doc in docs:
        scenario = {k: v for k, v in doc["scenario"].items() if k not in FREE_SCENARIO_KEYS}
        for key in sorted(set(scenario) | set(base_scenario), key=lambda k: (k != "name", k)):
            if scenario.get(key) != base_scenario.get(key):
                raise MergeError(f"{path}: scenario.{key}: {scenario.get(key)!r} differs from "
                                 f"{base_path}'s {base_scenario.get(key)!r}: not a run of the same scenario")
        if machine_of(doc) != machine_of(base):
            raise MergeError(f"{path}: env.device_name: {machine_of(doc)!r} differs from {base_path}'s "
                             f"{machine_of(base)!r}: not the same machine")
        for label in scheme_labels(doc, path):
            if label not in order:
                raise MergeError(f"{path}: scenario.schemes: {label!r} is not a scheme of {base_path}'s scenario")
        for i, row in enumerate(doc["rows"]):
            if row["scheme"] not in order:
                raise MergeError(f"{path}: rows[{i}].scheme: {row['scheme']!r} is not a scheme of "
                                 f"{base_path}'s scenario")
            key = row_key(row)
            if key in seen:
                raise MergeError(f"{path}: rows[{i}]: scheme {row['scheme']!r} M={row['m']} is also in {seen[key]}")
            seen[key] = path
            rows.append(row)
    rows.sort(key=lambda r: (order[r["scheme"]], r["m"]))  # stable: ties keep their input order
    have = {(r["scheme"], r["m"]) for r in rows}
    merged = copy.deepcopy(base)
    merged["rows"] = rows
    merged["complete"] = all((label, m) in have for label in labels for m in base["scenario"]["m"])
    merged["wall_s"] = round(sum(d.get("wall_s") or 0.0 for _, d in docs), 3)
    merged["created"] = max(str(d.get("created") or "") for _, d in docs) or base.get("created")
    sources = []
    for path, doc in docs:
        if doc.get("merged_from"):  # a merged file merged again: keep its own sources
            sources += doc["merged_from"]
            continue
        sources.append({
            "file": path,
            "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
            "complete": doc.get("complete"),
            "created": doc.get("created"),
            "wall_s": doc.get("wall_s"),
            "schemes": scheme_labels(doc, path),
            "rows": len(doc["rows"]),
            "env": doc.get("env"),
            "ceilings": doc.get("ceilings"),
        })
    merged["merged_from"] = sources
    return merged


def missing(doc: dict) -> list[str]:
    """The scheme labels of a (merged) document's scenario that have no row at some M."""
    have = {(r["scheme"], r["m"]) for r in doc["rows"]}
    return [label for label in scheme_labels(doc, "<doc>")
            if any((label, m) not in have for m in doc["scenario"]["m"])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="the base run (whole scenario) first, then the runs that complete it")
    parser.add_argument("--out", required=True, help="merged result file to write")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    args = parser.parse_args(argv)
    try:
        doc = merge(args.files)
        write_results(args.out, doc, force=args.force)
    except (MergeError, ResultsError, FileExistsError, OSError) as exc:
        print(f"merge_results: {exc}", file=sys.stderr)
        return 2
    gone = missing(doc)
    print(f"wrote {args.out}: {len(doc['rows'])} rows from {len(args.files)} files, complete: "
          f"{str(doc['complete']).lower()}" + (f" (no rows of {', '.join(gone)})" if gone else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
