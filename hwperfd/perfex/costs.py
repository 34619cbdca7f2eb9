"""The perfex -y cost table, as data: what one occurrence of each event costs.

perfex(1), COST ESTIMATE OPTIONS: each event has a "minimum", a "typical"
and a "maximum" cost, in processor cycles ("clks") or nanoseconds ("nsec").
The page fixes the conventions, which this table follows:

* minimum: the best case of one occurrence when as many as possible overlap
  (two floating point instructions complete per cycle: 0.5 clks);
* maximum: the worst case of one occurrence, even if pessimistic (floating
  point: a double precision reciprocal square root);
* typical: between the two, what average programs see;
* summary or redundant events (issued and graduated instructions, decoded
  branches, ...) cost 0 / 0 / 1 clks, so that they sort to the bottom while
  their maximum still hints at the time they stand for;
* asynchronous events with no sensible per-event cost (external
  interventions and invalidations) cost 0 / 0 / 0.

THE FIGURES ARE ESTIMATES chosen for hwperfd's emulated CPUs, not
measurements: hwperfd has no real R10000 to time.  They are plausible for
an Origin-class system - a two-level cache with 32-byte primary and
128-byte secondary lines, local memory a few hundred nanoseconds away, a
software-refilled TLB - and each row below says what it stands for.  Costs
of things that happen on the processor are in clks, so they scale with the
clock rate; costs of going to memory are in nsec, because memory does not
get faster when the processor does.  Override any of them with
/etc/perfex.costs or ``perfex -c FILE`` (format: ``perfex -t``).
"""

from __future__ import annotations

import math
import os
from types import MappingProxyType


from hwperfd.cpu.events import CPU_EVENTS, CpuEvents
from hwperfd.perfex.plan import COLUMNS, cpu_label, normal_name  # noqa: F401  (perfex's names, kept here too)

TYPE_CHECKING = False  # typing stays off perfex's start-up (hwperfd/records.py)
if TYPE_CHECKING:
    from typing import Mapping, NamedTuple
else:
    from hwperfd.records import NamedTuple

if TYPE_CHECKING:
    from pathlib import Path

SYSTEM_COSTS = "/etc/perfex.costs"
SYSTEM_COSTS_ENV = "PERFEX_COSTS"  # another system-wide file (tests, sites)

CLKS = "clks"
NSEC = "nsec"
_UNITS = {"clks": CLKS, "clk": CLKS, "clocks": CLKS, "cycles": CLKS, "nsec": NSEC, "ns": NSEC}

# Sizes the derived statistics need (perfex(1): "the primary cache line
# size", "the secondary cache line size", "a quadword (16 bytes)").
QUADWORD_BYTES = 16
LINE_BYTES: Mapping[str, tuple[int, int]] = MappingProxyType({"r10000": (32, 128), "r12000": (32, 128)})



class Cost(NamedTuple):
    """One cost: a non-negative number of clks or nsec."""

    value: float
    unit: str = CLKS

    def clocks(self, mhz: float) -> float:
        return self.value if self.unit == CLKS else self.value * mhz / 1000.0

    def seconds(self, mhz: float) -> float:
        return self.value / (mhz * 1e6) if self.unit == CLKS else self.value * 1e-9

    def text(self) -> str:
        return f"{_number(self.value):>10} {self.unit:<4}"


class EventCost(NamedTuple):
    minimum: Cost
    typical: Cost
    maximum: Cost

    def column(self, name: str) -> Cost:
        return getattr(self, name)


def _row(minimum: float, typical: float, maximum: float, unit: str = CLKS) -> EventCost:
    return EventCost(Cost(minimum, unit), Cost(typical, unit), Cost(maximum, unit))


_SUMMARY = _row(0, 0, 1)  # perfex(1): summary or redundant events
_ASYNC = _row(0, 0, 0)  # perfex(1): no cost assigned to asynchronous events
_CYCLE = _row(1, 1, 1)

# Estimates, one row per event number; see the module docstring.
_R10000 = (
    _CYCLE,  # 0 Cycles: one cycle is one cycle
    _SUMMARY,  # 1 Issued instructions
    _SUMMARY,  # 2 Issued loads: the cost is with graduated loads
    _SUMMARY,  # 3 Issued stores: the cost is with graduated stores
    _SUMMARY,  # 4 Issued store conditionals
    _row(1, 1, 1),  # 5 Failed store conditionals: the retry's issue slot
    _SUMMARY,  # 6 Decoded branches: the cost is with mispredictions
    _row(4, 6.5, 11),  # 7 Quadwords written back from scache: bus cycles per quadword
    _SUMMARY,  # 8 Correctable scache ECC errors: rare, corrected in line
    _row(5.5, 17.5, 19),  # 9 Primary I-cache misses: a refill from the secondary cache
    _row(250, 380, 420, NSEC),  # 10 Secondary I-cache misses: local memory latency
    _SUMMARY,  # 11 Instruction way mispredictions: a few cycles, hidden in 9
    _ASYNC,  # 12 External interventions
    _ASYNC,  # 13 External invalidations
    _SUMMARY,  # 14 ALU/FPU completion cycles (revision 3.x): a share of cycles
    _SUMMARY,  # 15 Graduated instructions
    _CYCLE,  # 16 Cycles
    _SUMMARY,  # 17 Graduated instructions
    _row(1, 1, 1),  # 18 Graduated loads: one load/store unit, one access a cycle
    _row(1, 1, 1),  # 19 Graduated stores: the same unit
    _row(1, 1, 1),  # 20 Graduated store conditionals
    _row(0.5, 1, 52),  # 21 Graduated FP instructions: two per cycle .. rsqrt.d
    _row(3, 3.9, 4.4),  # 22 Quadwords written back from the primary data cache
    _row(50, 60, 80),  # 23 TLB misses: the software refill handler
    _row(0.5, 1.5, 6),  # 24 Mispredicted branches: squashed work and refetch
    _row(2.9, 9, 10),  # 25 Primary data cache misses: a secondary cache hit
    _row(250, 380, 420, NSEC),  # 26 Secondary data cache misses: local memory latency
    _SUMMARY,  # 27 Data way mispredictions: a few cycles, hidden in 25
    _ASYNC,  # 28 External intervention hits in scache
    _ASYNC,  # 29 External invalidation hits in scache
    _row(1, 1, 1),  # 30 Store/prefetch exclusive to clean block: a tag update
    _row(100, 250, 420, NSEC),  # 31 ... to shared block: an upgrade at the home memory
)

_R12000 = (
    _CYCLE,  # 0 Cycles
    _SUMMARY,  # 1 Decoded instructions
    _SUMMARY,  # 2 Decoded loads
    _SUMMARY,  # 3 Decoded stores
    _SUMMARY,  # 4 Miss handling table occupancy: entries x cycles, a summary
    _row(1, 1, 1),  # 5 Failed store conditionals
    _SUMMARY,  # 6 Resolved conditional branches
    _row(4, 6.5, 9),  # 7 Quadwords written back from scache
    _SUMMARY,  # 8 Correctable scache ECC errors
    _row(5, 17, 20),  # 9 Primary I-cache misses
    _row(220, 340, 400, NSEC),  # 10 Secondary I-cache misses: memory latency
    _SUMMARY,  # 11 Instruction way mispredictions
    _ASYNC,  # 12 External interventions
    _ASYNC,  # 13 External invalidations
    _SUMMARY,  # 14 ALU/FPU progress cycles
    _SUMMARY,  # 15 Graduated instructions
    _SUMMARY,  # 16 Executed prefetch instructions
    _SUMMARY,  # 17 Prefetch primary data cache misses: overlapped by design
    _row(1, 1, 1),  # 18 Graduated loads
    _row(1, 1, 1),  # 19 Graduated stores
    _row(1, 1, 1),  # 20 Graduated store conditionals
    _row(0.5, 1, 52),  # 21 Graduated FP instructions
    _row(2.7, 3.6, 4.2),  # 22 Quadwords written back from the primary data cache
    _row(50, 60, 80),  # 23 TLB misses
    _row(5, 7, 9),  # 24 Mispredicted branches: the deeper R12000 pipeline
    _row(2.6, 9, 11),  # 25 Primary data cache misses
    _row(220, 340, 400, NSEC),  # 26 Secondary data cache misses
    _SUMMARY,  # 27 Data way mispredictions
    _ASYNC,  # 28 State of external intervention hits
    _ASYNC,  # 29 State of external invalidation hits
    _SUMMARY,  # 30 MHT entries accessing memory: entries x cycles, a summary
    _row(1, 20, 80),  # 31 Store/prefetch exclusive to shared block (clean +1, shared +2)
)

BUILTIN: Mapping[str, tuple[EventCost, ...]] = MappingProxyType({"r10000": _R10000, "r12000": _R12000})


class CostFileError(ValueError):
    """A cost file that cannot be used; the message names file and line."""


class CostTable:
    """An event cost table: a plain class (not a dataclass, which perfex would
    pay for at start-up; not a named tuple, whose indexing ``table[n]`` is)."""

    __slots__ = ("cpu_type", "costs", "sources")

    def __init__(self, cpu_type: str, costs: tuple[EventCost, ...], sources: tuple[str, ...] = ()) -> None:
        self.cpu_type = cpu_type
        self.costs = costs  # 32, index == event number
        self.sources = sources  # files applied over the built-in table, in order

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CostTable):
            return NotImplemented
        return (self.cpu_type, self.costs, self.sources) == (other.cpu_type, other.costs, other.sources)

    def __hash__(self) -> int:
        return hash((self.cpu_type, self.costs, self.sources))

    def __repr__(self) -> str:
        return f"CostTable(cpu_type={self.cpu_type!r}, costs={self.costs!r}, sources={self.sources!r})"

    @classmethod
    def builtin(cls, cpu_type: str) -> "CostTable":
        return cls(cpu_type, BUILTIN[cpu_type])

    @property
    def events(self) -> CpuEvents:
        return CPU_EVENTS[self.cpu_type]

    def __getitem__(self, event: int) -> EventCost:
        return self.costs[event]

    def overridden(self, overrides: Mapping[int, EventCost], source: str) -> "CostTable":
        costs = list(self.costs)
        for event, cost in overrides.items():
            costs[event] = cost
        return CostTable(self.cpu_type, tuple(costs), self.sources + (source,))

    def format(self) -> str:
        """The table as ``perfex -t`` prints it, which is what ``-c`` reads."""
        events = self.events
        label = cpu_label(self.cpu_type)
        lines = [
            f"# perfex cost table for the {label}: hwperfd's built-in estimates"
            + (" with " + ", ".join(self.sources) if self.sources else ""),
            "# Each line: event number, event name, then the Typical, Minimum and Maximum",
            "# cost of one event, each a number and a unit: clks (cycles) or nsec.",
            "# Delete the lines you do not want to override; '#' starts a comment.",
            "#",
            "#" + " " * (2 + 1 + 60 - 1) + "".join(f" {name.capitalize():>15}" for name in COLUMNS),
        ]
        for number, cost in enumerate(self.costs):
            name = events.events[number].name
            lines.append(f"{number:>2} {name:.<60}" + "".join(" " + cost.column(c).text() for c in COLUMNS))
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return f"{value:.2f}" if round(value, 2) == value else repr(float(value))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse(text: str, cpu_type: str, filename: str = "<costs>") -> dict[int, EventCost]:
    """Parse a cost file in ``perfex -t`` format; raise CostFileError.

    Blank lines, ``#`` comments and rulers of ``=`` or ``-`` are skipped.
    Every other line is ``[N] [NAME] T UNIT M UNIT X UNIT`` (typical,
    minimum, maximum): the number, the name or both identify the event; a
    name given with a number must be that event's name on this CPU type (a
    table written for another CPU is refused rather than misapplied).
    """
    events = CPU_EVENTS[cpu_type]
    costs: dict[int, EventCost] = {}

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or set(line) <= {"="} or set(line) <= {"-"}:
            continue

        def fail(message: str) -> CostFileError:
            return CostFileError(f"{filename}:{lineno}: {message}")  # noqa: B023 (called in this iteration)

        words = line.split()
        if len(words) < 6:
            raise fail("expected an event, then typical, minimum and maximum costs, each a number and a unit")
        head, tail = words[:-6], words[-6:]
        values = []
        for value_text, unit_text in zip(tail[0::2], tail[1::2]):
            unit = _UNITS.get(unit_text.casefold())
            if unit is None and not _is_number(value_text):
                raise fail("expected an event, then typical, minimum and maximum costs, each a number and a unit")
            if unit is None:
                raise fail(f"unit {unit_text!r} is neither clks nor nsec")
            try:
                value = float(value_text)
            except ValueError:
                raise fail(f"cost {value_text!r} is not a number") from None
            if not math.isfinite(value) or value < 0:
                raise fail(f"cost {value_text!r} must be a non-negative number")
            values.append(Cost(value, unit))
        number: int | None = None
        if head and head[0].isdigit():
            number = int(head[0])
            head = head[1:]
            if not 0 <= number < len(events.events):
                raise fail(f"event {number} is outside 0..{len(events.events) - 1}")
        name = " ".join(head).rstrip(".").strip()
        if number is None:
            if not name:
                raise fail("no event number or name")
            matches = [e.number for e in events.events if normal_name(e.name) == normal_name(name)]
            if not matches:
                raise fail(f"{name!r} is not an event of the {cpu_label(cpu_type)}")
            if len(matches) > 1:
                raise fail(f"{name!r} is events {' and '.join(map(str, matches))}: give the event number")
            number = matches[0]
        elif name and normal_name(name) != normal_name(events.events[number].name):
            raise fail(
                f"event {number} is {events.events[number].name!r} on the {cpu_label(cpu_type)}, not {name!r}"
            )
        typical, minimum, maximum = values
        costs[number] = EventCost(minimum=minimum, typical=typical, maximum=maximum)
    return costs


def system_costs_path(environ: Mapping[str, str] | None = None) -> Path:
    from pathlib import Path  # only -y reads cost files: not imported on every run

    environ = os.environ if environ is None else environ
    return Path(environ.get(SYSTEM_COSTS_ENV) or SYSTEM_COSTS)


def load(cpu_type: str, user_file: str | os.PathLike | None = None, *, system_file: Path | None = None) -> CostTable:
    """The built-in table, then /etc/perfex.costs if it exists, then -c FILE.

    perfex(1): "Costs supplied via the -c option will override those
    provided by the /etc/perfex.costs file."  A missing system file is
    normal; a missing -c file, or a bad line in either, is a CostFileError.
    """
    from pathlib import Path

    table = CostTable.builtin(cpu_type)
    system_file = system_file or system_costs_path()
    for path, required in ((system_file, False), (Path(user_file) if user_file else None, True)):
        if path is None:
            continue
        try:
            text = Path(path).read_text()
        except FileNotFoundError:
            if required:
                raise CostFileError(f"cost file {path} does not exist") from None
            continue
        except OSError as exc:
            raise CostFileError(f"cannot read cost file {path}: {exc.strerror}") from None
        table = table.overridden(parse(text, cpu_type, str(path)), str(path))
    return table
