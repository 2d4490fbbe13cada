"""The report's charts as hand-written SVG: a stacked histogram, a line chart, horizontal bars.

No library and no script: each chart is a few kilobytes of markup whatever the corpus, with a ``<title>`` on
every bar and point for its exact figure, and ``data-*`` attributes that state what it shows (the tests read
them back).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
WIDTH, HEIGHT = 560, 220
LEFT, BOTTOM, TOP, RIGHT = 56, 44, 12, 12


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _ticks(high: float, count: int = 4) -> list[float]:
    if high <= 0:
        return [0.0]
    raw = high / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if m * step >= raw)
    return [i * step for i in range(int(high / step) + 2) if i * step <= high * 1.0001 or i == 1]


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:.3g}"


def histogram(name: str, labels: Sequence[str], series: Mapping[str, Sequence[int]], *, unit: str) -> str:
    """Bars stacked by series (a source each) over ``labels`` (the bins); empty bins at both ends are left out."""
    totals = [sum(values[i] for values in series.values()) for i in range(len(labels))]
    used = [i for i, total in enumerate(totals) if total]
    if not used:
        return f'<p class="empty" data-chart="{escape(name)}">no documents</p>'
    first, last = used[0], used[-1]
    shown = list(range(first, last + 1))
    high = max(totals[i] for i in shown)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bar = plot_w / len(shown)
    parts = [_frame(name, "histogram", sum(totals), f"documents by {unit}")]
    for tick in _ticks(high):
        y = TOP + plot_h - tick / high * plot_h
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end">{_number(tick)}</text>')
    for column, index in enumerate(shown):
        x, base = LEFT + column * bar, TOP + plot_h
        for series_index, (label, values) in enumerate(series.items()):
            count = values[index]
            if not count:
                continue
            height = count / high * plot_h
            base -= height
            parts.append(f'<rect x="{x + 1:.1f}" y="{base:.1f}" width="{max(bar - 2, 1):.1f}" height="{height:.1f}" '
                         f'fill="{colour(series_index)}" data-count="{count}"><title>{escape(label)}: {count:,} '
                         f'documents of {escape(labels[index])} {unit}</title></rect>')
        if len(shown) <= 12 or column % 2 == 0:
            middle, below = x + bar / 2, HEIGHT - BOTTOM + 14
            parts.append(f'<text class="tick" x="{middle:.1f}" y="{below}" text-anchor="end" '
                         f'transform="rotate(-35 {middle:.1f} {below})">{escape(labels[index])}</text>')
    parts.append(f'<text class="axis" x="{WIDTH - RIGHT}" y="{HEIGHT - 2}" text-anchor="end">{escape(unit)} per '
                 "document</text></svg>")
    return "".join(parts)


def lines(name: str, series: Mapping[str, Sequence[Sequence[float]]], *, x_label: str, y_label: str) -> str:
    """One polyline per series of ``[x, y]`` points, on shared axes."""
    points = [point for values in series.values() for point in values]
    if not points:
        return f'<p class="empty" data-chart="{escape(name)}">no points</p>'
    x_high = max(p[0] for p in points) or 1
    y_low, y_high = min(p[1] for p in points), max(p[1] for p in points)
    y_low = min(0.0, y_low)
    span = (y_high - y_low) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def at(point: Sequence[float]) -> tuple[float, float]:
        return LEFT + point[0] / x_high * plot_w, TOP + plot_h - (point[1] - y_low) / span * plot_h

    parts = [_frame(name, "lines", len(points), y_label)]
    for tick in _ticks(y_high - y_low):
        y = TOP + plot_h - tick / span * plot_h
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end">'
                     f"{_number(y_low + tick)}</text>")
    for tick in _ticks(x_high):
        x = LEFT + tick / x_high * plot_w
        parts.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle">'
                     f"{_number(tick)}</text>")
    for index, (label, values) in enumerate(series.items()):
        if not values:
            continue
        coordinates = " ".join(f"{x:.1f},{y:.1f}" for x, y in map(at, values))
        last = values[-1]
        parts.append(f'<polyline fill="none" stroke="{colour(index)}" stroke-width="1.6" points="{coordinates}" '
                     f'data-series="{escape(label)}" data-points="{len(values)}" data-last="{last[1]}">'
                     f"<title>{escape(label)}: {last[1]:.4f} at {x_label} {last[0]:,}</title></polyline>")
        if len(values) == 1:
            x, y = at(last)
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour(index)}"/>')
    parts.append(f'<text class="axis" x="{WIDTH - RIGHT}" y="{HEIGHT - 2}" text-anchor="end">{escape(x_label)}</text>'
                 "</svg>")
    return "".join(parts)


def bars(name: str, rows: Sequence[tuple[str, float, str]]) -> str:
    """Horizontal bars: ``(label, value, text)`` each, scaled to the largest value."""
    if not rows:
        return f'<p class="empty" data-chart="{escape(name)}">nothing to show</p>'
    high = max(value for _, value, _ in rows) or 1.0
    row_h, label_w = 22, 250
    height = row_h * len(rows) + 8
    parts = [f'<svg class="chart" data-chart="{escape(name)}" data-kind="bars" data-total="{len(rows)}" '
             f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img">']
    for index, (label, value, text) in enumerate(rows):
        y = 4 + index * row_h
        width = value / high * (WIDTH - label_w - 90)
        short = label if len(label) <= 38 else label[:37] + "…"
        parts.append(f'<text class="tick" x="{label_w - 6}" y="{y + 14}" text-anchor="end">{escape(short)}'
                     f'<title>{escape(label)}</title></text>'
                     f'<rect x="{label_w}" y="{y + 3}" width="{width:.1f}" height="{row_h - 6}" fill="{colour(index)}" '
                     f'data-value="{value}"><title>{escape(label)}: {escape(text)}</title></rect>'
                     f'<text class="tick" x="{label_w + width + 4:.1f}" y="{y + 14}">{escape(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def legend(labels: Sequence[str]) -> str:
    keys = "".join(f'<span><i style="background:{colour(i)}"></i>{escape(label)}</span>'
                   for i, label in enumerate(labels))
    return f'<div class="legend">{keys}</div>'


def _frame(name: str, kind: str, total: int, label: str) -> str:
    return (f'<svg class="chart" data-chart="{escape(name)}" data-kind="{kind}" data-total="{total}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
            f'aria-label="{escape(label)}"><line class="axisline" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" '
            f'y2="{HEIGHT - BOTTOM}"/><line class="axisline" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" '
            f'y2="{HEIGHT - BOTTOM}"/>')
