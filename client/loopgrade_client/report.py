"""A result in words for a terminal, and as HTML for a notebook."""

from __future__ import annotations

import html
import xml.etree.ElementTree as ElementTree

from loopgrade_client.api import Submission

# What a chart from the server may hold: its drawing, titles and text. Anything else (a
# script, a link, an event handler, a foreign object) and the chart is left out.
SVG_ELEMENTS = {
    "svg",
    "g",
    "path",
    "line",
    "polyline",
    "polygon",
    "rect",
    "circle",
    "text",
    "tspan",
    "title",
    "desc",
    "defs",
    "clipPath",
    "style",
}
MAX_CHART_CHARS = 200_000
SVG_NAMESPACE = "{http://www.w3.org/2000/svg}"


def _points(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def score_line(submission: Submission) -> str:
    if submission.status == "error":
        return f"{submission.exercise}: the server could not grade this; it will be retried"
    if not submission.finished:
        return f"{submission.exercise}: {submission.status}"
    words = submission.diagnosis_text or submission.diagnosis or ""
    return (
        f"{submission.exercise}: {_points(submission.score)}/{_points(submission.max_score)} "
        f"points. {words}"
    ).strip()


def as_text(submission: Submission, server_url: str) -> str:
    """The score, the diagnosis in words, the failing checks and the feedback."""
    lines = [score_line(submission)]
    lines += [f"Note: {notice}" for notice in submission.notices]
    failing = [check for check in submission.checks if not check.passed]
    if failing:
        lines.append("Failing checks:")
        for check in failing:
            hidden = " (hidden case)" if check.hidden else ""
            lines.append(
                f"  x {check.id}{hidden} ({_points(check.points)}/{_points(check.max_points)}): "
                f"{check.message}"
            )
    if submission.feedback:
        lines += ["", submission.feedback.strip()]
    if _is_path(submission.page_url):
        lines += ["", f"On the web: {server_url}{submission.page_url}"]
    return "\n".join(lines)


def _is_path(page_url: str) -> bool:
    """A path on the server logged in to, not an address elsewhere (a hostile answer's)."""
    return page_url.startswith("/") and not page_url.startswith("//") and page_url.isprintable()


def safe_svg(svg: str) -> str | None:
    """The server's chart if it holds only drawing (the notebook shows it as it is), else None."""
    if len(svg) > MAX_CHART_CHARS or "<!" in svg:
        return None
    try:
        root = ElementTree.fromstring(svg)
    except ElementTree.ParseError:
        return None
    for element in root.iter():
        tag = element.tag.removeprefix(SVG_NAMESPACE) if isinstance(element.tag, str) else ""
        if tag not in SVG_ELEMENTS:
            return None
        for name in element.attrib:
            local = name.rsplit("}", 1)[-1].lower()
            if local.startswith("on") or local == "href":
                return None
        if (
            tag == "style"
            and element.text
            and ("url(" in element.text or "@import" in element.text)
        ):
            return None
    return svg


def as_html(submission: Submission, server_url: str) -> str:
    """The result for a notebook: score, diagnosis, checks, feedback and the server's charts."""
    e = html.escape
    ok = submission.full_marks
    colour = "#1a7f37" if ok else "#b35900"
    parts = [
        '<div class="loopgrade-result" style="font-family:sans-serif">',
        f'<p style="font-size:1.1em;color:{colour}">'
        f"<strong>{e(score_line(submission))}</strong></p>",
    ]
    parts += [f"<p><em>{e(notice)}</em></p>" for notice in submission.notices]
    if submission.checks:
        rows = "".join(
            f"<tr><td>{'✓' if c.passed else '✗'}</td><td>{e(c.id)}"
            f"{' (hidden)' if c.hidden else ''}</td>"
            f"<td>{_points(c.points)}/{_points(c.max_points)}</td><td>{e(c.message)}</td></tr>"
            for c in submission.checks
        )
        parts.append(
            "<table><thead><tr><th></th><th>Check</th><th>Points</th><th>Message</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>"
        )
    if submission.feedback:
        parts.append(f'<pre style="white-space:pre-wrap">{e(submission.feedback.strip())}</pre>')
    charts = [chart for svg in submission.charts_svg if (chart := safe_svg(svg)) is not None]
    if charts:
        parts.append('<div class="loopgrade-charts">' + "".join(charts) + "</div>")
    if _is_path(submission.page_url):
        link = e(server_url + submission.page_url, quote=True)
        parts.append(
            f'<p><a href="{link}" target="_blank" rel="noopener">See it on the web</a></p>'
        )
    parts.append("</div>")
    return "".join(parts)
