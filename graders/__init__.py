"""Trusted grading: cases, reference runs, checks, diagnosis and feedback.

from graders import grade
report = grade("train-step", source)   # a GradeReport
graded = grade_with_release("train-step", source)   # and when it may be shown (the server's)
"""

from graders.grade_by_id import grade, grade_with_release
from graders.grading import Graded
from graders.report import Check, GradeReport

__all__ = ["Check", "GradeReport", "Graded", "grade", "grade_with_release"]
