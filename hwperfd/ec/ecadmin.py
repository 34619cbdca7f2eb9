"""ecadmin(1): configure and control the global event counters.

The global counters are hwperfd's system mode, driven through the syssgi
ioctls of ``<mount>/control``: the first enabling ecadmin acquires it
(HWPERF_ENSYSCNTRS), later ones change the events (HWPERF_SET_SYSEVCTRL,
which keeps the counts of unchanged slots), and it is released
(HWPERF_RELSYSCNTRS) when the last event goes.
"""

from __future__ import annotations

import errno
import sys
from dataclasses import dataclass, field

from hwperfd.client import Control, mount_point, require_mount
from hwperfd.ec import common, procs
from hwperfd.ec.common import EcError, UsageError
from hwperfd.perfex import machine as machines

USAGE = "ecadmin [-aDlMrT] [-d event[,event...]] [-e event[,event...]]"
HELP = f"""\
usage: {USAGE}
       ecadmin -e '?'

Configure and control the global (system-wide) event counters: every event
enabled here counts on every CPU, in user and kernel mode, for all processes.
They are hwperfd's system mode: the first -e acquires it (HWPERF_ENSYSCNTRS
on the control node), later changes use HWPERF_SET_SYSEVCTRL, and the last
event's going releases it (HWPERF_RELSYSCNTRS).  Each event sits in the slot
perfex -a uses for it.

  -e events  enable the events (0-31 or names in any case, comma separated;
             '*' for all).  Adds to what is already enabled: events already
             counting keep their counts.
  -e '?'     list the events of the emulated CPU and exit.
  -a         enable all events (as -e '*'); more than one event per hardware
             counter is multiplexed at clock ticks (ecstats scales, marks '*').
  -d events  disable the events; the others keep counting.  Disabling the last
             one releases the counters.
  -r         disable and release all global counters (saying so, with exit
             status 0, if none were enabled).
  -l         list the enabled events (after any change on the same line).
  -D         diagnostics: each control operation, on stderr.
  -M, -T     accepted and ignored: hwperfd emulates one CPU type, so the
             mixed R10000/R12000 checks these relax never apply.

Order within one call: -r, then -e/-a, then -d (so -a -d 5 is all but 5), then -l.

Enabling is refused while any process counts through its /proc file (perfex,
PAPI, ...): the error names them (ecfind lists them).  While global counters
are enabled, perfex and other process-based counting get EBUSY.

Everything but -l and -e '?' needs root.
hwperfd must be mounted at $HWPERFD_MOUNT or {mount_point()}.
Exit status: 0 on success, 1 on any error.
"""


@dataclass
class Options:
    enable: list[str] = field(default_factory=list)
    disable: list[str] = field(default_factory=list)
    all: bool = False
    release: bool = False
    listing: bool = False
    diagnostics: bool = False
    ignored: list[str] = field(default_factory=list)  # -M, -T

    @property
    def changing(self) -> bool:
        return bool(self.all or self.enable or self.disable or self.release)


def parse_args(argv: list[str]) -> Options:
    found, rest = common.options(argv, "aDlMrTd:e:")
    if rest:
        raise UsageError(f"unexpected argument {rest[0]!r}")
    opts = Options()
    for name, value in found:
        if name == "-e":
            opts.enable.append(value)
        elif name == "-d":
            opts.disable.append(value)
        elif name in ("-M", "-T"):
            opts.ignored.append(name)
        else:
            attribute = {"-a": "all", "-r": "release", "-l": "listing", "-D": "diagnostics"}[name]
            setattr(opts, attribute, True)
    if not found:
        raise UsageError("no option given")
    return opts


def main(argv: list[str] | None = None) -> int:
    return common.run("ecadmin", USAGE, HELP, _ecadmin, argv)


def _ecadmin(argv: list[str]) -> int:
    opts = parse_args(argv)
    say = common.diagnostics("ecadmin", opts.diagnostics)
    if any(word.strip() == "?" for value in opts.enable for word in value.split(",")):
        sys.stdout.write(common.event_listing(mount_point()))
        return 0
    for name in opts.ignored:
        say(f"{name}: no effect: hwperfd emulates a single CPU type, so processors are never mixed")
    if opts.changing and not common.is_root():
        # ecadmin(1) CAVEATS: "the user must be root for any option other than -l".
        raise EcError("must be root to enable, disable or release the global event counters")
    mount = require_mount()
    with common.open_control(mount, "ecadmin" if opts.changing else "ecadmin -l") as control:
        machine = machines.detect(mount)
        say(f"hwperfd at {mount}: {machine.cpu_type} x{machine.cpus} @ {machine.mhz:g} MHz")
        if opts.changing:
            _change(opts, control, machine.cpu_type, say)
        if opts.listing:
            sys.stdout.write(_listing(common.read_state(control, say), machine))
    return 0


def _change(opts: Options, control: Control, cpu_type: str, say: common.Say) -> None:
    """-r, then -e/-a, then -d, as one HWPERF_* call where one will do."""
    wanted = common.event_numbers("*", cpu_type) if opts.all else []
    for value in opts.enable:
        wanted += common.event_numbers(value, cpu_type)
    dropped = [n for value in opts.disable for n in common.event_numbers(value, cpu_type)]
    state = common.read_state(control, say)
    if opts.release:
        if state is None:
            common.notice("ecadmin", "the global event counters were not enabled: nothing to release")
        else:
            _call(say, "HWPERF_RELSYSCNTRS", control.release_system)
            state = None
    current = state.in_use() if state else {}

    def numbers(specs: dict[int, int]) -> set[int]:
        return {s.number for s in common.decode(specs, cpu_type)}

    target = dict(current)
    for number in dict.fromkeys(wanted):
        if number not in numbers(target):
            slot, word = common.place(number, cpu_type, target)
            target[slot] = word
    for number in dict.fromkeys(dropped):
        if number not in numbers(target):
            common.notice("ecadmin", f"event {number} was not enabled")
    for s in common.decode(target, cpu_type):
        if s.number in dropped:
            del target[s.slot]

    if target == current:
        say("nothing to change")
    elif not target:
        _call(say, "HWPERF_RELSYSCNTRS", control.release_system)
    else:
        if numbers(target) - numbers(current):
            _refuse_if_process_counters(control, say)
        if state is None:
            _call(say, f"HWPERF_ENSYSCNTRS {common.words(target)}", control.enable_system, target)
        else:
            _call(say, f"HWPERF_SET_SYSEVCTRL {common.words(target)}", control.set_system_control, target)


def _refuse_if_process_counters(control: Control, say: common.Say) -> None:
    """ecadmin(1) CAVEATS: while any process uses the process-based counters,
    manipulating the global ones does not succeed.  hwperfd's ENSYSCNTRS
    would displace them, so look first (as ecfind does).  A process that
    starts counting between this look and the call is displaced: its
    generation changes, which tells its reader."""
    found = procs.scan(control.path.parent)
    say(f"looked at {found.files} process files for process-based counters: {len(found.counting)} counting")
    if not found.counting:
        return
    named = []
    for user in found.counting:
        row = procs.ps_row(user.pid)
        named.append(f"{user.pid} ({row.comm if row else '?'})")
    raise EcError(
        "cannot enable global event counters: process-based counters are in use by pid "
        + ", ".join(named)
        + " (see ecfind)"
    )


def _call(say: common.Say, what: str, call, *args) -> None:
    name = what.split()[0]
    try:
        result = call(*args)
    except OSError as exc:
        reason = {
            errno.EBUSY: "the counters were taken in system mode by another caller",
            errno.EINVAL: "refused with EINVAL (another caller may have released or changed the global counters)",
        }.get(exc.errno or 0, exc.strerror)
        raise EcError(f"{name}: {reason}") from None
    say(what + (f" -> generation {result}" if result is not None else ""))


def _listing(state: common.SystemState | None, machine: machines.Machine) -> str:
    if state is None:
        return "No global event counters are enabled.\n"
    lines = [f"Global event counters enabled (generation {state.generation}, {machine.label} x{machine.cpus}):"]
    for s in common.decode(state.specs, machine.cpu_type):
        lines.append(f"{s.number:>2} {s.name:<60} counter {s.counter} slot {s.slot:>2} mode {s.modes}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
