"""libperfex(3C) in Python: the same calls as lib/irix/libperfex.c.

    gen = start_counters(0, 25)            # cycles, primary data cache misses
    ...
    gen2, cycles, misses = read_counters(0, 25)
    print_counters(0, cycles, 25, misses)   # to stderr, as perfex prints
    print_costs(0, cycles, 25, misses)      # with perfex -y's time estimates

As in C, ``start_counters`` zeroes and starts the counters of this process,
``read_counters`` reads and stops them (both return the generation number),
and T5_EVENT0 / T5_EVENT1 override the events.  Python has no out
parameters, so ``read_counters`` returns ``(generation, c0, c1)``.  Errors
raise instead of returning -1: OSError (from hwperfd), plan.EventError
(conflicting counters, unknown events), costs.CostFileError.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import TextIO

import structs
from hwperfd.client import ProcessCounters
from hwperfd.perfex import costs as cost_tables
from hwperfd.perfex import machine as machines
from hwperfd.perfex import plan as plans
from hwperfd.perfex import report
from hwperfd.perfex.stats import derive

_counters: ProcessCounters | None = None
_machine: machines.Machine | None = None
_costs: cost_tables.CostTable | None = None
_slots: dict[int, int] = {}  # requested event -> slot of the last start_counters


def _own() -> ProcessCounters:
    global _counters
    if _counters is None or _counters.pid != os.getpid():  # a forked child has its own file
        _counters = ProcessCounters()
    return _counters


def _the_machine() -> machines.Machine:
    global _machine
    if _machine is None:
        _machine = machines.detect()
    return _machine


def _env(name: str, given: int) -> int:
    value = os.environ.get(name)
    if not value or not value.strip():
        return given
    return plans.parse_event(value, _the_machine().cpu_type)


def _place(e0: int, e1: int) -> list[plans.CountedEvent]:
    """e0 and e1 on the counters as lib/irix/libperfex.c places them: like perfex,
    but exactly these events (no cycles added on a free counter)."""
    cpu_type = _the_machine().cpu_type
    table = plans.cpu_events(cpu_type)
    for e in (e0, e1):
        if not 0 <= e < 32:
            raise plans.EventError(f"event {e} is outside 0..31")
    wanted = [e0] if e0 == e1 else [e0, e1]
    if table.per_counter:
        if len(wanted) == 2 and e0 // 16 == e1 // 16:
            for i, e in enumerate(wanted):
                twin = plans.R10000_TWINS.get(e)
                if twin is not None and twin != wanted[1 - i]:
                    wanted[i] = twin
                    break
            else:
                plans.choose(wanted, cpu_type)  # raises ConflictingCounters, worded as perfex words it
        return [plans.CountedEvent(e, table.events[e].name, e, e % 16) for e in wanted]
    return [
        plans.CountedEvent(e, table.events[e].name, 16 * i + e % 16, (e - 16 * i) % 32) for i, e in enumerate(wanted)
    ]


def start_counters(e0: int, e1: int) -> int:
    """Zero and start counting e0 and e1 for this process; return the generation."""
    counters = _own()
    e0, e1 = _env("T5_EVENT0", e0), _env("T5_EVENT1", e1)
    placed = _place(e0, e1)
    specs = {ev.slot: structs.spec_word(ev.hwp_ev, structs.HWPERF_CNTEN_U) for ev in placed}
    try:
        generation = counters.enable(specs)
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
        counters.release()  # "start_counters implicitly zero[es] out the counters"
        generation = counters.enable(specs)
    _slots.clear()
    _slots[e0] = placed[0].slot
    _slots[e1] = placed[-1].slot
    return generation


def read_counters(e0: int, e1: int) -> tuple[int, int, int]:
    """Read e0 and e1 and stop counting: ``(generation, c0, c1)``."""
    counters = _own()
    e0, e1 = _env("T5_EVENT0", e0), _env("T5_EVENT1", e1)
    generation, counts = counters.read()
    try:
        counters.release()  # "read_counters implicitly stops the counters"
    except OSError:
        pass
    return generation, counts[_slots.get(e0, e0)], counts[_slots.get(e1, e1)]


def _events_of(e0: int, c0: int, e1: int, c1: int) -> list[tuple[int, int]]:
    e0, e1 = _env("T5_EVENT0", e0), _env("T5_EVENT1", e1)
    for e in (e0, e1):
        if not 0 <= e < 32:
            raise plans.EventError(f"event {e} is outside 0..31")
    return [(e0, c0)] if e0 == e1 else [(e0, c0), (e1, c1)]


def print_counters(e0: int, c0: int, e1: int, c1: int, file: TextIO | None = None) -> int:
    """Print the two counts as perfex does (to stderr)."""
    names = plans.cpu_events(_the_machine().cpu_type).events
    out = file or sys.stderr
    for number, count in sorted(_events_of(e0, c0, e1, c1)):
        out.write(report.event_line(number, names[number].name, count) + "\n")
    out.flush()
    return 0


def _table() -> cost_tables.CostTable:
    global _costs
    if _costs is None or _costs.cpu_type != _the_machine().cpu_type:
        _costs = cost_tables.load(_the_machine().cpu_type)
    return _costs


def load_costs(path: str | os.PathLike) -> int:
    """Override costs from a file in perfex -t format (over /etc/perfex.costs)."""
    global _costs
    table = _table()
    overrides = cost_tables.parse(open(path).read(), table.cpu_type, str(path))
    _costs = table.overridden(overrides, str(path))
    return 0


def print_costs(e0: int, c0: int, e1: int, c1: int, file: TextIO | None = None) -> int:
    """Print the counts with perfex -y's time estimates and statistics (to stderr)."""
    machine, table = _the_machine(), _table()
    names = plans.cpu_events(machine.cpu_type).events
    entries = _events_of(e0, c0, e1, c1)
    lines = report.cost_header(machine.mhz, machine.label)
    for i in report.cost_order(machine.cpu_type, entries, table, machine.mhz):
        number, count = entries[i]
        lines.append(report.cost_line(number, names[number].name, count, table, machine.mhz))
    lines += report.statistics_lines(derive(dict(entries), table, machine.mhz))
    out = file or sys.stderr
    out.write("\n".join(lines) + "\n")
    out.flush()
    return 0


__all__ = ["start_counters", "read_counters", "print_counters", "print_costs", "load_costs"]
