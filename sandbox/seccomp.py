"""The seccomp filter every sandboxed program runs under: one definition, built once per process.

    filter = run_filter()          # EVERY_RUN's rules, built once, then cached
    filter.bpf                     # the compiled BPF program: `bwrap --seccomp FD`, docker's init
    filter.load()                  # or install it on the calling process (a warm pool's child)

    Filter(EVERY_RUN + NO_FORK + UNIX_SOCKETS_ONLY)   # a stricter one, e.g. for forked children

Separate uids and namespaces do not stop two runs at the same time from talking through what
they still share: the kernel and the read-only host files (/usr, the venv). A lock on a shared
file or an inotify watch on it carried a hidden case's seed from one run to another, bit by bit.
So the filter refuses file locks, file-change notification, and the kernel interfaces a learner
never needs and that carry state across runs or attack the kernel itself (keyrings, bpf, perf,
userfaultfd, io_uring, ptrace, mounts, namespaces, modules, kexec, reboot).

The rules are compiled by libseccomp (through pyseccomp, its Python API over ctypes and the
system's libseccomp2): it resolves the syscall numbers, and refuses every other architecture's
syscall ABI (a 32-bit `int 0x80` call kills the process), which hand-written BPF gets wrong.
Refused calls fail with EPERM, so that learner code sees an ordinary "Operation not permitted"
and a library that probes for a feature falls back; clone3 fails with ENOSYS, which makes the C
library fall back to clone, whose flags (unlike clone3's) a filter can see.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass

import pyseccomp

# fcntl commands (<linux/fcntl.h>, <asm-generic/fcntl.h>).
F_GETLK, F_SETLK, F_SETLKW = 5, 6, 7
F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38
F_SETLEASE, F_GETLEASE, F_NOTIFY = 1024, 1025, 1026
# clone flags (<linux/sched.h>).
CLONE_THREAD = 0x00010000
NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
AF_UNIX = 1
# The kernel reads an `int` or `unsigned int` argument from the low 32 bits of the register: a
# rule that compared all 64 bits would miss a command with garbage above them (CVE-2019-10063).
INT_BITS = 0xFFFFFFFF


@dataclass(frozen=True)
class Arg:
    """A condition on one argument: `(argument & mask) == value`, or `!=` when `negate`."""

    index: int
    value: int
    mask: int = INT_BITS
    negate: bool = False


@dataclass(frozen=True)
class Rule:
    """Refuse `syscall` with `error` when every condition holds (no condition: always)."""

    syscall: str
    error: int = errno.EPERM
    conditions: tuple[Arg, ...] = ()


def _refuse(*syscalls: str) -> tuple[Rule, ...]:
    return tuple(Rule(name) for name in syscalls)


# Record locks (and reading another process's lock), leases, and dnotify (inotify's predecessor).
LOCK_COMMANDS = (
    F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW,
    F_SETLEASE, F_GETLEASE, F_NOTIFY,
)  # fmt: skip
# Ways for two runs at the same time to signal each other through a file they both can read.
CROSS_RUN_CHANNELS = (
    *_refuse("flock", "inotify_init", "inotify_init1", "inotify_add_watch"),
    *_refuse("fanotify_init", "fanotify_mark"),
    *(Rule("fcntl", conditions=(Arg(1, command),)) for command in LOCK_COMMANDS),
)
# Kernel interfaces no training loop needs: shared state (keyrings), other processes (ptrace,
# process_vm_*), and the kernel's larger attack surfaces and administration.
KERNEL_INTERFACES = _refuse(
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "ptrace", "process_vm_readv", "process_vm_writev",
    "mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
    "open_tree", "mount_setattr",
    "unshare", "setns",
    "kexec_load", "kexec_file_load", "reboot",
    "init_module", "finit_module", "delete_module",
    "swapon", "swapoff", "acct", "quotactl", "syslog", "open_by_handle_at", "name_to_handle_at",
)  # fmt: skip
# No new namespace by clone either; clone3's flags sit in memory a filter cannot read.
NEW_NAMESPACES = (
    Rule("clone3", error=errno.ENOSYS),
    *(Rule("clone", conditions=(Arg(0, flag, mask=flag),)) for flag in NAMESPACE_FLAGS.values()),
)
EVERY_RUN = CROSS_RUN_CHANNELS + KERNEL_INTERFACES + NEW_NAMESPACES

# Stricter rules for a process that must do nothing but compute (a warm pool's forked child):
# they do not fit a cold run, where the interpreter itself may start helpers.
NO_FORK = (
    *_refuse("fork", "vfork"),
    Rule("clone", conditions=(Arg(0, 0, mask=CLONE_THREAD),)),  # threads only
)
UNIX_SOCKETS_ONLY = (Rule("socket", conditions=(Arg(0, AF_UNIX, negate=True),)),)


# A warm pool's slot container (Docker's JSON profile, docker_profile()): every run's refusals
# but the two its zygote needs to make each job's namespaces, clone with namespace flags and
# mount (the job's /proc, /tmp and /sandbox, inside the job's own user namespace, before the job
# loads EVERY_RUN on top). Without a capability in the container, neither reaches further.
SLOT_CONTAINER = (
    *(rule for rule in CROSS_RUN_CHANNELS + KERNEL_INTERFACES if rule.syscall != "mount"),
    Rule("clone3", error=errno.ENOSYS),
)


def docker_profile(rules: Iterable[Rule]) -> dict[str, object]:
    """`rules` as a Docker seccomp profile (`--security-opt seccomp=<JSON>`): allow the rest."""

    def condition(arg: Arg) -> dict[str, object]:
        if arg.negate:  # as Filter compiles it: != on the whole value
            return {"index": arg.index, "value": arg.value, "valueTwo": 0, "op": "SCMP_CMP_NE"}
        return {"index": arg.index, "value": arg.mask, "valueTwo": arg.value,
                "op": "SCMP_CMP_MASKED_EQ"}  # fmt: skip

    return {
        "defaultAction": "SCMP_ACT_ALLOW",  # other architectures' calls: killed, as by Filter
        "syscalls": [
            {
                "names": [rule.syscall],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": rule.error,
                "args": [condition(arg) for arg in rule.conditions],
            }
            for rule in rules
        ],
    }


class Filter:
    """A seccomp filter compiled once from `rules`; everything not refused is allowed."""

    def __init__(self, rules: Iterable[Rule] = EVERY_RUN) -> None:
        self.rules = tuple(rules)
        self._context = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
        for rule in self.rules:
            conditions = [
                pyseccomp.Arg(
                    condition.index,
                    pyseccomp.NE if condition.negate else pyseccomp.MASKED_EQ,
                    # MASKED_EQ takes (mask, value); NE takes the value alone, on 64 bits.
                    condition.value if condition.negate else condition.mask,
                    0 if condition.negate else condition.value,
                )
                for condition in rule.conditions
            ]
            self._context.add_rule(pyseccomp.ERRNO(rule.error), rule.syscall, *conditions)
        self.bpf = self._export()

    def _export(self) -> bytes:
        fd = os.memfd_create("seccomp-bpf")
        try:
            with open(fd, "w+b", closefd=False) as file:
                self._context.export_bpf(file)
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def load(self) -> None:
        """Install the filter on the calling thread's process for good (and set NO_NEW_PRIVS).

        Nothing is compiled again, so a forked child pays only the load itself.
        """
        self._context.load()


@functools.cache
def run_filter() -> Filter:
    """The filter of every sandboxed run, built the first time it is asked for."""
    return Filter(EVERY_RUN)
