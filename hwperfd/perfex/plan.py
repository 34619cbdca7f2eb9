"""Which events perfex counts, and in which of the 32 slots.

perfex(1) numbers events 0-31 as r10k_counters(5) does.  On the R10000,
events 0-15 exist only on hardware counter 0 and 16-31 only on counter 1,
so two events of the same counter cannot be counted together: "Two events
which must be counted on the same hardware counter ... will cause a
conflicting counters error".  Cycles (0 and 16) and graduated instructions
(15 and 17) exist on both counters, so, as IRIX perfex did, one of them is
moved to the other counter rather than refused.  The R12000 counts any
event on either counter: the first event goes to counter 0, the second to
counter 1.

A counter left free counts cycles, as IRIX perfex's defaults did, so a
single ``-e`` still gives the run's length (and ``-y`` its time base).

Slot conventions (the r10k_counters(5) example and PAPI): on the R10000 an
event e sits in slot e with ``hwp_ev = e % 16``; on the R12000 event e on
counter c sits in slot ``16 * c + e % 16`` with the ``hwp_ev`` that counter
takes for it (``(e - 16 * c) mod 32``, ``hwperfd.cpu.events``).  With ``-a``
slot i holds ``hwp_ev = i % 16`` and counts event i on both types (16 events
multiplexed per counter).
"""

from __future__ import annotations


import structs
from hwperfd.cpu.events import CPU_EVENTS, CpuEvents

TYPE_CHECKING = False  # typing stays off perfex's start-up (hwperfd/records.py)
if TYPE_CHECKING:
    from typing import Iterable, Mapping, NamedTuple, Sequence
else:
    from hwperfd.records import NamedTuple

SLOTS_PER_COUNTER = 16
CYCLES = 0
# Events that exist on both R10000 counters: event -> its twin on the other one.
R10000_TWINS = {0: 16, 16: 0, 15: 17, 17: 15}
ENV_EVENTS = ("T5_EVENT0", "T5_EVENT1")
# perfex(1) as typeset drops the underscore; accept that spelling too.
ENV_ALIASES = {"T5_EVENT0": "T5EVENT0", "T5_EVENT1": "T5EVENT1"}


# The -y cost columns, in the order perfex prints them.
COLUMNS = ("typical", "minimum", "maximum")


def cpu_label(cpu_type: str) -> str:
    return f"MIPS {cpu_type.upper()} CPU"


def normal_name(name: str) -> str:
    """An event's name as perfex compares names: case folded, each run of
    characters other than 0-9, a-z and / one space, none at the ends."""
    return " ".join("".join(c if c in _NAME_CHARS else " " for c in name.casefold()).split())


_NAME_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyz/")


class EventError(ValueError):
    """An event specifier perfex cannot honour."""


class ConflictingCounters(EventError):
    pass


class CountedEvent(NamedTuple):
    number: int  # perfex / r10k_counters event number, 0..31
    name: str
    slot: int  # index in hwperf_eventctrl_t
    hwp_ev: int  # event number as the slot's counter knows it

    @property
    def counter(self) -> int:
        return self.slot // SLOTS_PER_COUNTER


class EventPlan(NamedTuple):
    cpu_type: str
    events: tuple[CountedEvent, ...]  # sorted by event number
    mode: int = structs.HWPERF_CNTEN_U
    multiplexed: bool = False

    def specs(self) -> dict[int, int]:
        """Slot -> hwperf_spec word, for PIOCENEVCTRS."""
        return {e.slot: structs.spec_word(e.hwp_ev, self.mode) for e in self.events}

    def slots_on_counter(self, counter: int) -> int:
        return sum(1 for e in self.events if e.counter == counter)

    @property
    def numbers(self) -> tuple[int, ...]:
        return tuple(e.number for e in self.events)


def cpu_events(cpu_type: str) -> CpuEvents:
    return CPU_EVENTS[cpu_type]


def parse_event(text: str, cpu_type: str) -> int:
    """An event number 0-31, or a name as perfex(1) prints it (any case;
    spaces, dashes or underscores), or its <sys/hwperfmacros.h> macro."""
    table = cpu_events(cpu_type)
    word = text.strip()
    if word.isascii() and word.isdecimal():
        number = int(word)
        if number >= len(table.events):
            raise EventError(f"event {number} is outside 0..{len(table.events) - 1}")
        return number
    key = normal_name(word)
    for event in table.events:  # the lower number of a twin wins (0, 15)
        # An event may also be named by its kind ("fu_completion_cycles": the
        # revision 3.x meaning of perfex(1)'s "14 = Virtual coherency conditions").
        names = [event.name, event.macro, event.kind, *event.name.split(" / ")]
        if key in (normal_name(name) for name in names):
            return event.number
    raise EventError(
        f"unknown event {text!r} for the {cpu_type.upper()} (give 0-31 or a name; `perfex --list` lists them)"
    )


def environment_events(environ: Mapping[str, str]) -> list[str]:
    """T5_EVENT0 and T5_EVENT1, the page's way to give events without -e."""
    found = []
    for name in ENV_EVENTS:
        value = environ.get(name) or environ.get(ENV_ALIASES[name])
        if value and value.strip():
            found.append(value)
    return found


def _counted(table: CpuEvents, number: int, counter: int) -> CountedEvent:
    name = table.events[number].name
    if table.per_counter:
        return CountedEvent(number, name, number, number % SLOTS_PER_COUNTER)
    hwp_ev = table.hwp_ev(counter, number)
    assert hwp_ev is not None
    return CountedEvent(number, name, counter * SLOTS_PER_COUNTER + number % SLOTS_PER_COUNTER, hwp_ev)


def choose(requested: Sequence[int], cpu_type: str, mode: int = structs.HWPERF_CNTEN_U) -> EventPlan:
    """Place 0, 1 or 2 events on the two hardware counters."""
    table = cpu_events(cpu_type)
    wanted = list(dict.fromkeys(requested))  # the same event twice is counted once
    if len(wanted) > 2:
        raise EventError(f"at most two events can be counted at once (got {len(wanted)}); -a counts all 32")
    if not wanted:
        wanted = [CYCLES]
    placed: list[tuple[int, int]] = []  # (event, counter)
    if table.per_counter:
        if len(wanted) == 2 and wanted[0] // 16 == wanted[1] // 16:
            for i, event in enumerate(wanted):
                if event in R10000_TWINS and R10000_TWINS[event] not in wanted:
                    wanted[i] = R10000_TWINS[event]
                    break
            else:
                a, b = wanted
                raise ConflictingCounters(
                    f"conflicting counters: events {a} ({table.events[a].name}) and {b} "
                    f"({table.events[b].name}) must both be counted on hardware counter {a // 16} "
                    f"of the {cpu_type.upper()}"
                )
        placed = [(e, e // 16) for e in wanted]
        if len(placed) == 1 and placed[0][0] not in (0, 16):
            free = 1 - placed[0][1]
            placed.append((16 * free, free))  # cycles on the free counter
    else:
        placed = [(e, c) for c, e in enumerate(wanted)]
        if len(placed) == 1 and placed[0][0] != CYCLES:
            placed.append((CYCLES, 1))
    events = sorted((_counted(table, e, c) for e, c in placed), key=lambda e: (e.number, e.slot))
    return EventPlan(cpu_type, tuple(events), mode)


def all_events(cpu_type: str, mode: int = structs.HWPERF_CNTEN_U) -> EventPlan:
    """-a: slot i counts event i; each counter multiplexes its 16 slots."""
    table = cpu_events(cpu_type)
    events = []
    for event in table.events:
        hwp_ev = event.number % SLOTS_PER_COUNTER  # slot i counts event i on both CPU types
        events.append(CountedEvent(event.number, event.name, event.number, hwp_ev))
    return EventPlan(cpu_type, tuple(events), mode, multiplexed=True)


def plan_from(specifiers: Iterable[str], cpu_type: str, mode: int) -> EventPlan:
    return choose([parse_event(s, cpu_type) for s in specifiers], cpu_type, mode)
