"""Failures on purpose: ioctls made to answer an errno the caller chose.

Counter clients have error paths (EBUSY from a held PMU, EINTR, a vanished
process) that a healthy PMU never takes.  Root arms them through the control
node; an armed call fails before it reaches the kernel model, so - like any
refused call - it changes nothing.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Callable

import structs

ANY = "*"
CONTROL = "control"
ALWAYS = -1

# Names a fault may be armed for: the /proc calls and the syssgi sub-commands.
CALLS: dict[str, int] = {
    **{
        name: getattr(structs, name)
        for name in ("PIOCENEVCTRS", "PIOCRELEVCTRS", "PIOCGETEVCTRS", "PIOCGETPREVCTRS", "PIOCGETEVCTRL",
                     "PIOCSETEVCTRL", "PIOCSAVECCNTRS")
    },  # fmt: skip
    "PIOCENEVCTRSEX": structs.HWPERFD_PIOCENEVCTRSEX,
    "PIOCGETEVCTRLEX": structs.HWPERFD_PIOCGETEVCTRLEX,
    **{
        name: getattr(structs, "HWIOC_" + name[len("HWPERF_"):])
        for name in ("HWPERF_PROFENABLE", "HWPERF_ENSYSCNTRS", "HWPERF_GET_CPUCNTRS", "HWPERF_PROF_CTR_SUSP",
                     "HWPERF_PROF_CTR_CONT", "HWPERF_RELSYSCNTRS", "HWPERF_GET_SYSCNTRS", "HWPERF_GET_SYSEVCTRL",
                     "HWPERF_SET_SYSEVCTRL")
    },  # fmt: skip
}
_NAMES = {cmd: name for name, cmd in CALLS.items()}
_NAMES[structs.PIOCENEVCTRSEX] = "PIOCENEVCTRSEX"  # IRIX's pointer forms count as the same calls
_NAMES[structs.PIOCGETEVCTRLEX] = "PIOCGETEVCTRLEX"
_NAMES[structs.HWPERFD_PROFENABLE] = "HWPERF_PROFENABLE"  # libhwperf's form of the call


class FaultError(ValueError):
    """A fault that cannot be armed; the message says why."""


@dataclass
class Fault:
    target: int | str  # a pid, CONTROL or ANY
    call: str  # a name in CALLS, or ANY
    code: int
    times: int  # ALWAYS, or how many calls are left

    def describe(self) -> str:
        left = "always" if self.times == ALWAYS else f"x{self.times}"
        return f"fault {self.target} {self.call} {errno.errorcode[self.code]} {left}"


def parse_errno(name: str) -> int:
    code = getattr(errno, name, None) if name.isupper() and name.startswith("E") else None
    if not isinstance(code, int) or code not in errno.errorcode:
        raise FaultError(f"not an errno name: {name[:20]!r}")
    if code == errno.ENOSYS:
        # FUSE takes ENOSYS from an ioctl as "no ioctl support" and never asks again.
        raise FaultError("ENOSYS would turn off every ioctl on the mount; choose another errno")
    return code


def _number(text: str, what: str) -> int:
    if not text.isdigit():
        raise FaultError(f"{what} must be a non-negative integer, got {text!r}")
    return int(text)


class FaultPlan:
    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def command(self, args: list[str], exists: Callable[[int], bool]) -> None:
        """The control node's ``fail PID|control|* CALL|* ERRNO [TIMES|always]``;
        ``exists(pid)``: a process of that pid lives."""
        if len(args) not in (3, 4):
            raise FaultError("usage: fail PID|control|* CALL|* ERRNO [TIMES|always]")
        target: int | str = args[0]
        if target not in (ANY, CONTROL):
            target = _number(args[0], "pid")
            if not exists(target):
                raise FaultError(f"no process {target}")
        times = 1 if len(args) == 3 else ALWAYS if args[3] == "always" else _number(args[3], "times")
        self.arm(target, args[1], parse_errno(args[2]), times)

    def arm(self, target: int | str, call: str, code: int, times: int) -> None:
        if call != ANY and call not in CALLS:
            raise FaultError(f"unknown call {call[:40]!r} (one of {', '.join(CALLS)} or *)")
        if times != ALWAYS and times < 1:
            raise FaultError("a fault fires at least once")
        self._faults.append(Fault(target, call, code, times))

    def clear(self) -> None:
        self._faults.clear()

    def check(self, target: int | str, cmd: int) -> None:
        """Raise the errno of the first armed fault matching this call."""
        if not self._faults:
            return
        call = _NAMES.get(cmd)
        for fault in self._faults:
            if fault.target not in (ANY, target) or fault.call not in (ANY, call):
                continue
            if fault.times != ALWAYS:
                fault.times -= 1
                if fault.times == 0:
                    self._faults.remove(fault)
            raise OSError(fault.code, f"failed on purpose ({fault.describe()})")

    def armed(self, target: int, call: str) -> bool:
        """Some fault would fall on ``call`` (a name in CALLS) on ``target``:
        a state page then sends its process's reads to the daemon, so that
        the fault reaches it."""
        return any(f.target in (ANY, target) and f.call in (ANY, call) for f in self._faults)

    def pids(self) -> set[int]:
        return {f.target for f in self._faults if isinstance(f.target, int)}

    def forget(self, pid: int) -> None:
        """The process is gone: its faults must not fall on a later one with its pid."""
        self._faults = [f for f in self._faults if f.target != pid]

    def describe(self) -> list[str]:
        return [fault.describe() for fault in self._faults]
