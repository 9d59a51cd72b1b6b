"""The report's charts as inline SVG: a fixed view box scaled to the page's width (never wider than
the page), text the browser lays out (tooltips with `<title>`, text boxes a test can measure), tick
labels chosen so that they never overlap, no label rotated.

Every chart is drawn from aggregates (bins, the members of a window), not one mark per record.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

WIDTH = 1000  # the view box's width: the page scales it (max-width in the report's style)
FONT = 12
CHAR = 0.62 * FONT  # a generous average advance of the sans-serif font, for fitting labels
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
SECOND, MINUTE, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000
TIME_STEPS = (1, 2, 5, 10, 20, 50, 100, 200, 500, SECOND, 2 * SECOND, 5 * SECOND, 10 * SECOND, 15 * SECOND,
              30 * SECOND, MINUTE, 2 * MINUTE, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE, 30 * MINUTE, HOUR, 2 * HOUR,
              3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY, 30 * DAY, 61 * DAY, 91 * DAY,
              182 * DAY, 365 * DAY)


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def fit(text: str, width: float, size: float = FONT) -> str:
    """`text` cut at the end with an ellipsis to fit `width` pixels."""
    room = max(1, int(width / (0.62 * size)))
    return text if len(text) <= room else text[: room - 1] + "…"


def duration_text(ms: float) -> str:
    """12 ms, 1.5 s, 2 min, 3 h: a duration as an operator reads it."""
    if ms < SECOND:
        return f"{ms:g} ms" if ms >= 1 else f"{ms:.2g} ms"
    for unit, size in (("d", DAY), ("h", HOUR), ("min", MINUTE), ("s", SECOND)):
        if ms >= size:
            value = ms / size
            return f"{value:.3g} {unit}"
    return f"{ms} ms"


def time_text(ms: float, step: float) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    if step >= DAY:
        return moment.strftime("%Y-%m-%d")
    if step >= MINUTE:
        return moment.strftime("%m-%d %H:%M") if step >= HOUR else moment.strftime("%H:%M")
    if step >= SECOND:
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%H:%M:%S.%f")[:-3]


def time_ticks(low: float, high: float, width: float) -> list[tuple[float, str]]:
    """Ticks of a time axis (epoch ms) `width` pixels long whose labels do not touch."""
    span = max(high - low, 1)
    for step in TIME_STEPS:
        if span / step > width / 40:  # more ticks than labels could ever fit
            continue
        first = math.ceil(low / step) * step
        ticks = [first + k * step for k in range(int((high - first) // step) + 1)]
        labels = [time_text(t, step) for t in ticks]
        longest = max((len(label) for label in labels), default=0) * CHAR + 16
        if len(ticks) <= 1 or longest * len(ticks) <= width * (ticks[-1] - ticks[0] + step) / span:
            return list(zip(ticks, labels))
    return [(low, time_text(low, DAY))]


def log_ticks(low: float, high: float) -> list[float]:
    """Ticks of a logarithmic axis: every decade, with 2 and 5 between when it spans few decades."""
    low, high = max(low, 1e-3), max(high, low * 10)
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    subs = (1, 2, 5) if len(decades) <= 4 else (1,)
    return [m * 10.0 ** d for d in decades for m in subs if low <= m * 10.0 ** d <= high * 1.0001]


@dataclass
class Chart:
    """An SVG chart: a plot area inside margins, elements added in drawing order."""

    height: int
    left: int = 70
    right: int = 20
    top: int = 28
    bottom: int = 44
    title: str = ""
    parts: list[str] = field(default_factory=list)

    @property
    def plot_width(self) -> int:
        return WIDTH - self.left - self.right

    @property
    def plot_height(self) -> int:
        return self.height - self.top - self.bottom

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, x: float, y: float, content: str, *, anchor: str = "start", size: int = FONT,
             color: str = "#222", tip: str | None = None) -> None:
        title = f"<title>{esc(tip)}</title>" if tip else ""
        self.add(f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' fill='{color}'>"
                 f"{title}{esc(content)}</text>")

    def svg(self, label: str) -> str:
        head = (f"<svg class='chart' viewBox='0 0 {WIDTH} {self.height}' role='img' aria-label='{esc(label)}' "
                f"xmlns='http://www.w3.org/2000/svg'>")
        title = []
        if self.title:
            title = [f"<text x='{self.left}' y='16' font-size='13' font-weight='bold' fill='#222'>"
                     f"{esc(fit(self.title, self.plot_width, 13))}</text>"]
        return head + "".join(title + self.parts) + "</svg>"

    def frame(self) -> None:
        self.add(f"<rect x='{self.left}' y='{self.top}' width='{self.plot_width}' height='{self.plot_height}' "
                 "fill='none' stroke='#bbb'/>")

    def time_axis(self, low: float, high: float) -> None:
        """Ticks and labels under the plot; the first date beside the title when labels are times of day."""
        scale = self.plot_width / max(high - low, 1)
        ticks = time_ticks(low, high, self.plot_width)
        base = self.top + self.plot_height
        for at, label in ticks:
            x = self.left + (at - low) * scale
            self.add(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{self.top}' y2='{base + 4}' stroke='#ddd'/>")
            self.text(x, base + 18, label, anchor="middle")
        self.text(WIDTH - self.right, base + 36,
                  f"UTC, from {datetime.fromtimestamp(low / 1000, tz=timezone.utc):%Y-%m-%d %H:%M:%S}",
                  anchor="end", size=11, color="#555")

    def log_axis_y(self, low: float, high: float) -> tuple[float, float]:
        """A logarithmic y axis with a label at each tick; returns its (log low, log high)."""
        ticks = log_ticks(low, high)
        lo, hi = math.log10(min(ticks[0], low)), math.log10(max(ticks[-1], high))
        for t in ticks:
            y = self.y_log(t, lo, hi)
            self.add(f"<line x1='{self.left - 4}' x2='{self.left + self.plot_width}' y1='{y:.1f}' y2='{y:.1f}' "
                     "stroke='#e4e4e4'/>")
            self.text(self.left - 6, y + 4, duration_text(t), anchor="end", size=11)
        return lo, hi

    def y_log(self, value: float, lo: float, hi: float) -> float:
        share = (math.log10(max(value, 10 ** lo)) - lo) / max(hi - lo, 1e-9)
        return self.top + self.plot_height * (1 - share)


def bars(title: str, edges: Sequence[float], counts: Sequence[int], *, log_x: bool,
         tips: Sequence[str] | None = None, height: int = 190) -> str:
    """A histogram: `counts[i]` between `edges[i]` and `edges[i + 1]` (epoch ms, or durations in ms on a
    logarithmic axis)."""
    chart = Chart(height, title=title)
    chart.frame()
    top = max(counts, default=0) or 1
    if log_x:
        lo, hi = math.log10(edges[0]), math.log10(edges[-1])
        place = lambda v: chart.left + (math.log10(v) - lo) / max(hi - lo, 1e-9) * chart.plot_width  # noqa: E731
    else:
        lo, hi = edges[0], edges[-1]
        place = lambda v: chart.left + (v - lo) / max(hi - lo, 1) * chart.plot_width  # noqa: E731
    for k, count in enumerate(counts):
        if not count:
            continue
        x0, x1 = place(edges[k]), place(edges[k + 1])
        h = chart.plot_height * count / top
        tip = tips[k] if tips else f"{count}"
        chart.add(f"<rect x='{x0 + 0.5:.1f}' y='{chart.top + chart.plot_height - h:.1f}' "
                  f"width='{max(x1 - x0 - 1, 1):.1f}' height='{h:.1f}' fill='{COLORS[0]}'><title>{esc(tip)}</title>"
                  "</rect>")
    for value in _count_ticks(top):
        y = chart.top + chart.plot_height * (1 - value / top)
        chart.text(chart.left - 6, y + 4, f"{value:,}", anchor="end", size=11)
    if log_x:
        base = chart.top + chart.plot_height
        for t in log_ticks(edges[0], edges[-1]):
            x = place(t)
            chart.add(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{chart.top}' y2='{base + 4}' stroke='#ddd'/>")
            chart.text(x, base + 18, duration_text(t), anchor="middle", size=11)
    else:
        chart.time_axis(edges[0], edges[-1])
    return chart.svg(title)


def _count_ticks(top: int) -> list[int]:
    """At most 5 ticks of a count axis, at 1, 2 or 5 times a power of ten."""
    step = next(m * 10 ** e for e in range(0, 12) for m in (1, 2, 5) if top / (m * 10 ** e) <= 4)
    return list(range(0, top + 1, step))


BAR, ASSIGNED, MOVED, SPAN, EDGE = "#9db4d0", "#2c3e50", "#c0392b", "#f5b041", "#d35400"
ROW = 22
LABEL_WIDTH = 260


@dataclass
class Lane:
    """A member's row of the timeline: its label (cut to fit), the tooltip naming it whole, when it was
    in the group, and its assignments (time, active tasks moved to it, tooltip)."""

    label: str
    tip: str
    start: float
    end: float
    events: list[tuple[float, bool, str]]


@dataclass
class Span:
    """A rebalance: start (None when the log does not tell), end (None when it never completed), label."""

    start: float | None
    end: float | None
    label: str
    tip: str


def timeline(title: str, lanes: list[Lane], spans: list[Span], low: float, high: float) -> str:
    """Members as rows, time across: a bar while a member is in the group, a dot at each assignment (red
    when active tasks moved to it), each rebalance a shaded span or a dashed line at its end, labelled
    above the plot where its label has room."""
    chart = Chart(max(len(lanes), 1) * ROW + 80, left=LABEL_WIDTH, top=40, title=title)
    chart.frame()
    pad = max((high - low) * 0.02, 50)
    low, high = low - pad, high + pad
    scale = chart.plot_width / max(high - low, 1)
    at = lambda t: chart.left + (min(max(t, low), high) - low) * scale  # noqa: E731
    free = chart.left  # where the next rebalance label may start
    for span in sorted(spans, key=lambda s: s.end if s.end is not None else s.start or 0):
        x1 = at(span.end if span.end is not None else span.start)  # type: ignore[arg-type]
        if span.start is not None and span.end is not None:
            x0 = at(span.start)
            chart.add(f"<rect x='{x0:.1f}' y='{chart.top}' width='{max(x1 - x0, 1):.1f}' height='{chart.plot_height}' "
                      f"fill='{SPAN}' fill-opacity='0.3'><title>{esc(span.tip)}</title></rect>")
        chart.add(f"<line x1='{x1:.1f}' x2='{x1:.1f}' y1='{chart.top}' y2='{chart.top + chart.plot_height}' "
                  f"stroke='{EDGE}' stroke-dasharray='4 3'><title>{esc(span.tip)}</title></line>")
        width = len(span.label) * CHAR * 0.92
        x = min(max(x1, chart.left + width / 2), WIDTH - chart.right - width / 2)  # kept inside the plot's width
        if x - width / 2 >= free:
            chart.text(x, chart.top - 6, span.label, anchor="middle", size=11, color=EDGE, tip=span.tip)
            free = x + width / 2 + 6
    for row, lane in enumerate(lanes):
        y = chart.top + row * ROW + ROW / 2
        chart.text(chart.left - 8, y + 4, fit(lane.label, chart.left - 16), anchor="end", tip=lane.tip)
        x0, x1 = at(lane.start), at(lane.end)
        chart.add(f"<rect x='{x0:.1f}' y='{y - 4:.1f}' width='{max(x1 - x0, 2):.1f}' height='8' fill='{BAR}'>"
                  f"<title>{esc(lane.tip)}</title></rect>")
        for when, moved, tip in lane.events:
            chart.add(f"<circle cx='{at(when):.1f}' cy='{y:.1f}' r='4.5' fill='{MOVED if moved else ASSIGNED}'>"
                      f"<title>{esc(tip)}</title></circle>")
    chart.time_axis(low, high)
    return chart.svg(title)


def latency(title: str, series: dict[str, list[tuple[float, float, str | None]]], low: float, high: float) -> str:
    """Latency (ms, logarithmic) of requests over time, one colour per API (named in a legend inside the
    chart), error responses as crosses (the error named in the tooltip)."""
    chart = Chart(280, title=title, bottom=64)
    chart.frame()
    values = [v for points in series.values() for _, v, _ in points]
    lo, hi = chart.log_axis_y(max(min(values, default=1), 0.01), max(max(values, default=10), 0.1))
    pad = max((high - low) * 0.02, 50)
    low, high = low - pad, high + pad
    scale = chart.plot_width / max(high - low, 1)
    x = float(chart.left)
    for k, (api, points) in enumerate(sorted(series.items())):
        color = COLORS[k % len(COLORS)]
        for when, value, error in points:
            px, py = chart.left + (when - low) * scale, chart.y_log(max(value, 0.01), lo, hi)
            tip = f"{api}: {value:.3g} ms" + (f", {error}" if error else "")
            if error:
                chart.add(f"<path d='M{px - 5:.1f} {py - 5:.1f}l10 10m0 -10l-10 10' stroke='{MOVED}' "
                          f"stroke-width='2'><title>{esc(tip)}</title></path>")
            else:
                chart.add(f"<circle cx='{px:.1f}' cy='{py:.1f}' r='3.5' fill='{color}'><title>{esc(tip)}</title>"
                          "</circle>")
        label = f"{api} ({len(points)})"
        width = len(label) * CHAR + 28
        if x + width > WIDTH - chart.right:
            break  # (the table under the chart names every API)
        base = chart.height - 12
        chart.add(f"<circle cx='{x + 5:.1f}' cy='{base - 4:.1f}' r='4' fill='{color}'/>")
        chart.text(x + 14, base, label, size=11)
        x += width
    chart.time_axis(low, high)
    return chart.svg(title)


def swatches(items: list[tuple[str, str]]) -> str:
    """An HTML legend (it wraps, it is never clipped): (CSS of the swatch, label)."""
    return "<ul class='legend'>" + "".join(f"<li><span class='swatch' style='{style}'></span>{esc(label)}</li>"
                                           for style, label in items) + "</ul>"
