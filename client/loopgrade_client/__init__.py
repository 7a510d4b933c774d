"""loopgrade's client: `loopgrade-client` in a terminal, `%load_ext loopgrade_client` and
`loopgrade_client.submit(function)` and `loopgrade_client.solution(exercise, course)` in a
notebook."""

from loopgrade_client.notebook import load_ipython_extension, solution, submit

__all__ = ["load_ipython_extension", "solution", "submit"]
