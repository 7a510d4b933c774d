"""How each exercise kind is judged; an exercise names its kind in `exercise.toml`."""

from __future__ import annotations

from graders.exercises import Kind
from graders.judging import KindJudge
from graders.kinds import accumulation, loop, magnitude, steps

JUDGES: dict[Kind, KindJudge] = {
    "train-step": steps.JUDGE,
    "accumulate-microbatches": steps.JUDGE,
    "accumulation-demo": accumulation.JUDGE,
    "grad-magnitude": magnitude.JUDGE,
    "whole-loop": loop.JUDGE,
}
