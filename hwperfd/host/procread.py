"""Reads of other processes' /proc files that cannot wedge the daemon.

Many /proc/<pid> files take a lock the target process can hold for as long
as it likes: stat, io, wchan, syscall and stack take its ``exec_update_lock``
(and maps, environ, exe open with it), which execve(2) holds while it closes
close-on-exec files; a close-on-exec file on a FUSE filesystem whose server
never answers FLUSH (or on a dead NFS mount) keeps the exec there for good.
cmdline takes the target's mmap lock, which a fault on such a file holds.
The wait is killable only, so no signal short of the daemon's own death ends
it.  The daemon serves every request from one thread: one such read would
stop it for everyone.

So those reads run on worker threads while the caller waits with a deadline:
a worker found in uninterruptible sleep after ``STALL_NS`` (a /proc read
does not sleep so otherwise), or any read past ``DEADLINE_NS`` whose worker has
spent a fifth of that in CPU time (the maps of a huge process), or any read past
``HARD_DEADLINE_NS``, answers **EAGAIN** and
leaves its worker behind; later reads of the same process answer EAGAIN at
once until that worker returns.  Left-behind workers are bounded per user
of the stuck process and in all (EAGAIN past either): a user can stall
reads of their own processes, not the daemon.

A stat of the very thread a request is served for (``caller``) is read
directly: that thread waits in the request, so its thread group is not
past de_thread(), where execve() takes exec_update_lock, and what execve
holds before (cred_guard_mutex, while de_thread() waits for the other
threads) stat does not take (measured: a thread held in FLUSH keeps its
process's exec in de_thread, and every stat of it reads at once).  A
thread's own open of its process file (PAPI's, once per thread it counts)
then costs no hand-over to a worker.
"""

from __future__ import annotations

import contextvars
import errno
import os
import queue
import threading
import time

__all__ = [
    "DEADLINE_NS", "HARD_DEADLINE_NS", "STALL_NS", "MAX_STUCK", "MAX_STUCK_PER_UID", "Stalled", "read", "may_block",
    "stalled",
]  # fmt: skip

#: A worker in uninterruptible sleep this long waits on the target's lock.
STALL_NS = 10_000_000
#: A read this long whose worker has run a fifth of it is too costly to finish.
#: Wall time alone is no sign: on a loaded machine a worker waits for a CPU
#: as long as the caller does, and a caller answered EAGAIN for its own
#: process's stat (vperfctr_control under PAPI's ctests at load average 40)
#: fails where the original system never did.
DEADLINE_NS = 500_000_000
#: Longest any read keeps its caller, asleep or not.
HARD_DEADLINE_NS = 5_000_000_000
#: Workers left behind on stuck reads, in all and per user of the stuck process.
MAX_STUCK = 256
MAX_STUCK_PER_UID = 8
#: Idle workers kept for the next read.
_IDLE_KEPT = 2

#: Files of /proc/<pid> whose reads take no lock the process can hold
#: (measured, and by fs/proc: status, schedstat, comm and children read
#: only counters and lists under spinlocks).
_NEVER_BLOCK = frozenset({"status", "schedstat", "comm", "children"})

#: The thread (tid) the request being served was made by, 0 for none: the
#: FUSE boundary sets it for each request that names its caller.
caller: contextvars.ContextVar[int] = contextvars.ContextVar("procread_caller", default=0)

#: The calling thread's own stat and schedstat, as read during the request
#: being served (None: not kept).  The caller waits in its request until the
#: reply (FUSE holds it through any signal but a fatal one), so neither can
#: move meanwhile: each is read once a request, where the three calls of a
#: PAPI thread registration read its stat and its schedstat five times each.
request_reads: contextvars.ContextVar[dict[str, bytes] | None] = contextvars.ContextVar(
    "procread_request_reads", default=None
)
_OWN_FILES = frozenset({"stat", "schedstat"})
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class Stalled(BlockingIOError):
    """The process is stuck where its /proc files wait for it (EAGAIN)."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(errno.EAGAIN, f"process {pid} is stuck in the kernel (its /proc files wait on it)")


def may_block(path: str, dir_fd: int | None) -> bool:
    """Whether reading ``path`` can wait on another process (the daemon's
    own files never wait on it: it is not in exec while it reads)."""
    if dir_fd is not None:
        path = _dir_path(dir_fd) + "/" + path
    if not (path.startswith("/proc/") and path[6:7].isdigit()):
        return False  # /proc/stat, /proc/self/..., /proc/sys/...
    if path.startswith(f"/proc/{os.getpid()}/"):
        return False
    name = path.rpartition("/")[2]
    if name == "stat" and (tid := caller.get()) and _names_task(path, tid):
        return False
    return name not in _NEVER_BLOCK


def _names_task(path: str, tid: int) -> bool:
    """``/proc/<tid>/...`` or ``/proc/<pid>/task/<tid>/...``: a file of that task."""
    parts = path.split("/")
    own = str(tid)
    return parts[2] == own or (len(parts) > 4 and parts[3] == "task" and parts[4] == own)


def _dir_path(dir_fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{dir_fd}")
    except OSError:
        return "/proc/0"


class _Job:
    __slots__ = ("path", "dir_fd", "done", "data", "error", "worker", "abandoned", "pid", "uid")

    def __init__(self, path: str, dir_fd: int | None) -> None:
        self.path = path
        self.dir_fd = dir_fd
        self.done = threading.Lock()
        self.done.acquire()
        self.data = b""
        self.error: BaseException | None = None
        self.abandoned = False
        self.pid: int | None = None
        self.uid: int | None = None

    def result(self) -> bytes:
        if self.error is not None:
            raise self.error
        return self.data


class _Worker:
    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.inbox: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.tid = 0
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), name="procread", daemon=True)
        self.thread.start()
        started.wait()
        assert self.thread.ident is not None
        self.clock = time.pthread_getcpuclockid(self.thread.ident)

    def cpu_ns(self) -> int:
        """The worker's CPU time: what a read has cost, not what it waited."""
        return time.clock_gettime_ns(self.clock)

    def _run(self, started: threading.Event) -> None:
        self.tid = threading.get_native_id()
        started.set()
        while True:
            job = self.inbox.get()
            try:
                job.data = _read_direct(job.path, job.dir_fd)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                job.error = exc
            if not self.pool.finished(self, job):
                return

    def asleep(self) -> bool:
        """In an uninterruptible (killable) sleep in the kernel: where a
        /proc read waits on its process's locks.  A worker waiting for the
        GIL sleeps interruptibly (S) and is not stuck."""
        try:
            data = _read_direct(f"/proc/self/task/{self.tid}/stat", None)
        except OSError:
            return False
        at = data.rindex(b")") + 2
        return data[at : at + 1] == b"D"


class _Pool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []
        self.stuck: dict[int, int] = {}  # pid -> workers stuck on it
        self.stuck_uids: dict[int, int] = {}  # uid of the stuck process -> workers
        self.total = 0

    def finished(self, worker: _Worker, job: _Job) -> bool:
        """A worker's read returned: hand it back (False: the worker ends)."""
        with self.lock:
            if job.abandoned:
                self._unstick(job)
            else:
                job.done.release()
            if len(self.idle) >= _IDLE_KEPT and job.abandoned:
                return False
            self.idle.append(worker)
            return True

    def _unstick(self, job: _Job) -> None:
        self.total -= 1
        for table, key in ((self.stuck, job.pid), (self.stuck_uids, job.uid)):
            if key is not None:
                table[key] -= 1
                if not table[key]:
                    del table[key]

    def read(self, path: str, dir_fd: int | None) -> bytes:
        pid = None
        if self.stuck:
            pid = _pid_of(path, dir_fd)
            if pid in self.stuck:
                raise Stalled(pid)
            if self.total >= MAX_STUCK or any(n >= MAX_STUCK_PER_UID for n in self.stuck_uids.values()):
                uid = _uid_of(pid)
                if self.total >= MAX_STUCK or (uid is not None and self.stuck_uids.get(uid, 0) >= MAX_STUCK_PER_UID):
                    raise Stalled(pid)
        with self.lock:
            worker = self.idle.pop() if self.idle else None
        if worker is None:
            worker = _Worker(self)
        job = _Job(path, dir_fd)
        cpu = worker.cpu_ns()
        worker.inbox.put(job)
        if job.done.acquire(timeout=0.002):
            return job.result()
        began = time.monotonic_ns()
        while True:
            if job.done.acquire(timeout=0.005):
                return job.result()
            waited = time.monotonic_ns() - began
            if (
                (waited >= STALL_NS and worker.asleep())
                or (waited >= DEADLINE_NS and worker.cpu_ns() - cpu >= DEADLINE_NS // 5)
                or waited >= HARD_DEADLINE_NS
            ):
                break
        pid = _pid_of(path, dir_fd) if pid is None else pid
        uid = _uid_of(pid)
        with self.lock:
            if job.done.acquire(blocking=False):
                return job.result()  # it returned meanwhile
            job.abandoned, job.pid, job.uid = True, pid, uid
            self.total += 1
            if pid is not None:
                self.stuck[pid] = self.stuck.get(pid, 0) + 1
            if uid is not None:
                self.stuck_uids[uid] = self.stuck_uids.get(uid, 0) + 1
        raise Stalled(pid)


def _read_direct(path: str, dir_fd: int | None) -> bytes:
    """Whole content of a /proc file; os.open/os.read skips io's buffering."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        data = os.read(fd, 8192)
        if len(data) < 8192:
            return data
        chunks = [data]
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _pid_of(path: str, dir_fd: int | None) -> int | None:
    """The process a /proc path (or one relative to an open /proc/<pid>) is of."""
    if dir_fd is not None:
        path = _dir_path(dir_fd) + "/" + path
    parts = path.split("/")
    return int(parts[2]) if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() else None


def _uid_of(pid: int | None) -> int | None:
    """Real uid of ``pid`` from its status (a file that never waits on it)."""
    if pid is None:
        return None
    try:
        for line in _read_direct(f"/proc/{pid}/status", None).split(b"\n"):
            if line.startswith(b"Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


_pool = _Pool()


def read(path: str, dir_fd: int | None = None) -> bytes:
    """Whole content of a /proc file, with a deadline where it can wait on
    another process (``Stalled``, EAGAIN, past it)."""
    kept = request_reads.get()
    if kept is not None and dir_fd is None:
        data = kept.get(path)
        if data is None:
            data = _read_guarded(path, None)
            if _callers_own(path):
                kept[path] = data
        return data
    return _read_guarded(path, dir_fd)


def _read_guarded(path: str, dir_fd: int | None) -> bytes:
    """At once where the read cannot wait, else through a worker."""
    if not may_block(path, dir_fd):
        return _read_direct(path, dir_fd)
    data = _read_if_dead(path, dir_fd)
    return _pool.read(path, dir_fd) if data is None else data


def _read_if_dead(path: str, dir_fd: int | None) -> bytes | None:
    """The file read at once if its process is a zombie with no thread left
    (None if not): only an execve(2) in the thread group holds the lock its
    files wait on, and such a group has no thread to make one.  status
    (which never waits) says so: ``Threads`` counts the threads not yet
    released, the zombie leader's own release waiting for its reaping, so a
    leader that exited before its other threads shows ``Z`` with ``Threads: 2``
    or more.  Both files are read through one open directory of the process:
    one reaped and its pid taken again between the two reads gives ESRCH,
    never the new process's file.  The exit path reads each ending process
    several times (its final times, its split, its usage for the parent), and
    a read through a worker costs a thread hand-over each."""
    if dir_fd is None:
        parts = path.split("/", 3)
        if len(parts) < 4 or parts[1] != "proc" or not parts[2].isdigit():
            return None
        try:
            dfd = os.open(f"/proc/{parts[2]}", _O_DIR)
        except OSError:
            return None  # the read proper says what became of it
        rest = parts[3]
    else:
        folder = _dir_path(dir_fd).split("/")
        if len(folder) != 3 or folder[1] != "proc" or not folder[2].isdigit():
            return None  # not a process's own directory (its task/ one, say)
        dfd, rest = dir_fd, path
    try:
        try:
            status = _read_direct("status", dfd)
        except OSError:
            return None
        return _read_direct(rest, dfd) if _group_dead(status) else None
    finally:
        if dir_fd is None:
            os.close(dfd)


def _group_dead(status: bytes) -> bool:
    """A zombie whose thread group has no other thread (its status text)."""
    state = threads = False
    for line in status.split(b"\n"):
        if line.startswith(b"State:"):
            state = line[6:].lstrip()[:1] == b"Z"
        elif line.startswith(b"Threads:"):
            threads = line[8:].strip() == b"1"
            break  # Threads comes after State
    return state and threads


def _callers_own(path: str) -> bool:
    """``/proc/<pid>/task/<tid>/stat`` or ``schedstat`` of the calling thread
    (not ``/proc/<pid>/stat``: a process's sums move with its other threads)."""
    parts = path.split("/")
    tid = caller.get()
    return (
        tid != 0 and len(parts) == 6 and parts[1] == "proc" and parts[3] == "task"
        and parts[4] == str(tid) and parts[5] in _OWN_FILES
    )  # fmt: skip


def stalled() -> dict[int, int]:
    """pid -> reads of it still stuck (for the status node and tests)."""
    with _pool.lock:
        return dict(_pool.stuck)
