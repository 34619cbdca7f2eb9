"""IRIX's files in the mount: its /proc (r10k_counters(5), proc(4)), as the
mount's own files the filesystem routes to (hwperfd/node.py, ``MountFiles``).

The mount's root answers HWPERFD_GETMACHINE; the control node, syssgi's
SGI_EVENTCTR sub-commands; a process's file, the PIOC ioctls on it and the
name of its state page; a pinfo file, the informational ioctls proc(4)
allows there.  Each table says what its commands may change
(hwperfd/irix/proc.py, syssgi.py); failures armed on purpose (faults.py)
fall here, before a call reaches them.
"""

from __future__ import annotations

import errno
import time

import structs
from hwperfd.counters.kernel import ptrace_readable
from hwperfd.host import processes
from hwperfd.counters.kernel import CounterKernel
from hwperfd.irix import faults, machine
from hwperfd.irix.calls import Target
from hwperfd.irix.errno_map import UnknownCommand, in_errnos
from hwperfd.irix.info import PINFO_COMMANDS, InfoIoctls
from hwperfd.irix.proc import NAMES, ProcIoctls
from hwperfd.irix.syssgi import SyssgiIoctls
from hwperfd.node import COUNTS, TEXTS, Call, Changed, Mount, Reply

# Every /proc ioctl hwperfd knows: on a pinfo file those not allowed are
# EINVAL (known, not permitted here); anything else is ENOTTY.
_KNOWN = frozenset(NAMES)
# syssgi's commands that act on the calling process's own counters.
_ON_CALLER = frozenset((structs.HWPERFD_PROFENABLE, structs.HWIOC_PROF_CTR_SUSP, structs.HWIOC_PROF_CTR_CONT))


class RootFiles:
    """The mount's root: the emulated machine, for any user; it changes nothing."""

    def __init__(self, mount: Mount) -> None:
        self._kernel = mount.kernel

    def ioctl(self, call: Call, changed: Changed) -> Reply:
        return machine.root_ioctl(self._kernel, call)


class ControlFiles:
    """The control node: syssgi(SGI_EVENTCTR)'s sub-commands."""

    def __init__(self, mount: Mount, plan: faults.FaultPlan) -> None:
        self._ioctls = SyssgiIoctls(mount.kernel)
        self._faults = plan
        self._kernel = mount.kernel
        self._deliver = mount.deliver

    def ioctl(self, call: Call, changed: Changed) -> Reply:
        self._faults.check(faults.CONTROL, call.cmd)
        reply = self._ioctls(call, changed)
        # What a catch-up found goes before the answer, as on a process's
        # file (ProcessFiles.ioctl): system mode's to its holder, and the
        # profiling commands' to the calling process they act on.
        holder = self._kernel.system_signal_target()
        if holder is not None:
            self._deliver(holder, 0)
        if call.cmd in _ON_CALLER and (process := processes.thread_group(call.pid)):
            self._deliver(process, 0)
        return reply


class ProcessFiles:
    """A process's file: the PIOC ioctls, and HWPERFD_PIOCSTATEPAGE."""

    def __init__(self, mount: Mount, plan: faults.FaultPlan) -> None:
        self._ioctls = ProcIoctls(mount.kernel)
        self._faults = plan
        self._state_pages = mount.state_pages
        self._tgid_of = mount.tgid_of
        self._kernel = mount.kernel
        self._deliver = mount.deliver

    def ioctl(self, call: Call, changed: Changed) -> Reply:
        self._faults.check(call.target, call.cmd)
        if call.cmd == structs.HWPERFD_PIOCSTATEPAGE:
            reply = self._state_page(call)
            changed.report(TEXTS | COUNTS)  # reads answered in C look again, and may take the new page
            return reply
        if call.cmd == structs.HWPERFD_PIOCOVFLNS:
            reply = self._overflow_left(call)
            changed.report(TEXTS | COUNTS)  # caught up
            return reply
        reply = self._ioctls(call, changed)
        # IRIX sent each overflow's signal at its interrupt (r10k_counters(5),
        # hwp_ovflw_sig), so none came after a call that counted past it had
        # returned: what the call's catch-up found goes before its answer.
        self._deliver_owed(call)
        if call.cmd == structs.PIOCGETEVCTRS:
            # The bridge may answer this caller's next reads from a state page,
            # unless a fault waits for one of them.
            changed.fast_read = not self._faults.armed(call.target, "PIOCGETEVCTRS")
        return reply

    def _deliver_owed(self, call: Call) -> None:
        """Send now what is owed to the file's process, or to the thread
        whose own file it is."""
        if call.gone:
            return
        process = self._kernel.thread_record(call.target)
        if process:
            self._deliver(process, call.target)
        else:
            self._deliver(call.target, 0)

    def _overflow_left(self, call: Call) -> Reply:
        """HWPERFD_PIOCOVFLNS: the CPU ns before the nearest overflow of the
        file's counters, asked by the process itself (any of its threads)
        or, on a thread's own file, by that thread; an overflow the look
        finds is signalled before the answer (docs/overflow.md)."""
        pid = call.target
        if call.gone:
            raise OSError(errno.ESRCH, f"pid {pid} is gone")
        if call.pid != pid and self._tgid_of(call.pid) != pid:
            raise OSError(errno.EPERM, f"pid {call.pid} asked for the overflows of pid {pid}")
        left, sig, thread, at = _overflow_left(self._kernel, Target(pid, call.start), time.monotonic_ns())
        if thread:
            self._deliver(self._tgid_of(pid), pid)
        else:
            self._deliver(pid, 0)
        return 0, structs.hwperfd_ovflns_t.build(dict(
            ho_left=structs.HWPERFD_OVFL_NONE if left is None else left,
            ho_at=0 if thread else at,
            ho_clock=structs.HWPERFD_STATE_CLOCK_THREAD if thread else structs.HWPERFD_STATE_CLOCK_PROCESS,
            ho_sig=sig,
        ))  # fmt: skip

    def _state_page(self, call: Call) -> Reply:
        """The path of the page the process itself maps; only the process
        (any of its threads) may ask, as its owner."""
        pages = self._state_pages()
        if pages is None:
            raise OSError(errno.EOPNOTSUPP, "state pages are off (--state-dir)")
        pid = call.target
        if call.gone:
            raise OSError(errno.ESRCH, f"pid {pid} is gone")
        if self._tgid_of(call.pid) != pid:
            raise OSError(errno.EPERM, f"pid {call.pid} asked for the state page of pid {pid}")
        info = processes.read_process(pid)
        if info is None or (call.start and info.start != call.start):
            raise OSError(errno.ESRCH, f"pid {pid} is gone")
        if call.uid != 0 and not ptrace_readable(call.uid, call.gid, info):
            raise OSError(errno.EPERM, f"uid {call.uid} may not read pid {pid}")
        path = pages.grant(pid, call.start or info.start, call.uid)
        return 0, structs.hwperfd_statepage_t.build(dict(hp_path=path))


@in_errnos
def _overflow_left(kernel: CounterKernel, target: Target, now: int) -> tuple[int | None, int, bool, int]:
    return kernel.overflow_left(target, now)


class PinfoFiles:
    """A file of pinfo/: proc(4) allows only the informational ioctls there."""

    def __init__(self, mount: Mount, plan: faults.FaultPlan) -> None:
        self._info = InfoIoctls(mount.kernel)
        self._faults = plan

    def ioctl(self, call: Call, changed: Changed) -> Reply:
        self._faults.check(call.target, call.cmd)
        handler = self._info.commands.get(call.cmd) if call.cmd in PINFO_COMMANDS else None
        if handler is not None:
            return handler(call.target, call)  # reads: they change nothing
        if call.cmd in _KNOWN:
            raise OSError(errno.EINVAL, "a pinfo file answers only PIOCPSINFO, PIOCUSAGE, PIOCGETPTIMER, PIOCCRED")
        raise UnknownCommand(call.cmd)


class IrixFiles:
    """IRIX's answers to the mount's own files (``hwperfd.node.MountFiles``)."""

    fast_read = structs.PIOCGETEVCTRS
    name = "irix"
    control_name = "irix-syssgi"

    def __init__(self, mount: Mount) -> None:
        self.faults = faults.FaultPlan()
        self.root = RootFiles(mount)
        self.control = ControlFiles(mount, self.faults)
        self.process = ProcessFiles(mount, self.faults)
        self.pinfo = PinfoFiles(mount, self.faults)
