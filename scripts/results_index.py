"""Write ``results/<machine>/INDEX.md``: what each committed file under ``results/<machine>/`` is, who made
it and which pages cite it.

    python scripts/results_index.py             # rewrite the INDEX.md of every machine under results/
    python scripts/results_index.py h200        # one machine
    python scripts/results_index.py --check     # exit 1 with a diff when a committed INDEX.md is stale

The layout it describes: ``results/<machine>/*.json`` are the current files, one per scenario (the
newest run of each); ``evidence/`` holds derived files a page cites;
``env/`` the machine files and run logs (``env/logs/<name>.log``) and ``env/provenance.toml``.

Per file the index names:

- the **command** and the **code** (commit) that made it: from ``env/provenance.toml`` (the first
  ``[[entry]]`` whose ``files`` glob matches), because a result file records neither its command nor,
  on a copied tree, its real commit; the file's own ``env.git`` is shown beside it;
- the **date** (``env.date``, else ``created``), the rows ``ok`` / ``skipped`` / ``failed``, whether it is
  ``complete``, its scenario and how many of that scenario file's schemes it has today;
- the **claims it backs**: every page (``README.md``, ``docs/*.md``) that names the file's path, with
  the heading of the section that does (a generated block's command counts);
- for a merged file (a run cut off and completed by another), its sources (``merged_from``).

The output depends only on the committed files, so ``tests/test_docs.py`` can compare it with the
committed INDEX.md. Exit status: 0; 1 (``--check`` found a stale index); 2 (a bad provenance file
or an unreadable result, one line naming the file).
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import re
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
#: Pages whose mentions of a result path count as claims backed by it.
PAGES = ("README.md", "docs/*.md")


_HISTORY = re.compile(r"\b[0-9a-f]{7,40}:$")


class IndexError_(ValueError):
    """A provenance file or a result file that cannot be read; the message names the file."""


# ---- reading ---------------------------------------------------------------------------------------

def provenance(machine_dir: Path) -> list[dict]:
    """The ``[[entry]]`` tables of ``env/provenance.toml`` (none when the file is absent).

    Raises:
        IndexError_: not TOML, or an entry without a ``files`` list of strings.
    """
    path = machine_dir / "env" / "provenance.toml"
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise IndexError_(f"{_rel(path)}: not TOML: {exc}") from None
    entries = data.get("entry", [])
    for i, entry in enumerate(entries):
        files = entry.get("files")
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            raise IndexError_(f"{_rel(path)}: entry[{i}].files: a list of globs, got {files!r}")
    return entries


def entry_for(entries: list[dict], rel: str) -> dict:
    """The first provenance entry whose ``files`` globs match ``rel`` (a path under the machine's
    folder); ``**`` matches across folders. Empty when none does."""
    for entry in entries:
        for pattern in entry["files"]:
            if fnmatch.fnmatchcase(rel, pattern) or (pattern.endswith("/**") and rel.startswith(pattern[:-2])):
                return entry
    return {}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def load_json(path: Path) -> dict | None:
    """The JSON object in ``path``, or None for a file that is not a JSON object."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise IndexError_(f"{_rel(path)}: not JSON: {exc}") from None
    return doc if isinstance(doc, dict) else None


def is_result(doc: dict | None) -> bool:
    """A run's result document (``qbench run``), not a derived summary (those carry a ``kind``)."""
    return bool(doc) and "schema_version" in doc and isinstance(doc.get("rows"), list) and "kind" not in doc


# ---- claims --------------------------------------------------------------------------------------

def _pages() -> list[Path]:
    out: list[Path] = []
    for pattern in PAGES:
        out += sorted(ROOT.glob(pattern))
    return out


def page_mentions() -> dict[str, list[tuple[str, str]]]:
    """Every ``results/...`` path named on a page -> [(page, section heading), ...] in page order.
    Headings inside fenced code blocks are not headings. A path right after ``COMMIT:`` (``git show
    0b7dab3:results/h200/decode.json``) names a file of the past, not the committed one."""
    found: dict[str, list[tuple[str, str]]] = {}
    path_re = re.compile(r"results/[A-Za-z0-9_.{},*/-]+")
    for page in _pages():
        heading, fenced = "(top)", False
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and line.startswith("#"):
                heading = line.lstrip("#").strip()
            for match in path_re.finditer(line):
                if _HISTORY.search(line, 0, match.start()):
                    continue
                where = (page.relative_to(ROOT).as_posix(), heading)
                hits = found.setdefault(match.group(0).rstrip(".,"), [])
                if where not in hits:
                    hits.append(where)
    return found


def claims_for(rel_path: str, mentions: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """The (page, heading) pairs that name ``rel_path`` (e.g. ``results/h200/decode.json``), or a folder
    holding it (``results/h200/evidence/speed/2026-12-01/call12/``); a page that names a layout folder
    (``results/h200/``, ``results/h200/evidence/``, ``results/h200/env/``) backs no one file by that."""
    out: list[tuple[str, str]] = []
    for named, hits in mentions.items():
        parts = named.rstrip("/").split("/")
        layout_root = len(parts) == 2 or (len(parts) == 3 and parts[2] in ("evidence", "env"))
        folder = named.endswith("/") and not layout_root
        if named == rel_path or (folder and rel_path.startswith(named)):
            out += [h for h in hits if h not in out]
    return out


# ---- one file --------------------------------------------------------------------------------------

def _short(commit: str | None) -> str:
    return commit[:7] if commit else ""


def describe(path: Path, machine_dir: Path, entries: list[dict], mentions: dict) -> dict:
    """What the index says about one file (see the module docstring)."""
    rel = path.relative_to(machine_dir).as_posix()
    entry = entry_for(entries, rel)
    info = {"rel": rel, "path": _rel(path), "entry": entry, "claims": claims_for(_rel(path), mentions),
            "kind": "file", "doc": None}
    if path.suffix != ".json":
        return info
    doc = load_json(path)
    info["doc"] = doc
    if not is_result(doc):
        info["kind"] = f"summary ({doc.get('kind')})" if doc and doc.get("kind") else "summary"
        entries_of = (doc or {}).get("rows") or (doc or {}).get("runs") or (doc or {}).get("layers") or []
        info["rows"] = f"{len(entries_of)} entries" if isinstance(entries_of, list) else "—"
        return info
    env = doc.get("env") or {}
    git = env.get("git") or {}
    status = Counter(r.get("status") for r in doc["rows"])
    info.update(kind="result", date=str(env.get("date") or doc.get("created") or ""),
                git=(f"{_short(git.get('commit'))}{' (dirty)' if git.get('dirty') else ''}" if git.get("commit")
                     else "not recorded"),
                rows=f"{status.get('ok', 0)} / {status.get('skipped', 0)} / {status.get('failed', 0)}",
                complete=doc.get("complete"), scenario=(doc.get("scenario") or {}).get("source") or "",
                schemes=len({r.get("scheme") for r in doc["rows"]}), merged=doc.get("merged_from") or [])
    info["today"] = _schemes_today(info["scenario"], doc["rows"])
    return info


def _schemes_today(source: str, rows: list) -> int | None:
    """Schemes the scenario ``source`` lists today (None: gone, invalid, or ``rows`` not one per scheme)."""
    from qbench import jobs
    from qbench.scenario import ScenarioError, load
    path = ROOT / source
    if not source or not path.is_file() or not jobs.of_rows(rows).rows_per_scheme:
        return None
    try:
        return len(load(path).schemes)
    except ScenarioError:
        return None


# ---- rendering ---------------------------------------------------------------------------------------

def _claims_md(claims: list[tuple[str, str]]) -> str:
    if not claims:
        return "no page names it"
    by_page: dict[str, list[str]] = {}
    for page, heading in claims:
        by_page.setdefault(page, []).append(heading)
    return "; ".join(f"{page} § " + ", § ".join(f"{h}" for h in heads) for page, heads in by_page.items())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _oneline(text: str) -> str:
    return " ".join(str(text).split())


def _scheme_cell(info: dict) -> str:
    today = info.get("today")
    base = f"{info['schemes']}"
    if today is None:
        return base
    return base if today == info["schemes"] else f"{base} (the scenario lists {today} today)"


def render(machine: str) -> str:
    """The INDEX.md text of ``results/<machine>/``.

    Raises:
        IndexError_: a provenance or result file cannot be read.
    """
    machine_dir = RESULTS / machine
    entries = provenance(machine_dir)
    mentions = page_mentions()
    files = sorted(p for p in machine_dir.rglob("*") if p.is_file() and p.name != "INDEX.md")
    current = [p for p in files if p.parent == machine_dir]
    evidence = [p for p in files if p.relative_to(machine_dir).parts[0] == "evidence"]
    env = [p for p in files if p.relative_to(machine_dir).parts[0] == "env"]
    other = [p for p in files if p not in current and p not in evidence and p not in env]
    out = [f"# results/{machine}: index",
           "",
           f"Generated by `python scripts/results_index.py {machine}` (run by `scripts/gen_docs.py`) from the files "
           f"below and `env/provenance.toml`; `tests/test_docs.py` fails when it differs. Do not edit by hand.",
           "",
           "The files at the top are the current ones: the newest run of each scenario. `evidence/` holds "
           "derived files a page still cites (cross-checks); `env/` the machine files and run logs. Older "
           "runs are in git history ([docs/history.md](../../docs/history.md)). Partial files "
           "(`*.partial.json`) are never committed.",
           "",
           "## Current files",
           "",
           "| file | scenario | schemes | rows ok / skipped / failed | complete | date (env) | code | env.git |",
           "|---|---|---|---|---|---|---|---|"]
    infos = [describe(p, machine_dir, entries, mentions) for p in current]
    for info in infos:
        if info["kind"] != "result":
            out.append(f"| `{info['rel']}` | {info['kind']} | | {info.get('rows', '')} | | | | |")
            continue
        out.append(f"| [`{info['rel']}`]({info['rel']}) | `{info['scenario']}` | {_scheme_cell(info)} | {info['rows']} | "
                   f"{str(info['complete']).lower()} | {info['date'][:19]} | "
                   f"{_cell(info['entry'].get('code') or info['git'])} | {info['git']} |")
    for info in infos:
        out += ["", f"### `{info['rel']}`", ""]
        entry = info["entry"]
        if entry.get("command"):
            out.append(f"- command: `{_oneline(entry['command'])}`" if "`" not in entry["command"]
                       else f"- command: {_oneline(entry['command'])}")
        if entry.get("machine"):
            out.append(f"- machine: {_oneline(entry['machine'])}")
        logs = [f"`{_rel(p)}`" for p in env if p.stem == Path(info["rel"]).stem or
                p.stem.startswith(Path(info["rel"]).stem + "-")]
        support = [f"`results/{machine}/{e}`" for e in entry.get("env", [])]
        if logs or support:
            out.append(f"- logs and machine files: {', '.join(dict.fromkeys(logs + support))}")
        for src in info.get("merged", []):
            git = ((src.get("env") or {}).get("git") or {}).get("commit")
            out.append(f"- merged from `{src['file']}`: {src['rows']} rows, complete "
                       f"{str(src.get('complete')).lower()}, created {str(src.get('created'))[:19]}, env.git "
                       f"{_short(git) or 'not recorded'}, sha256 {src['sha256'][:12]}")
        out.append(f"- claims it backs: {_claims_md(info['claims'])}")
        if entry.get("note"):
            out.append(f"- note: {_oneline(entry['note'])}")
    if evidence:
        out += ["", "## Evidence", "", "| file | kind | command | claims it backs |", "|---|---|---|---|"]
        for p in evidence:
            info = describe(p, machine_dir, entries, mentions)
            command = info["entry"].get("command")
            out.append(f"| `{info['rel']}` | {info['kind']} | {_cell(_oneline(command)) if command else ''} | "
                       f"{_cell(_claims_md(info['claims']))} |")
    if env:
        out += ["", "## Machine files and logs (`env/`)", ""]
        by_folder: dict[str, list[str]] = {}
        for p in env:
            by_folder.setdefault(p.parent.relative_to(machine_dir).as_posix(), []).append(p.name)
        for folder, names in sorted(by_folder.items()):
            out.append(f"- `{folder}/`: " + ", ".join(f"`{n}`" for n in names))
    if other:
        out += ["", "## Not in the layout", "",
                "These files are neither current, evidence nor env; move or delete them:", ""]
        out += [f"- `{p.relative_to(machine_dir).as_posix()}`" for p in other]
    return "\n".join(out) + "\n"


def machines() -> list[str]:
    """The folders under results/ holding an ``env/provenance.toml`` or JSON; not runs/ (qbench run's, gitignored)."""
    return sorted(p.name for p in RESULTS.iterdir() if p.is_dir() and p.name != "runs"
                  and ((p / "env" / "provenance.toml").is_file() or any(p.glob("*.json"))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("machines", nargs="*", help="folders under results/ (default: every machine)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 with a diff when stale")
    args = parser.parse_args(argv)
    stale = 0
    try:
        for machine in args.machines or machines():
            if not (RESULTS / machine).is_dir():
                raise IndexError_(f"results/{machine}: no such folder")
            new = render(machine)
            path = RESULTS / machine / "INDEX.md"
            old = path.read_text(encoding="utf-8") if path.is_file() else ""
            if new == old:
                continue
            if args.check:
                stale += 1
                sys.stdout.writelines(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                           fromfile=f"{_rel(path)} (committed)",
                                                           tofile=f"{_rel(path)} (generated)"))
            else:
                path.write_text(new, encoding="utf-8")
                print(f"wrote {_rel(path)}")
    except IndexError_ as exc:
        print(f"results_index: {exc}", file=sys.stderr)
        return 2
    if stale:
        print(f"results_index: {stale} index(es) out of date; run: python scripts/results_index.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
