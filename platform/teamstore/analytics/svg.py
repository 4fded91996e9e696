"""Charts as inline SVG, drawn in Python: no script, no library, nothing fetched.

    from teamstore.analytics.svg import Bar, stacked_bars

    svg = stacked_bars("cost-by-team", [Bar("2026-11-30", "support_triage", 0.12, "0.12")], unit="USD")

A page draws each chart in both :class:`Layout` s: :data:`WIDE` for a desktop and for print, :data:`SMALL` for
a phone, where the wide one scaled down to the screen would leave its text a few pixels high. Its style shows
one of them (``svg.chart`` or ``svg.small-chart``), so a screen reader hears only the one shown. A mark's class
names its place in the palette (``hue0`` to ``hue9``), by which the style colours it for a light or dark scheme.

Every mark carries its exact figure (``data-value``), its category (``data-x``) and its series
(``data-series``), and a ``<title>`` a browser shows on hover and a screen reader reads as the mark's name (each
chart is a group named by the heading ``<chart id>-title`` of the page): the page's figures can be read back and
compared with ``teamstore cost``'s. Text is escaped; a label too long for the chart is shortened there
and given whole in its title.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from teamstore.terminal import inert

WIDTH, HEIGHT = 760, 280
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 14, 46
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
DARK_PALETTE = ("#6a9bd1", *PALETTE[1:-1], "#8b9097")
"""The same series on a dark background: the blue lighter, so it stands 3:1 from it as every other colour does,
and the shared grey darker, so the series it folds together stay behind the named ones."""
MOST_LABELS = 12
CHAR_WIDTH, LABEL_GAP, EMPTY_CHAR_WIDTH = 7, 12, 7
"""The most a character of an axis label takes (11px text), the least room between two labels, and the most a
character of a chart's 13px "nothing to draw" takes."""
BAR_SHARE, MIN_BAR_WIDTH = 0.76, 2
"""The share of its category's room a stacked bar takes (the rest is the gap beside it), and the least width of
one, in pixels of its chart's drawn size: narrower, a bar is a hairline no one can point at or tell apart."""
MIN_HEIGHT = 120
"""The least height of a chart of horizontal bars (one session's)."""
ROW_HEIGHT, MIN_ROW_HEIGHT = 26, 18
"""The height of a horizontal bar's row, and the least it may shrink to for many of them (past it the chart
grows instead): under 18 pixels a name's 11px text would touch the next one's."""


@dataclass(frozen=True)
class Layout:
    """How wide a chart is drawn, and what fits in it.

    Attributes:
        width: The chart's width, in the pixels of its 11px text.
        left: Room for the value axis's figures, left of the marks.
        names: Room for a horizontal bar's name, left of its bar.
        name_chars: The most characters of such a name written there (the whole name is in the mark's title).
        suffix: Added to the chart's id, so both layouts of a chart are on one page.
        css_class: The SVG element's class, which the page's style shows on its screens.
    """

    width: int
    left: int
    names: int
    name_chars: int
    suffix: str
    css_class: str


WIDE = Layout(WIDTH, LEFT, 210, 30, "", "chart")
SMALL = Layout(360, LEFT, 140, 19, "-small", "small-chart")
"""A phone's chart: at 360 pixels it is drawn at about the size of its text, not scaled to half of it. Its value
axis keeps the desktop's room: a figure such as 0.0000015 is as long on a phone."""


@dataclass(frozen=True)
class Bar:
    """One mark: a category (a day, a session), a series (a team, a model, an outcome), and its figure.

    Attributes:
        x: The category.
        series: The series, stacked within a category.
        value: Its size on the chart.
        text: The exact figure, as the report gives it.
    """

    x: str
    series: str
    value: float
    text: str


def most_bars(layout: Layout) -> int:
    """The most categories :func:`stacked_bars` draws in ``layout`` each at least :data:`MIN_BAR_WIDTH` wide."""
    return int((layout.width - layout.left - RIGHT) * BAR_SHARE // MIN_BAR_WIDTH)


def slots(series: Sequence[str]) -> dict[str, int]:
    """A place in the palette per series (its colour, in :data:`PALETTE` or :data:`DARK_PALETTE`), in the order given; past ten, the first nine keep theirs and the rest
    share the palette's last, grey, so no two series a reader tells apart by colour look alike."""
    folded = len(series) > len(PALETTE)
    return {name: min(i, len(PALETTE) - 1) if folded else i for i, name in enumerate(series)}


def _attr(value: object) -> str:
    """An attribute's value, exact: ``data-*`` carry the figures and names as the report gives them."""
    return escape(str(value), quote=True)


def shown(value: object) -> str:
    """Text a reader sees, as text: markup escaped, and the characters that would reorder or hide what is
    around them (bidirectional overrides, controls) written as their escapes (:func:`teamstore.terminal.inert`)."""
    return escape(inert(value))


def isolated(text: str) -> str:
    """``text`` as :func:`shown` gives it, each part of a name joined by `` / `` (a user and a session) set apart
    as its own run of text (U+2068 ... U+2069): a right-to-left name stays in its place, and the id or figure
    after it is not drawn on its other side (``42 / مستخدم`` for the user مستخدم's session 42)."""
    return " / ".join(f"\u2068{shown(part)}\u2069" for part in text.split(" / "))


def _short(text: str, most: int = 28) -> str:
    return text if len(text) <= most else text[: most - 1] + "\u2026"


def _svg(chart_id: str, layout: Layout, height: float, body: list[str]) -> str:
    """The SVG element of a chart in ``layout``, drawn at its own size, named by the heading ``<chart id>-title``."""
    return (f'<svg id="{_attr(chart_id + layout.suffix)}" class="{layout.css_class}" role="group" '
            f'aria-labelledby="{_attr(chart_id)}-title" viewBox="0 0 {layout.width} {height}" '
            f'width="{layout.width}" height="{height}" xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>")


def _frame(chart_id: str, body: list[str], top: float, unit: str, empty: str, layout: Layout) -> str:
    """The SVG element around ``body``: the value axis (0 and the top figure) and the baseline; with no
    figure above 0 (``top`` 0), no top figure but ``empty``, saying why, across the chart."""
    base, left = HEIGHT - BOTTOM, layout.left
    axis = [
        f'<line class="axis" x1="{left}" y1="{base}" x2="{layout.width - RIGHT}" y2="{base}" stroke="#888"/>',
        f'<text class="tick" x="{left - 6}" y="{base}" text-anchor="end">0</text>',
        # On its own line above the top figure, which is right-aligned to the axis and may be long.
        f'<text class="unit" x="4" y="{TOP - 3}">{shown(unit)}</text>',
    ]
    if top:
        axis.append(f'<text class="tick" x="{left - 6}" y="{TOP + 10}" text-anchor="end">{shown(_number(top))}</text>')
    else:
        axis.append(_empty(empty, left + (layout.width - left - RIGHT) / 2, (TOP + base) / 2, layout.width - left))
    return _svg(chart_id, layout, HEIGHT, axis + body)


def _empty(text: str, x: float, y: float, room: float) -> str:
    """Why a chart has nothing above 0 to draw, in its middle (nothing when not given), in as many lines of
    its 13px text as ``room`` needs: SVG text does not wrap by itself."""
    if not text:
        return ""
    lines = textwrap.wrap(text, max(12, int(room // EMPTY_CHAR_WIDTH)))
    first = y - (len(lines) - 1) * 8
    return (f'<text class="empty" x="{x:.1f}" y="{first:.1f}" text-anchor="middle">'
            + "".join(f'<tspan x="{x:.1f}" dy="{16 if i else 0}">{shown(line)}</tspan>' for i, line in enumerate(lines))
            + "</text>")


def _number(value: float) -> str:
    """An axis figure to four significant digits, as a reader reads one: 34.7M, 0.0000015, never 3.47e+07."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= max(size, 1e4):  # up to 9999 the four digits are the figure itself
            return f"{value / size:.4g}{suffix}"
    if 0 < value < 1e-4:  # where the 'g' format turns to an exponent
        return f"{value:.{3 - math.floor(math.log10(value))}f}".rstrip("0")
    return f"{value:.4g}"


def _x_labels(categories: Sequence[str], band: float, layout: Layout) -> list[str]:
    longest = max((len(_short(c, 12)) for c in categories), default=1)
    fit = int((layout.width - layout.left - RIGHT) // (longest * CHAR_WIDTH + LABEL_GAP))  # so no two labels touch
    step = max(1, -(-len(categories) // max(1, min(MOST_LABELS, fit))))  # at most a dozen labels under the bars
    return [f'<text class="label" x="{layout.left + band * (i + 0.5):.1f}" y="{HEIGHT - BOTTOM + 16}" '
            f'text-anchor="middle">{shown(_short(c, 12))}</text>'
            for i, c in enumerate(categories) if i % step == 0]


def _mark(kind: str, mark: Bar, slot: int, place: str, title: str) -> str:
    """One mark of the series in palette place ``slot`` (its class ``hue<slot>``, by which a page's style gives
    it the colour of its scheme), with its figures and its title."""
    tag = "rect" if kind == "bar" else "circle"
    return (f'<{tag} class="{kind} hue{slot}" role="img" data-x="{_attr(mark.x)}" data-series="{_attr(mark.series)}" '
            f'data-value="{_attr(mark.text)}" {place} fill="{PALETTE[slot]}"><title>{title}</title></{tag}>')


def stacked_bars(chart_id: str, bars: Sequence[Bar], unit: str, series: Sequence[str] | None = None,
                 categories: Sequence[str] | None = None, empty: str = "", *, layout: Layout = WIDE) -> str:
    """Bars per category, each series stacked on the last; one ``rect.bar`` per mark given.

    Args:
        chart_id: The SVG element's id (with ``layout``'s suffix).
        bars: The marks.
        unit: What the value axis counts (a currency, "runs").
        series: The stacking order (and colours); by default the order first seen.
        categories: Every category in order, those without a mark given their empty place (the periods of a
            time axis); by default the marks' own, in the order first seen.
        empty: Why nothing is drawn, shown when no mark is above 0 (every cost 0 or unknown).
        layout: How wide it is drawn.
    """
    categories = list(dict.fromkeys([*(categories or ()), *(b.x for b in bars)]))
    order = list(series or dict.fromkeys(b.series for b in bars))
    slot = slots(order)
    totals = {c: sum(b.value for b in bars if b.x == c) for c in categories}
    top = max(totals.values(), default=0.0)
    band = (layout.width - layout.left - RIGHT) / max(1, len(categories))
    scale = (HEIGHT - TOP - BOTTOM) / (top or 1.0)
    filled = dict.fromkeys(categories, 0.0)
    body = []
    for bar in sorted(bars, key=lambda b: (categories.index(b.x), order.index(b.series))):
        height = bar.value * scale
        y = HEIGHT - BOTTOM - filled[bar.x] - height
        filled[bar.x] += height
        body.append(_mark(
            "bar", bar, slot[bar.series],
            f'x="{layout.left + band * categories.index(bar.x) + band * (1 - BAR_SHARE) / 2:.1f}" y="{y:.1f}" '
            f'width="{band * BAR_SHARE:.1f}" height="{height:.1f}"',
            f"{isolated(bar.x)} · {isolated(bar.series)}: {shown(f'{bar.text} {unit}')}"))
    return _frame(chart_id, body + _x_labels(categories, band, layout), top, unit, empty, layout)


def horizontal_bars(chart_id: str, bars: Sequence[Bar], unit: str, empty: str = "", *,
                    layout: Layout = WIDE) -> str:
    """One ``rect.bar`` per mark, top to bottom in the order given, its category written to its left; the
    chart as tall as its bars need: a few sessions leave no empty box, and many no less than
    :data:`MIN_ROW_HEIGHT` each, so no two names overlap; ``empty`` beside them when none is above 0."""
    rows = max(1, len(bars))
    height = max(MIN_ROW_HEIGHT, min(ROW_HEIGHT, (HEIGHT - TOP - BOTTOM) / rows))
    tall = max(MIN_HEIGHT, round(TOP + rows * height + TOP))
    left, top = layout.names, max((b.value for b in bars), default=0.0)
    scale = (layout.width - left - RIGHT) / (top or 1.0)
    body = [] if top else [_empty(empty, layout.width / 2, tall / 2, layout.width)]
    for i, bar in enumerate(bars):
        y = TOP + i * height
        body.append(
            f'<text class="label" x="{left - 6}" y="{y + height * 0.7:.1f}" text-anchor="end">'
            f"{isolated(_short(bar.x, layout.name_chars))}</text>"
            + _mark("bar", bar, 0, f'x="{left}" y="{y + 2:.1f}" width="{bar.value * scale:.1f}" '
                    f'height="{height - 4:.1f}"', f'{isolated(bar.x)}: {shown(f"{bar.text} {unit}")}'))
    return _svg(chart_id, layout, tall, body)


def points(chart_id: str, marks: Sequence[Bar], unit: str, categories: Sequence[str] | None = None,
           empty: str = "", *, layout: Layout = WIDE) -> str:
    """One ``circle.point`` per mark, joined by a line, categories left to right in the order given
    (``categories``: every one in order, as :func:`stacked_bars` takes them; a line crosses those without;
    ``empty`` and ``layout`` as it takes them)."""
    categories = list(dict.fromkeys([*(categories or ()), *(m.x for m in marks)]))
    top = max((m.value for m in marks), default=0.0)
    band = (layout.width - layout.left - RIGHT) / max(1, len(categories))
    scale = (HEIGHT - TOP - BOTTOM) / (top or 1.0)
    places = [(layout.left + band * (categories.index(m.x) + 0.5), HEIGHT - BOTTOM - m.value * scale) for m in marks]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in places)
    body = [f'<polyline class="line hue0" points="{line}" fill="none" stroke="{PALETTE[0]}" stroke-width="2"/>']
    body += [_mark("point", mark, 0, f'cx="{x:.1f}" cy="{y:.1f}" r="4"',
                   f"{isolated(mark.x)}: {shown(f'{mark.text} {unit}')}")
             for (x, y), mark in zip(places, marks, strict=True)]
    return _frame(chart_id, body + _x_labels(categories, band, layout), top, unit, empty, layout)


def legend(series: Sequence[str]) -> str:
    """The colour of each series, as an HTML list under a chart (a swatch of class ``hue<slot>``, as its marks);
    those sharing the grey of :func:`slots` in one item naming them all."""
    shared = len(PALETTE) - 1 if len(series) > len(PALETTE) else None
    named = [(name, slot) for name, slot in slots(series).items() if slot != shared]
    rest = [name for name, slot in slots(series).items() if slot == shared]
    items = [f'<li><span class="swatch hue{slot}"></span><bdi>{shown(name)}</bdi></li>' for name, slot in named]
    if rest:  # each name its own run of text: a right-to-left one does not swap places with its neighbours
        items.append(f'<li><span class="swatch hue{shared}"></span>{shown(other(len(rest)))}: '
                     + ", ".join(f"<bdi>{shown(name)}</bdi>" for name in rest) + "</li>")
    return f'<ul class="legend">{"".join(items)}</ul>'


def other(count: int) -> str:
    """The name of the series that :func:`slots` folds into its grey: ``the other 3``."""
    return f"the other {count}"


def table(chart_id: str, bars: Sequence[Bar], unit: str, series: Sequence[str],
          categories: Sequence[str] | None = None, caption: str = "") -> str:
    """A chart's figures as a table (a row per category, a column per series), for a screen reader and for a
    reader who wants the figures: in a ``<details>`` under the chart, in a box that scrolls sideways (by the
    keyboard too) on a screen too narrow for its columns.

    Args:
        chart_id: The chart's id; the table's is ``<chart id>-table``.
        bars: The chart's marks.
        unit: What the figures count, said in the heading row.
        series: The columns, in order.
        categories: The rows, in order (those without a mark left out); by default the marks' own.
        caption: What a reader of the table should know first (the scale it was drawn at, when not the one
            asked for), as its ``<caption>``, which a screen reader reads with it.
    """
    cells = {(b.x, b.series): b.text for b in bars}
    rows = [c for c in dict.fromkeys([*(categories or ()), *(b.x for b in bars)]) if any(
        (c, s) in cells for s in series)]
    head = "<th></th>" + "".join(f'<th scope="col"><bdi>{shown(s)}</bdi></th>' for s in series)
    body = "".join(f'<tr><th scope="row"><bdi>{shown(c)}</bdi></th>'
                   + "".join(f"<td>{shown(cells.get((c, s), '-'))}</td>" for s in series) + "</tr>" for c in rows)
    return (f'<details class="figures"><summary>The figures as a table ({shown(unit)})</summary>'
            f'<div class="scroll" role="region" tabindex="0" aria-labelledby="{_attr(chart_id)}-title">'
            f'<table id="{_attr(chart_id)}-table">' + (f"<caption>{shown(caption)}</caption>" if caption else "")
            + f"<tr>{head}</tr>{body}</table></div></details>")
