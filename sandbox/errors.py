"""The sandbox's own failures; a learner's failure is a RunResult, never one of these."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """The sandbox itself failed (a server fault): the learner's code may not have run."""


class SandboxUnavailable(SandboxError):
    """No sandbox backend works on this host, so nothing may run. The message says how to fix it."""
