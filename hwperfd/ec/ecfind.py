"""ecfind(1): report the processes using the process-based event counters.

These are the processes that stop ecadmin from enabling the global
counters.  How they are found: ``hwperfd.ec.procs``.
"""

from __future__ import annotations

import sys

from hwperfd.client import mount_point, require_mount
from hwperfd.ec import common, procs
from hwperfd.ec.common import UsageError

USAGE = "ecfind [-tv]"
HELP = f"""\
usage: {USAGE}

Report the processes whose event counters are enabled through their /proc
file (perfex, libperfex, PAPI, ...): while any exist, ecadmin cannot enable
the global counters.

Default columns are those of ps -ef: UID PID PPID STIME TTY TIME CMD.
  -t   terse: PID and COMMAND only.
  -v   verbose, on stderr: what was looked at, each process's counter state
       (enabled, released, lost; user or system mode; generation), and how
       many files could not be read.

Process files are mode 0600 and owned by the process's user: root sees
every process, other users only their own (ecfind says how many it could
not read).  hwperfd must be mounted at $HWPERFD_MOUNT or {mount_point()}.
Exit status: 0 (whether or not any process was found), 1 on any error.
"""


def main(argv: list[str] | None = None) -> int:
    return common.run("ecfind", USAGE, HELP, _ecfind, argv)


def _ecfind(argv: list[str]) -> int:
    found, rest = common.options(argv, "tv")
    if rest:
        raise UsageError(f"unexpected argument {rest[0]!r}")
    terse = any(name == "-t" for name, _ in found)
    say = common.diagnostics("ecfind", any(name == "-v" for name, _ in found))
    mount = require_mount()
    scan = procs.scan(mount)
    say(f"looked at {scan.files} process files in {mount}")
    for user in scan.with_state:
        say(f"pid {user.pid}: counters {user.state}, {user.mode} mode, generation {user.generation}")
    if scan.unreadable:
        say(
            f"{len(scan.unreadable)} process files not readable by this user (other users' files are mode 0600): "
            "run as root to see every process"
        )
    if scan.gone:
        say(f"{len(scan.gone)} processes exited while looking")
    rows = [row for row in (procs.ps_row(user.pid) for user in scan.counting) if row is not None]
    say(f"{len(rows)} processes use the process-based counters")
    if terse:
        lines = [f"{'PID':>7} COMMAND"] + [f"{r.pid:>7} {r.cmd}" for r in rows]
    else:
        lines = [f"{'UID':<8} {'PID':>7} {'PPID':>7} {'STIME':<5} {'TTY':<8} {'TIME':>8} CMD"]
        lines += [f"{r.uid:<8} {r.pid:>7} {r.ppid:>7} {r.stime:<5} {r.tty:<8} {r.time:>8} {r.cmd}" for r in rows]
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
