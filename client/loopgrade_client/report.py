"""A result in words for a terminal, and as HTML for a notebook."""

from __future__ import annotations

import html
import re
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


# The markdown the grader's words use, as the page renders feedback (app/web/rendering.py):
# paragraphs, lists, code spans, fenced blocks and emphasis; everything else is shown as text,
# and every character of it escaped, so no server's text becomes a tag, a link or a script.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r"^ {0,3}([-*+]|\d{1,9}[.)]) +(.*)$")
_CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EMPHASIS = re.compile(r"(?<![\w*])([*_])(?=\S)(.+?)(?<=\S)\1(?![\w*])")


def _inline(text: str) -> str:
    """One block's text: code spans verbatim, emphasis around the rest, all escaped."""
    parts, at = [], 0
    for span in _CODE_SPAN.finditer(text):
        parts.append(_emphasised(text[at : span.start()]))
        code = span.group(2)
        if code.startswith(" ") and code.endswith(" ") and code.strip():
            code = code[1:-1]
        parts.append(f"<code>{html.escape(code)}</code>")
        at = span.end()
    parts.append(_emphasised(text[at:]))
    return "".join(parts)


def _emphasised(text: str) -> str:
    text = html.escape(text, quote=False)
    text = _STRONG.sub(r"<strong>\2</strong>", text)
    return _EMPHASIS.sub(r"<em>\2</em>", text)


def markdown_html(markdown: str) -> str:
    """The grader's markdown as HTML, as the page shows it (escaped throughout)."""
    out: list[str] = []
    paragraph: list[str] = []
    items: list[str] = []
    ordered = False

    def close() -> None:
        if paragraph:
            out.append(f"<p>{_inline(' '.join(paragraph))}</p>")
            paragraph.clear()
        if items:
            tag = "ol" if ordered else "ul"
            out.append(f"<{tag}>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + f"</{tag}>")
            items.clear()

    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        fence = _FENCE.match(line)
        if fence:
            close()
            marker = fence.group(1)
            code = []
            while index < len(lines) and not lines[index].strip().startswith(marker):
                code.append(lines[index])
                index += 1
            index += 1  # the closing fence (or the end)
            out.append(f"<pre><code>{html.escape(chr(10).join(code))}</code></pre>")
        elif not line.strip():
            close()
        elif item := _LIST_ITEM.match(line):
            numbered = item.group(1)[-1] in ".)"
            if paragraph or (items and ordered != numbered):
                close()
            ordered = numbered
            items.append(item.group(2))
        elif items and line.startswith("  "):
            items[-1] += " " + line.strip()
        else:
            if items:
                close()
            paragraph.append(line.strip())
    close()
    return "".join(out)


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
    if submission.solution is not None:
        lines += ["", solution_text(submission.solution)]
    if _is_path(submission.page_url):
        lines += ["", f"On the web: {server_url}{submission.page_url}"]
    return "\n".join(lines)


SOLUTION_TITLE = "The reference solution"
SOLUTION_WHY = "your course shows it now that the due date has passed"


def solution_text(solution: str) -> str:
    """The reference solution under its title, indented, for a terminal."""
    code = "\n".join(f"    {line}" for line in solution.rstrip().splitlines())
    return f"{SOLUTION_TITLE} ({SOLUTION_WHY}):\n{code}"


def solution_html(solution: str) -> str:
    """The reference solution folded, as the exercise page shows it (escaped throughout)."""
    return (
        f'<details class="loopgrade-solution"><summary>{SOLUTION_TITLE} '
        f"<small>({SOLUTION_WHY})</small></summary>"
        f"<pre><code>{html.escape(solution.rstrip())}</code></pre></details>"
    )


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


def _sized(svg: str) -> str:
    """The chart with its text at the page's size, whatever the notebook's font size."""
    return svg.replace("<svg ", '<svg font-size="11" font-family="sans-serif" ', 1)


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
            f"<td>{_points(c.points)}/{_points(c.max_points)}</td>"
            f"<td>{_inline(c.message)}</td></tr>"
            for c in submission.checks
        )
        parts.append(
            "<table><thead><tr><th></th><th>Check</th><th>Points</th><th>Message</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>"
        )
    if submission.feedback:
        parts.append(f'<div class="loopgrade-feedback">{markdown_html(submission.feedback)}</div>')
    link = e(server_url + submission.page_url, quote=True) if _is_path(submission.page_url) else ""
    if submission.first_hint and submission.hint_count > 0:
        more = (
            f" The next {'one opens' if submission.hint_count == 2 else 'ones open'} one at a "
            f'time <a href="{link}" target="_blank" rel="noopener">on the web page</a>.'
            if submission.hint_count > 1 and link
            else ""
        )
        parts.append(
            f"<details><summary>Show a hint (1 of {submission.hint_count})</summary>"
            f"{markdown_html(submission.first_hint)}<p><small>{more.strip()}</small></p>"
            "</details>"
        )
    if submission.solution is not None:
        parts.append(solution_html(submission.solution))
    charts = [chart for svg in submission.charts_svg if (chart := safe_svg(svg)) is not None]
    if charts:
        # The page's chart text is 11 px (12 px titles); a notebook's own size (often 14 to
        # 16 px) would push the labels out of the drawing.
        parts.append(
            '<div class="loopgrade-charts" style="display:flex;flex-wrap:wrap;gap:0.75em">'
            + "".join(_sized(chart) for chart in charts)
            + "</div>"
        )
    if link:
        parts.append(
            f'<p><a href="{link}" target="_blank" rel="noopener">See it on the web</a></p>'
        )
    parts.append("</div>")
    return "".join(parts)
