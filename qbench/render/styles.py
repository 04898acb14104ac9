"""How every qbench chart draws a scheme: its colour, marker per M, and label drawn literally; and how a chart is
drawn (:func:`pyplot`, :data:`OUTSIDE`) and written (:func:`save`)."""

from __future__ import annotations

from pathlib import Path

#: A legend to the right of the axes, its top at theirs (``ax.legend(handles=..., **OUTSIDE)``).
OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 7.5, "borderaxespad": 0}


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only, no display); matplotlib is optional, imported here."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` (.png, .svg or .pdf) at 120 dpi, outside legends kept, and close it; ``path``. A PNG
    is stored with a 256-colour palette (Pillow, matplotlib's own dependency; no dithering): a chart's flat colours
    survive, and the file is about a third of the RGBA one."""
    fig.savefig(path, dpi=120, bbox_inches="tight")
    pyplot().close(fig)
    if Path(path).suffix.lower() == ".png" and Path(path).is_file():  # (a test may stub savefig out)
        from PIL import Image

        with Image.open(path) as image:
            palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        palette.save(path, optimize=True)
    return path


def plain(text: object) -> str:
    """``text`` (a string from a result file) as matplotlib draws it literally: every ``$`` escaped,
    so it is never read as mathtext (``$x^2$`` stays ``$x^2$``, ``$\\frac{a}{$`` is no parse error)."""
    return str(text).replace("$", r"\$")


#: Marker per M (in ascending M order), so one chart can hold a sweep of M values.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")


def scheme_colour_index(base: str) -> int:
    """A scheme's fixed colour slot: its place in ``qbench.schemes.names()``; another name after them, by its name."""
    from qbench import schemes
    names = schemes.names()
    return names.index(base) if base in names else len(names) + sum(map(ord, base)) % 20


def scheme_styles(bases: list[str], ms: list[int]) -> tuple[dict, dict]:
    """``(colour per scheme, marker per M)``: 40 colours (tab20 dark, light, tab20b) by :func:`scheme_colour_index`;
    a compiled variant has its eager scheme's colour, an option variant its scheme's slot plus the registry's size."""
    import matplotlib

    from qbench import schemes
    tab20, tab20b = matplotlib.colormaps["tab20"], matplotlib.colormaps["tab20b"]
    palette = [tab20(2 * i) for i in range(10)] + [tab20(2 * i + 1) for i in range(10)] + [tab20b(i) for i in range(20)]
    count = len(schemes.names())

    def slot(base: str) -> int:
        return scheme_colour_index(base.split("[", 1)[0]) + (count if "[" in base else 0)
    colours = {b: palette[slot(b) % len(palette)] for b in dict.fromkeys(bases)}
    markers = {m: _MARKERS[i % len(_MARKERS)] for i, m in enumerate(sorted(set(ms)))}
    return colours, markers
