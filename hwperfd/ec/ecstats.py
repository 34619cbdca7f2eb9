"""ecstats(1): report global event counter activity.

Samples HWPERF_GET_SYSEVCTRL (what is enabled) and HWPERF_GET_SYSCNTRS
(the counts summed over the CPUs) every interval.  The first sample is
taken at start and not printed: it is what the first interval's rates are
measured from, so every block printed - the first included - covers one
full interval of wall time.  -a keeps the same rhythm.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

from hwperfd.client import Control, mount_point, require_mount
from hwperfd.ec import common
from hwperfd.ec.common import EcError, UsageError
from hwperfd.perfex import machine as machines
from hwperfd.perfex.report import NAME_WIDTH

USAGE = "ecstats [-aCDefr] [-s samples] [interval]"
HELP = f"""\
usage: {USAGE}

Report the global event counters (enabled with ecadmin) every interval
seconds (default 5; fractions allowed): a timestamped block per sample, one
line per event - number, name, value.

  -r          rates: events per second of wall time over the interval (default).
  -a          absolute values: the counts since each event was enabled.
  -e          only the enabled events (default).
  -f          all events; those not enabled are marked "disabled".
  -s samples  print that many blocks, then exit (default: until interrupted).
  -C          full-screen continuous mode (curses) with the keys a, r, e, f
              (as the options), q (quit) and ^L (redraw).
  -D          diagnostics: each control operation, on stderr.

The first block comes one interval after the start: rates need a previous
sample, which is taken at start and not printed.  When m enabled events
share one hardware counter the kernel gives each about 1/m of the time
(round robin at clock ticks), so their values are multiplied by m and marked
"*".  If the events change between samples (ecadmin), events that kept
their slot keep their counts; the others are measured from zero, and the
block says so.

Any user may sample (the control node's read commands answer everyone);
at least one global counter must be enabled.  hwperfd must be mounted at
$HWPERFD_MOUNT or {mount_point()}.  Exit status: 0 after -s samples or q,
1 on any error (including the counters being released while sampling).
"""


@dataclass
class Options:
    absolute: bool = False
    full: bool = False
    continuous: bool = False
    diagnostics: bool = False
    samples: int | None = None
    interval: float = 5.0


def parse_args(argv: list[str]) -> Options:
    found, rest = common.options(argv, "aCDefrs:")
    opts = Options()
    flags = {"-a": ("absolute", True), "-r": ("absolute", False), "-e": ("full", False), "-f": ("full", True),
             "-C": ("continuous", True), "-D": ("diagnostics", True)}  # fmt: skip
    for name, value in found:
        if name == "-s":
            if not value.strip().isdigit() or int(value) < 1:
                raise UsageError(f"-s needs a whole number of samples of at least 1, not {value!r}")
            opts.samples = int(value)
        else:
            setattr(opts, *flags[name])
    if len(rest) > 1:
        raise UsageError(f"unexpected argument {rest[1]!r}")
    if rest:
        try:
            opts.interval = float(rest[0])
        except ValueError:
            raise UsageError(f"the interval must be a number of seconds, not {rest[0]!r}") from None
        if not (math.isfinite(opts.interval) and opts.interval > 0):
            raise UsageError(f"the interval must be more than 0 seconds, not {rest[0]!r}")
    return opts


def main(argv: list[str] | None = None) -> int:
    return common.run("ecstats", USAGE, HELP, _ecstats, argv)


@dataclass(frozen=True)
class Sample:
    wall: float  # time.time(), for the timestamp
    clock: float  # time.monotonic(), for the interval
    state: common.SystemState


class Sampler:
    def __init__(self, control: Control, say: common.Say) -> None:
        self.control, self.say = control, say

    def take(self, first: bool = False) -> Sample:
        state = common.read_state(self.control, self.say, counts=True)
        if state is None:
            if first:
                raise EcError("no global event counters are enabled (enable some with ecadmin -e)")
            raise EcError("the global event counters were released")
        return Sample(time.time(), time.monotonic(), state)


def _ecstats(argv: list[str]) -> int:
    opts = parse_args(argv)
    say = common.diagnostics("ecstats", opts.diagnostics)
    if opts.continuous and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise EcError("-C needs a terminal on stdin and stdout")
    mount = require_mount()
    with common.open_control(mount, "ecstats") as control:
        machine = machines.detect(mount)
        sampler = Sampler(control, say)
        first = sampler.take(first=True)
        if opts.continuous:
            return _continuous(opts, sampler, first, machine)
        print(title(opts, machine), flush=True)
        before, deadline, shown = first, first.clock, 0
        while opts.samples is None or shown < opts.samples:
            deadline += opts.interval
            time.sleep(max(0.0, deadline - time.monotonic()))
            after = sampler.take()
            print("\n" + "\n".join(block(before, after, opts, machine.cpu_type)), flush=True)
            before, shown = after, shown + 1
    return 0


def title(opts: Options, machine: machines.Machine) -> str:
    what = "counts since each event was enabled" if opts.absolute else "rates per second"
    return (
        f"Global event counters of hwperfd at {machine.mount} ({machine.label} x{machine.cpus} @ {machine.mhz:g} MHz): "
        f"{what}, every {opts.interval:g} s; * = multiplexed m ways, scaled by m"
    )


def block(before: Sample, after: Sample, opts: Options, cpu_type: str) -> list[str]:
    """One sample: a timestamp line, then a line per event by number."""
    elapsed = after.clock - before.clock
    old, new = before.state, after.state
    assert old.counts is not None and new.counts is not None  # sampled with counts=True
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(after.wall)) + f".{int(after.wall % 1 * 1000):03d}"
    head = f"{stamp}  interval {elapsed:.6f} s  generation {new.generation}"
    if new.generation != old.generation:
        head += f"  (events changed since generation {old.generation})"
    slots = common.decode(new.specs, cpu_type)
    shares = common.sharing(slots)
    rows: list[tuple[int, str]] = []
    for s in slots:
        count, m = new.counts[s.slot], shares[s.slot]
        if opts.absolute:
            value = f"{count * m:>15d}"
        else:
            kept = old.specs[s.slot] == s.spec and old.counts[s.slot] <= count  # else restarted at zero
            delta = count - old.counts[s.slot] if kept else count
            value = f"{delta * m / elapsed:>15.2f}" if elapsed > 0 else f"{'-':>15}"
        rows.append((s.number, f"{s.number:>2} {s.name:.<{NAME_WIDTH}} {value}{'*' if m > 1 else ''}"))
    if opts.full:
        enabled = {s.number for s in slots}
        for event in common.events_of(cpu_type):
            if event.number not in enabled:
                rows.append((event.number, f"{event.number:>2} {event.name:.<{NAME_WIDTH}} {'disabled':>15}"))
    return [head] + [line for _, line in sorted(rows, key=lambda row: row[0])]


# -- -C: full screen ------------------------------------------------------------------------

KEYS = "a absolute  r rates  e enabled  f all events  q quit  ^L redraw"


def _continuous(opts: Options, sampler: Sampler, first: Sample, machine: machines.Machine) -> int:
    import curses

    try:
        last = curses.wrapper(_screen, opts, sampler, first, machine)
    except curses.error as exc:
        raise EcError(f"-C: the terminal cannot be driven ({exc}; is TERM set?)") from None
    print("\n".join(last), flush=True)  # the screen is gone: leave the last block behind
    return 0


def _screen(screen, opts: Options, sampler: Sampler, first: Sample, machine: machines.Machine) -> list[str]:
    """The loop of -C; returns the lines last shown."""
    import curses

    try:
        curses.curs_set(0)
    except curses.error:
        pass  # a terminal without an invisible cursor
    pair: tuple[Sample, Sample] | None = None
    before, deadline, shown, key_pressed = first, first.clock + opts.interval, 0, -1
    while True:
        lines = [title(opts, machine), KEYS, ""]
        lines += block(*pair, opts, machine.cpu_type) if pair else ["(first sample after one interval)"]
        _draw(screen, lines)
        if key_pressed in (ord("q"), ord("Q")) or opts.samples is not None and shown >= opts.samples:
            return lines
        screen.timeout(max(0, int((deadline - time.monotonic()) * 1000)))
        key_pressed = screen.getch()
        if key_pressed == -1 or time.monotonic() >= deadline:
            after = sampler.take()
            pair, before, shown = (before, after), after, shown + 1
            deadline += opts.interval
        if key_pressed == 12:  # ^L
            screen.clear()
        elif 0 <= key_pressed < 128 and chr(key_pressed) in "aref":
            key = chr(key_pressed)
            opts.absolute = {"a": True, "r": False}.get(key, opts.absolute)
            opts.full = {"f": True, "e": False}.get(key, opts.full)


def _draw(screen, lines: list[str]) -> None:
    import curses

    screen.erase()
    height, width = screen.getmaxyx()
    for row, line in enumerate(lines[:height]):
        try:
            screen.addnstr(row, 0, line, max(0, width - 1))
        except curses.error:
            pass  # the last cell of a small screen
    screen.refresh()


if __name__ == "__main__":
    sys.exit(main())
