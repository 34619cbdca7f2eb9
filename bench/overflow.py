#!/usr/bin/env python3
"""Overflow signals on the real clock: how many arrive, and how late.

    python3 bench/overflow.py [--cpu-ms MS] [--periods 1,10,100] [--idle N] [--idle-only]

Mounts hwperfd (--clock real, intel at 2400 MHz, 2 CPUs) in a temporary
directory and runs bench/overflow_client.c, linked with libperfctr and
libcpc, as a sampling profiler does: one overflow-interrupting cycles
counter (user and system mode) of each period, restarted from the signal
handler (perfctr i-mode and vperfctr_iresume; libcpc CPC_OVF_NOTIFY_EMT,
preset and cpc_set_restart), while the client burns --cpu-ms of its own CPU
time.  Per personality and period, with the libraries' overflow timer
("timer": docs/overflow.md), without it (HWPERFD_OVERFLOW_TIMER=0, the
daemon's tick alone, as before the timer), and with the timer beside a
CPU-bound process on every CPU ("+busy"), it prints:

  signals  what arrived; "of cpu" what the CPU time holds (cycles of it /
           period); "of counted" what the counter counted / period - the
           counters stop at the overflowing event, so this one is exact;
  past     counts past the overflow read in the handler (median, p99):
           0 when the counters froze at the event;
  late     counts the CPU time between the overflow and the handler's
           restart is worth (median, p99; the restart before it and the
           handler's own read included): the time the counters stood frozen,
           which "of cpu" loses to "of counted".

Then four threads of one process, each on its own period (the periods
given, and one longer than the run, which must get none), alone and beside
a CPU-bound process on every CPU (tests/overflow/four_threads.c): per
thread, signals against the CPU time's and the counted cycles' worth, and
signals that reached a thread that did not overflow ("foreign", with the
main thread's "stray").

Then IRIX (an R10000 mount at IRIX_MHZ): overflow thresholds with the
interrupt enable bit and SIGUSR1 (tests/overflow/irix_sampler.c, under the
hwperfd-run shim), on the process's counters (one thread, and "x2": two
threads burning its CPU time) and on four threads' own, with the shim's
overflow timer ("timer"), without it (HWPERFD_OVERFLOW_TIMER=0: the daemon's
tick alone, as before the shim timed them), and with the timer beside a
CPU-bound process on every CPU.  IRIX counters count on through an
overflow: "past" is the count in the handler past the signal's overflow,
"late" the process's (or thread's) CPU time from the overflow to the
handler, in counts; "got" the signals against what the CPU time holds, and
"of counted" the overflows the counted cycles crossed (cycles / period: as
nobody, user mode alone).  --irix-only prints these alone.

Before these, what one FUSE round trip costs the calling thread's own CPU
clock, against the C libfuse floor server (bench/floor_server.c, which does
nothing but answer), with the server on CPU 0 and the caller on CPU 0 ("same
CPU") or CPU 1 ("other CPU"): the look that finds an overflow is one such
trip the counters stand still through, so it bounds "got" for short periods
(docs/overflow.md).

Last, the idle cost: --idle processes (2 000; --quick 50) that block on a
pipe, each with a vperfctr i-mode counter of a 100 ms period through
libperfctr, and the daemon's CPU time over 10 s (% of one core), with the
timer and without it; the goal is under 1%.  (For IRIX, printed after its
figures: as many processes with a threshold of 100 ms of CPU time, opening
the mount themselves ("tick") and under the hwperfd-run shim ("shim"), which
times the threshold in the process.)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tree's hwperfd-run shim (irix_env), not an installed one
MHZ = 2400
# The daemon runs at the shipped unit's priority, as the service does (and the suite's daemons).
_UNIT_NICE = re.search(r"^Nice=(-?\d+)$", (ROOT / "systemd" / "hwperfd.service").read_text(), re.M)
DAEMON_NICE = ["nice", "-n", _UNIT_NICE.group(1)] if _UNIT_NICE else []
IRIX_MHZ = 200  # an R10000's thresholds are 31 bits: 10 s of CPU time is 2e9 cycles


def build(tmp: Path, source: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib")], check=True)
    out = tmp / source.stem
    libraries = [str(ROOT / "lib" / f"{name}.a") for name in ("libperfctr", "libcpc", "libhwperf")]
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", f"-I{ROOT / 'include'}", "-o", str(out), str(source),
                    *libraries, "-lpthread"], check=True)  # fmt: skip
    return out


def mount(tmp: Path, cpu_type: str = "intel", mhz: int = MHZ) -> tuple[subprocess.Popen, Path]:
    mnt = tmp / f"mnt-{cpu_type}"
    mnt.mkdir()
    log = open(tmp / "hwperfd.log", "a")
    daemon = subprocess.Popen([*DAEMON_NICE, sys.executable, "-m", "hwperfd", "--cpus", "2", "--cpu-type", cpu_type,
                               "--mhz", str(mhz), "--state-dir", f"{mnt}-state", str(mnt)],
                              cwd=ROOT, stdout=log, stderr=log)  # fmt: skip
    deadline = time.monotonic() + 60
    while not (mnt / "control").exists():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"hwperfd did not mount: {(tmp / 'hwperfd.log').read_text()}")
        time.sleep(0.1)
    return daemon, mnt


def pct(values: list[int], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else 0


def run(client: Path, mnt: Path, personality: str, period: int, cpu_ms: int, timer: bool = True,
        busy: bool = False) -> str:  # fmt: skip
    env = {**os.environ, "HWPERFD_MOUNT": str(mnt), "HWPERFD_OVERFLOW_TIMER": "1" if timer else "0"}
    with cpu_bound_on_every_cpu(busy):
        done = subprocess.run([str(client), personality, str(period), str(cpu_ms), str(MHZ)], capture_output=True,
                              text=True, env=env, timeout=600)  # fmt: skip
    label = f"{personality} {'timer' if timer else 'tick'}{'+busy' if busy else ''}"
    if done.returncode:
        return f"{label:13} failed: {done.stderr.strip()}"
    head, *rows = done.stdout.splitlines()
    fields = dict(kv.split("=") for kv in head.split())
    signals, counted, cpu_ns = int(fields["signals"]), int(fields["counted"]), int(fields["cpu_ns"])
    past = [int(r.split()[0]) for r in rows]
    late = [int(r.split()[1]) * MHZ // 1000 for r in rows]  # CPU ns -> cycles
    of_cpu = cpu_ns * MHZ / 1000 / period
    return (
        f"{label:18} {period / MHZ / 1000:8.1f} ms {signals:7d} {of_cpu:9.1f} {signals / of_cpu:6.1%}"
        f" {counted // period:10d} {statistics.median(past) if past else 0:6.0f} {pct(past, 0.99):6.0f}"
        f" {statistics.median(late) if late else 0:9.0f} {pct(late, 0.99):9.0f}"
    )


def irix_env(mnt: Path, timer: bool = True) -> dict[str, str]:
    from hwperfd.run import preload_library

    return {**os.environ, "HWPERFD_MOUNT": str(mnt), "LD_PRELOAD": str(preload_library()),
            "HWPERFD_OVERFLOW_TIMER": "1" if timer else "0"}  # fmt: skip


def lateness(label: str, signals: int, of_cpu: float, counted: int, past: list[int], late: list[int]) -> str:
    return (
        f"{label:13} {signals:7d} {of_cpu:9.1f} {signals / of_cpu if of_cpu else 0:6.1%} {counted:10d}"
        f" {statistics.median(past) if past else 0:6.0f} {pct(past, 0.99):6.0f}"
        f" {statistics.median(late) if late else 0:9.0f} {pct(late, 0.99):9.0f}"
    )


def run_irix(sampler: Path, mnt: Path, period: int, cpu_ms: int, busy: bool, timer: bool = True,
             threads: int = 1) -> str:  # fmt: skip
    with cpu_bound_on_every_cpu(busy):
        done = subprocess.run([str(sampler), "process", str(period), str(cpu_ms), str(IRIX_MHZ), str(threads)],
                              capture_output=True, text=True, env=irix_env(mnt, timer), timeout=600)  # fmt: skip
    what = f"process{f'x{threads}' if threads > 1 else ''}"
    label = f"{what} {'timer' if timer else 'tick'}{'+busy' if busy else ''} {period / IRIX_MHZ / 1000:6.1f} ms"
    if done.returncode:
        return f"{label} failed: {done.stderr.strip()}"
    head, *rows = done.stdout.splitlines()
    fields = dict(kv.split("=") for kv in head.split())
    past = [int(r.split()[0]) for r in rows]
    late = [int(r.split()[1]) * IRIX_MHZ // 1000 for r in rows]
    of_cpu = int(fields["cpu_ns"]) * IRIX_MHZ / 1000 / period
    return lateness(label, int(fields["signals"]), of_cpu, int(fields["counted"]) // period, past, late)


def run_irix_threads(sampler: Path, mnt: Path, periods: list[int], cpu_ms: int, busy: bool,
                     timer: bool = True) -> list[str]:  # fmt: skip
    with cpu_bound_on_every_cpu(busy):
        done = subprocess.run([str(sampler), "threads", str(cpu_ms), str(IRIX_MHZ), *map(str, periods)],
                              capture_output=True, text=True, env=irix_env(mnt, timer), timeout=600)  # fmt: skip
    how = f"{'timer' if timer else 'tick'}{'+busy' if busy else ''}"
    if done.returncode:
        return [f"threads {how} failed: {done.stderr.strip()}"]
    lines = done.stdout.splitlines()
    late: dict[int, list[int]] = {}
    for line in lines:
        if line.startswith("late="):
            index, ns = line[5:].split()
            late.setdefault(int(index), []).append(int(ns) * IRIX_MHZ // 1000)
    *rows, tail = (dict(kv.split("=") for kv in line.split()) for line in lines if not line.startswith("late="))
    out = []
    for row in rows:
        period = int(row["period"])
        label = f"thread{row['thread']} {how} {period / IRIX_MHZ / 1000:6.1f} ms"
        of_cpu = int(row["cpu_ns"]) * IRIX_MHZ / 1000 / period
        ticks = late.get(int(row["thread"]), [])
        out.append(lateness(label, int(row["signals"]), of_cpu, int(row["sum"]) // period, [], ticks)
                   + f" foreign {row['foreign']} stray {tail['stray']}")  # fmt: skip
    return out


@contextmanager
def cpu_bound_on_every_cpu(on: bool) -> Iterator[None]:
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range((os.cpu_count() or 1) if on else 0)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def run_threads(client: Path, mnt: Path, personality: str, periods: list[int], cpu_ms: int, busy: bool) -> list[str]:
    with cpu_bound_on_every_cpu(busy):
        done = subprocess.run([str(client), personality, str(cpu_ms), *map(str, periods)], capture_output=True,
                              text=True, env={**os.environ, "HWPERFD_MOUNT": str(mnt)}, timeout=600)  # fmt: skip
    label = f"{personality}{'+busy' if busy else ''}"
    if done.returncode:
        return [f"{label:13} failed: {done.stderr.strip()}"]
    *rows, tail = (dict(kv.split("=") for kv in line.split()) for line in done.stdout.splitlines())
    out = []
    for row in rows:
        period, signals, counted = int(row["period"]), int(row["signals"]), int(row["sum"])
        out.append(f"{label:18} {period / MHZ / 1000:8.1f} ms {signals:7d} {cpu_ms * MHZ * 1000 / period:9.1f}"
                   f" {counted // period:10d} {row['foreign']:>7} {tail['stray']:>5}")  # fmt: skip
    return out


IDLE_CHILD = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "libperfctr.h"
/* One idle counted process: a vperfctr i-mode cycles counter of PERIOD, then
   it says "1" on stdout and blocks on stdin until it closes. */
int main(int argc, char **argv)
{
    struct vperfctr_control c;
    struct vperfctr *v = vperfctr_open();
    char b;

    (void)argc;
    memset(&c, 0, sizeof c);
    c.si_signo = 29;
    c.cpu_control.tsc_on = 1;
    c.cpu_control.nrictrs = 1;
    c.cpu_control.evntsel[0] = 0x3C | (3 << 16) | (1 << 20) | (1 << 22);
    c.cpu_control.ireset[0] = -atoi(argv[1]);
    if (v == NULL || vperfctr_control(v, &c) < 0)
        return perror("vperfctr"), 1;
    write(1, "1", 1);
    return read(0, &b, 1) < 0;
}
"""


IDLE_IRIX_CHILD = r"""
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <unistd.h>
/* One idle IRIX process: cycles with the interrupt enable bit and a
   threshold of PERIOD, SIGUSR1; then "1" on stdout, and it blocks on stdin. */
static void on_usr1(int sig) { (void)sig; }
int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args;
    char path[4096], b;
    int fd;

    (void)argc;
    signal(SIGUSR1, on_usr1);
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ie = 1;
    args.hwp_ovflw_freq[0] = atoi(argv[1]);
    args.hwp_ovflw_sig = SIGUSR1;
    snprintf(path, sizeof path, "%s/%d", getenv("HWPERFD_MOUNT"), (int)getpid());
    if ((fd = open(path, O_RDWR)) < 0 || ioctl(fd, PIOCENEVCTRS, &args) < 0)
        return perror(path), 1;
    write(1, "1", 1);
    return read(0, &b, 1) < 0;
}
"""


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle(tmp: Path, mnt: Path, daemon: subprocess.Popen, n: int, timer: bool, seconds: float,
         irix_child: bool = False, beside: Path | None = None) -> str:  # fmt: skip
    """The daemon's CPU over ``seconds`` with ``n`` idle i-mode counting
    processes (``irix_child``: processes with an IRIX threshold of 100 ms),
    against the same daemon's over ``seconds`` with none just before (the
    machine's other processes' events cost it too).  With ``beside`` (the
    IRIX sampler), also the daemon's CPU while one process overflows every
    1 ms on the daemon's tick alone, with the idle ones and without: each of
    its wakes must cost what is due, not every process armed."""
    source = tmp / ("idle_irix.c" if irix_child else "idle.c")
    source.write_text(IDLE_IRIX_CHILD if irix_child else IDLE_CHILD.replace("#include <unistd.h>",
                                                                            "#include <unistd.h>\n#include <stdlib.h>"))
    binary = build(tmp, source)
    period = 100 * (IRIX_MHZ if irix_child else MHZ) * 1000
    env = {**os.environ, "HWPERFD_MOUNT": str(mnt), "HWPERFD_OVERFLOW_TIMER": "1" if timer else "0"}
    if irix_child and timer:  # under the hwperfd-run shim, which times the threshold in the process
        env = irix_env(mnt)

    def share() -> float:
        before, wall = cpu_s(daemon.pid), time.monotonic()
        time.sleep(seconds)
        return (cpu_s(daemon.pid) - before) / (time.monotonic() - wall)

    def sampled() -> float:
        assert beside is not None
        before, wall = cpu_s(daemon.pid), time.monotonic()
        subprocess.run([str(beside), "process", str(IRIX_MHZ * 1000), "1000", str(IRIX_MHZ), "1"],
                       capture_output=True, env=irix_env(mnt, False), timeout=600, check=True)  # fmt: skip
        return (cpu_s(daemon.pid) - before) / (time.monotonic() - wall)

    time.sleep(3)  # the exits of an earlier figure's processes are taken in first
    baseline = share()
    alone = sampled() if beside is not None else 0.0
    children, refused = [], 0
    try:
        while len(children) < n and refused <= n // 10:
            child = subprocess.Popen([str(binary), str(period)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)  # fmt: skip
            assert child.stdout is not None
            if child.stdout.read(1) == b"1":
                children.append(child)
            else:  # set-up refused (reported below); another takes its place
                refused += 1
                child.wait()
        time.sleep(1)  # the looks at the new contexts settle
        loaded = share()
        crowded = sampled() if beside is not None else 0.0
    finally:
        for child in children:
            child.kill()
            child.wait()
    label = ("shim" if timer else "tick") if irix_child else "timer" if timer else "tick"
    what = "IRIX" if irix_child else "i-mode"
    line = (f"{len(children)} idle {what} processes, {label:5}: daemon {loaded:.2%} of a core over {seconds:.0f} s,"
            f" {baseline:.2%} with none: {loaded - baseline:+.2%} (goal < 1%); set-ups refused {refused}")  # fmt: skip
    if beside is not None:
        line += (f"\n  one process overflowing every 1 ms (tick alone) beside them: daemon {crowded:.1%} of a core,"
                 f" {alone:.1%} alone: {crowded / alone if alone else 0:.2f}x")  # fmt: skip
    return line


def irix(tmp: Path, args: argparse.Namespace) -> None:
    sampler = build(tmp, ROOT / "tests" / "overflow" / "irix_sampler.c")
    daemon, mnt = mount(tmp, "r10000", IRIX_MHZ)
    try:
        print(f"IRIX thresholds, r10000 {IRIX_MHZ} MHz; load average {os.getloadavg()[0]:.1f}")
        print(f"{'':29} {'signals':>7} {'of cpu':>9} {'got':>6} {'of counted':>10} "
              f"{'past':>6} {'p99':>6} {'late':>9} {'p99':>9}")  # fmt: skip
        for busy in (False, True):
            for ms in (float(p) for p in args.irix_periods.split(",")):
                period = int(ms * IRIX_MHZ * 1000)
                cpu_ms = args.cpu_ms or max(300, int(20.5 * ms))
                for timer in (True, False) if not busy else (True,):
                    print(run_irix(sampler, mnt, period, cpu_ms, busy, timer), flush=True)
        for ms in (float(p) for p in args.irix_periods.split(",")[:2]):
            period = int(ms * IRIX_MHZ * 1000)
            cpu_ms = args.cpu_ms or max(300, int(20.5 * ms))
            for timer in (True, False):  # the process's counters count both threads, on the process's clock
                print(run_irix(sampler, mnt, period, cpu_ms, False, timer, threads=2), flush=True)
        periods = [int(float(p) * IRIX_MHZ * 1000) for p in args.threads.split(",")]
        cpu_ms = args.cpu_ms or max(300, int(20 * max(periods) / IRIX_MHZ / 1000))
        periods.append(2**31 - 1)  # longer than the run: never overflows
        for busy, timer in ((False, True), (False, False), (True, True)):
            print("\n".join(run_irix_threads(sampler, mnt, periods, cpu_ms, busy, timer)), flush=True)
        if args.idle:
            for timer in (False, True):
                beside = sampler if not timer else None
                print(idle(tmp, mnt, daemon, args.idle, timer, args.idle_seconds, True, beside), flush=True)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False, capture_output=True)


def round_trip_cost(tmp: Path) -> str:
    """The caller's own CPU time (and the wall time) per FUSE round trip to
    the floor server, caller on the server's CPU and on the other."""
    sys.path.insert(0, str(ROOT / "bench"))
    import run as runner  # bench/run.py: the floor server and its start and stop

    server_bin, client = runner.build(tmp)
    floor_mount = tmp / "floor"
    server = [str(server_bin), str(floor_mount)]
    file = floor_mount / "file"
    floor = runner.start_server("floor, C libfuse", server, floor_mount, tmp / "floor.log", file, file, enable=False)
    lines = ["FUSE round trip to the C libfuse floor server (on CPU 0): the caller's CPU time per call"]
    try:
        runner.set_affinity(floor.pid, {0})
        for label, cpu in (("same CPU", 0), ("other CPU", 1 % (os.cpu_count() or 1))):
            done = subprocess.run([str(client), "-n", "5000", "-w", "500", str(floor_mount / "file")],
                                  capture_output=True, text=True, timeout=300,
                                  preexec_fn=lambda cpu=cpu: os.sched_setaffinity(0, {cpu}))  # fmt: skip
            found = runner.RESULT.search(done.stdout)
            if done.returncode != 0 or not found:
                raise SystemExit(f"ioctl_client failed:\n{done.stdout}{done.stderr}")
            v = dict(kv.split("=", 1) for kv in found.group(1).split())
            cpu_us, wall_us = float(v["cpu_median_us"]), float(v["median_us"])
            lines.append(f"  {label:10} {cpu_us:7.2f} us of the caller's CPU ({cpu_us * MHZ:8.0f} counts at {MHZ} MHz)"
                         f", {wall_us:7.2f} us wall")  # fmt: skip
    finally:
        runner.stop_server(floor)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-ms", type=int, default=0, help="CPU time per run (default: 20 periods, at least 300 ms)")
    parser.add_argument("--periods", default="1,10,100", help="periods in ms of CPU time at 2400 MHz")
    parser.add_argument("--irix-periods", default="1,10,100,1000", help="IRIX periods in ms of CPU time")
    parser.add_argument("--threads", default="1,2,5", help="three threads' periods in ms (a fourth never overflows)")
    parser.add_argument("--idle", type=int, default=2000, help="idle counting processes for the idle cost (0: none)")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--irix-only", action="store_true", help="only the IRIX figures (and their idle cost)")
    parser.add_argument("--idle-only", action="store_true", help="only the idle cost (i-mode and IRIX)")
    quick = os.environ.get("HWPERFD_BENCH_QUICK") == "1"
    if quick:  # bench/run.py --quick: a smoke test
        parser.set_defaults(cpu_ms=40, periods="1", irix_periods="1", idle=20, idle_seconds=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hwperfd-overflow-") as name:
        tmp = Path(name)
        if args.irix_only:
            irix(tmp, args)
            return
        if args.idle_only:
            for model, mhz, irix_child in (("intel", MHZ, False), ("r10000", IRIX_MHZ, True)):
                daemon, mnt = mount(tmp, model, mhz) if irix_child else mount(tmp)
                try:
                    for timer in (True, False):
                        sampler = ROOT / "tests" / "overflow" / "irix_sampler.c"
                        beside = build(tmp, sampler) if irix_child and not timer else None
                        line = idle(tmp, mnt, daemon, args.idle, timer, args.idle_seconds, irix_child, beside)
                        print(line, flush=True)
                finally:
                    daemon.terminate()
                    daemon.wait(timeout=30)
                    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False, capture_output=True)
            return
        client = build(tmp, ROOT / "bench" / "overflow_client.c")
        threads = build(tmp, ROOT / "tests" / "overflow" / "four_threads.c")
        print(round_trip_cost(tmp), flush=True)
        daemon, mnt = mount(tmp)
        try:
            print(f"hwperfd real clock, intel {MHZ} MHz; load average {os.getloadavg()[0]:.1f}")
            print(f"{'':18} {'period':>11} {'signals':>7} {'of cpu':>9} {'got':>6} {'of counted':>10} "
                  f"{'past':>6} {'p99':>6} {'late':>9} {'p99':>9}")  # fmt: skip
            for ms in (float(p) for p in args.periods.split(",")):
                period = int(ms * MHZ * 1000)
                cpu_ms = args.cpu_ms or max(300, int(20.5 * ms))  # half a period past the 20th
                for personality in ("perfctr", "cpc"):
                    for timer in (True, False):
                        print(run(client, mnt, personality, period, cpu_ms, timer), flush=True)
                    print(run(client, mnt, personality, period, cpu_ms, busy=True), flush=True)
            periods = [int(float(p) * MHZ * 1000) for p in args.threads.split(",")]
            cpu_ms = args.cpu_ms or max(300, int(20 * max(periods) / MHZ / 1000))
            periods.append(2**31 - 1)  # perfctr's longest ireset: longer than the run, never overflows
            print(f"four threads, {cpu_ms} ms of CPU time each")
            print(f"{'':13} {'period':>11} {'signals':>7} {'of cpu':>9} {'of counted':>10} {'foreign':>7} {'stray':>5}")
            for busy in (False, True):
                for personality in ("perfctr", "cpc"):
                    print("\n".join(run_threads(threads, mnt, personality, periods, cpu_ms, busy)), flush=True)
            irix(tmp, args)
            if args.idle:
                for timer in (True, False):
                    print(idle(tmp, mnt, daemon, args.idle, timer, args.idle_seconds), flush=True)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False, capture_output=True)


if __name__ == "__main__":
    main()
