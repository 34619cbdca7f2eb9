"""perfex(1): run a command and print its R10000/R12000 event counts.

Options are IRIX perfex's (single dash, ``-mp`` included), parsed up to
the first word that is not an option: that word and the rest are the
command.  Exit status: the command's (128 + N if signal N killed it);
125 when perfex itself fails, 126/127 when the command cannot be run or
is not found (as env(1), nice(1), timeout(1) do).
"""

from __future__ import annotations

import os
import sys

import structs
from hwperfd.client import NotMounted, mount_point
from hwperfd.cpu.events import CPU_TYPE_DATA
from hwperfd.perfex import machine as machines
from hwperfd.perfex import plan as plans
from hwperfd.perfex import report as reports
from hwperfd.perfex import runner
from hwperfd.perfex.runner import EXIT_PERFEX, PerfexError

TYPE_CHECKING = False  # typing stays off perfex's start-up (hwperfd/records.py)
if TYPE_CHECKING:
    from typing import TextIO

    from hwperfd.perfex.costs import CostTable

USAGE = """\
usage: perfex [-a | -e event0 [-e event1]] [-mp | -s] [-x] [-y] [-t]
              [-o file] [-c file] [-l n] [-r n] [--json | --csv] command [args]
       perfex --list [--cpu-type TYPE] [--json]
       perfex -t [-c file] [--cpu-type TYPE]

Runs command and, when it exits, prints the counts of the chosen events over
the command and every descendant it waited for, to stderr (or -o file).

  -e event   count event (0-31 or its name, see --list); up to two, one per
             hardware counter; a counter left free counts cycles.  Default:
             cycles.  T5_EVENT0 / T5_EVENT1 in the environment give events
             when no -e does.
  -a         count all 32 events, 16 multiplexed per counter at clock ticks;
             counts are projected (scaled by the time each was counted) and
             shown with that share of the run.  -e is ignored.
  --times-16 with -a: project by multiplying by 16, as the page (and IRIX's
             perfex) did, instead of by the share each event was counted.
  -mp        also print each process's own counts, labelled by pid.
  -s         count only between SIGUSR1 and SIGUSR2 sent to perfex (repeatable;
             the command only, not its descendants).  Not with -mp.
  -x         count at exception level too (e.g. TLB refills), not only user.
  -y         estimate the time each event costs (typical, minimum, maximum),
             sorted by cost, with derived statistics.
  -t         print the cost table (the format -c and /etc/perfex.costs use)
             to stdout and exit.
  -c file    cost file overriding the built-in table and /etc/perfex.costs.
  -l n       with -y: L1/L2 data reuse for n-byte data elements instead of
             cache line reuse (IRIX's load quantum; 0 = cache lines).
  -r n       run the command n times; print mean counts and their spread.
  -o file    write the report to file instead of stderr.
  --json     the report as JSON;  --csv  as CSV.
  --list     list the events of the CPU type with descriptions.
  --cpu-type TYPE  with --list or -t: r10000 or r12000, without asking hwperfd.

hwperfd must be mounted at $HWPERFD_MOUNT or /run/hwperfd.
Exit status: the command's; 125 if perfex fails; 126/127 if the command
cannot be run / is not found.
"""

_WITH_ARGUMENT = {"-e": "events", "-o": "output", "-c": "cost_file", "-l": "reuse", "-r": "repeat"}
_LONG_WITH_ARGUMENT = {
    "--event": "-e",
    "--output": "-o",
    "--costs": "-c",
    "--repeat": "-r",
    "--cpu-type": "--cpu-type",
}
_FLAGS = {
    "-a": "all_events",
    "-mp": "per_process",
    "-s": "signal_control",
    "-x": "exception_level",
    "-y": "costs",
    "-t": "print_table",
    "--json": "json_output",
    "--csv": "csv_output",
    "--list": "list_events",
    "--times-16": "times_16",
    "-h": "help",
    "--help": "help",
}


class UsageError(ValueError):
    pass


class Options:
    """perfex's options, as parsed (a plain class: see hwperfd.cpu.events.Event)."""

    __slots__ = (
        "events", "all_events", "per_process", "signal_control", "exception_level", "costs", "print_table",
        "output", "cost_file", "reuse", "repeat", "json_output", "csv_output", "list_events", "cpu_type",
        "help", "command", "times_16",
    )  # fmt: skip

    def __init__(self) -> None:
        self.events: list[str] = []
        self.all_events = False
        self.per_process = False
        self.signal_control = False
        self.exception_level = False
        self.costs = False
        self.print_table = False
        self.output: str | None = None
        self.cost_file: str | None = None
        self.reuse = 0
        self.repeat = 1
        self.json_output = False
        self.csv_output = False
        self.list_events = False
        self.cpu_type: str | None = None
        self.help = False
        self.command: list[str] = []
        self.times_16 = False


def parse_args(argv: list[str]) -> Options:
    """IRIX perfex's options, then the command."""
    opts = Options()
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        value = None
        name = word
        if word.startswith("--") and "=" in word:
            name, value = word.split("=", 1)
        if name in _LONG_WITH_ARGUMENT:
            name = _LONG_WITH_ARGUMENT[name]
        if name in _FLAGS and value is None:
            setattr(opts, _FLAGS[name], True)
            i += 1
            continue
        if name not in _WITH_ARGUMENT and name != "--cpu-type":
            attached = word[:2]
            if attached in _WITH_ARGUMENT and not word.startswith("--"):
                name, value = attached, word[2:]
            else:
                raise UsageError(f"unknown option {word!r}")
        if value is None:
            if i + 1 >= len(argv):
                raise UsageError(f"option {name} needs an argument")
            value = argv[i + 1]
            i += 1
        i += 1
        _set(opts, name, value)
    opts.command = argv[i:]
    _check(opts)
    return opts


def _set(opts: Options, name: str, value: str) -> None:
    if name == "-e":
        opts.events.append(value)
    elif name == "--cpu-type":
        if value.lower() not in CPU_TYPE_DATA:
            raise UsageError(f"--cpu-type must be one of {', '.join(CPU_TYPE_DATA)}")
        opts.cpu_type = value.lower()
    elif name in ("-l", "-r"):
        try:
            number = int(value)
        except ValueError:
            raise UsageError(f"{name} needs a whole number, not {value!r}") from None
        if name == "-l" and number < 0:
            raise UsageError("-l: the load quantum must be 0 or a positive number of bytes")
        if name == "-r" and number < 1:
            raise UsageError("-r: the number of runs must be at least 1")
        setattr(opts, _WITH_ARGUMENT[name], number)
    else:
        setattr(opts, _WITH_ARGUMENT[name], value)


def _check(opts: Options) -> None:
    if opts.help:
        return
    if opts.signal_control and opts.per_process:
        # perfex(1) DEPENDENCIES / LIMITATIONS: -s controls only the command.
        raise UsageError("-s and -mp cannot be combined: -s starts and stops only the command, not its descendants")
    if opts.json_output and opts.csv_output:
        raise UsageError("--json and --csv cannot be combined")
    if opts.cost_file and not (opts.costs or opts.print_table):
        raise UsageError("-c loads costs for -y (or -t); give -y")
    if opts.reuse and not opts.costs:
        raise UsageError("-l changes the reuse statistics of -y; give -y")
    if opts.times_16 and not opts.all_events:
        raise UsageError("--times-16 changes how -a projects its counts; give -a")
    if opts.per_process and opts.repeat > 1:
        raise UsageError("-mp and -r cannot be combined")
    if opts.cpu_type and not (opts.list_events or opts.print_table):
        raise UsageError("--cpu-type is for --list and -t; a run uses the CPU type hwperfd emulates")
    if not (opts.list_events or opts.print_table) and not opts.command:
        raise UsageError("no command given")


def main(argv: list[str] | None = None) -> int:
    from hwperfd.perfex import hold_start_signals

    hold_start_signals()
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        _error(f"{exc}\n{USAGE.splitlines()[0]}\n(perfex --help for more)")
        return EXIT_PERFEX
    if opts.help:
        sys.stdout.write(USAGE)
        return 0
    try:
        if opts.list_events or opts.print_table:
            return _describe(opts)
        return _measure(opts)
    except PerfexError as exc:
        _error(str(exc))
        return exc.status
    except (NotMounted, machines.MachineUnknown, plans.EventError) as exc:
        _error(str(exc))
        return EXIT_PERFEX


def _costs(cpu_type: str, cost_file: str | None) -> CostTable:
    """The -y/-t cost table: the cost modules load only for these options."""
    from hwperfd.perfex import costs as cost_tables

    try:
        return cost_tables.load(cpu_type, cost_file)
    except cost_tables.CostFileError as exc:
        raise PerfexError(str(exc)) from None


def _error(text: str) -> None:
    sys.stderr.write(f"perfex: {text}\n")
    sys.stderr.flush()


def _machine_for_description(opts: Options) -> tuple[machines.Machine, str]:
    if opts.cpu_type:
        return machines.offline(opts.cpu_type), ""
    try:
        return machines.detect(), ""
    except NotMounted:
        return machines.offline("r10000"), f" (hwperfd is not mounted at {mount_point()}: showing the R10000)"


def _describe(opts: Options) -> int:
    machine, note = _machine_for_description(opts)
    if opts.print_table:
        table = _costs(machine.cpu_type, opts.cost_file)
        sys.stdout.write(table.format())
        return 0
    sys.stdout.write(reports.event_list_json(machine) if opts.json_output else reports.event_list(machine, note))
    return 0


def _measure(opts: Options) -> int:
    output = _open_output(opts.output)
    machine = machines.detect()
    mode = structs.HWPERF_CNTEN_U | (structs.HWPERF_CNTEN_E if opts.exception_level else 0)
    if opts.all_events:
        if opts.events:
            _error("-a counts all events: ignoring -e")
        plan = plans.all_events(machine.cpu_type, mode)
    else:
        specifiers = opts.events or plans.environment_events(os.environ)
        plan = plans.plan_from(specifiers, machine.cpu_type, mode)
    table = _costs(machine.cpu_type, opts.cost_file) if opts.costs else None

    warnings: list[str] = []
    measurements: list[runner.Measurement] = []
    exit_code = 0
    for _ in range(opts.repeat):
        m = runner.run(
            opts.command,
            plan,
            machine.mount,
            signal_control=opts.signal_control,
            notice=_error,
            processes=opts.per_process,
        )
        measurements.append(m)
        exit_code = m.exit_code
        if m.signal:
            warnings.append(f"the command was killed by signal {m.signal}")
        if m.lost:
            warnings.append("the counters were taken away during the run (generation changed): counts are incomplete")
        if opts.signal_control and not m.started:
            warnings.append("never got a start (SIGUSR1) signal: nothing was counted")
        if exit_code != 0:
            break  # a failing run is not repeated; its counts are reported
    for text in dict.fromkeys(warnings):
        _error(text)

    projected = [runner.project(m, plan, opts.times_16) for m in measurements]
    events = [
        reports.EventResult(
            e,
            runs=[p[e.number].count for p in projected],
            raw=[p[e.number].raw for p in projected],
            fractions=[p[e.number].fraction for p in projected],
        )
        for e in plan.events
    ]
    report = reports.Report(
        opts.command, machine, plan, events, exit_code, table, warnings=list(dict.fromkeys(warnings))
    )
    if table is not None:
        from hwperfd.perfex import stats

        report.statistics = stats.derive(report.counted(), table, machine.mhz, opts.reuse)
    if opts.per_process:
        m = measurements[-1]
        shares = runner.project_shares(m.processes, plan, projected[-1])
        report.processes = [
            reports.ProcessResult(share.pid, share.comm, counts, share.thread_of)
            for share, counts in zip(m.processes, shares)
        ]
    if opts.json_output:
        text = reports.as_json(report)
    elif opts.csv_output:
        text = reports.as_csv(report)
    else:
        text = reports.text(report)
    output.write(text)
    output.flush()
    if output is not sys.stderr:
        output.close()
    return exit_code


def _open_output(path: str | None) -> TextIO:
    if not path:
        return sys.stderr
    try:
        return open(path, "w")  # opened before the run: a bad path fails first
    except OSError as exc:
        raise PerfexError(f"cannot write {path}: {exc.strerror}") from None
