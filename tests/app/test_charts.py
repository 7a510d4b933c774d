"""The result page's SVG charts: well-formed, accessible, and honest about missing values."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

from app.charts import HEIGHT, MAX_DRAWN_POINTS, line_chart
from app.grading.results import MAX_FIXED_LABEL_CHARS, MAX_SERIES_POINTS, _stored_plot
from graders.report import PlotSeries

SVG = "{http://www.w3.org/2000/svg}"


def paths(svg: str) -> dict[str, str]:
    root = ElementTree.fromstring(svg)
    return {p.get("class", ""): p.get("d", "") for p in root.iter(f"{SVG}path")}


def text_of(root: ElementTree.Element, tag: str) -> str:
    element = root.find(f"{SVG}{tag}")
    assert element is not None and element.text is not None, f"the chart has no <{tag}> text"
    return element.text


def test_chart_draws_both_series_with_a_point_per_step() -> None:
    svg = line_chart(
        PlotSeries(case="basic", label="loss", learner=[3.0, 2.0, 1.5], reference=[3.0, 1.0, 0.5])
    )
    drawn = paths(svg)
    assert drawn["learner"].count("M") == 1 and drawn["learner"].count("L") == 2
    assert drawn["reference"].count("L") == 2
    root = ElementTree.fromstring(svg)
    assert root.get("role") == "img"
    assert "case basic" in text_of(root, "title")
    assert "Your loss: 3, 2, 1.5" in text_of(root, "desc")


def test_missing_and_infinite_values_leave_gaps() -> None:
    svg = line_chart(
        PlotSeries(
            case="c", label="loss", learner=[1.0, None, 2.0, float("inf"), 3.0], reference=[1.0] * 5
        )
    )
    learner = paths(svg)["learner"]
    assert learner.count("M") == 3 and "L" not in learner


def test_labels_are_escaped() -> None:
    svg = line_chart(PlotSeries(case="<script>", label="a&b", learner=[1.0], reference=[1.0]))
    assert "<script>" not in svg
    ElementTree.fromstring(svg)


def test_a_long_series_is_drawn_small_and_keeps_its_spike() -> None:
    learner: list[float | None] = [1.0] * 1_800_000
    learner[1_234_567] = 50.0
    learner[900_000] = None
    svg = line_chart(PlotSeries(case="c", label="loss", learner=learner, reference=[1.0] * 10))
    assert len(svg) < 20_000
    root = ElementTree.fromstring(svg)
    drawn = paths(svg)["learner"]
    assert drawn.count("M") + drawn.count("L") <= MAX_DRAWN_POINTS
    assert drawn.count("M") == 2  # the missing value breaks the line once
    # The spike is the highest point: at the top of the chart, and labelled.
    assert any(text.text == "50" for text in root.iter(f"{SVG}text"))
    assert "1800000 values, from 1 to 50" in text_of(root, "desc")
    ticks = [t for t in root.iter(f"{SVG}text") if t.get("y") == str(HEIGHT - 10)]
    assert 2 <= len(ticks) <= 10


def test_a_short_series_is_drawn_whole_with_a_dot_per_value() -> None:
    svg = line_chart(
        PlotSeries(case="c", label="loss", learner=[float(v) for v in range(30)], reference=[])
    )
    assert paths(svg)["learner"].count("L") == 29
    assert svg.count("<circle") == 30


def test_a_replayed_fix_is_a_third_line_with_its_legend_and_its_values_in_words() -> None:
    label = "your loop with optimizer.zero_grad() before backward()"
    svg = line_chart(
        PlotSeries(
            case="stale-gradients",
            label="loss",
            learner=[3.0, 2.5, 2.4],
            reference=[3.0, 1.0, 0.5],
            fixed=[3.0, 1.0, 0.5],
            fixed_label=label,
        )
    )
    root = ElementTree.fromstring(svg)
    assert paths(svg)["fixed"].count("L") == 2
    legend = root.find(f"{SVG}text[@class='fixed-label']")
    assert legend is not None
    # Its line is the reference's, under it: the legend and the description say so.
    lines = [t.text or "" for t in legend.iter(f"{SVG}tspan")]
    assert " ".join(lines[:-1]) == label and lines[-1] == "Your fix matches the reference."
    description = text_of(root, "desc")
    assert "Your loop with optimizer.zero_grad() before backward(): 3, 1, 0.5." in description
    assert description.endswith("Your fix matches the reference.")
    assert int(root.get("height", "0")) > HEIGHT  # room for the legend under the plot

    # A fix that is not the reference says nothing of the kind.
    apart = line_chart(
        PlotSeries(
            case="c",
            label="loss",
            learner=[3.0, 2.5, 2.4],
            reference=[3.0, 1.0, 0.5],
            fixed=[3.0, 1.0, 0.6],
            fixed_label=label,
        )
    )
    assert "matches the reference" not in apart


def test_without_a_fix_the_chart_is_as_before() -> None:
    svg = line_chart(PlotSeries(case="c", label="loss", learner=[1.0, 2.0], reference=[1.0, 1.0]))
    root = ElementTree.fromstring(svg)
    assert "fixed" not in paths(svg) and root.get("height") == str(HEIGHT)
    assert "fixed" not in svg


def test_a_stored_fix_is_cut_to_the_caps_like_the_other_lines() -> None:
    forged = {
        "case": "c",
        "label": "loss",
        "learner": [1.0] * 10,
        "reference": [1.0] * 10,
        "fixed": [2.0] * 1_000_000,
        "fixed_label": "your loop " * 1000,
    }
    plot = _stored_plot(forged, "s1")
    assert plot is not None
    assert len(plot.fixed) == MAX_SERIES_POINTS
    assert len(plot.fixed_label) <= MAX_FIXED_LABEL_CHARS
    assert len(line_chart(plot)) < 20_000
