"""Hypothesis strategies for hostile uploads: any bytes, any JSON, notebook-shaped or not."""

from __future__ import annotations

import json

from hypothesis import strategies as st

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
cells = st.fixed_dictionaries(
    {"cell_type": st.sampled_from(["code", "markdown", "raw"]) | json_values},
    optional={
        "source": st.text() | st.lists(st.text(max_size=30), max_size=5) | json_values,
        "outputs": json_values,
    },
)
notebooks = st.one_of(
    st.fixed_dictionaries({"cells": st.lists(cells | json_values, max_size=6)}), json_values
)


@st.composite
def notebook_files(draw: st.DrawFn) -> bytes:
    """A notebook-shaped (or any) JSON document, in any JSON encoding, maybe cut short."""
    document = draw(notebooks)
    encoding = draw(st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-32"]))
    data = json.dumps(document, ensure_ascii=draw(st.booleans())).encode(
        encoding, errors="surrogatepass"
    )
    cut = draw(st.none() | st.integers(min_value=0, max_value=len(data)))
    return data if cut is None else data[:cut]


files = st.one_of(
    notebook_files(),
    st.binary(max_size=2000),
    st.text(max_size=300).map(lambda text: text.encode("utf-8", errors="surrogatepass")),
    st.sampled_from([b"", b"\xef\xbb\xbf", b"[" * 200_000, b"\x00" * 64]),
)
filenames = st.one_of(
    st.sampled_from(["step.py", "step.ipynb", "STEP.IPYNB", "step", "", "../x.py", ".ipynb"]),
    st.text(max_size=30).map(lambda name: name + ".ipynb"),
    st.text(max_size=30),
)
