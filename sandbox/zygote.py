"""The warm pool's zygote: `python -I zygote.py CONFIG_JSON`, run inside a slot's outer sandbox.

It is started by sandbox.pool, one per slot, inside the same bubblewrap sandbox as a cold run
(its own host uid, the slot's cgroups, no network, read-only root), or a long-lived container
(sandbox/docker.py), but allowed to make nested user namespaces. Once, it compiles the program
(/sandbox/main.py), runs it as `__main__` on the trusted warm-up inputs beside it (so that
`import torch` and the optimizer's lazy imports are done), and loads the seccomp filter's bytes.
It holds no secret and no expected value: a child is a copy of its memory.

Then, for every job on the control socket (a JSON header and fds: payload, start, stdout, stderr,
the request for the later input, stdin, and one
memfd per input), it clones a child straight into new user, mount, pid, net, ipc and uts
namespaces (so the job is PID 1 of its pid namespace, killed with the zygote) that isolates
itself before it reads a byte of the inputs: new session, every other fd closed, fresh /proc,
an empty size-capped /tmp, a fresh /sandbox with the inputs, all capabilities dropped, rlimits,
NO_NEW_PRIVS, not dumpable, the seccomp filter. Only then does it run the program. The zygote
reports the child's wait status and takes the next job. It uses only the standard library.

What a job costs is mostly copying the zygote's page tables and freeing them at the job's exit
(torch makes ~200 MB of anonymous memory), so the zygote asks the kernel to back its warm
memory with huge pages (MADV_COLLAPSE: 512 times fewer page table entries to copy), and makes
each job with one clone(), not a fork to unshare in and a second fork to be PID 1.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import gc
import json
import os
import random
import resource
import signal
import socket
import sys
import traceback
from typing import Any

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 22, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL, SECCOMP_MODE_FILTER = 4, 2
LINUX_CAPABILITY_VERSION_3, LAST_CAPABILITY = 0x20080522, 63
NAMESPACES = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
# clone(2)'s number; its first two arguments (flags, stack) are the same on both.
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
MADV_COLLAPSE, HUGE_PAGE_BYTES = 25, 2 << 20
SANDBOX_DIR, PROGRAM_PATH, SCRATCH_DIR = "/sandbox", "/sandbox/main.py", "/tmp"
PAYLOAD_FD, START_FD, REQUEST_FD = 3, 4, 5
MAX_HEADER_BYTES, MAX_FDS = 65536, 64

libc = ctypes.CDLL(None, use_errno=True)
# Called with the GIL held, as os.fork does: no other thread may hold it in the child's copy.
libc_holding_gil = ctypes.PyDLL(None, use_errno=True)
libc_holding_gil.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    def encode(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    _check(libc.mount(encode(source), target.encode(), encode(fstype), flags, data.encode()),
           f"mount {fstype or source} on {target}")  # fmt: skip


def _prctl(option: int, value: int, pointer: Any = 0) -> None:
    _check(libc.prctl(option, value, pointer, 0, 0), f"prctl({option})")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]  # fmt: skip


def _drop_capabilities() -> None:
    for capability in range(LAST_CAPABILITY + 1):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            _check(-1, f"drop capability {capability}")  # EINVAL: no such capability here
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: no capability of any kind
    _check(libc.capset(ctypes.byref(header), data), "capset")


def _load_seccomp(program: bytes) -> None:
    """Install a compiled BPF program (struct sock_filter[], 8 bytes each) as the filter."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog))


def _write_file(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def _copy_in(memfd: int, path: str) -> None:
    """Copy an input (a memfd the server wrote) to `path`, without interpreting a byte of it."""
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    size = os.fstat(memfd).st_size
    offset = 0
    while offset < size:
        sent = os.sendfile(target, memfd, offset, size - offset)
        if sent == 0:
            break
        offset += sent
    os.close(target)


def _clone_into_namespaces(number: int) -> int:
    """os.fork(), but the child is born in new namespaces: its pid there is 1.

    `number`: clone(2)'s syscall number here. Unlike os.fork, without the interpreter's fork
    hooks (PyOS_BeforeFork, PyOS_AfterFork_*): they make a child of a process with threads
    consistent (locks another thread held, its thread states), and the zygote has one thread
    (checked after its warm-up), which holds the interpreter's lock through the clone. In the
    child they would run every module's handlers (threading's, logging's, torch's), about
    0.7 ms and a few hundred copy-on-write faults per job
    (docs/performance.md#a-job-is-one-clone-without-the-interpreters-fork-hooks). The
    one handler whose effect a job can see, random's new seed, the child takes itself.
    """
    pid = libc_holding_gil.syscall(number, NAMESPACES | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        return 0
    errno = ctypes.get_errno()
    if pid < 0:
        raise OSError(errno, f"clone: {os.strerror(errno)}")
    return int(pid)


def _collapse_into_huge_pages() -> None:
    """Back the warm anonymous memory with huge pages, where the kernel can (Linux 6.1+)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5] != "[heap]"):
                continue  # a file's pages are not copied by fork
            start, end = (int(address, 16) for address in fields[0].split("-"))
            start = -(-start // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
            end = end // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
            if end > start:  # a failure (an old kernel, THP off) only leaves small pages
                libc_holding_gil.madvise(start, end - start, MADV_COLLAPSE)


class _WarmUpEnded(Exception):
    """The program called os._exit during the warm-up."""


def _end_warm_up(status: int) -> None:
    raise _WarmUpEnded(status)


class Zygote:
    def __init__(self, config: dict[str, Any]) -> None:
        if "control_path" in config:  # in a container: the server listens on a bind-mounted path
            connected = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            connected.connect(config["control_path"])
            control_fd = connected.detach()
        else:
            control_fd = config["control_fd"]
        # Moved far from fds 3 and 4, which the program writes to.
        self.control = socket.socket(fileno=fcntl.fcntl(control_fd, fcntl.F_DUPFD, 100))
        os.close(control_fd)
        self.uid, self.gid = os.getuid(), os.getgid()
        self.environment: dict[str, str] = config["environment"]
        self.imports_torch: bool = config["imports_torch"]
        # The interpreter's directories that live under /tmp (a checkout there, as in CI): a
        # job's fresh /tmp would hide them, so they are mounted again on top of it.
        self.kept_under_scratch: list[str] = config["kept_under_scratch"]
        with open(config["seccomp_path"], "rb") as filter_file:
            self.seccomp = filter_file.read()
        with open(PROGRAM_PATH) as program_file:
            self.source = program_file.read()
        self.code = compile(self.source, PROGRAM_PATH, "exec")
        machine = os.uname().machine
        if machine not in SYS_CLONE:  # before the warm-up: the pool does not start, runs go cold
            raise OSError(f"the zygote does not know clone(2)'s number on {machine}")
        self.clone_number = SYS_CLONE[machine]

    def warm_up(self) -> None:
        """Run the program once here on the trusted inputs in /sandbox: its imports stay loaded."""
        if self.imports_torch:
            # One thread before anything runs: a child forked after a parallel region would
            # hang in OpenMP's next one.
            import torch

            torch.set_num_threads(1)
        devnull = fcntl.fcntl(os.open(os.devnull, os.O_WRONLY), fcntl.F_DUPFD, 100)
        for fd in (PAYLOAD_FD, START_FD, REQUEST_FD):
            os.dup2(devnull, fd)
        os.close(devnull)
        os.chdir(SCRATCH_DIR)
        # A program may end itself with os._exit (the harness does, to skip torch's teardown):
        # here that must end the warm-up, not the zygote.
        real_exit = os._exit
        os._exit = _end_warm_up  # type: ignore[assignment]
        try:
            exec(self.code, {"__name__": "__main__", "__file__": PROGRAM_PATH})
        except _WarmUpEnded:
            pass
        finally:
            os._exit = real_exit
        for fd in (PAYLOAD_FD, START_FD, REQUEST_FD):
            with contextlib.suppress(OSError):  # the program may have closed it itself
                os.close(fd)
        sys.stdout.flush()
        sys.stderr.flush()
        # The jobs' environment, set once here for every child to inherit.
        os.environ.clear()
        os.environ.update(self.environment)
        gc.collect()
        gc.freeze()  # the warm objects stay in place: children share their pages
        _collapse_into_huge_pages()
        # A job is cloned without the C library's fork handlers: another thread holding a lock
        # (malloc's) at that moment would leave it held forever in the job's copy.
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            raise RuntimeError(f"the zygote runs {threads} threads after its warm-up, not one")

    def serve(self) -> None:
        self.control.sendall(b'{"ready": true}')
        while True:
            message, fds, _, _ = socket.recv_fds(self.control, MAX_HEADER_BYTES, MAX_FDS)
            if not message:
                return  # the server closed the pool
            job = json.loads(message)
            sys.stdout.flush()
            sys.stderr.flush()
            started_r, started_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            pid = _clone_into_namespaces(self.clone_number)
            if pid == 0:
                self._child(job, [started_w.detach(), *fds])  # never returns
            started_w.close()
            for fd in fds:
                os.close(fd)
            # The job says when its namespaces and mounts are made (nothing if it died first),
            # with its scratch directory: the server holds it to check file sizes, however soon
            # the job ends.
            said, scratch, _, _ = socket.recv_fds(started_r, 1, 1)
            started_r.close()
            started = said == b"1" and len(scratch) == 1
            message = json.dumps({"started": started}).encode()
            socket.send_fds(self.control, [message], scratch[:1] if started else [])
            for fd in scratch:
                os.close(fd)
            status = self._wait(pid)
            self.control.sendall(json.dumps({"status": status}).encode())

    @staticmethod
    def _wait(pid: int) -> int:
        """The child's wait status; the zygote is PID 1 here, so it also reaps any orphan."""
        while True:
            reaped, status = os.waitpid(-1, 0)
            if reaped == pid:
                return status

    def _child(self, job: dict[str, Any], fds: list[int]) -> None:
        """Never returns: isolate, then run the job as PID 1 of its namespaces.

        `fds`: the started socket, then the write ends of fds 3 (payload), 4 (start), 1, 2 and
        5 (the request for the later input), the read end of stdin, then the inputs' memfds.
        """
        try:
            started_w, payload_w, start_w, out_w, err_w, request_w, stdin_r, *memfds = fds
            pipes = [stdin_r, payload_w, start_w, out_w, err_w, request_w]
            self.control.close()
            os.setsid()
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the zygote's death takes the namespace
            # The OOM killer of the slot's cgroup takes the job, never the zygote.
            _write_file("/proc/self/oom_score_adj", "1000")
            _write_file("/proc/self/setgroups", "deny")
            # The slot's uid stays the job's uid, inside too (as bwrap maps it): never uid 0, so
            # no exec can give it root's capabilities, whatever the bounding set.
            _write_file("/proc/self/uid_map", f"{self.uid} {self.uid} 1")
            _write_file("/proc/self/gid_map", f"{self.gid} {self.gid} 1")
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            kept = [os.open(path, os.O_PATH | os.O_DIRECTORY) for path in self.kept_under_scratch]
            _mount("tmpfs", SCRATCH_DIR, "tmpfs", MS_NOSUID | MS_NODEV,
                   f"mode=0755,size={int(job['scratch_bytes'])}")  # fmt: skip
            for path, fd in zip(self.kept_under_scratch, kept, strict=True):
                # Bound from the fd opened before the tmpfs covered it: the same read-only
                # mount as the zygote's, on a directory of the job's scratch.
                os.makedirs(path)
                _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                os.close(fd)
            _mount("tmpfs", SANDBOX_DIR, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
            names = job["input_names"]
            with open(PROGRAM_PATH, "x") as program_copy:  # as in a cold run, for parity
                program_copy.write(self.source)
            for name, memfd in zip(names, memfds, strict=True):
                _copy_in(memfd, f"{SANDBOX_DIR}/{name}")
            _mount(None, SANDBOX_DIR, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
            scratch = os.open(SCRATCH_DIR, os.O_RDONLY | os.O_DIRECTORY)
            socket.send_fds(socket.socket(fileno=started_w), [b"1"], [scratch])
            os.close(scratch)
            # Parked above every wanted number first, so that no move overwrites one to come.
            parked = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in pipes]
            for fd, wanted in zip(parked, [0, PAYLOAD_FD, START_FD, 1, 2, REQUEST_FD], strict=True):
                os.dup2(fd, wanted)
            os.closerange(REQUEST_FD + 1, 1 << 20)
            os.chdir(SCRATCH_DIR)
            for limit, soft, hard in job["rlimits"]:
                resource.setrlimit(limit, (soft, hard))
            _drop_capabilities()
            _prctl(PR_SET_NO_NEW_PRIVS, 1)
            _prctl(PR_SET_DUMPABLE, 0)
            _load_seccomp(self.seccomp)
            random.seed()  # as os.fork's handler does: no two jobs share a sequence
        except BaseException:
            traceback.print_exc()
            os._exit(125)
        # From here on, the learner's code runs: nothing of the zygote's may be trusted after.
        sys.argv = [PROGRAM_PATH]
        code = 0
        try:
            exec(self.code, {"__name__": "__main__", "__file__": PROGRAM_PATH})
        except SystemExit as exit_request:
            code = exit_request.code if isinstance(exit_request.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main(argv: list[str]) -> None:
    zygote = Zygote(json.loads(argv[1]))
    zygote.warm_up()
    zygote.serve()


if __name__ == "__main__":
    main(sys.argv)
