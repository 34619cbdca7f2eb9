"""What ecadmin, ecstats and ecfind share.

Options are parsed with getopt, as IRIX's tools did (``-aD``, ``-e0,25``).
Every failure becomes one line on stderr and exit status 1: a tool that a
shell script drives must never answer with a traceback.

The global counters are hwperfd's system mode.  Each event is counted in
user and kernel mode (``HWPERF_CNTEN_U|HWPERF_CNTEN_K``: ecadmin(1),
"aggregated over all processes, user and system mode") in the slot perfex
-a uses for it, so that ``ecadmin -a`` is perfex -a's layout and two
ecadmin calls never disagree about where an event lives.
"""

from __future__ import annotations

import errno
import getopt
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import structs
from hwperfd.client import Control, NotMounted
from hwperfd.cpu.events import Event
from hwperfd.perfex import machine as machines
from hwperfd.perfex import plan as plans
from hwperfd.perfex import report as reports

MODE = structs.HWPERF_CNTEN_U | structs.HWPERF_CNTEN_K
PER_COUNTER = plans.SLOTS_PER_COUNTER
EXIT_ERROR = 1

Say = Callable[[str], None]


class EcError(Exception):
    """Something the user must hear about, in one line; the tool exits 1."""


class UsageError(EcError):
    pass


class _Help(Exception):
    pass


def options(argv: Sequence[str], shortopts: str) -> tuple[list[tuple[str, str]], list[str]]:
    """getopt (options may follow operands, as GNU's does), plus -h / --help."""
    try:
        found, rest = getopt.gnu_getopt(list(argv), shortopts + "h", ["help"])
    except getopt.GetoptError as exc:
        raise UsageError(str(exc)) from None
    if any(name in ("-h", "--help") for name, _ in found):
        raise _Help
    return found, rest


def run(prog: str, usage: str, help_text: str, body: Callable[[list[str]], int], argv: list[str] | None) -> int:
    """Run a tool's body; turn every failure into one line on stderr."""
    try:
        return body(sys.argv[1:] if argv is None else list(argv))
    except _Help:
        sys.stdout.write(help_text)
        return 0
    except UsageError as exc:
        return error(prog, f"{exc} (usage: {usage}; {prog} -h for more)")
    except (EcError, NotMounted, machines.MachineUnknown) as exc:
        return error(prog, str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `ecstats | head`: stop quietly (Python's documented recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as exc:  # the daemon went away, a pipe closed: still one line
        return error(prog, f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))


def error(prog: str, text: str) -> int:
    notice(prog, text)
    return EXIT_ERROR


def notice(prog: str, text: str) -> None:
    """One line on stderr, whatever newlines ``text`` holds."""
    sys.stderr.write(f"{prog}: {' '.join(text.split())}\n")
    sys.stderr.flush()


def diagnostics(prog: str, enabled: bool) -> Say:
    """-D: what the tool does, on stderr (stdout stays the report)."""

    def say(text: str) -> None:
        if enabled:
            notice(prog, text)

    return say


def is_root() -> bool:
    return os.geteuid() == 0


def open_control(mount: Path, what: str) -> Control:
    """The control node (read-only for a non-root user: its read commands
    answer everyone, the others EPERM); say why it cannot be opened."""
    try:
        return Control(mount=mount)
    except PermissionError:
        raise EcError(f"{what}: {mount}/control cannot be opened (permission denied)") from None


# -- events and slots ------------------------------------------------------------------


def event_numbers(text: str, cpu_type: str) -> list[int]:
    """``event[,event...]``: numbers 0-31 or names (any case), ``*`` for all."""
    table = plans.cpu_events(cpu_type)
    numbers: list[int] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            raise EcError(f"empty event name in {text!r}")
        if word == "*":
            numbers += [e.number for e in table.events]
        elif re.fullmatch(r"[+-]?[0-9]+", word):
            if not 0 <= int(word) < len(table.events):
                raise EcError(f"event {word} is outside 0..{len(table.events) - 1}")
            numbers.append(int(word))
        else:
            try:
                numbers.append(plans.parse_event(word, cpu_type))
            except plans.EventError:
                raise EcError(
                    f"unknown event {word!r} for the {cpu_type.upper()} (give 0-31 or a name; "
                    "`ecadmin -e '?'` lists them)"
                ) from None
    return list(dict.fromkeys(numbers))


def event_listing(root: Path) -> str:
    """``ecadmin -e ?``: perfex --list's table for the mounted CPU type.  A
    user who may not ask hwperfd (not mounted; non-root while the global
    counters are held, which refuses perfex's probe) gets the R10000's."""
    try:
        machine, note = machines.detect(root), ""
    except NotMounted:
        machine, note = machines.offline("r10000"), f" (hwperfd is not mounted at {root}: showing the R10000)"
    except (machines.MachineUnknown, OSError) as exc:
        machine, note = machines.offline("r10000"), f" (hwperfd would not say its CPU type: {exc}; showing the R10000)"
    return reports.event_list(machine, note)


def events_of(cpu_type: str) -> tuple[Event, ...]:
    return plans.cpu_events(cpu_type).events


def home_slot(number: int, cpu_type: str) -> tuple[int, int]:
    """(slot, spec word) for an event: where perfex -a counts it."""
    event = plans.all_events(cpu_type, MODE).events[number]
    return event.slot, structs.spec_word(event.hwp_ev, MODE)


def place(number: int, cpu_type: str, taken: Mapping[int, int]) -> tuple[int, int]:
    """The event's home slot, or - when another tool put a different event
    there through syssgi - the first free slot of a counter that counts it."""
    slot, word = home_slot(number, cpu_type)
    if slot not in taken:
        return slot, word
    table = plans.cpu_events(cpu_type)
    for counter in table.counters_for(number):
        hwp_ev = table.hwp_ev(counter, number)
        assert hwp_ev is not None
        for other in range(counter * PER_COUNTER, (counter + 1) * PER_COUNTER):
            if other not in taken:
                return other, structs.spec_word(hwp_ev, MODE)
    raise EcError(f"no free slot can count event {number}")


@dataclass(frozen=True)
class Slot:
    slot: int
    spec: int
    event: Event | None  # None only for a word no validated request holds

    @property
    def counter(self) -> int:
        return self.slot // PER_COUNTER

    @property
    def number(self) -> int:
        return self.event.number if self.event else -1

    @property
    def name(self) -> str:
        return self.event.name if self.event else f"unknown event in slot {self.slot}"

    @property
    def modes(self) -> str:
        """``uk`` for ecadmin's words; ``x`` is exception level, ``s`` supervisor."""
        return structs.mode_text(structs.spec_fields(self.spec)[2])


def decode(specs: Sequence[int] | Mapping[int, int], cpu_type: str) -> list[Slot]:
    """The slots in use (any mode bit set), sorted by event number."""
    table = plans.cpu_events(cpu_type)
    items = specs.items() if isinstance(specs, Mapping) else enumerate(specs)
    slots = []
    for slot, word in items:
        ev, _, mode = structs.spec_fields(word)
        if mode:
            slots.append(Slot(slot, word, table.on_counter(slot // PER_COUNTER, ev)))
    return sorted(slots, key=lambda s: (s.number, s.slot))


def sharing(slots: Sequence[Slot]) -> dict[int, int]:
    """Slot -> how many enabled slots share its hardware counter.

    The kernel loads them in turn at clock ticks (r10k_counters(5): "multiplex
    the events across clock tick boundaries"), so each sees about 1/m of the
    time and ecstats(1) scales its count up by m.
    """
    per_counter = Counter(s.counter for s in slots)
    return {s.slot: per_counter[s.counter] for s in slots}


# -- reading system mode -------------------------------------------------------------------


@dataclass(frozen=True)
class SystemState:
    generation: int
    specs: tuple[int, ...]  # 32 spec words
    counts: tuple[int, ...] | None = None  # 32 sums over the CPUs, when asked for

    def in_use(self) -> dict[int, int]:
        return {slot: word for slot, word in enumerate(self.specs) if structs.spec_fields(word)[2]}


def read_state(control: Control, say: Say, *, counts: bool = False) -> SystemState | None:
    """The enabled events (HWPERF_GET_SYSEVCTRL) and, if asked, their counts
    (HWPERF_GET_SYSCNTRS) under one generation; None when nothing is enabled
    (GET_SYSEVCTRL: "EINVAL if the counters are not in use")."""
    for _ in range(10):
        try:
            generation, specs = control.system_control()
            say(f"HWPERF_GET_SYSEVCTRL: generation {generation}, {words(specs)}")
            if not counts:
                return SystemState(generation, specs)
            again, values = control.read_system()
            say(f"HWPERF_GET_SYSCNTRS: generation {again}")
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            say("HWPERF_GET_SYSEVCTRL / GET_SYSCNTRS: EINVAL (no global counters enabled)")
            return None
        if again == generation:
            return SystemState(generation, specs, values)
    raise EcError("the global event counters kept changing while being read")


def words(specs: Sequence[int] | Mapping[int, int]) -> str:
    """The slots in use and their spec words, as -D shows them."""
    items = sorted(specs.items()) if isinstance(specs, Mapping) else enumerate(specs)
    used = [f"slot {slot}=0x{word:04x}" for slot, word in items if structs.spec_fields(word)[2]]
    return ", ".join(used) or "no slot in use"
