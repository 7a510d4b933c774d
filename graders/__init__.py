"""Trusted grading: cases, reference runs, checks, diagnosis and feedback.

from graders import grade
report = grade("train-step", source)   # a GradeReport
"""

from graders.grading import grade
from graders.report import Check, GradeReport

__all__ = ["Check", "GradeReport", "grade"]
