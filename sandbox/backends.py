"""The sandbox backends by name, in the order `auto` tries them: for each, how its cold runner
is opened here (once a trivial run worked: sandbox.probes), and how a warm pool's slots get
their outer sandbox in front of it. A new backend is its module, one entry here, and its docs;
the tests read BACKENDS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sandbox import probes
from sandbox.bwrap import BwrapRunner
from sandbox.bwrap_pool import BwrapOuter
from sandbox.docker import ContainerOuter, DockerRunner, DockerSettings
from sandbox.pool import Outer
from sandbox.runner import Runner

R = TypeVar("R", bound=Runner)


@dataclass(frozen=True)
class Backend(Generic[R]):
    """One backend: `open` probes it and returns its cold runner (SandboxUnavailable, with what to
    install or enable, when it does not work here); `pool_outer` starts a warm pool's slots for
    that runner."""

    name: str
    open: Callable[[], R]
    pool_outer: Callable[[R], Outer]


def open_bwrap() -> BwrapRunner:
    binary = probes.bwrap_binary()
    probes.probe_bwrap(binary)
    return BwrapRunner(binary)


def open_docker() -> DockerRunner:
    settings = DockerSettings.from_environment()
    probes.probe_docker(settings)
    return DockerRunner(settings)


BWRAP: Backend[BwrapRunner] = Backend("bwrap", open_bwrap, lambda cold: BwrapOuter(cold.binary))
DOCKER: Backend[DockerRunner] = Backend(
    "docker", open_docker, lambda cold: ContainerOuter(cold.settings)
)
BACKENDS: dict[str, Backend[Any]] = {backend.name: backend for backend in (BWRAP, DOCKER)}
