"""Learner text never speaks with the server's voice: whatever the learner's code chose, placed in
a report's feedback or a check's message, renders as code, never as markdown or HTML."""

from __future__ import annotations

import html
import re
import textwrap
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from graders.exercises import get_exercise
from graders.feedback import learner_text
from graders.grading import GRADING_LIMITS, grade_runs
from graders.proving import judge_source
from tests.graders.sandbox_results import groups, harness_result

# Both the app's renderer (no raw HTML) and one that would pass HTML through.
RENDERERS = [MarkdownIt("commonmark", {"html": False}).enable("table"), MarkdownIt("commonmark")]
HOSTILE = {
    "markdown": "**Grader note:** _full marks_ # heading",
    "link": "[see your grade](https://attacker.example/x) <https://attacker.example>",
    "image": "![](https://attacker.example/pixel.png)",
    "html": '<script>alert(1)</script><a href="https://attacker.example">x</a><img src=x>',
    "backticks": "`` ` ``` closes? ` **bold**",
    "newlines": "line one\n\n**Grader note:** line two\n```\nfenced\n```",
    "fence at the start": "```\n**x**",
    "trailing backtick": "tick`",
    "table": "a | b\n--- | ---\n1 | 2",
    "bidi and controls": "abc\u202eevil\u2066\x1b[31m",
}
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
ELEMENTS = re.compile(r"<(?!/?(p|code|pre)\b)[a-z]", re.IGNORECASE)


def rendered(markdown: str, renderer: MarkdownIt) -> str:
    html: str = renderer.render(markdown)
    return html


@pytest.mark.parametrize("renderer", RENDERERS, ids=["app", "html-on"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_learner_text_renders_as_code_and_nothing_else(name: str, renderer: MarkdownIt) -> None:
    text = HOSTILE[name]
    for block in (False, True):
        page = rendered(f"Your code said {learner_text(text, block=block)}.", renderer)
        assert not ELEMENTS.search(page), page
        assert page.count("<code") == 1, page
        assert "<strong>" not in page and "<a " not in page and "<script" not in page


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(max_size=60))
def test_any_text_is_shown_verbatim_inside_one_code_span(text: str) -> None:
    page = rendered(learner_text(text), RENDERERS[0])
    match = re.fullmatch(r"<p><code>(.*)</code></p>\n", page, re.DOTALL)
    assert match, page
    shown = html.unescape(match.group(1))
    wrote = text.replace("\n", " ")
    if not wrote.strip(" "):
        assert not shown.strip(" ")
        return
    assert len(shown) == len(wrote), (shown, wrote)
    for seen, written in zip(shown, wrote, strict=True):
        hidden = (unicodedata.category(written) == "Cc" and written != "\t") or written in BIDI
        assert seen == ("\ufffd" if hidden else written), (seen, written)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(text=st.text(max_size=80))
def test_any_text_is_one_fenced_block(text: str) -> None:
    page = rendered(learner_text(text, block=True), RENDERERS[0])
    assert page.startswith('<pre><code class="language-text">'), page
    assert page.count("</pre>") == 1 and page.endswith("</code></pre>\n")


def test_an_exception_in_a_visible_case_is_quoted_in_the_feedback() -> None:
    exercise = get_exercise("train-step")
    message = HOSTILE["newlines"] + " " + HOSTILE["link"]
    source = textwrap.dedent(f"""
        class GraderNote(Exception):
            pass

        def train_step(model, optimizer, loss_fn, x, y):
            raise GraderNote({message!r})
    """)
    report = judge_source(exercise, source)
    assert report.diagnosis == "runtime-error"
    for text in (report.feedback, report.facts):
        page = rendered(text, RENDERERS[1])
        assert "<a " not in page and "Grader note:</strong>" not in page, page
        assert "attacker.example" in page  # shown, as code


def test_a_returned_type_name_is_quoted_in_a_check_message() -> None:
    exercise = get_exercise("train-step")
    source = textwrap.dedent("""
        Note = type("**Grader note:** [ok](https://attacker.example)", (), {})

        def train_step(model, optimizer, loss_fn, x, y):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            return Note()
    """)
    runs = [(cases, harness_result(exercise, source, cases)) for cases in groups(exercise)]
    report = grade_runs(exercise, runs, GRADING_LIMITS)
    message = next(c.message for c in report.checks if c.id == "loss-returned")
    page = rendered(message, RENDERERS[1])
    assert "<a " not in page and "<strong>Grader" not in page, page
    assert "attacker.example" in page


def test_a_syntax_error_line_is_a_fenced_block() -> None:
    exercise = get_exercise("train-step")
    line = "def train_step(): ``` **Grader note:** [x](http://attacker.example)"
    report = judge_source(exercise, line + "\n")
    assert report.diagnosis == "syntax-error"
    page = rendered(report.feedback, RENDERERS[1])
    assert "<a " not in page and "Grader note:</strong>" not in page, page
    assert "attacker.example" in page
