"""`judging.close_numbers` (numpy, float32) says exactly what `close` on `as_tensor`'s tensors
(torch.allclose) says for numbers and nested lists of them: at the tolerance's edge, not finite,
ragged, of other shapes. What is not numbers is never close (torch reads '' and [] beside a
number as an empty row)."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graders.judging import (
    ABSOLUTE_TOLERANCE,
    RELATIVE_TOLERANCE,
    as_tensor,
    cleared,
    close,
    close_numbers,
)


def torch_says(a: Any, b: Any) -> bool:
    try:
        return close(as_tensor(a), as_tensor(b))
    except (TypeError, ValueError, RuntimeError):
        return False


numbers = st.one_of(
    st.floats(width=32, allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e40, max_value=1e40),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.booleans(),
)
values = st.recursive(numbers, lambda inner: st.lists(inner, min_size=1, max_size=4), max_leaves=12)


def at_the_edge(expected: float, steps: int) -> float:
    """A number `steps` float32 ulps around the tolerance's edge from `expected`."""
    edge = torch.tensor(expected, dtype=torch.float32)
    allowed = ABSOLUTE_TOLERANCE + abs(RELATIVE_TOLERANCE * edge)
    value = edge + allowed
    for _ in range(abs(steps)):
        value = torch.nextafter(value, torch.tensor(float("inf") if steps > 0 else float("-inf")))
    return float(value)


@settings(max_examples=600, deadline=None)
@given(values, values)
def test_any_two_values(a: Any, b: Any) -> None:
    assert close_numbers(a, b) == torch_says(a, b)


@settings(max_examples=300, deadline=None)
@given(st.one_of(values, st.lists(st.just(0.0), max_size=4), st.just(-0.0)))
def test_a_gradient_is_cleared_as_torch_reads_it(values: Any) -> None:
    try:
        torch_reads = not bool(as_tensor(values).any())
    except (TypeError, ValueError, RuntimeError):  # ragged, past float32: no cleared gradient
        torch_reads = False
    assert cleared(values) == torch_reads


@settings(max_examples=600, deadline=None)
@given(
    st.lists(st.floats(min_value=-1e6, max_value=1e6, width=32), min_size=1, max_size=6),
    st.integers(min_value=-3, max_value=3),
)
def test_numbers_at_the_tolerance_s_edge(expected: list[float], steps: int) -> None:
    mine = [at_the_edge(value, steps) for value in expected]
    assert close_numbers(mine, expected) == torch_says(mine, expected)
    assert close_numbers([mine], [expected]) == torch_says([mine], [expected])


def test_what_is_never_close() -> None:
    assert close_numbers([1.0, 2.0], [1.0, 2.0])
    assert close_numbers([], []) == torch_says([], []) is True
    assert not close_numbers([1.0, float("nan")], [1.0, float("nan")])
    assert not close_numbers([[1.0], [2.0, 3.0]], [[1.0], [2.0, 3.0]])  # ragged
    assert not close_numbers(["1.0"], [1.0])  # text is not a number, whatever it reads
    assert not close_numbers([1.0, None], [1.0, None])
    assert not close_numbers([1.0, 2.0], [[1.0, 2.0]])  # another shape
    assert not close_numbers([3e38], [-3e38])  # their difference past float32's range
    # torch makes an empty (2, 0) tensor of both: "close"; they are not numbers.
    assert torch_says(["", 0.0], [[], 0.0]) and not close_numbers(["", 0.0], [[], 0.0])
    assert cleared(None) and cleared([[0.0, -0.0]]) and not cleared(["", 0.0])
