"""``HWPERFD_GETMACHINE`` on the mount's root: the emulated machine, for any user.

syssgi(SGI_GETNVRAM, "cpufreq"), sysmp(MP_NPROCS) and the cycle-counter
period in libhwperf come from here, so they always agree with the daemon's
--cpu-type, --cpus and --mhz, and an unprivileged program may ask.
"""

from __future__ import annotations

import errno

import structs
from hwperfd.counters.kernel import CounterKernel
from hwperfd.irix.calls import IoctlCall

_MACHINE = structs.hwperfd_machine_t.compile()


def root_ioctl(kernel: CounterKernel, call: IoctlCall) -> tuple[int, bytes]:
    if call.cmd != structs.HWPERFD_GETMACHINE:
        raise OSError(errno.ENOTTY, "the mount root answers only HWPERFD_GETMACHINE")
    cpus = kernel.cpus
    return 0, _MACHINE.build(
        dict(
            hm_imp=structs.C0_IMP.get(cpus.type.name, 0),
            hm_ncpus=len(cpus),
            hm_hz=round(cpus.mhz * 1_000_000),
            hm_name=cpus.type.name[:15],
        )
    )
