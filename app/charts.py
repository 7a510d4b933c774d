"""Small server-rendered SVG charts: the learner's values per step against the reference's."""

from __future__ import annotations

import math
from html import escape

from graders.report import PlotSeries

WIDTH, HEIGHT = 320, 196
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 40, 28


# A chart is 260 px wide: more points than this per line are not seen, only sent.
MAX_DRAWN_POINTS = 260
MAX_TICKS = 10
MAX_DESCRIBED_VALUES = 20
MAX_DOTS = 60
# Under the plot, the replayed fix's legend: two lines of its label.
FIX_LEGEND_HEIGHT, FIX_LABEL_LINE_CHARS = 30, 44
FIX_LEGEND_LINE_HEIGHT = 13


def _is_drawn(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _label(value: float) -> str:
    return f"{value:.3g}"


def _drawn(values: list[float | None]) -> list[tuple[int, float | None]]:
    """(step, value) pairs to draw, None where the line breaks.

    A short series is drawn whole. A long one is cut into buckets of steps, and each bucket
    gives its lowest and highest value (a spike stays visible) and a break if a value in it is
    missing: at most MAX_DRAWN_POINTS points, whatever the series' length.
    """
    if len(values) <= MAX_DRAWN_POINTS:
        return list(enumerate(values))
    buckets = MAX_DRAWN_POINTS // 3
    points: list[tuple[int, float | None]] = []
    for bucket in range(buckets):
        first, end = len(values) * bucket // buckets, len(values) * (bucket + 1) // buckets
        steps = range(first, end)
        finite = [(step, v) for step in steps if (v := values[step]) is not None and _is_drawn(v)]
        missing = next((step for step in steps if not _is_drawn(values[step])), None)
        chosen: set[tuple[int, float | None]] = set()
        if finite:
            chosen = {min(finite, key=lambda p: p[1]), max(finite, key=lambda p: p[1])}
        if missing is not None:
            chosen.add((missing, None))
        points += sorted(chosen, key=lambda p: p[0])
    return points


def _described(values: list[float | None]) -> str:
    def shown(part: list[float | None]) -> str:
        return ", ".join("none" if v is None else _label(v) for v in part)

    if len(values) <= MAX_DESCRIBED_VALUES:
        return shown(values)
    finite = [v for v in values if v is not None and _is_drawn(v)]
    span = f", from {_label(min(finite))} to {_label(max(finite))}" if finite else ""
    half = MAX_DESCRIBED_VALUES // 2
    return (
        f"{len(values)} values{span}; the first {shown(values[:half])}; "
        f"the last {shown(values[-half:])}"
    )


MATCHES_REFERENCE = "Your fix matches the reference."


def _fix_legend(label: str, top: int, matches: bool) -> str:
    """The replayed fix's legend entry, under the plot: its swatch, then its label in up to two
    lines (a label is a short sentence; a phone's chart is this 320 px wide), and a third when
    the fix's line is the reference's."""
    words, lines = label.split(), [""]
    for word in words:
        if lines[-1] and len(lines[-1]) + 1 + len(word) > FIX_LABEL_LINE_CHARS and len(lines) < 2:
            lines.append("")
        lines[-1] = f"{lines[-1]} {word}".strip()
    if matches:
        lines.append(MATCHES_REFERENCE)
    text = "".join(
        f'<tspan x="{LEFT - 8}" dy="{0 if i == 0 else FIX_LEGEND_LINE_HEIGHT}">'
        f"{escape(line)}</tspan>"
        for i, line in enumerate(lines)
    )
    return (
        f'<line x1="8" y1="{top - 4}" x2="{LEFT - 14}" y2="{top - 4}" class="fixed" '
        f'stroke="#176f2c" stroke-width="2.5" stroke-dasharray="2 3"/>'
        f'<text x="{LEFT - 8}" y="{top}" class="fixed-label">{text}</text>'
    )


def fix_matches_reference(series: PlotSeries) -> bool:
    """Whether the replayed fix's values are the reference's, step for step (to float noise):
    then its dotted line lies under the reference's and the chart says so in words."""
    if not series.fixed or len(series.fixed) != len(series.reference):
        return False
    return all(
        f is not None
        and r is not None
        and _is_drawn(f)
        and _is_drawn(r)
        and math.isclose(f, r, rel_tol=1e-6, abs_tol=1e-9)
        for f, r in zip(series.fixed, series.reference, strict=True)
    )


def line_chart(series: PlotSeries) -> str:
    """One chart as an SVG element: steps along x, the learner's line solid, the reference dashed,
    and the learner's loop with its mistake fixed (graders/fix_replay.py) dotted, when there is one.

    A step with no value (None, NaN or infinite) leaves a gap in the learner's line. Its size
    is bounded whatever the series' length: a long series is drawn thinned (`_drawn`).
    """
    learner, reference = _drawn(series.learner), _drawn(series.reference)
    fixed = _drawn(series.fixed) if series.fixed and series.fixed_label else []
    # Equal lines draw one over the other: the dotted one would seem to be missing.
    matches = bool(fixed) and fix_matches_reference(series)
    height = (
        HEIGHT + (FIX_LEGEND_HEIGHT if fixed else 0) + (FIX_LEGEND_LINE_HEIGHT if matches else 0)
    )
    values = [v for _, v in learner + reference + fixed if v is not None and _is_drawn(v)]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high - low < 1e-12:
        low, high = low - 1.0, high + 1.0
    steps = max(len(series.learner), len(series.reference), len(series.fixed), 2)
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(step: int) -> float:
        return LEFT + plot_width * step / (steps - 1)

    def y(value: float) -> float:
        return TOP + plot_height * (high - value) / (high - low)

    def path(points: list[tuple[int, float | None]]) -> str:
        commands, pen_down = [], False
        for step, value in points:
            if value is None or not _is_drawn(value):
                pen_down = False
                continue
            commands.append(f"{'L' if pen_down else 'M'}{x(step):.1f},{y(value):.1f}")
            pen_down = True
        return " ".join(commands)

    title = f"{series.label} per step, case {series.case}"
    description = (
        f"Your {series.label}: {_described(series.learner)}. "
        f"Reference: {_described(series.reference)}."
    )
    if fixed:
        label = series.fixed_label
        description += f" {label[:1].upper()}{label[1:]}: {_described(series.fixed)}."
    if matches:
        description += f" {MATCHES_REFERENCE}"
    tick_every = math.ceil(steps / MAX_TICKS)
    ticks = "".join(
        f'<text x="{x(step):.1f}" y="{HEIGHT - 10}" text-anchor="middle">{step + 1}</text>'
        for step in range(0, steps, tick_every)
    )
    # A dot per value of a short series: a value between two missing ones is a point, not a line.
    dots = [(step, v) for step, v in learner if v is not None and _is_drawn(v)]
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        f'role="img" aria-labelledby="t-{escape(series.case)}-{escape(series.label)}" '
        f'xmlns="http://www.w3.org/2000/svg">'
        f'<title id="t-{escape(series.case)}-{escape(series.label)}">{escape(title)}</title>'
        f"<desc>{escape(description)}</desc>"
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" class="axis"/>'
        f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" '
        f'class="axis"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{_label(high)}</text>'
        f'<text x="{LEFT - 4}" y="{HEIGHT - BOTTOM}" text-anchor="end">{_label(low)}</text>'
        f"{ticks}"
        f'<text x="4" y="14" class="chart-title" font-weight="bold">{escape(series.label)}, '
        f"case {escape(series.case)}</text>"
        f'<line x1="{WIDTH - 150}" y1="26" x2="{WIDTH - 130}" y2="26" class="learner" '
        f'stroke="#b3261e" stroke-width="2.5"/><text x="{WIDTH - 126}" y="30">yours</text>'
        f'<line x1="{WIDTH - 84}" y1="26" x2="{WIDTH - 64}" y2="26" class="reference" '
        f'stroke="#555" stroke-width="2" stroke-dasharray="5 4"/>'
        f'<text x="{WIDTH - 60}" y="30">reference</text>'
        f'<path d="{path(reference)}" class="reference" fill="none" '
        f'stroke="#555" stroke-width="2" stroke-dasharray="5 4"/>'
        + (
            f'<path d="{path(fixed)}" class="fixed" fill="none" stroke="#176f2c" '
            f'stroke-width="2.5" stroke-dasharray="2 3"/>'
            f"{_fix_legend(series.fixed_label, HEIGHT + 8, matches)}"
            if fixed
            else ""
        )
        + f'<path d="{path(learner)}" class="learner" fill="none" '
        f'stroke="#b3261e" stroke-width="2.5"/>'
        + "".join(
            f'<circle cx="{x(step):.1f}" cy="{y(value):.1f}" r="3" class="learner" fill="#b3261e"/>'
            for step, value in (dots if len(dots) <= MAX_DOTS else [])
        )
        + "</svg>"
    )


def bar_chart(title: str, bars: list[tuple[str, int]], *, chart_id: str) -> str:
    """Horizontal bars, one per (label, count), longest first as given; fits a phone's width."""
    row_height, label_width, width = 26, 190, 420
    height = 30 + row_height * max(1, len(bars))
    most = max((count for _, count in bars), default=0) or 1
    bar_space = width - label_width - 50
    rows = []
    for index, (label, count) in enumerate(bars):
        top = 24 + index * row_height
        length = bar_space * count / most
        rows.append(
            f'<text x="{label_width - 6}" y="{top + 15}" text-anchor="end">{escape(label)}</text>'
            f'<rect x="{label_width}" y="{top + 3}" width="{length:.1f}" height="16" '
            f'class="bar"/>'
            f'<text x="{label_width + length + 5:.1f}" y="{top + 15}">{count}</text>'
        )
    if not bars:
        rows.append(f'<text x="{label_width}" y="40">nothing yet</text>')
    description = "; ".join(f"{label}: {count}" for label, count in bars) or "no data"
    return (
        f'<svg class="chart bar-chart" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-labelledby="{escape(chart_id)}-title '
        f'{escape(chart_id)}-desc" xmlns="http://www.w3.org/2000/svg">'
        f'<title id="{escape(chart_id)}-title">{escape(title)}</title>'
        f'<desc id="{escape(chart_id)}-desc">{escape(description)}</desc>'
        f'<text x="8" y="16" class="chart-title">{escape(title)}</text>' + "".join(rows) + "</svg>"
    )


def transition_chart(
    title: str,
    states: list[tuple[str, str]],
    counts: dict[tuple[str, str], int],
    *,
    chart_id: str,
) -> str:
    """A grid of moves between states, `(code, label)` in order: a row per state moved from, a
    column per state moved to, each cell shaded by its count's share of the busiest cell.

    Columns are numbered (a state's number is in its row's label): long labels fit a phone.
    """
    cell, top, char_width = 40, 46, 6.5  # 11 px text is about 6.5 px a character
    longest = max((len(f"{len(states)}. {label}") for _, label in states), default=0)
    label_width = round(12 + char_width * longest)
    sources, targets = states, states[1:]  # nothing moves back to the start
    # The title (12 px, semibold) is about 7.5 px a character: 7 cut the last ones off.
    width = max(label_width + cell * max(1, len(targets)) + 8, round(16 + 7.5 * len(title)))
    height = top + cell * len(sources) + 8
    most = max(counts.values(), default=0) or 1
    parts = [
        f'<text x="{label_width + cell * column + cell / 2:.0f}" y="{top - 8}" '
        f'text-anchor="middle">{column + 1}</text>'
        for column in range(len(targets))
    ]
    for row, (source, source_label) in enumerate(sources):
        y = top + row * cell
        number = f"{row}. " if row else ""
        parts.append(
            f'<text x="{label_width - 6}" y="{y + cell / 2 + 4:.0f}" text-anchor="end">'
            f"{escape(number + source_label)}</text>"
        )
        for column, (target, target_label) in enumerate(targets):
            count = counts.get((source, target), 0)
            x = label_width + column * cell
            shade = 0.08 + 0.92 * count / most if count else 0.0
            parts.append(
                f'<rect x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" class="cell" '
                f'fill-opacity="{shade:.2f}"><title>{escape(source_label)} to '
                f"{escape(target_label)}: {count}</title></rect>"
            )
            if count:
                parts.append(
                    f'<text x="{x + (cell - 2) / 2:.0f}" y="{y + cell / 2 + 3:.0f}" '
                    f'text-anchor="middle" class="{"on-dark" if shade > 0.55 else ""}">'
                    f"{count}</text>"
                )
    moves = sorted(
        ((count, s, t) for (s, t), count in counts.items() if count),
        key=lambda move: -move[0],
    )
    labels = dict(states)
    description = "; ".join(
        f"{labels[s]} to {labels[t]}: {count}" for count, s, t in moves[:MAX_DESCRIBED_VALUES]
    )
    return (
        f'<svg class="chart transition-chart" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-labelledby="{escape(chart_id)}-title '
        f'{escape(chart_id)}-desc" xmlns="http://www.w3.org/2000/svg">'
        f'<title id="{escape(chart_id)}-title">{escape(title)}</title>'
        f'<desc id="{escape(chart_id)}-desc">{escape(description or "no moves yet")}</desc>'
        f'<text x="8" y="16" class="chart-title">{escape(title)}</text>'
        f'<text x="{label_width - 6}" y="{top - 8}" text-anchor="end">from \\ to</text>'
        + "".join(parts)
        + "</svg>"
    )
