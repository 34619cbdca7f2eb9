"""The /proc PIOC* ioctls of r10k_counters(5), on the file of one process."""

from __future__ import annotations

from fractions import Fraction
from typing import Callable

from hwperfd.counters.errors import CounterError, InvalidRequest, NoSuchProcess
from hwperfd.counters.kernel import CounterKernel
from hwperfd.host import processes
from hwperfd.irix import marshal
from hwperfd.irix.calls import IoctlCall, Target
from hwperfd.irix.errno_map import PointerArgument, UnknownCommand, to_oserror
from hwperfd.irix.info import InfoIoctls
import structs

Reply = tuple[int, bytes]

PID_MAX = 1 << 22  # Linux's largest pid_max (PID_MAX_LIMIT on 64-bit)


class ProcIoctls:
    """Decode, check, call the kernel, encode.  Raises OSError(errno) only."""

    def __init__(self, kernel: CounterKernel) -> None:
        self.kernel = kernel
        self._commands: dict[int, Callable[[Target, IoctlCall], Reply]] = {
            structs.PIOCENEVCTRS: self._enable,
            structs.PIOCGETEVCTRS: self._read,
            structs.PIOCGETPREVCTRS: self._read_usage,
            structs.PIOCGETEVCTRL: self._control,
            structs.PIOCSETEVCTRL: self._set_control,
            structs.PIOCRELEVCTRS: self._release,
            structs.PIOCSAVECCNTRS: self._save_child,
            structs.HWPERFD_PIOCENEVCTRSEX: self._enable_ex,
            structs.HWPERFD_PIOCGETEVCTRLEX: self._control_ex,
            structs.PIOCENEVCTRSEX: self._pointers("PIOCENEVCTRSEX"),
            structs.PIOCGETEVCTRLEX: self._pointers("PIOCGETEVCTRLEX"),
        }
        # proc(4)'s informational ioctls (PIOCPSINFO, PIOCUSAGE, ...) too.
        self._info = InfoIoctls(kernel)
        for cmd, info in self._info.commands.items():
            self._commands[cmd] = _on_pid(info)

    def __call__(self, pid: int, call: IoctlCall, start: int = 0, gone: bool = False) -> Reply:
        """``start``: the start time of the process the file was opened on;
        ``gone``: that process has been reaped.  An unknown command is ENOTTY
        whatever the state of the process; a known one on a gone process ESRCH."""
        handler = self._commands.get(call.cmd)
        if handler is None:
            raise UnknownCommand(call.cmd)
        try:
            if gone:
                raise NoSuchProcess(f"pid {pid} is gone")
            return handler(Target(pid, start), call)
        except CounterError as exc:
            raise to_oserror(exc) from None

    def _enable(self, target: Target, call: IoctlCall) -> Reply:
        request = marshal.parse_request(call.data)
        return self.kernel.enable(call.caller(), target, request), b""

    def _enable_ex(self, target: Target, call: IoctlCall) -> Reply:
        request, restore = marshal.parse_request_ex(call.data)
        return self.kernel.enable(call.caller(), target, request, restore), b""

    def _control_ex(self, target: Target, call: IoctlCall) -> Reply:
        generation, request = self.kernel.control(call.caller(), target)
        return generation, marshal.build_control_ex(request)

    @staticmethod
    def _pointers(name: str) -> Callable[[Target, IoctlCall], Reply]:
        def refuse(target: Target, call: IoctlCall) -> Reply:
            raise PointerArgument(name)

        return refuse

    def _read(self, target: Target, call: IoctlCall) -> Reply:
        generation, counts = self.kernel.read(call.caller(), target)
        return generation, marshal.build_counts(counts)

    def _read_usage(self, target: Target, call: IoctlCall) -> Reply:
        generation, _ = self.kernel.read(call.caller(), target)
        view = self.kernel.view(target.pid, target.start)
        usage = self._info.usage(target.pid)
        return generation, marshal.build_prusage(usage, view, self._tlb_misses(target.pid, usage))

    def _control(self, target: Target, call: IoctlCall) -> Reply:
        generation, request = self.kernel.control(call.caller(), target)
        return generation, marshal.build_eventctrl(request)

    def _set_control(self, target: Target, call: IoctlCall) -> Reply:
        request = marshal.parse_request(call.data)
        return self.kernel.set_control(call.caller(), target, request), b""

    def _release(self, target: Target, call: IoctlCall) -> Reply:
        self.kernel.release(call.caller(), target)
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
        self.kernel.save_child_counts(call.caller(), parent, child)
        return 0, b""

    def _tlb_misses(self, pid: int, usage: processes.Usage | None) -> tuple[int, int]:
        """IRIX's pu_utlb/pu_ktlb have no Linux source: take them from the
        emulated CPU, at the process's profile rate over its CPU time."""
        if usage is None:
            return 0, 0
        rate = self.kernel.profile(pid).rate("tlb_misses") * self.kernel.cpus.mhz / 1000
        return int(Fraction(usage.user_ns) * rate), int(Fraction(usage.system_ns) * rate)


def _on_pid(info: Callable[[int, IoctlCall], Reply]) -> Callable[[Target, IoctlCall], Reply]:
    """An informational ioctl, which takes the target's pid."""

    def handler(target: Target, call: IoctlCall) -> Reply:
        return info(target.pid, call)

    return handler
