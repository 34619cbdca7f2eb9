"""syssgi(SGI_EVENTCTR, ...) sub-commands, served as ioctls on the control node.

Linux has no syssgi; abi.md gives each sub-command an ioctl number (type 'h',
number = the IRIX sub-command) on a root-only node of the mount.
"""

from __future__ import annotations

from typing import Callable

from hwperfd.counters.errors import CounterError, NotSupported
from hwperfd.counters.kernel import CounterKernel
from hwperfd.irix import marshal
from hwperfd.irix.calls import IoctlCall
from hwperfd.irix.errno_map import BadArgument, UnknownCommand, to_oserror
import structs

Reply = tuple[int, bytes]


class SyssgiIoctls:
    def __init__(self, kernel: CounterKernel) -> None:
        self.kernel = kernel
        self._commands: dict[int, Callable[[IoctlCall], Reply]] = {
            structs.HWIOC_ENSYSCNTRS: self._enable,
            structs.HWIOC_GET_SYSCNTRS: self._read,
            structs.HWIOC_GET_CPUCNTRS: self._read_cpu,
            structs.HWIOC_GET_SYSEVCTRL: self._control,
            structs.HWIOC_SET_SYSEVCTRL: self._set_control,
            structs.HWIOC_RELSYSCNTRS: self._release,
            structs.HWIOC_PROFENABLE: self._unsupported,
            structs.HWIOC_PROF_CTR_SUSP: self._unsupported,
            structs.HWIOC_PROF_CTR_CONT: self._unsupported,
        }

    def __call__(self, call: IoctlCall) -> Reply:
        handler = self._commands.get(call.cmd)
        if handler is None:
            raise UnknownCommand(call.cmd)
        try:
            return handler(call)
        except CounterError as exc:
            raise to_oserror(exc) from None

    def _enable(self, call: IoctlCall) -> Reply:
        return self.kernel.enable_system(call.caller(), marshal.parse_request(call.data)), b""

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
        return self.kernel.set_system_control(call.caller(), marshal.parse_request(call.data)), b""

    def _release(self, call: IoctlCall) -> Reply:
        self.kernel.release_system(call.caller())
        return 0, b""

    def _unsupported(self, call: IoctlCall) -> Reply:
        raise NotSupported("sprofil-style profiling through the counters is not emulated")
