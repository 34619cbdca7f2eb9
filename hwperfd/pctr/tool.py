"""pctr(1): display or set the CPU performance counters, as OpenBSD's.

Options, output and messages follow OpenBSD's usr.bin/pctr on amd64: the
machine and vendor decide the table (GenuineIntel: two counters, unit masks
and MESI flags; AuthenticAMD: four); the counters are read with PCIOCRD and
set with PCIOCSx on ``<mount>/pctr``, where OpenBSD's sysctl(3) answers come
from reading that node.  See man/pctr.1.
"""

from __future__ import annotations

import errno
import fcntl
import getopt
import os
import re
import struct
import sys
from typing import NoReturn

from hwperfd.cpu.models import (
    ANY_INITIATOR,
    EDGE,
    MESI,
    MODELS,
    UNIT_MASK,
    CpuModel,
    ModelEvent,
)
from structs.pctr import (
    PCIOCRD,
    PCIOCS,
    PCTR_CM_SHIFT,
    PCTR_E,
    PCTR_EN,
    PCTR_I,
    PCTR_K,
    PCTR_NUM,
    PCTR_U,
    PCTR_UM_A,
    PCTR_UM_E,
    PCTR_UM_I,
    PCTR_UM_M,
    PCTR_UM_MESI,
    PCTR_UM_S,
    PCTR_UM_SHIFT,
    PCTRST_SIZE,
    pctrst,
)

PROG = "pctr"
CPU_CORE, CPU_AMD = "core", "amd"
INTEL_NUM, AMD_NUM = 2, 4
MAX_FUNCT = MAX_UMASK = 0xFF


class Exit(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def errx(message: str) -> NoReturn:
    print(f"{PROG}: {message}", file=sys.stderr)
    raise Exit(1)


def err(message: str, exc: OSError) -> NoReturn:
    print(f"{PROG}: {message}: {os.strerror(exc.errno or errno.EIO)}", file=sys.stderr)
    raise Exit(1)


def device() -> str:
    return os.path.join(os.environ.get("HWPERFD_MOUNT") or "/run/hwperfd", "pctr")


class Machine:
    """What OpenBSD's pctr(1) asks sysctl: the architecture and CPU vendor."""

    def __init__(self) -> None:
        try:
            with open(device()) as f:
                info = dict(line.split(" ", 1) for line in f.read().splitlines() if " " in line)
        except OSError as exc:
            err("HW_MACHINE", exc)
        arch = info.get("machine", "")
        if arch not in ("i386", "amd64"):
            errx(f"architecture {arch} is not supported")
        vendor = info.get("vendor", "")
        self.cpu_type = CPU_AMD if vendor == "AuthenticAMD" else CPU_CORE if vendor == "GenuineIntel" else None
        self.model: CpuModel | None = MODELS.get(info.get("model", ""))
        if self.model is None or self.model.arch != arch:
            self.model = next((m for m in MODELS.values() if m.vendor == vendor and m.arch == arch), None)

    @property
    def events(self) -> tuple[ModelEvent, ...]:
        return self.model.events if self.model is not None else ()

    def event(self, code: int) -> ModelEvent | None:
        return next((e for e in self.events if e.code == code), None)


class Options:
    def __init__(self) -> None:
        self.ctr = self.func = self.masku = self.thold = 0
        self.flags: dict[str, int] = {c: 0 for c in "AcEeIiklMSu"}
        self.set_mode = False


def usage(machine: Machine) -> NoReturn:
    usg = {
        CPU_CORE: "[-AEeIiklMSu] [-f funct] [-m umask] [-s ctr] [-t thold]",
        CPU_AMD: "[-eilku] [-f funct] [-m umask] [-s ctr] [-t thold]",
    }.get(machine.cpu_type or "", "(null)")
    print(f"usage: {PROG} {usg}", file=sys.stderr)
    raise Exit(1)


def scan_hex(text: str) -> int | None:
    """sscanf(text, "%x"): leading blanks, a sign, an optional 0x, hex digits."""
    match = re.match(r"\s*([+-]?)(?:0[xX](?=[0-9a-fA-F]))?([0-9a-fA-F]+)", text)
    if match is None:
        return None
    value = int(match.group(2), 16) & 0xFFFFFFFF
    if match.group(1) == "-":
        value = -value & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value  # stored in an int


def strtonum(text: str, low: int, high: int) -> tuple[int, str | None]:
    """OpenBSD's strtonum(3): (value, None) or (0, "invalid" / "too small" / "too large")."""
    if not re.fullmatch(r"\s*[+-]?\d+", text):
        return 0, "invalid"
    value = int(text)
    if value < low:
        return 0, "too small"
    if value > high:
        return 0, "too large"
    return value, None


def parse(argv: list[str], machine: Machine) -> tuple[Options, bool]:
    opts = Options()
    list_mode = False
    try:
        pairs, rest = getopt.getopt(argv, "AcEef:IiklMm:Ss:t:u")
    except getopt.GetoptError as exc:
        what = "option requires an argument" if "requires argument" in exc.msg else "unknown option"
        print(f"{PROG}: {what} -- {exc.opt}", file=sys.stderr)
        usage(machine)
    for flag, value in pairs:
        ch = flag[1]
        if ch == "f":
            func = scan_hex(value)
            if func is None or func < 0 or func > MAX_FUNCT:
                errx("invalid function number")
            opts.func = func
        elif ch == "m":
            masku = scan_hex(value)
            if masku is None or masku < 0 or masku > MAX_UMASK:
                errx("invalid unit mask number")
            opts.masku = masku
        elif ch == "s":
            opts.set_mode = True
            opts.ctr, why = strtonum(value, 0, PCTR_NUM - 1)
            if why:
                errx(f"counter number is {why}: {value}")
        elif ch == "t":
            opts.thold, why = strtonum(value, 0, 0xFF)
            if why:
                errx(f"threshold is {why}: {value}")
        elif ch == "l":
            list_mode = True
        else:
            opts.flags[ch] += 1
    if rest:
        usage(machine)
    f = opts.flags
    if f["A"] and (f["M"] or f["E"] or f["S"] or f["I"]):
        usage(machine)
    return opts, list_mode


def fn2str(machine: Machine, sel: int) -> str:
    fn = sel & 0xFF
    mode = "".join(
        c if sel & bit else "-" for c, bit in (("i", PCTR_I), ("e", PCTR_E), ("k", PCTR_K), ("u", PCTR_U))
    )
    th = f"+{sel >> PCTR_CM_SHIFT}" if sel >> PCTR_CM_SHIFT else ""
    umask = (sel >> PCTR_UM_SHIFT) & 0xFF
    if machine.cpu_type == CPU_AMD:
        return f"{mode} {fn:02x} {umask:02x} {th}"
    event = machine.event(fn)
    um = ""
    if event is not None and MESI in event.flags:
        um = "".join(c if sel & bit else "-" for c, bit in (("M", PCTR_UM_M), ("E", PCTR_UM_E),
                                                              ("S", PCTR_UM_S), ("I", PCTR_UM_I)))  # fmt: skip
    elif event is not None and ANY_INITIATOR in event.flags:
        um = "A" if sel & PCTR_UM_A else "-"
    return f"{mode} {fn:02x} {umask:02x} {th} {um} {event.name if event else 'unknown function'}"


def read_counters() -> bytes:
    fd = os.open(device(), os.O_RDONLY)
    try:
        return fcntl.ioctl(fd, PCIOCRD, bytes(PCTRST_SIZE))
    finally:
        os.close(fd)


def print_values(machine: Machine, raw: bytes) -> None:
    st = pctrst.parse(raw)
    if machine.cpu_type is None:
        return
    n = AMD_NUM if machine.cpu_type == CPU_AMD else INTEL_NUM
    for i in range(n):
        print(f" ctr{i} = {st.pctr_hwc[i]:16d}  [{fn2str(machine, st.pctr_fn[i])}]")
    print(f"  tsc = {st.pctr_tsc:16d}")


def print_desc(desc: str) -> None:
    """Six spaces in, lines under 70 columns, broken at blanks (pctr_printdesc)."""
    while True:
        desc = desc.lstrip(" ")
        if len(desc) < 70:
            if desc:
                print(f"      {desc}")
            return
        cut = desc.rfind(" ", 0, 71)
        cut = len(desc[:cut].rstrip(" "))
        print(f"      {desc[:cut]}")
        desc = desc[cut:]


def list_functions(machine: Machine) -> None:
    if machine.cpu_type is None:
        return
    for event in machine.events:
        line = f"{event.code:02x}  {event.name}"
        if MESI in event.flags:
            line += "  (MESI)"
        elif ANY_INITIATOR in event.flags:
            line += "  (A)"
        if event.counters == 0b01:
            line += "  (ctr0 only)"
        elif event.counters == 0b10:
            line += "  (ctr1 only)"
        if UNIT_MASK in event.flags:
            line += "  (needs unit mask)"
        print(line)
        if event.description:
            print_desc(event.description)


def function_value(machine: Machine, opts: Options) -> int:
    """pctr_set_cntr: the value PCIOCSx gets, with pctr(1)'s own checks."""
    f, func, val = opts.flags, opts.func, opts.func
    if machine.cpu_type == CPU_CORE:
        if opts.ctr >= INTEL_NUM:
            errx(f"only {INTEL_NUM} counters are supported")
        event = machine.event(func) if func else None
        if func and event is None:
            errx(f"function {func:02x} is not supported")
        if event is not None and ANY_INITIATOR in event.flags:
            val |= PCTR_UM_A
        if event is not None and MESI in event.flags:
            for ch, bit in (("M", PCTR_UM_M), ("E", PCTR_UM_E), ("S", PCTR_UM_S), ("I", PCTR_UM_I)):
                if f[ch]:
                    val |= bit
            # OpenBSD's test: all four states unless every one of -M -E -S -I is given.
            if not f["M"] or not f["E"] or not f["S"] or not f["I"]:
                val |= PCTR_UM_MESI
        if event is not None and EDGE in event.flags:
            val |= PCTR_E
        if event is not None and UNIT_MASK in event.flags and not opts.masku:
            errx(f"function {func:02x} needs unit mask specification")
    if machine.cpu_type == CPU_AMD and func and machine.event(func) is None:
        errx(f"function {func:02x} is not supported")
    if opts.ctr >= AMD_NUM:
        errx(f"only {AMD_NUM} counters are supported")
    for ch, bit in (("e", PCTR_E), ("i", PCTR_I), ("k", PCTR_K), ("u", PCTR_U)):
        if f[ch]:
            val |= bit
    if func and not f["k"] and not f["u"]:
        val |= PCTR_K | PCTR_U
    val |= opts.masku << PCTR_UM_SHIFT
    val |= opts.thold << PCTR_CM_SHIFT
    if func:
        val |= PCTR_EN
    return val & 0xFFFFFFFF


def set_counter(ctr: int, value: int) -> None:
    fd = os.open(device(), os.O_WRONLY)
    try:
        fcntl.ioctl(fd, PCIOCS[ctr], struct.pack("I", value))
    finally:
        os.close(fd)


def run(argv: list[str]) -> None:
    machine = Machine()
    opts, list_mode = parse(argv, machine)
    if list_mode:
        list_functions(machine)
    elif opts.set_mode:
        value = function_value(machine, opts)
        try:
            set_counter(opts.ctr, value)
        except OSError as exc:
            err("pctr_set_cntr", exc)
    else:
        try:
            raw = read_counters()
        except OSError as exc:
            err("pctr_read", exc)
        print_values(machine, raw)


def main(argv: list[str] | None = None) -> int:
    try:
        run(sys.argv[1:] if argv is None else argv)
    except Exit as exc:
        sys.stdout.flush()
        return exc.status
    return 0


if __name__ == "__main__":
    sys.exit(main())
