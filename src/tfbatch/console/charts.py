"""Line charts as inline SVG, drawn on the server from a job's aggregated series.

The same function draws the live page's charts and the static report's, so the two can
not disagree. No chart library and no script: the console runs where nothing reaches the
internet, and an SVG string travels inside the HTML the page already loads.
"""

from __future__ import annotations

import bisect
from html import escape

from tfbatch.console.source import ALL_INSTANCES, Point

# Colour per instance (repeats past eight); the total is drawn in black.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 24, 34


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value`` (axis top).

    The axis has five divisions, so each of these tops gives round tick labels."""
    if value <= 0:
        return 1.0
    scale = 1.0
    while scale * 10 <= value:
        scale *= 10
    while scale > value:
        scale /= 10
    for step in (1, 2, 2.5, 5, 10):
        if step * scale >= value:
            return step * scale
    return 10 * scale


def fmt_number(value: float) -> str:
    """12, 3.4k, 10M: short labels for axes and tables."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            text = f"{value / limit:.1f}".rstrip("0").rstrip(".")
            return text + suffix
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def fmt_seconds(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def total_series(series: dict[int, list[Point]]) -> list[Point]:
    """The sum of every instance's cumulative counts, at each time any instance has a point."""
    times = sorted({p.t for points in series.values() for p in points})
    out: list[Point] = []
    cursors = {i: 0 for i in series}
    last = {i: Point(0.0, 0, 0, 0) for i in series}
    for t in times:
        for i, points in series.items():
            while cursors[i] < len(points) and points[cursors[i]].t <= t:
                last[i] = points[cursors[i]]
                cursors[i] += 1
        out.append(Point(t, sum(p.objects for p in last.values()), sum(p.records for p in last.values()),
                         sum(p.failed for p in last.values())))
    return out


def line_chart(title: str, lines: list[tuple[str, str, list[tuple[float, float]]]], *,
               chart_id: str = "", value_covers_span_before: bool = False) -> str:
    """An SVG chart of ``lines`` (label, colour, [(seconds, value)]) sharing one pair of axes.

    Drawn as steps: a count holds from its point until the next one; a rate
    (``value_covers_span_before``) holds over the span that ends at its point."""
    max_x = max((x for _l, _c, pts in lines for x, _y in pts), default=0.0) or 1.0
    max_y = nice_ceiling(max((y for _l, _c, pts in lines for _x, y in pts), default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + x / max_x * plot_w

    def sy(y: float) -> float:
        return TOP + plot_h - y / max_y * plot_h

    parts = [f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}"'
             + (f' id="{escape(chart_id)}"' if chart_id else "") + ">",
             f"<title>{escape(title)}</title>",
             f'<text x="{LEFT}" y="15" class="chart-title">{escape(title)}</text>']
    for k in range(6):  # horizontal grid with labels, 0 .. max_y
        value = max_y * k / 5
        y = sy(value)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt_number(value))}</text>')
    for k in range(5):
        x = sx(max_x * k / 4)
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                     f"{escape(fmt_seconds(max_x * k / 4))}</text>")
    legend_x = LEFT
    for label, colour, pts in lines:
        if pts:
            # Steps, not slopes: a count holds until the next point, so a quiet start-up reads
            # as flat rather than as slow progress.
            if value_covers_span_before:
                steps = [pts[0]] + [q for (x0, _), (x1, y1) in zip(pts, pts[1:]) for q in ((x0, y1), (x1, y1))]
            else:
                steps = [pts[0]] + [q for (_, y0), (x1, y1) in zip(pts, pts[1:]) for q in ((x1, y0), (x1, y1))]
            coords = " ".join(f"{sx(x):.0f},{sy(y):.0f}" for x, y in steps)  # whole pixels are enough
            parts.append(f'<polyline fill="none" stroke="{escape(colour)}" stroke-width="1.8" points="{coords}"'
                         f' data-label="{escape(label)}" data-last="{pts[-1][1]:g}"/>')
        parts.append(f'<rect x="{legend_x}" y="{HEIGHT - 12}" width="10" height="10" fill="{escape(colour)}"/>'
                     f'<text x="{legend_x + 14}" y="{HEIGHT - 3}">{escape(label)}</text>')
        legend_x += 14 + 8 * len(label) + 16
    parts.append("</svg>")
    return "".join(parts)


def progress_charts(series: dict[int, list[Point]]) -> str:
    """The two charts of a job page: objects done and records done, per instance and in all."""
    instances = {i: points for i, points in series.items() if i != ALL_INSTANCES}
    total = series.get(ALL_INSTANCES) or total_series(instances)
    charts = []
    for what, pick in (("objects", lambda p: p.objects), ("records", lambda p: p.records)):
        lines = []
        if len(instances) > 1 or ALL_INSTANCES in series:
            lines.append(("all", "#000000", [(p.t, pick(p)) for p in total]))
        for i, points in sorted(instances.items()):
            lines.append((f"instance {i}", COLOURS[i % len(COLOURS)], [(p.t, pick(p)) for p in points]))
        charts.append(line_chart(f"{what} done over time", lines, chart_id=f"chart-{what}"))
    charts.append(line_chart("records/s, all instances", [("records/s", "#000000", rates(total))],
                             chart_id="chart-rate", value_covers_span_before=True))
    return f'<div class="charts">{"".join(charts)}</div>'


def rates(points: list[Point], bins: int = 60) -> list[tuple[float, float]]:
    """Records per second over ``bins`` equal spans of the run (each point ends its span).

    Equal spans, not point to point: neighbouring points of a merged series can be
    milliseconds apart, and a rate over such a gap is noise."""
    if len(points) < 2 or points[-1].t <= 0:
        return [(0.0, 0.0)] if points else []
    times = [p.t for p in points]
    width = points[-1].t / bins

    def records_at(t: float) -> int:
        i = bisect.bisect_right(times, t) - 1
        return points[i].records if i >= 0 else 0

    out = [(0.0, 0.0)]
    for k in range(1, bins + 1):
        out.append((k * width, (records_at(k * width) - records_at((k - 1) * width)) / width))
    return out
