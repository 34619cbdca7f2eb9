"""The /proc PIOC* ioctls of r10k_counters(5), on the file of one process:
each command's handler and what it may change (hwperfd/node.py)."""

from __future__ import annotations

from fractions import Fraction
from typing import Callable

from hwperfd.counters.errors import InvalidRequest, NoSuchProcess
from hwperfd.counters.kernel import CounterKernel
from hwperfd.host import processes
from hwperfd.irix import marshal
from hwperfd.irix.calls import IoctlCall, Target, caller
from hwperfd.irix.errno_map import PointerArgument, in_errnos, to_oserror
from hwperfd.irix.info import InfoIoctls
from hwperfd.node import CONTROLS, COUNTS, PAGE, TEXTS, Call, Changed, Command, dispatch
import structs

Reply = tuple[int, bytes]
Handler = Callable[[Target, IoctlCall], Reply]

# What a call may change.  Any answered call may change what a text shows (a
# read catches the counts up).  After the counter read the bridge answers in
# C (PIOCGETEVCTRS) the file is marked for it again; after any other call the
# bridge's marks go, and the next read is the daemon's.  A call that sets
# counters also changes the process's state page and what the overflow tick
# watches; one that ends or moves counts, the page.
FAST_READ = TEXTS
READS = TEXTS | COUNTS
SETS = TEXTS | COUNTS | PAGE | CONTROLS
ENDS = TEXTS | COUNTS | PAGE

PID_MAX = 1 << 22  # Linux's largest pid_max (PID_MAX_LIMIT on 64-bit)

#: Every /proc ioctl hwperfd knows, by number.
NAMES = {v: k for k, v in vars(structs).items() if k.startswith(("PIOC", "HWPERFD_PIOC")) and isinstance(v, int)}


class ProcIoctls:
    """Decode, check, call the kernel, encode.  Raises OSError(errno) only."""

    def __init__(self, kernel: CounterKernel) -> None:
        self.kernel = kernel
        commands: dict[int, tuple[Handler, int]] = {
            structs.PIOCENEVCTRS: (self._enable, SETS),
            structs.PIOCGETEVCTRS: (self._read, FAST_READ),
            structs.PIOCGETPREVCTRS: (self._read_usage, READS),
            structs.PIOCGETEVCTRL: (self._control, READS),
            structs.PIOCSETEVCTRL: (self._set_control, SETS),
            structs.PIOCRELEVCTRS: (self._release, ENDS),
            structs.PIOCSAVECCNTRS: (self._save_child, ENDS),  # the parent's counts move
            structs.HWPERFD_PIOCENEVCTRSEX: (self._enable_ex, SETS),
            structs.HWPERFD_PIOCGETEVCTRLEX: (self._control_ex, READS),
            structs.PIOCENEVCTRSEX: (self._pointers("PIOCENEVCTRSEX"), 0),  # always refused
            structs.PIOCGETEVCTRLEX: (self._pointers("PIOCGETEVCTRLEX"), 0),
        }
        # proc(4)'s informational ioctls (PIOCPSINFO, PIOCUSAGE, ...) too.
        self._info = InfoIoctls(kernel)
        for cmd, info in self._info.commands.items():
            commands[cmd] = (_on_pid(info), READS)
        self.table: dict[int, Command] = {
            cmd: Command(_on_target(handler), changes, NAMES[cmd]) for cmd, (handler, changes) in commands.items()
        }

    def __call__(self, call: Call, changed: Changed) -> Reply:
        """On the file of process ``call.target`` (opened on the one that
        started at ``call.start``; ``call.gone``: it has been reaped since).
        An unknown command is ENOTTY whatever the state of the process; a
        known one on a gone process ESRCH.  What the command may change is
        reported in ``changed`` once it answers: a refused call changes nothing."""
        return dispatch(self.table, call, changed)

    def _enable(self, target: Target, call: IoctlCall) -> Reply:
        request = marshal.parse_request(call.data)
        return self.kernel.enable(caller(call), target, request), b""

    def _enable_ex(self, target: Target, call: IoctlCall) -> Reply:
        request, restore = marshal.parse_request_ex(call.data)
        return self.kernel.enable(caller(call), target, request, restore), b""

    def _control_ex(self, target: Target, call: IoctlCall) -> Reply:
        generation, request = self.kernel.control(caller(call), target)
        return generation, marshal.build_control_ex(request)

    @staticmethod
    def _pointers(name: str) -> Callable[[Target, IoctlCall], Reply]:
        def refuse(target: Target, call: IoctlCall) -> Reply:
            raise PointerArgument(name)

        return refuse

    def _read(self, target: Target, call: IoctlCall) -> Reply:
        generation, counts = self.kernel.read(caller(call), target)
        return generation, marshal.build_counts(counts)

    def _read_usage(self, target: Target, call: IoctlCall) -> Reply:
        generation, _ = self.kernel.read(caller(call), target)
        view = self.kernel.view(target.pid, target.start)
        usage = self._info.usage(target.pid)
        return generation, marshal.build_prusage(usage, view, self._tlb_misses(target.pid, usage))

    def _control(self, target: Target, call: IoctlCall) -> Reply:
        generation, request = self.kernel.control(caller(call), target)
        return generation, marshal.build_eventctrl(request)

    def _set_control(self, target: Target, call: IoctlCall) -> Reply:
        request = marshal.parse_request(call.data)
        return self.kernel.set_control(caller(call), target, request), b""

    def _release(self, target: Target, call: IoctlCall) -> Reply:
        self.kernel.release(caller(call), target)
        return 0, b""

    def _save_child(self, target: Target, call: IoctlCall) -> Reply:
        # PAPI passes the child's pid as the raw argument; with none, the
        # file's process is the child and its parent receives the counts.
        if call.arg and call.arg != target.pid:
            # Only the target's own children: anything else would let a
            # caller grow the set with pids it has no business naming.
            info = processes.read_process(call.arg) if 0 < call.arg <= PID_MAX else None
            if info is None:
                raise to_oserror(NoSuchProcess(f"no process {call.arg}"))
            if info.ppid != target.pid:
                raise to_oserror(InvalidRequest(f"pid {call.arg} is not a child of pid {target.pid}"))
            parent, child = target, call.arg
        else:
            info = processes.read_process(target.pid)
            if info is None:
                raise to_oserror(NoSuchProcess(f"pid {target.pid} is gone"))
            parent, child = Target(info.ppid), target.pid
        self.kernel.save_child_counts(caller(call), parent, child)
        return 0, b""

    def _tlb_misses(self, pid: int, usage: processes.Usage | None) -> tuple[int, int]:
        """IRIX's pu_utlb/pu_ktlb have no Linux source: take them from the
        emulated CPU, at the process's profile rate over its CPU time."""
        if usage is None:
            return 0, 0
        rate = self.kernel.profile(pid).rate("tlb_misses") * self.kernel.cpus.mhz / 1000
        return int(Fraction(usage.user_ns) * rate), int(Fraction(usage.system_ns) * rate)


def _on_target(handler: Handler) -> Callable[[Call], Reply]:
    """``handler`` on the file's process, ESRCH once it is gone, the
    counters' refusals in IRIX's errnos."""

    @in_errnos
    def run(call: Call) -> Reply:
        if call.gone:
            raise NoSuchProcess(f"pid {call.target} is gone")
        return handler(Target(call.target, call.start), call)

    return run


def _on_pid(info: Callable[[int, IoctlCall], Reply]) -> Callable[[Target, IoctlCall], Reply]:
    """An informational ioctl, which takes the target's pid."""

    def handler(target: Target, call: IoctlCall) -> Reply:
        return info(target.pid, call)

    return handler
