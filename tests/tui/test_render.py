"""The list's grid (pmem/tui/widgets.py) draws what a Rich table grid drew."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")


def drawn(renderable, width: int) -> list[list[tuple]]:
    """Each line's visible cells as (character, bold, dim, italic); spaces left out but counted."""
    from rich.console import Console

    console = Console(width=width, force_terminal=True, color_system="truecolor")
    lines = console.render_lines(renderable, console.options.update(width=width, height=None), pad=False)
    out = []
    for line in lines:
        cells, x = [], 0
        for seg in line:
            for ch in seg.text:
                if ch != " ":
                    style = seg.style
                    cells.append((x, ch, bool(style and style.bold), bool(style and style.dim),
                                  bool(style and style.italic)))
                x += 1
        out.append(cells)
    while out and not out[-1]:
        out.pop()
    return out


@pytest.mark.parametrize("width", [12, 19, 24, 33, 47, 77, 140])
def test_grid_draws_what_a_rich_table_grid_drew(width):
    """The detail pane's grids (render.Grid) against rich's Table.grid, the spec they replace:
    the same characters in the same cells with the same styles, wrapped and cut the same way."""
    from rich.table import Table
    from rich.text import Text

    from pmem.tui.render import Grid

    rows = [
        (Text("tier"), Text("archival")),
        (Text("created"), Text("2025-02-28T09:00:00Z (3 days ago)", style="italic")),
        (Text("scope"), Text("/home/someone/projects/a-very-long-project-directory-name/src", overflow="fold")),
        (Text("text"), Text("a longer sentence of several words that has to wrap at narrow widths, twice")),
        (Text("word"), Text("Supercalifragilisticexpialidocious-and-some-more-without-spaces")),
        (Text(""), Text("an empty key")),
        (Text("meta.source"), Text("")),
    ]
    three = [(Text("2025-02-28 09:00"), Text("create"), Text("created")),
             (Text("2025-03-01 10:30"), Text("retag"), Text("tags +work -home; tier archival → core, and more"))]
    for styles, data in ((("bold", ""), rows), (("dim", "bold", ""), three)):
        grid, table = Grid(*styles), Table.grid(padding=(0, 1))
        for style in styles[:-1]:
            table.add_column(style=style, no_wrap=True)
        table.add_column(style=styles[-1])
        for row in data:
            grid.add_row(*row)
            table.add_row(*row)
        assert drawn(grid, width) == drawn(table, width), (styles, width)

