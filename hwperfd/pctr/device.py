"""``<mount>/pctr``: OpenBSD's /dev/pctr driver (sys/arch/amd64/amd64/pctr.c).

The driver's checks, in its order:

* an unknown ioctl: EINVAL (the driver's ``default:`` case, not ENOTTY;
  the node's table, pctr/node.py);
* PCIOCSx on a CPU without counters: ENODEV, while PCIOCRD still returns
  the TSC;
* PCIOCSx: a counter the CPU does not have (Intel 2, AMD 4): EINVAL; then a
  descriptor not open for writing: EPERM; then reserved function bits
  (``fn & 0x380000``): EINVAL;
* hwperfd's addition: another personality holds the hardware system-wide
  (IRIX system mode, ...): EBUSY.  OpenBSD had no other user of the counters
  to collide with; EBUSY is what its kernel answered for a device in use.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from hwperfd.counters.errors import CountersBusy
from hwperfd.counters.percpu import GlobalCounters
from structs.pctr import PCTR_NUM, PCTR_RESERVED, pctrst


class PctrError(Exception):
    """A refusal of the pctr driver, in its own terms."""


class NoCounters(PctrError):
    """The CPU has no counters pctr knows (not an amd64 model)."""


class BadCounter(PctrError):
    """PCIOCS2/3 on a CPU with two counters."""


class NotWritable(PctrError):
    """PCIOCSx on a descriptor opened read-only."""


class ReservedBits(PctrError):
    """A function with bits the driver refuses."""


# pctr(4) ERRORS, plus EBUSY for hardware another personality holds.  An
# unknown ioctl is EINVAL, the driver's ``default:`` case (the node's table).
ERRNO: dict[type[Exception], int] = {
    NoCounters: errno.ENODEV,
    BadCounter: errno.EINVAL,
    NotWritable: errno.EPERM,
    ReservedBits: errno.EINVAL,
    CountersBusy: errno.EBUSY,
}


def to_oserror(exc: Exception) -> OSError:
    return OSError(ERRNO[type(exc)], str(exc))


class PctrDevice:
    def __init__(self, counters: GlobalCounters, processor: Callable[[int], int | None]) -> None:
        self.counters = counters
        self._processor = processor  # the host CPU a thread runs on, None if gone

    @property
    def has_counters(self) -> bool:
        """pctr drives the counters of amd64 CPUs only; elsewhere it reads the TSC."""
        return self.counters.cpus.model.arch == "amd64"

    def read_call(self, pid: int) -> bytes:
        """PCIOCRD: the counters of the CPU the caller runs on."""
        return self.read(self.cpu_of(pid))

    def set_call(self, counter: int, data: bytes, writable: bool) -> None:
        """PCIOCSx: counter ``counter``'s function, checked in the driver's order."""
        try:
            if not self.has_counters:
                raise NoCounters(f"the {self.counters.cpus.model.name} has no counters pctr can set")
            if counter >= self.counters.count:
                raise BadCounter(f"the {self.counters.cpus.model.name} has {self.counters.count} counters")
            if not writable:
                raise NotWritable("setting a counter needs a descriptor open for writing")
            function = int.from_bytes(data[:4], "little")
            if function & PCTR_RESERVED:
                raise ReservedBits(f"function {function:#x} has reserved bits {function & PCTR_RESERVED:#x}")
            self.counters.set_function(counter, function)
        except (PctrError, CountersBusy) as exc:
            raise to_oserror(exc) from None

    def read(self, cpu: int) -> bytes:
        """struct pctrst for one CPU; without counters only the TSC is filled."""
        if not self.has_counters:
            zero = [0] * PCTR_NUM
            return pctrst.build({"pctr_fn": zero, "pctr_tsc": self.counters.tsc(cpu), "pctr_hwc": zero})
        reading = self.counters.read(cpu)
        pad = [0] * (PCTR_NUM - len(reading.values))
        return pctrst.build(
            {"pctr_fn": list(reading.functions) + pad, "pctr_tsc": reading.tsc, "pctr_hwc": list(reading.values) + pad}
        )

    def cpu_of(self, pid: int) -> int:
        processor = self._processor(pid)
        return (processor or 0) % len(self.counters.cpus)

    def describe(self) -> str:
        """What reading the node shows: the machine, for pctr(1) and people."""
        cpus = self.counters.cpus
        model = cpus.model
        lines = [
            f"model {model.name}",
            f"description {model.description}",
            f"machine {model.arch}",
            f"vendor {model.vendor}",
            f"counters {self.counters.count if self.has_counters else 0}",
            f"width {model.width}",
            f"read-width {model.read_width}",
            f"cpus {len(cpus)}",
            f"mhz {float(cpus.mhz):g}",
            f"reserved-by {cpus.reservation.holder or '-'}",
        ]
        for cpu in range(len(cpus)):
            if self.has_counters:
                reading = self.counters.read(cpu)
                pairs = enumerate(zip(reading.values, reading.functions))
                counts = " ".join(f"ctr{i} {v} fn {f:#x}" for i, (v, f) in pairs)
                lines.append(f"cpu {cpu} tsc {reading.tsc} {counts}")
            else:
                lines.append(f"cpu {cpu} tsc {self.counters.tsc(cpu)}")
        return "\n".join(lines) + "\n"
