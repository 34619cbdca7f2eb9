"""What perfex prints: the text of perfex(1), and JSON and CSV for programs.

The text layout is IRIX perfex's: one line per event, the event number and
its name padded with dots, then the count; with -y three time columns
(typical, minimum, maximum), lines sorted from most to least costly, and a
Statistics section.  libperfex's print_counters/print_costs print the same
lines (lib/irix/libperfex.c follows ``event_line`` and ``cost_block`` exactly).
"""

from __future__ import annotations

# json, csv, shlex and statistics are imported where used: most runs need
# only the text, and each import is start-up time perfex pays on every run.

from hwperfd.perfex.machine import Machine
from hwperfd.perfex.plan import COLUMNS, CountedEvent, EventPlan, cpu_label

TYPE_CHECKING = False  # typing stays off perfex's start-up (hwperfd/records.py)
if TYPE_CHECKING:
    from typing import Sequence

    # Only -y needs the cost table and the statistics: perfex loads them then.
    from hwperfd.perfex.costs import CostTable
    from hwperfd.perfex.stats import Statistic

NAME_WIDTH = 60
COUNT_WIDTH = 15
TIME_WIDTH = 12
EVENT_WIDTH = 2 + 1 + NAME_WIDTH + 1 + COUNT_WIDTH  # 79
COST_LINE = EVENT_WIDTH + 3 * (TIME_WIDTH + 1)  # 118
STAT_NAME_WIDTH = EVENT_WIDTH
STAT_LINE = STAT_NAME_WIDTH + 1 + TIME_WIDTH


class EventResult:
    # Plain classes with __slots__ here: `dataclasses` imports `inspect`,
    # which would cost perfex's start-up more than its own modules.
    __slots__ = ("event", "runs", "raw", "fractions")

    def __init__(self, event: CountedEvent, runs: list[int], raw: list[int], fractions: list[float | None]) -> None:
        self.event = event
        self.runs = runs  # projected count of each run
        self.raw = raw  # raw count of each run
        self.fractions = fractions  # share of the time counted, each run

    @property
    def count(self) -> float:
        if len(self.runs) == 1:
            return self.runs[0]
        import statistics as pystats

        return pystats.fmean(self.runs)

    @property
    def stddev(self) -> float:
        if len(self.runs) == 1:
            return 0.0
        import statistics as pystats

        return pystats.stdev(self.runs)

    @property
    def fraction(self) -> float | None:
        known = [f for f in self.fractions if f is not None]
        if len(known) == 1:
            return float(known[0])
        import statistics as pystats

        return pystats.fmean(known) if known else None


class ProcessResult:
    __slots__ = ("pid", "comm", "counts", "thread_of")

    def __init__(self, pid: int, comm: str, counts: dict[int, int], thread_of: int = 0) -> None:
        self.pid = pid  # a thread's block: its tid
        self.comm = comm
        self.counts = counts  # event number -> projected count
        self.thread_of = thread_of  # a thread's block: its process's pid (0: a whole process)


class Report:
    __slots__ = ("command", "machine", "plan", "events", "exit_code", "costs", "statistics", "processes", "warnings")

    def __init__(
        self,
        command: list[str],
        machine: Machine,
        plan: EventPlan,
        events: list[EventResult],
        exit_code: int,
        costs: CostTable | None = None,
        statistics: list[Statistic] | None = None,
        processes: list[ProcessResult] | None = None,
        warnings: list[str] | None = None,
    ) -> None:
        self.command = command
        self.machine = machine
        self.plan = plan
        self.events = events
        self.exit_code = exit_code
        self.costs = costs  # -y
        self.statistics: list[Statistic] = [] if statistics is None else statistics
        self.processes: list[ProcessResult] = [] if processes is None else processes  # -mp
        self.warnings: list[str] = [] if warnings is None else warnings

    @property
    def runs(self) -> int:
        return len(self.events[0].runs) if self.events else 0

    def counts(self) -> dict[int, float]:
        return {r.event.number: r.count for r in self.events}

    def counted(self) -> dict[int, float]:
        """The counts of events that were really counted: perfex(1) prints a
        statistic "only if counts for the events which define it have been
        gathered", and under -a an event that never got a tick was not."""
        return {r.event.number: r.count for r in self.events if r.fraction is not None}


# -- text ---------------------------------------------------------------------------


def event_line(number: int, name: str, count: float) -> str:
    """`` 0 Cycles.......... 2000000``: IRIX perfex's line (libperfex prints it too)."""
    return f"{number:>2} {name:.<{NAME_WIDTH}} {round(count):>{COUNT_WIDTH}}"


def event_seconds(costs: CostTable, number: int, count: float, mhz: float) -> dict[str, float]:
    return {column: count * costs[number].column(column).seconds(mhz) for column in COLUMNS}


def cost_order(cpu_type: str, entries: Sequence[tuple[int, float]], costs: CostTable, mhz: float) -> list[int]:
    """Indexes of ``entries`` (number, count) by typical cost, "from most
    costly to least costly" (perfex(1), -y), cycles included; ties by number."""

    def key(i: int):
        number, count = entries[i]
        return (-count * costs[number].typical.seconds(mhz), number)

    return sorted(range(len(entries)), key=key)


def cost_header(mhz: float, label: str) -> list[str]:
    return [
        f"Based on {mhz:g} MHz {label}".rjust(COST_LINE),
        " " * EVENT_WIDTH + "".join(f" {c.capitalize():>{TIME_WIDTH}}" for c in COLUMNS),
        f"{'':3}{'Event Counter Name':<{NAME_WIDTH}} {'Counter Value':>{COUNT_WIDTH}}"
        + f" {'Time (sec)':>{TIME_WIDTH}}" * 3,
        "=" * COST_LINE,
    ]


def cost_line(number: int, name: str, count: float, costs: CostTable, mhz: float) -> str:
    seconds = event_seconds(costs, number, count, mhz)
    return event_line(number, name, count) + "".join(f" {seconds[c]:>{TIME_WIDTH}.6f}" for c in COLUMNS)


def statistics_lines(stats: Sequence[Statistic]) -> list[str]:
    if not stats:
        return []
    return ["", "Statistics", "=" * STAT_LINE] + [
        f"{s.name:.<{STAT_NAME_WIDTH}} {s.value:>{TIME_WIDTH}.6f}" for s in stats
    ]


# The characters shlex.quote leaves unquoted (its "safe" set, ASCII only).
_SHELL_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-")


def command_line(command: list[str]) -> str:
    """``shlex.join(command)``, without importing shlex when no word needs quoting."""
    if all(word and _SHELL_SAFE.issuperset(word) for word in command):
        return " ".join(command)
    import shlex

    return shlex.join(command)


def text(report: Report) -> str:
    plan, machine = report.plan, report.machine
    lines = [f"Summary for execution of {command_line(report.command)}", ""]
    if plan.multiplexed:
        lines.append(
            "Counts projected from multiplexed counting (-a): [n%] is the share of the run each event was counted."
        )
    if report.runs > 1:
        lines.append(f"Mean of {report.runs} runs: (+- n%) is the relative standard deviation.")
    if plan.multiplexed or report.runs > 1:
        lines.append("")
    names = {e.number: e.name for e in plan.events}
    for process in report.processes:
        lines.append(f"Counts for pid {process.pid} ({process.comm})")
        lines += [event_line(n, names[n], c) for n, c in sorted(process.counts.items())]
        lines.append("")
    if report.processes:
        what = "threads" if any(p.thread_of for p in report.processes) else "processes"
        lines.append(f"Totals over {len(report.processes)} {what}")

    def suffix(result: EventResult) -> str:
        out = ""
        if plan.multiplexed:
            f = result.fraction
            out += "  [not counted]" if not f else f"  [{100 * f:6.2f}%]"
        if report.runs > 1:
            rel = 100 * result.stddev / result.count if result.count else 0.0
            out += f"  (+- {rel:.2f}%)"
        return out

    if report.costs is None:
        for result in sorted(report.events, key=lambda r: r.event.number):
            lines.append(event_line(result.event.number, result.event.name, result.count) + suffix(result))
    else:
        entries = [(r.event.number, r.count) for r in report.events]
        lines += cost_header(machine.mhz, machine.label)
        for i in cost_order(machine.cpu_type, entries, report.costs, machine.mhz):
            r = report.events[i]
            lines.append(cost_line(r.event.number, r.event.name, r.count, report.costs, machine.mhz) + suffix(r))
        lines += statistics_lines(report.statistics)
    return "\n".join(lines) + "\n"


# -- machine-readable ------------------------------------------------------------------


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def as_dict(report: Report) -> dict:
    import statistics as pystats

    machine, plan = report.machine, report.plan
    events = []
    for r in sorted(report.events, key=lambda r: r.event.number):
        item = {
            "event": r.event.number,
            "name": r.event.name,
            "counter": r.event.counter,
            "slot": r.event.slot,
            "count": _number(r.count),
            "raw_count": _number(r.raw[0] if len(r.raw) == 1 else pystats.fmean(r.raw)),
            "fraction_counted": r.fraction,
            "stddev": r.stddev,
            "run_counts": r.runs,
            "run_raw_counts": r.raw,
        }
        if report.costs is not None:
            item["time_sec"] = event_seconds(report.costs, r.event.number, r.count, machine.mhz)
        events.append(item)
    out = {
        "command": report.command,
        "exit_status": report.exit_code,
        "cpu": {"type": machine.cpu_type, "name": machine.label, "mhz": machine.mhz, "count": machine.cpus},
        "mount": str(machine.mount) if machine.mount else None,
        "modes": ["user"] + (["exception"] if plan.mode & 0x1 else []),
        "multiplexed": plan.multiplexed,
        "runs": report.runs,
        "events": events,
        "warnings": report.warnings,
    }
    if report.costs is not None:
        out["cost_files"] = list(report.costs.sources)
        out["statistics"] = [{"name": s.name, "value": s.value} for s in report.statistics]
    if report.processes:
        out["processes"] = [
            {
                "pid": p.pid,
                "comm": p.comm,
                **({"thread_of": p.thread_of} if p.thread_of else {}),
                "counts": {str(n): c for n, c in sorted(p.counts.items())},
            }
            for p in report.processes
        ]
    return out


def as_json(report: Report) -> str:
    import json

    return json.dumps(as_dict(report), indent=2) + "\n"


CSV_FIELDS = (
    "scope", "event", "name", "count", "fraction_counted", "stddev", "typical_sec", "minimum_sec", "maximum_sec"
)


def as_csv(report: Report) -> str:
    """One row per event (scope ``total``), per process and event with -mp
    (scope = the pid), and per statistic with -y (scope ``statistic``)."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    names = {e.number: e.name for e in report.plan.events}
    for p in report.processes:
        for n, c in sorted(p.counts.items()):
            writer.writerow([p.pid, n, names[n], c, "", "", "", "", ""])
    for r in sorted(report.events, key=lambda r: r.event.number):
        times = ["", "", ""]
        if report.costs is not None:
            seconds = event_seconds(report.costs, r.event.number, r.count, report.machine.mhz)
            times = [f"{seconds[c]:.9g}" for c in COLUMNS]
        fraction = "" if r.fraction is None else f"{r.fraction:.6g}"
        writer.writerow(["total", r.event.number, r.event.name, _number(r.count), fraction, f"{r.stddev:.6g}", *times])
    for s in report.statistics:
        writer.writerow(["statistic", "", s.name, f"{s.value:.9g}", "", "", "", "", ""])
    return buffer.getvalue()


# -- listing ------------------------------------------------------------------------------


def event_list(machine: Machine, note: str = "") -> str:
    from hwperfd.perfex.plan import cpu_events

    table = cpu_events(machine.cpu_type)
    head = f"Events of the {cpu_label(machine.cpu_type)}"
    if machine.mount:
        head += f" (hwperfd at {machine.mount}: {machine.cpus} CPUs at {machine.mhz:g} MHz)"
    lines = [head + note, "", f"{'num':>3}  {'counter':<7}  name / description", ""]
    for event in table.events:
        counters = ",".join(map(str, table.counters_for(event.number)))
        lines.append(f"{event.number:>3}  {counters:<7}  {event.name}")
        lines.append(f"{'':3}  {'':7}  {event.description}")
    lines += ["", "Give -e a number or a name (any case; '-' or '_' for spaces), or use -a for all."]
    return "\n".join(lines) + "\n"


def event_list_json(machine: Machine) -> str:
    import json

    from hwperfd.perfex.plan import cpu_events

    table = cpu_events(machine.cpu_type)
    return (
        json.dumps(
            {
                "cpu": {"type": machine.cpu_type, "name": machine.label, "mhz": machine.mhz},
                "events": [
                    {
                        "event": e.number,
                        "name": e.name,
                        "counters": list(table.counters_for(e.number)),
                        "macro": e.macro,
                        "description": e.description,
                    }
                    for e in table.events
                ],
            },
            indent=2,
        )
        + "\n"
    )
