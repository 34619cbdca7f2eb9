#!/usr/bin/env python3
"""Regenerate the event macros in include/sys/hwperfmacros.h from events.py.

Usage: python3 include/gen_hwperfmacros.py [--check]

Only the lines between the BEGIN/END GENERATED EVENT MACROS markers are
rewritten.  With --check nothing is written; the exit status is 1 when the
header is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "include" / "sys" / "hwperfmacros.h"
BEGIN = "/* BEGIN GENERATED EVENT MACROS */"
END = "/* END GENERATED EVENT MACROS */"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hwperfd.cpu.events import CPU_EVENTS, CpuEvents, Event  # noqa: E402


def hwp_ev_value(table: CpuEvents, event: Event) -> int:
    """The hwp_ev that selects ``event`` on its (first) hardware counter."""
    counter = table.counters_for(event.number)[0]
    for ev in range(64):
        if table.on_counter(counter, ev) == event:
            return ev
    raise ValueError(f"{table.name}: event {event.number} unreachable")


def render() -> str:
    """The generated section, markers excluded, ending in a newline."""
    lines: list[str] = []
    for table in CPU_EVENTS.values():
        lines.append(f"/* {table.name.upper()} */")
        for event in table.events:
            value = hwp_ev_value(table, event)
            counters = "/".join(str(c) for c in table.counters_for(event.number))
            comment = f"{event.number:2d}: {event.name} (counter {counters})"
            lines.append(f"#define {event.macro:<28} {value:<3d}/* {comment} */")
    return "\n".join(lines) + "\n"


def update(text: str) -> str:
    """``text`` (the header) with its generated section replaced."""
    start = text.index(BEGIN) + len(BEGIN)
    stop = text.index(END, start)
    return text[:start] + "\n" + render() + text[stop:]


def main(argv: list[str]) -> int:
    current = HEADER.read_text()
    wanted = update(current)
    if "--check" in argv:
        if current != wanted:
            print(f"{HEADER} is out of date; run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        HEADER.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
