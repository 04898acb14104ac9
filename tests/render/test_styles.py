"""render.styles.save: a PNG chart is written with a 256-colour palette (a third of the RGBA file), its colours kept."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from qbench.render.styles import pyplot, save  # noqa: E402


def test_a_png_is_saved_as_a_palette_image_with_its_colours(tmp_path):
    from PIL import Image

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], color="#d62728", lw=6)
    ax.set_facecolor("#1f77b4")
    out = save(fig, tmp_path / "chart.png")
    with Image.open(out) as image:
        assert image.mode == "P" and len(image.getcolors(256)) <= 256
        rgb = image.convert("RGB")
        colours = {c for _, c in rgb.getcolors(256)}
    assert (0xd6, 0x27, 0x28) in colours and (0x1f, 0x77, 0xb4) in colours  # flat colours survive, not dithered


def test_a_pdf_is_left_as_matplotlib_wrote_it(tmp_path):
    plt = pyplot()
    fig, _ = plt.subplots()
    out = save(fig, tmp_path / "chart.pdf")
    assert out.read_bytes().startswith(b"%PDF")
