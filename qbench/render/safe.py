"""Text from result files made harmless on output (a file may come from another machine): terminal text
:func:`visible`, Markdown cells :func:`markdown_cell`, CSV text cells :func:`csv_text`; :class:`TerminalStream`
is the backstop every reader writes through."""

from __future__ import annotations

import re
from typing import Any, TextIO

__all__ = ["CSV_FORMULA_START", "TerminalStream", "csv_text", "markdown_cell", "visible", "MARKDOWN_FORMATS"]

#: Characters a whole output may not contain (it keeps its own newlines and tsv's tabs).
_UNSAFE_IN_OUTPUT = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE_IN_OUTPUT_RE = re.compile(f"[{_UNSAFE_IN_OUTPUT}]")
#: Characters never emitted from untrusted text: the same, and tab and newline.
_UNSAFE_RE = re.compile(f"[\t\n{_UNSAFE_IN_OUTPUT}]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

#: The first characters that make a spreadsheet read a CSV cell as a formula (OWASP, CSV injection).
CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

#: Markdown formats (tabulate's pipe tables and their aliases): cells escape ``|``; the documents are generated from
#: them, so they keep every column (:func:`qbench.render.narrow`).
MARKDOWN_FORMATS = frozenset({"github", "pipe", "markdown", "md"})


def _escape(match: re.Match) -> str:
    ch = match.group(0)
    return _SHORT.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def visible(text: Any) -> Any:
    """``text`` with every unsafe character written as its escape (``"\\x1b[2J"`` -> ``"\\\\x1b[2J"``, a newline ->
    ``"\\\\n"``), anything but a ``str`` as it is. Unsafe: C0 and C1 controls (U+0000–U+001F, U+007F–U+009F), the
    line/paragraph separators (U+2028, U+2029), the bidi controls (U+202A–U+202E, U+2066–U+2069, "Trojan Source")."""
    return _UNSAFE_RE.sub(_escape, text) if isinstance(text, str) and _UNSAFE_RE.search(text) else text


def markdown_cell(text: Any) -> Any:
    """A Markdown table cell: :func:`visible`, and ``|`` written ``\\|``; anything but a ``str`` as it is."""
    return visible(text).replace("|", "\\|") if isinstance(text, str) else text


def csv_text(text: str) -> str:
    """A CSV text cell: a leading ``'`` when ``text`` begins with one of :data:`CSV_FORMULA_START` (OWASP's rule
    against formula injection: ``'=HYPERLINK("x")``), then :func:`visible`; numbers are no text cells."""
    return ("'" if text.startswith(CSV_FORMULA_START) else "") + visible(text)


class TerminalStream:
    """A text stream writing to ``stream`` with unsafe characters but newline and tab escaped."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` with unsafe characters escaped; returns ``len(text)`` (what was asked)."""
        unsafe = isinstance(text, str) and _UNSAFE_IN_OUTPUT_RE.search(text)
        self._stream.write(_UNSAFE_IN_OUTPUT_RE.sub(_escape, text) if unsafe else text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
