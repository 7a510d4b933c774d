"""A run's file descriptors, as every backend that spawns the program on this host handles
them: its files handed on in memory, its later input written, its pipes read, and a wait for
one to have something to read (the cold bubblewrap run, a warm pool's child, the container
pool's zygote and listener)."""

from __future__ import annotations

import contextlib
import os
import selectors

from sandbox.supervise import START_REPORT_BYTES, Channel

READ_BYTES = 65536


def memfd(data: bytes) -> int:
    """A file in memory holding `data`, at offset 0: how a run's files are handed on."""
    fd = os.memfd_create("sandbox-file")
    try:
        unwritten = memoryview(data)
        while unwritten:
            unwritten = unwritten[os.write(fd, unwritten) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_input(fd: int, data: bytes) -> None:
    """Write a program's later input into its (empty) stdin pipe, never blocking. A program that
    closed its end, or shrank the pipe below the input, loses what did not fit."""
    with contextlib.suppress(OSError):
        os.set_blocking(fd, False)
        os.write(fd, data)


def read_pipe(
    fd: int, channel: Channel, start_report: bytearray
) -> tuple[list[tuple[Channel, bytes]], bool]:
    """Read one of the program's pipes: what it brought, and whether the pipe has ended.

    The set-up report (fd 4) is gathered in `start_report` and handed on when fd 4 closes.
    """
    data = os.read(fd, READ_BYTES)
    if channel is Channel.STARTED:
        if data:
            start_report += data[: START_REPORT_BYTES - len(start_report)]
            return [], False
        return [(Channel.STARTED, bytes(start_report))], True
    return ([(channel, data)] if data else []), not data


def readable(fd: int, timeout_seconds: float) -> bool:
    """`fd` has something to read (or has ended; a pidfd: its process has exited) within
    `timeout_seconds` (0: now)."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(max(0.0, timeout_seconds)))
