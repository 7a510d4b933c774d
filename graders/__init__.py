"""Trusted grading: cases, reference runs, checks, diagnosis and feedback."""
