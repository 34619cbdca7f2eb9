"""syssgi(SGI_EVENTCTR, ...) sub-commands, served as ioctls on the control node.

Linux has no syssgi; abi.md gives each sub-command an ioctl number (type 'h',
number = the IRIX sub-command) on a root-only node of the mount.

The profiling commands act on the calling process, as IRIX's did on
curuthread's: HWPERFD_PROFENABLE (libhwperf's form of HWPERF_PROFENABLE, the
buffers kept in the caller) and HWPERF_PROF_CTR_SUSP / _CONT.
"""

from __future__ import annotations


from hwperfd.counters.errors import NoSuchProcess
from hwperfd.counters.kernel import Caller, CounterKernel
from hwperfd.host import processes
from hwperfd.irix import marshal
from hwperfd.irix.calls import IoctlCall, LazyCaller, Target, caller
from hwperfd.irix.errno_map import BadArgument, ProfilingBuffers, in_errnos
from hwperfd.node import CONTROLS, COUNTS, PAGES, TEXTS, Call, Changed, Command, dispatch
import structs

Reply = tuple[int, bytes]

# What a call may change.  Reads change only what a text shows (anyone may
# make them: they must not cost a rewrite of every state page).  A call that
# sets or ends system mode, or a caller's profiling, may take or give back
# any process's counters: every page, every read answered in C, the tick.
READS = TEXTS
SETS = TEXTS | COUNTS | PAGES | CONTROLS


class SyssgiIoctls:
    def __init__(self, kernel: CounterKernel) -> None:
        self.kernel = kernel
        self.table: dict[int, Command] = {
            getattr(structs, name): Command(in_errnos(handler), changes, name)
            for name, handler, changes in (
                ("HWIOC_ENSYSCNTRS", self._enable, SETS),
                ("HWIOC_GET_SYSCNTRS", self._read, READS),
                ("HWIOC_GET_CPUCNTRS", self._read_cpu, READS),
                ("HWIOC_GET_SYSEVCTRL", self._control, READS),
                ("HWIOC_SET_SYSEVCTRL", self._set_control, SETS),
                ("HWIOC_RELSYSCNTRS", self._release, SETS),
                ("HWIOC_PROFENABLE", self._profenable_buffers, 0),  # always refused
                ("HWPERFD_PROFENABLE", self._profenable, SETS),
                ("HWIOC_PROF_CTR_SUSP", self._suspend, SETS),
                ("HWIOC_PROF_CTR_CONT", self._continue, SETS),  # carries nothing, may restart ticks
            )
        }

    def __call__(self, call: Call, changed: Changed) -> Reply:
        """What the command may change is reported in ``changed`` once it
        answers: a refused call changes nothing."""
        return dispatch(self.table, call, changed)

    def _enable(self, call: IoctlCall) -> Reply:
        return self.kernel.enable_system(caller(call), marshal.parse_request(call.data)), b""

    def _read(self, call: IoctlCall) -> Reply:
        generation, counts = self.kernel.read_system()
        return generation, marshal.build_counts(counts)

    def _read_cpu(self, call: IoctlCall) -> Reply:
        if len(call.data) != marshal.CPUCNTRS_ARG.sizeof():
            raise BadArgument("HWPERF_GET_CPUCNTRS takes a hwperf_cpucntrs_arg_t")
        cpuid = marshal.CPUCNTRS_ARG.parse(call.data).cpuid
        result = self.kernel.read_cpu(cpuid)
        if result is None:
            # r10k_counters(5): "0 otherwise (which would indicate an invalid cpuid)"
            return 0, call.data
        generation, counts = result
        return generation, marshal.CPUCNTRS_ARG.build(dict(cpuid=cpuid, cntr=dict(hwp_evctr=list(counts))))

    def _control(self, call: IoctlCall) -> Reply:
        generation, request = self.kernel.system_control()
        return generation, marshal.build_eventctrl(request)

    def _set_control(self, call: IoctlCall) -> Reply:
        return self.kernel.set_system_control(caller(call), marshal.parse_request(call.data)), b""

    def _release(self, call: IoctlCall) -> Reply:
        self.kernel.release_system(caller(call))
        return 0, b""

    def _profenable_buffers(self, call: IoctlCall) -> Reply:
        raise ProfilingBuffers()

    def _profenable(self, call: IoctlCall) -> Reply:
        request, tick_signal = marshal.parse_profenable(call.data)
        caller, target = self._self(call)
        if tick_signal == 0:
            # No region to profile: evc_profil disabled the counters, returned 0.
            self.kernel.disable_profiling(caller, target)
            return 0, b""
        return self.kernel.enable_profiling(caller, target, request, tick_signal), b""

    def _suspend(self, call: IoctlCall) -> Reply:
        self.kernel.suspend(*self._self(call), True)
        return 0, b""

    def _continue(self, call: IoctlCall) -> Reply:
        self.kernel.suspend(*self._self(call), False)
        return 0, b""

    @staticmethod
    def _self(call: IoctlCall) -> tuple[Caller, Target]:
        """The calling process: FUSE names the thread that called, IRIX acted
        on its whole process."""
        pid = processes.thread_group(call.pid)
        start = processes.read_start(pid) if pid is not None else None
        if pid is None or start is None:
            raise NoSuchProcess(f"caller {call.pid} is gone")
        return LazyCaller(pid, call.uid, call.gid), Target(pid, start)
