"""Keeping the host's CPUs out of their idle states while the daemon runs
(``hwperfd --keep-cpus-awake``): a PM QoS request of 0 us on
/dev/cpu_dma_latency, which the kernel honours for as long as the file
stays open (the kernel's Documentation/power/pm_qos_interface.rst).

Why: on the real clock a count is CPU time at the model's rate, and a host
that runs a CPU slower for a while after it idled (a virtual machine whose
vCPU halted, a CPU that left a deep C-state) makes the same loop take more
CPU time after any blocking call, a request to the daemon among them.  A
real PMU counts the same cycles at any speed.  With every CPU kept awake the
same work takes the same CPU time (docs/irix.md, "Where the counts come
from").  It costs power, and a hypervisor sees the idle vCPUs busy, so it
is asked for, never on by default."""

from __future__ import annotations

import os
import struct

PATH = "/dev/cpu_dma_latency"
_S32 = struct.Struct("=i")


def current(path: str = PATH) -> int:
    """The latency, in us, the kernel now keeps every CPU within: the least
    of all requests held (2000000000 with none)."""
    with open(path, "rb") as f:
        return int(_S32.unpack(f.read(_S32.size))[0])


class AwakeCpus:
    """A held request of 0 us: no CPU enters an idle state it would take any
    time to leave.  Let go by ``close``, or when the process ends."""

    def __init__(self, path: str = PATH) -> None:
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(self._fd, _S32.pack(0))
        except OSError:
            os.close(self._fd)
            self._fd = None
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
