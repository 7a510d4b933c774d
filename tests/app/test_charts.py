"""The result page's SVG charts: well-formed, accessible, and honest about missing values."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

from app.web.charts import line_chart
from graders.report import PlotSeries

SVG = "{http://www.w3.org/2000/svg}"


def paths(svg: str) -> dict[str, str]:
    root = ElementTree.fromstring(svg)
    return {p.get("class", ""): p.get("d", "") for p in root.iter(f"{SVG}path")}


def test_chart_draws_both_series_with_a_point_per_step() -> None:
    svg = line_chart(
        PlotSeries(case="basic", label="loss", learner=[3.0, 2.0, 1.5], reference=[3.0, 1.0, 0.5])
    )
    drawn = paths(svg)
    assert drawn["learner"].count("M") == 1 and drawn["learner"].count("L") == 2
    assert drawn["reference"].count("L") == 2
    root = ElementTree.fromstring(svg)
    assert root.get("role") == "img"
    assert "case basic" in root.find(f"{SVG}title").text
    assert "Your loss: 3, 2, 1.5" in root.find(f"{SVG}desc").text


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
