"""How every qbench chart draws a scheme: its colour, fixed by the scheme registry, its marker per M,
and a label drawn literally (no mathtext). The layer charts (:mod:`qbench.readers.plot`) and the
job kinds' charts (the model step's context sweep) share them. Matplotlib is imported on use.
"""

from __future__ import annotations


def plain(text: object) -> str:
    """``text`` (a string from a result file: a scheme label, a device or scenario name) as
    matplotlib draws it literally: every ``$`` escaped (``\\$``), so it is never read as mathtext
    (``$x^2$`` stays ``$x^2$``, and ``$\\frac{a}{$`` is no parse error). Mathtext stays on for the
    axes' own tick labels (``10^{-2}``)."""
    return str(text).replace("$", r"\$")


#: Marker per M (in ascending M order), so one chart can hold a sweep of M values.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")


def scheme_colour_index(base: str) -> int:
    """A scheme's fixed colour slot: its place in the registry (``qbench.schemes.names()``), so a
    scheme has the same colour in every chart of every file; a name outside the registry (an old
    file) comes after them, in a slot from its name."""
    from qbench import schemes

    names = schemes.names()
    if base in names:
        return names.index(base)
    return len(names) + sum(map(ord, base)) % 20


def scheme_styles(bases: list[str], ms: list[int]) -> tuple[dict, dict]:
    """Colour per scheme of ``bases`` fixed by the registry order (:func:`scheme_colour_index`; 40 colours:
    tab20's dark shades, its light ones, then tab20b), the same in every chart; marker per M
    of ``ms`` (ascending). A compiled variant shares its eager scheme's colour; an option variant
    (``fp8-dynamic[kernel_preference=mslk]``) takes its scheme's slot plus the registry's size."""
    import matplotlib

    from qbench import schemes

    # 40 distinct colours: tab20 (dark shades first, then light) then tab20b
    tab20, tab20b = matplotlib.colormaps["tab20"], matplotlib.colormaps["tab20b"]
    palette = [tab20(2 * i) for i in range(10)] + [tab20(2 * i + 1) for i in range(10)] + \
        [tab20b(i) for i in range(20)]
    bases = list(dict.fromkeys(bases))
    count = len(schemes.names())

    def slot(base: str) -> int:
        name, variant = (base.split("[", 1)[0], True) if "[" in base else (base, False)
        return scheme_colour_index(name) + (count if variant else 0)

    colours = {b: palette[slot(b) % len(palette)] for b in bases}
    markers = {m: _MARKERS[i % len(_MARKERS)] for i, m in enumerate(sorted(set(ms)))}
    return colours, markers
