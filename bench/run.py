#!/usr/bin/env python3
"""hwperfd benchmark: PIOCGETEVCTRS round trips against the FUSE floor, idle load, listing, perfex start-up.

    python3 bench/run.py [--calls N] [--rounds R] [--procs P] [--idle-seconds S] [--list-procs N] ...

Part 1 (latency).  Builds bench/floor_server.c (a minimal single-threaded
libfuse3 server answering every ioctl with 256 zero bytes: the floor for any
FUSE ioctl here) and bench/ioctl_client.c, mounts the floor server, hwperfd
with --clock manual and with --clock real, and (for reference) hwperfd's
FUSE stack with a no-op handler (bench/pyfuse3_floor.py), all under a
temporary directory.  The C client runs against each, interleaved over
several rounds so that machine noise falls on all alike; against hwperfd it
first enables the counters on itself, so each PIOCGETEVCTRS does real work.
The figure per target is the median of the per-round medians, and the ratio
hwperfd / floor is checked against the 2.0x target, and the daemon's CPU
per call against 2.5x the floor server's.  Beside each hwperfd
clock the same client, run with -s, reads its own counters from its state
page (docs/state-pages.md) instead: no FUSE round trip, target 2 us; and
the Python client's own reads, from the page and through the ioctl.
Beside them, a perfctr program's own reads (bench/vperfctr_client.c,
linked with libperfctr): vperfctr_read_ctrs from the thread's state page
against VPERFCTR_READ_STATE through the daemon, on hwperfd --cpu-type intel
with each clock, at the gate placement (target 2 us for the page).

Placements: "same" pins every server and the client to CPU 0, so no
cross-CPU wake-up is timed and the gap to the floor is the servers' own
cost (the gate by default: reproducible, and what bare metal would show);
"split" pins the servers to CPU 0 and the client to CPU 1; "free" lets the
scheduler choose, which on a small VM swings between the two from run to
run.  The servers' CPU time per call (process CPU clock, exact) is shown too.

Part 2 (idle load).  Mounts a fresh hwperfd (--clock real by default), forks
PROCS children that block on a pipe, enables counters on each through the
mount (hwperfd.client), and measures the daemon's CPU time over IDLE_SECONDS
of wall time (% of one core), before and after enabling, and its RSS.

Part 3 (listing).  Forks LIST_PROCS children that block on a pipe and
times ``ls`` and ``ls -l`` of a fresh hwperfd mount against the same of
/proc, interleaved; the figure is the median, the targets 3x and 5x.  One
listing more after the owners' 1 s lifetime has lapsed shows that cost.

Part 4 (perfex start-up).  ``perfex -e 0 true`` as installed (the -I -S
launcher of hwperfd.perfex.launcher, bytecode compiled) against ``perf stat
-e task-clock true`` (or a compiled fork/exec/wait of true, bench/forkexec.c,
where perf cannot count); for reference the interpreter alone with and
without site, and ``python3 -m hwperfd.perfex`` (site and its .pth hooks
first); median of interleaved runs, target 6x.

Part 5 (bench modules).  Every ``bench/<topic>.py`` with a top-level
``main()`` (found anew on each run, so a new module needs no edit here) runs
as ``python3 bench/<topic>.py``; its output is its figures, and a line
``figure: WHAT | VALUE | FLOOR | GOAL | PASS`` of it (the last three
optional) also becomes a row of a table in its section.  A module exits 1
when it missed a goal (its figures are kept); one that fails (dies of an
exception, exits with another status, times out, does not parse) is
skipped with a line saying so and its last lines, its figures left out;
a part of run.py's own
that fails is reported the same way, and the others still run.  With
--quick, the modules see HWPERFD_BENCH_QUICK=1 and should do the least that
exercises every path.

The report.  docs/performance.md (--output) is written whole from the run:
the command, date, machine, load and placement, every figure of parts 1-4
beside its floor or baseline and its goal, and each module's output.  No
figure in it is edited by hand.  --quick makes every part tiny (a smoke
test, as the suite runs it; its figures mean nothing).

Everything is unmounted at the end, even on error (SIGTERM, then
fusermount3 -u -z), and the idle children are killed.  Needs root.  Exit
status 0 if every hwperfd ratio at the gate placement meets the target and
every bench module exited 0 (with --quick: if every module and part ran,
goals aside).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TARGET_RATIO = 2.0
CPU_TARGET_RATIO = 2.5  # the daemon's CPU per call against the floor server's
PAGE_TARGET_US = 2.0  # a read of one's own counters from the state page
IDLE_CPU_TARGET = 1.0  # % of one core, the daemon with idle counting processes
RSS_PER_PROC_TARGET_KIB = 8.0  # the daemon's RSS per idle counting process
REPORT = ROOT / "docs" / "performance.md"
# bench/*.py with a main() that are not bench modules: this runner and the servers it starts.
NOT_MODULES = {"run", "pyfuse3_floor"}
QUICK_ENV = "HWPERFD_BENCH_QUICK"  # set to 1 for the bench modules in --quick runs
MODULE_GRACE = 30  # seconds a stopped module's group has to unmount before SIGKILL
PLACEMENTS = ("same", "split", "free")

sys.path.insert(0, str(ROOT))

from hwperfd.daemon import mounted_at  # noqa: E402


# -- small helpers -------------------------------------------------------------


def log(msg: str = "") -> None:
    print(msg, flush=True)


def is_mounted(path: Path) -> bool:
    return mounted_at(str(path)) is not None


def cpu_ns(pid: int) -> int:
    """Exact CPU time (user + system, all threads) of ``pid``: its process CPU clock."""
    return time.clock_gettime_ns(((~pid) << 3) | 2)


def stat_cpu_ns(pid: int) -> int:
    """utime + stime of ``pid`` from /proc/<pid>/stat, in ns (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * (1_000_000_000 // os.sysconf("SC_CLK_TCK"))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def set_affinity(pid: int, cpus: set[int] | None) -> None:
    """Pin every thread of ``pid`` (None: all CPUs)."""
    cpus = cpus or set(range(os.cpu_count() or 1))
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cpus)


def build(tmp: Path) -> tuple[Path, Path]:
    cc = os.environ.get("CC", "cc")
    fuse = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], check=True, capture_output=True, text=True)
    server, client = tmp / "floor_server", tmp / "ioctl_client"
    flags = ["-O2", "-Wall", "-Werror"]
    subprocess.run([cc, *flags, "-o", server, BENCH / "floor_server.c", *fuse.stdout.split()], check=True)
    subprocess.run([cc, *flags, "-I", ROOT / "include", "-o", client, BENCH / "ioctl_client.c",
                    ROOT / "lib" / "state.c", ROOT / "lib" / "state_open.c"],
                   check=True)
    return server, client


# -- servers -------------------------------------------------------------------


@dataclass
class Server:
    name: str
    mount: Path
    process: subprocess.Popen
    log: Path
    client_path: Path  # what the client opens (a file, or the mount for hwperfd)
    enable: bool  # the client enables counters first (hwperfd)
    state: bool = False  # the client reads its state page, not the ioctl (-s)
    python: tuple[float, float] | None = None  # the Python client's reads: page, ioctl (us)
    gated: bool = False  # checked against the target
    short: str = ""  # label in the summary
    medians: dict[str, list[float]] = field(default_factory=dict)
    p99s: dict[str, list[float]] = field(default_factory=dict)
    cpu_per_call: dict[str, list[float]] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid


def start_server(name: str, argv: list[str], mount: Path, logfile: Path, ready: Path, client_path: Path,
                 enable: bool) -> Server:
    mount.mkdir(parents=True, exist_ok=True)
    with open(logfile, "w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    server = Server(name, mount, process, logfile, client_path, enable)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{logfile.read_text()}")
        with contextlib.suppress(OSError):
            if is_mounted(mount) and ready.exists():
                return server
        time.sleep(0.02)
    stop_server(server)
    raise RuntimeError(f"{name} did not mount {mount} in time:\n{logfile.read_text()}")


def stop_server(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    if is_mounted(server.mount):
        subprocess.run(["fusermount3", "-u", "-z", str(server.mount)], check=False)


def start_hwperfd(tmp: Path, clock: str, cpus: int, tag: str = "") -> Server:
    mount = tmp / f"hwperfd-{clock}{tag}"
    argv = [sys.executable, "-m", "hwperfd", "--clock", clock, "--cpus", str(cpus), "--state-dir", f"{mount}-state",
            str(mount)]
    server = start_server(f"hwperfd, {clock} clock", argv, mount, tmp / f"hwperfd-{clock}{tag}.log",
                          mount / "control", mount, enable=True)
    server.gated, server.short = True, clock
    return server


# -- part 1: latency -------------------------------------------------------------

RESULT = re.compile(r"^RESULT (.*)$", re.M)


def run_client(client: Path, server: Server, calls: int, warmup: int, cpu: int | None) -> dict[str, float]:
    argv = [str(client), "-n", str(calls), "-w", str(warmup)]
    if server.enable:
        argv.append("-e")
    if server.state:
        argv.append("-s")
    argv.append(str(server.client_path))
    preexec = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    before = cpu_ns(server.pid)
    done = subprocess.run(argv, capture_output=True, text=True, preexec_fn=preexec, timeout=600)
    used = cpu_ns(server.pid) - before
    match = RESULT.search(done.stdout)
    if done.returncode != 0 or not match:
        raise RuntimeError(f"client against {server.name} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    values = {k: float(v) for k, v in (kv.split("=") for kv in match.group(1).split())}
    # Includes the open, the enable and the warm-up; the server did nothing else meanwhile.
    values["server_cpu_us_per_call"] = used / 1000 / (calls + warmup + (1 if server.enable else 0))
    return values


def place(servers: list[Server], placement: str) -> int | None:
    """Set the servers' affinity; return the CPU to pin the client to (None: free)."""
    if placement == "free":
        for s in servers:
            set_affinity(s.pid, None)
        return None
    for s in servers:
        set_affinity(s.pid, {0})
    return 0 if placement == "same" else 1


def med(values: list[float]) -> float:
    return statistics.median(values)


def verdict(ratio: float) -> str:
    return "PASS" if ratio <= TARGET_RATIO else "MISS"


@dataclass
class Latency:
    placement: str
    floor: Server
    others: list[Server]

    def figure(self, s: Server) -> float:
        return med(s.medians[self.placement])

    def ratio(self, s: Server) -> float:
        return self.figure(s) / self.figure(self.floor)

    def cpu_ratio(self, s: Server) -> float:
        """The server's CPU per call against the floor server's."""
        return med(s.cpu_per_call[self.placement]) / med(self.floor.cpu_per_call[self.placement])


def latency(args, tmp: Path, server_bin: Path, client_bin: Path) -> list[Latency]:
    results = []
    with contextlib.ExitStack() as stack:
        floor_mount = tmp / "floor"
        floor = start_server("floor, C libfuse", [str(server_bin), str(floor_mount)], floor_mount,
                             tmp / "floor.log", floor_mount / "file", floor_mount / "file", enable=False)
        floor.short = "floor"
        stack.callback(stop_server, floor)
        others = []
        if args.pyfuse3_floor:
            loop_mount = tmp / "pyfuse3-floor"
            loop = start_server("pyfuse3 loop, no-op", [sys.executable, str(BENCH / "pyfuse3_floor.py"), str(loop_mount)],
                                loop_mount, tmp / "pyfuse3-floor.log", loop_mount / "file", loop_mount / "file",
                                enable=False)
            loop.short = "pyfuse3 loop"
            stack.callback(stop_server, loop)
            others.append(loop)
        for clock in args.clocks:
            d = start_hwperfd(tmp, clock, args.cpus)
            stack.callback(stop_server, d)
            others.append(d)
            # The same daemon, the client reading its own counters from its state page.
            others.append(dataclasses.replace(d, name=f"hwperfd, {clock}, page", state=True, gated=False,
                                              short=f"{clock} page", medians={}, p99s={}, cpu_per_call={}))
        servers = [floor, *others]
        for placement in args.placements:
            if placement != "free" and (os.cpu_count() or 1) < 2:
                log(f"(skipping placement {placement}: needs 2 CPUs)")
                continue
            cpu = place(servers, placement)
            log(f"\n== latency, placement {placement}: {args.rounds} rounds x {args.calls} calls "
                f"(+{args.warmup} warm-up) per target ==")
            for r in range(args.rounds):
                # Rotate the order so no target always runs first or last.
                order = servers[r % len(servers):] + servers[: r % len(servers)]
                for s in order:
                    v = run_client(client_bin, s, args.calls, args.warmup, cpu)
                    s.medians.setdefault(placement, []).append(v["median_us"])
                    s.p99s.setdefault(placement, []).append(v["p99_us"])
                    s.cpu_per_call.setdefault(placement, []).append(v["server_cpu_us_per_call"])
                    fell = int(v.get("fallbacks", 0))  # page reads the page sent to the ioctl
                    log(f"  round {r + 1}  {s.name:21s} median {v['median_us']:6.1f} us  p90 {v['p90_us']:6.1f}"
                        f"  p99 {v['p99_us']:6.1f}   server CPU {v['server_cpu_us_per_call']:5.1f} us/call"
                        + (f"  ({fell} reads through the ioctl)" if fell else ""))
            result = Latency(placement, floor, others)
            report_latency(result, args)
            results.append(result)
        place(servers, "free")
        for s in servers:
            if s.process.poll() is not None:
                raise RuntimeError(f"{s.name} died:\n{s.log.read_text()}")
        for s in others:
            if s.gated:
                s.python = python_reads(s, args)
    return results


PYTHON_READS = """
import sys, time
from hwperfd.client import ProcessCounters, user
pc = ProcessCounters(mount=sys.argv[1])
pc.enable({0: user(0)})
assert pc.page is not None
def median(read, n):
    times = []
    for _ in range(n):
        t = time.perf_counter_ns(); read(); times.append(time.perf_counter_ns() - t)
    return sorted(times)[n // 2]
n = int(sys.argv[2])
print(median(pc.read, n), median(pc.read_ioctl, n))
"""


@dataclass
class VperfctrReads:
    clock: str
    page_ns: list[float] = field(default_factory=list)  # per-round medians
    ioctl_ns: list[float] = field(default_factory=list)
    reg_ns: list[float] = field(default_factory=list)  # a thread's registration, as PAPI makes it
    reg_cpu_ns: list[float] = field(default_factory=list)  # the daemon's CPU per registration
    region_sleep_ns: list[float] = field(default_factory=list)  # two threads' registrations per region,
    region_spin_ns: list[float] = field(default_factory=list)  # barrier sleeping / spinning (omptough's shape)
    # The same with every vperfctr given to the daemon (HWPERFD_PERFCTR_KEEP=0),
    # on the real clock, where libperfctr otherwise keeps a TSC-only one.
    given: VperfctrReads | None = None

    @property
    def kept(self) -> str:
        """How its registrations reach the daemon."""
        if self.given is not None:
            return "kept in libperfctr"
        return "each call to the daemon" + (" (HWPERFD_PERFCTR_KEEP=0)" if self.clock == "real" else "")


def registrations(client: Path, server: Server, res: VperfctrReads, args, preexec, env: dict[str, str]) -> None:
    """A thread's registration (PAPI's, at every thread it meets), what it
    costs the daemon's CPU, and two threads registering at each parallel
    region, meeting at a barrier that sleeps or spins (libgomp's default):
    free placement, as an OpenMP program's threads run."""
    regs = max(100, args.calls // 10)
    before = cpu_ns(server.process.pid)
    done = subprocess.run([str(client), "-r", str(regs), "-w", str(max(10, regs // 10))],
                          capture_output=True, text=True, preexec_fn=preexec, timeout=600, env=env)
    spent = cpu_ns(server.process.pid) - before
    match = RESULT.search(done.stdout)
    if done.returncode != 0 or not match:
        raise RuntimeError(f"registrations against {server.name} failed:\n{done.stdout}{done.stderr}")
    values = {k: float(v) for k, v in (kv.split("=") for kv in match.group(1).split())}
    res.reg_ns.append(values["reg_ns"])
    res.reg_cpu_ns.append(spent / (regs + max(10, regs // 10)))
    log(f"  {server.name:24s} registration, {res.kept}: {values['reg_ns'] / 1000:6.1f} us (p99 "
        f"{values['reg_p99_ns'] / 1000:6.1f}), daemon CPU {res.reg_cpu_ns[-1] / 1000:6.1f} us each")
    for spin, kept in ((False, res.region_sleep_ns), (True, res.region_spin_ns)):
        argv = [str(client), "-p", str(max(50, args.calls // 20)), *(["-s"] if spin else [])]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
        match = RESULT.search(done.stdout)
        if done.returncode != 0 or not match:
            raise RuntimeError(f"regions against {server.name} failed:\n{done.stdout}{done.stderr}")
        kept.append(float(match.group(1).split("=")[1]))
    log(f"  {server.name:24s} region of two registrations, {res.kept}: barrier sleeping "
        f"{res.region_sleep_ns[-1] / 1e6:6.2f} ms, spinning {res.region_spin_ns[-1] / 1e6:6.2f} ms")


def vperfctr_reads(args, tmp: Path) -> list[VperfctrReads]:
    """A perfctr program's own reads: vperfctr_read_ctrs from its state page,
    and VPERFCTR_READ_STATE through the daemon, pinned as the gate placement."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), "libperfctr"], check=True)
    client = tmp / "vperfctr_client"
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-Wall", "-Werror", "-I", ROOT / "include", "-o", client,
                    BENCH / "vperfctr_client.c", ROOT / "lib" / "libperfctr.a", "-lpthread"], check=True)
    results = []
    with contextlib.ExitStack() as stack:
        servers = []
        for clock in args.clocks:
            mount = tmp / f"hwperfd-perfctr-{clock}"
            argv = [sys.executable, "-m", "hwperfd", "--clock", clock, "--cpus", str(args.cpus), "--cpu-type", "intel",
                    "--state-dir", f"{mount}-state", str(mount)]
            server = start_server(f"hwperfd perfctr, {clock}", argv, mount, tmp / f"hwperfd-perfctr-{clock}.log",
                                  mount / "control", mount, enable=False)
            stack.callback(stop_server, server)
            res = VperfctrReads(clock)
            if clock == "real":
                res.given = VperfctrReads(clock)
            servers.append((server, res))
        cpu = None
        if args.gate != "free" and (os.cpu_count() or 1) >= 2:
            cpu = place([s for s, _ in servers], args.gate)
        log(f"\n== perfctr own reads, placement {args.gate}: {args.rounds} rounds x {args.calls} reads per kind ==")
        for r in range(args.rounds):
            for server, res in servers:
                preexec = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
                done = subprocess.run([str(client), "-n", str(args.calls), "-w", str(args.warmup)], capture_output=True,
                                      text=True, preexec_fn=preexec, timeout=600,
                                      env={**os.environ, "HWPERFD_MOUNT": str(server.mount)})
                match = RESULT.search(done.stdout)
                if done.returncode != 0 or not match:
                    raise RuntimeError(f"vperfctr client against {server.name} failed:\n{done.stdout}{done.stderr}")
                values = {k: float(v) for k, v in (kv.split("=") for kv in match.group(1).split())}
                res.page_ns.append(values["page_ns"])
                res.ioctl_ns.append(values["ioctl_ns"])
                log(f"  round {r + 1}  {server.name:24s} page {values['page_ns']:6.0f} ns (p99 "
                    f"{values['page_p99_ns']:6.0f})  ioctl {values['ioctl_ns'] / 1000:6.1f} us (p99 "
                    f"{values['ioctl_p99_ns'] / 1000:6.1f})")
                env = {**os.environ, "HWPERFD_MOUNT": str(server.mount)}
                registrations(client, server, res, args, preexec, env)
                if res.given is not None:
                    registrations(client, server, res.given, args, preexec, {**env, "HWPERFD_PERFCTR_KEEP": "0"})
        results = [res for _, res in servers]
    return results


def python_reads(server: Server, args) -> tuple[float, float]:
    """The Python client on its own process: median us per read from the page, and through the ioctl."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PYTHON_READS, str(server.mount), str(min(args.calls, 5000))],
                          capture_output=True, text=True, env=env, check=True, timeout=600)
    page_ns, ioctl_ns = map(int, done.stdout.split())
    return page_ns / 1000, ioctl_ns / 1000


def report_latency(res: Latency, args) -> None:
    p = res.placement
    log(f"-- placement {p}: median of {len(res.floor.medians[p])} per-round medians")
    for s in [res.floor, *res.others]:
        line = (f"  {s.name:21s} {res.figure(s):6.1f} us  (p99 {med(s.p99s[p]):6.1f} us, "
                f"server CPU {med(s.cpu_per_call[p]):5.1f} us/call)")
        if s is not res.floor:
            line += f"  {res.ratio(s):5.2f}x floor"
            if s.gated:
                line += f"  {verdict(res.ratio(s))}" + (" (gate)" if p == args.gate else "")
        log(line)


# -- part 2: idle load ---------------------------------------------------------


def fork_idle(n: int) -> tuple[int, list[int]]:
    """``n`` children blocked reading a pipe; they exit when its write end closes."""
    r, w = os.pipe()
    pids: list[int] = []
    try:
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(w)
                    os.read(r, 1)
                finally:
                    os._exit(0)
            pids.append(pid)
    except BaseException:
        os.close(w)
        kill_idle(pids)
        raise
    finally:
        os.close(r)
    return w, pids


def kill_idle(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def measure_cpu(pid: int, seconds: float) -> tuple[float, float]:
    """% of one core over ``seconds``: (exact CPU clock, /proc stat utime+stime)."""
    t0, c0, s0 = time.monotonic_ns(), cpu_ns(pid), stat_cpu_ns(pid)
    time.sleep(seconds)
    t1, c1, s1 = time.monotonic_ns(), cpu_ns(pid), stat_cpu_ns(pid)
    return 100 * (c1 - c0) / (t1 - t0), 100 * (s1 - s0) / (t1 - t0)


@dataclass
class IdleResult:
    clock: str
    procs: int
    base_cpu: float
    base_rss: int
    cpu: float
    cpu_stat: float
    rss: int
    enable_s: float = 0.0  # enabling counters on every process, one client, one after the other
    sweep: str = ""  # the daemon's account of its last sweep (control node)

    @property
    def rss_per_proc(self) -> float:
        """KiB of daemon RSS per idle counting process."""
        return (self.rss - self.base_rss) / self.procs if self.procs else 0.0


SWEEP = re.compile(r"^sweep every .*$", re.M)


def last_sweep(mount: Path) -> str:
    """The daemon's line on its last sweep, from the control node."""
    match = SWEEP.search((mount / "control").read_text())
    return match.group(0) if match else "sweep: not reported"


def sweep_checked(line: str) -> int:
    """How many processes the daemon kept when it last swept."""
    match = re.search(r"checked \d+ of (\d+) processes", line)
    return int(match.group(1)) if match else 0


def sweep_share(line: str) -> str:
    """The sweep's CPU as an average share of one core over its interval."""
    match = re.search(r"every ([0-9.]+) s: the last checked \d+ of \d+ processes in ([0-9.]+) ms", line)
    if not match:
        return "?"
    return f"{100 * float(match.group(2)) / 1000 / float(match.group(1)):.3f}%"


def idle_load(args, tmp: Path, clock: str) -> IdleResult:
    from hwperfd.client import ProcessCounters, user

    daemon = start_hwperfd(tmp, clock, args.cpus, tag="-idle")
    write_end, pids = -1, []
    try:
        log(f"\n== idle load: hwperfd, {clock} clock, {args.procs} idle processes with counters enabled ==")
        time.sleep(1)  # let start-up settle
        base_cpu, base_stat = measure_cpu(daemon.pid, args.idle_seconds)
        base_rss = rss_kib(daemon.pid)
        log(f"  nothing enabled:   CPU {base_cpu:5.2f}% of one core over {args.idle_seconds:g} s "
            f"(stat utime+stime {base_stat:5.2f}%), RSS {base_rss / 1024:.1f} MiB")
        write_end, pids = fork_idle(args.procs)
        t0 = time.monotonic()
        for pid in pids:
            with ProcessCounters(pid, mount=daemon.mount) as counters:
                counters.enable({0: user(0)})
        enable_s = time.monotonic() - t0
        log(f"  enabled counters on {len(pids)} processes in {enable_s:.2f} s")
        time.sleep(1)
        cpu, cpu_stat = measure_cpu(daemon.pid, args.idle_seconds)
        rss = rss_kib(daemon.pid)
        log(f"  {args.procs} enabled, idle: CPU {cpu:5.2f}% of one core over {args.idle_seconds:g} s "
            f"(stat utime+stime {cpu_stat:5.2f}%), RSS {rss / 1024:.1f} MiB "
            f"({(rss - base_rss) / max(1, args.procs):.2f} KiB per process)")
        sweep = last_sweep(daemon.mount)
        if args.procs >= 1000:  # wait for a sweep once all are kept (once a minute)
            deadline = time.monotonic() + 65
            while time.monotonic() < deadline and sweep_checked(sweep) < args.procs:
                time.sleep(1)
                sweep = last_sweep(daemon.mount)
        log(f"  {sweep}")
        for pid in pids[:3]:  # spot check: still enabled
            with ProcessCounters(pid, mount=daemon.mount) as counters:
                generation, _ = counters.read()
            if generation != 1:
                raise RuntimeError(f"pid {pid}: generation {generation}, expected 1")
        if daemon.process.poll() is not None:
            raise RuntimeError(f"hwperfd died:\n{daemon.log.read_text()}")
        return IdleResult(clock, args.procs, base_cpu, base_rss, cpu, cpu_stat, rss, enable_s, sweep)
    finally:
        if write_end >= 0:
            os.close(write_end)  # the children read EOF and exit
        kill_idle(pids)
        stop_server(daemon)


# -- part 3: listing -------------------------------------------------------------


@dataclass
class ListingResult:
    procs: int
    rounds: int
    times: dict[str, list[float]] = field(default_factory=dict)  # command -> ms per round

    def figure(self, name: str) -> float:
        return med(self.times[name])


LISTING_TARGETS = {"ls": 3.0, "ls -l": 5.0}


def timed_run(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Wall time of one run of ``argv`` in ms (its output discarded; a process
    that exits while ``ls -l`` lists it makes ls complain, which is fine)."""
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return (time.perf_counter() - t0) * 1000


def listing(args, tmp: Path) -> ListingResult:
    """``ls`` and ``ls -l`` of the mount against the same of /proc, with
    LIST_PROCS extra processes blocked on a pipe, interleaved per round."""
    daemon = start_hwperfd(tmp, "real", args.cpus, tag="-listing")
    write_end, pids = -1, []
    result = ListingResult(args.list_procs, args.list_rounds)
    try:
        write_end, pids = fork_idle(args.list_procs)
        log(f"\n== listing: {args.list_procs} extra idle processes, {args.list_rounds} rounds ==")
        for flags in ([], ["-l"]):
            name = " ".join(["ls", *flags])
            timed_run(["ls", *flags, str(daemon.mount)])  # the first listing reads every owner
            timed_run(["ls", *flags, "/proc"])
            for r in range(args.list_rounds):
                pair = [(f"{name} <mount>", daemon.mount), (f"{name} /proc", Path("/proc"))]
                for label, path in pair if r % 2 == 0 else pair[::-1]:
                    result.times.setdefault(label, []).append(timed_run(["ls", *flags, str(path)]))
            # A listing after the owners' lifetime has lapsed reads them all again.
            time.sleep(1.1)
            result.times.setdefault(f"{name} <mount>, cold", []).append(timed_run(["ls", *flags, str(daemon.mount)]))
            mine, proc = result.figure(f"{name} <mount>"), result.figure(f"{name} /proc")
            log(f"  {name:6s} mount {mine:7.1f} ms  /proc {proc:6.1f} ms  {mine / proc:5.2f}x "
                f"(target {LISTING_TARGETS[name]:g}x: {'PASS' if mine / proc <= LISTING_TARGETS[name] else 'MISS'}); "
                f"cold {result.figure(f'{name} <mount>, cold'):7.1f} ms")
        if daemon.process.poll() is not None:
            raise RuntimeError(f"hwperfd died:\n{daemon.log.read_text()}")
        return result
    finally:
        if write_end >= 0:
            os.close(write_end)
        kill_idle(pids)
        stop_server(daemon)


# -- part 4: perfex start-up -----------------------------------------------------


@dataclass
class StartupResult:
    baseline: str
    times: dict[str, list[float]] = field(default_factory=dict)

    def figure(self, name: str) -> float:
        return med(self.times[name])


STARTUP_TARGET = 6.0


def startup(args, tmp: Path) -> StartupResult:
    """Wall time of ``perfex -e 0 true`` (as installed: the launcher) against
    ``perf stat -e task-clock true``, or a compiled fork/exec/wait of
    ``true`` where perf cannot count; and for reference the interpreter
    alone and perfex started through site."""
    daemon = start_hwperfd(tmp, "manual", args.cpus, tag="-startup")
    try:
        env = {**os.environ, "HWPERFD_MOUNT": str(daemon.mount), "PYTHONPATH": str(ROOT)}
        perf = shutil.which("perf")
        if perf and subprocess.run([perf, "stat", "-e", "task-clock", "true"], capture_output=True, check=False).returncode == 0:
            baseline, base_argv = "perf stat -e task-clock true", [perf, "stat", "-e", "task-clock", "true"]
        else:
            exe = tmp / "forkexec"
            subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", exe, BENCH / "forkexec.c"], check=True)
            baseline, base_argv = "C fork/exec/wait of true", [str(exe)]
        # perfex as scripts/install.sh installs it: the -I -S launcher, with
        # the package's bytecode compiled (as pip compiles it on install).
        from hwperfd.perfex import launcher

        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "hwperfd"), str(ROOT / "structs")],
                       check=True, stdout=subprocess.DEVNULL)
        launcher.write(str(tmp / "perfex"), root=str(ROOT))
        runs = {
            "perfex -e 0 true": [str(tmp / "perfex"), "-e", "0", "true"],
            baseline: base_argv,
            "python3 -c pass": [sys.executable, "-c", "pass"],
            "python3 -IS -c pass": [sys.executable, "-IS", "-c", "pass"],
            "python3 -m hwperfd.perfex -e 0 true": [sys.executable, "-m", "hwperfd.perfex", "-e", "0", "true"],
        }
        check = subprocess.run(runs["perfex -e 0 true"], env=env, capture_output=True, text=True, check=False)
        if check.returncode != 0:
            raise RuntimeError(f"perfex failed:\n{check.stdout}{check.stderr}")
        result = StartupResult(baseline)
        log(f"\n== perfex start-up: {args.startup_runs} interleaved runs each ==")
        for name, argv in runs.items():
            timed_run(argv, env)  # warm the page cache
        for _ in range(args.startup_runs):
            for name, argv in runs.items():
                result.times.setdefault(name, []).append(timed_run(argv, env))
        ratio = result.figure("perfex -e 0 true") / result.figure(baseline)
        log(f"  perfex -e 0 true {result.figure('perfex -e 0 true'):6.1f} ms, {baseline} "
            f"{result.figure(baseline):6.1f} ms: {ratio:5.2f}x (target {STARTUP_TARGET:g}x: "
            f"{'PASS' if ratio <= STARTUP_TARGET else 'MISS'}); python3 -c pass {result.figure('python3 -c pass'):6.1f} ms, "
            f"python3 -IS -c pass {result.figure('python3 -IS -c pass'):6.1f} ms, python3 -m hwperfd.perfex -e 0 true "
            f"{result.figure('python3 -m hwperfd.perfex -e 0 true'):6.1f} ms")
        return result
    finally:
        stop_server(daemon)


# -- main ----------------------------------------------------------------------


def summary(args, lat: list[Latency], idle: list[IdleResult], lst: ListingResult | None = None,
            up: StartupResult | None = None, vpc: list[VperfctrReads] | None = None) -> str:
    lines = [
        f"hwperfd benchmark (python3 bench/run.py): {os.cpu_count()} CPUs, {platform.machine()}, "
        f"Linux {platform.release()}, Python {platform.python_version()}",
    ]
    if lat:
        lines.append(f"PIOCGETEVCTRS round trip from C, median of {args.rounds} rounds x {args.calls} calls "
                     f"(target: hwperfd <= {TARGET_RATIO:g}x floor at placement {args.gate}):")
        names = [s.name for s in lat[0].others]
        lines.append(f"  {'placement':9s} {'floor, C libfuse':>17s}" + "".join(f"  {n:>25s}" for n in names))
        for res in lat:
            row = f"  {res.placement:9s} {res.figure(res.floor):14.1f} us"
            for s in res.others:
                cell = f"{res.figure(s):.1f} us {res.ratio(s):5.2f}x"
                if s.gated:
                    cell += f" {verdict(res.ratio(s))}"
                row += f"  {cell:>25s}"
            lines.append(row)
        lines.append("  server CPU per call (us): " + "; ".join(
            f"{res.placement}: " + ", ".join(f"{s.short} {med(s.cpu_per_call[res.placement]):.1f}"
                                             for s in [res.floor, *res.others])
            for res in lat))
        for res in lat:
            if res.placement == args.gate:
                lines.append(f"  server CPU per call against the floor's (target {CPU_TARGET_RATIO:g}x): " + ", ".join(
                    f"{s.short} {res.cpu_ratio(s):.2f}x {'PASS' if res.cpu_ratio(s) <= CPU_TARGET_RATIO else 'MISS'}"
                    for s in res.others if s.gated))
        lines.append("  (same: servers and client on CPU 0; split: client on CPU 1; free: scheduler's choice)")
        lines.append(f"Own counters from the state page (no FUSE round trip; target <= {PAGE_TARGET_US:g} us), "
                     "beside the ioctl round trip and the floor:")
        for res in lat:
            for page in (s for s in res.others if s.state):
                ioctl = next(s for s in res.others if s.gated and s.pid == page.pid)
                fast = res.figure(page)
                lines.append(
                    f"  {res.placement:9s} {ioctl.short:6s} clock: page {fast * 1000:6.0f} ns "
                    f"({'PASS' if fast <= PAGE_TARGET_US else 'MISS'}), ioctl {res.figure(ioctl):.1f} us, "
                    f"floor {res.figure(res.floor):.1f} us: ioctl / page {res.figure(ioctl) / fast:.0f}x, "
                    f"floor / page {res.figure(res.floor) / fast:.0f}x")
        for s in lat[0].others:
            if s.gated and s.python is not None:
                page_us, ioctl_us = s.python
                lines.append(f"  Python client, {s.short} clock: page {page_us:.1f} us, ioctl {ioctl_us:.1f} us "
                             f"({ioctl_us / page_us:.1f}x)")
    if vpc:
        lines.append(f"perfctr's own reads (vperfctr_read_ctrs), median of {args.rounds} rounds x {args.calls}, "
                     f"placement {args.gate} (target: page <= {PAGE_TARGET_US:g} us):")
        for v in vpc:
            page, ioctl = med(v.page_ns), med(v.ioctl_ns)
            lines.append(f"  {v.clock:6s} clock: page {page:6.0f} ns ({'PASS' if page <= PAGE_TARGET_US * 1000 else 'MISS'}),"
                         f" VPERFCTR_READ_STATE round trip {ioctl / 1000:.1f} us: ioctl / page {ioctl / page:.0f}x")
            for w in (v, v.given):
                if w is None or not w.reg_ns:
                    continue
                reg, cpu = med(w.reg_ns), med(w.reg_cpu_ns)
                lines.append(f"  {v.clock:6s} clock, {w.kept}: a thread's registration (vperfctr_open, control, "
                             f"unlink, close) {reg / 1000:.1f} us, {reg / ioctl:.2f} read round trips; "
                             f"daemon CPU {cpu / 1000:.1f} us")
                sleep, spin = med(w.region_sleep_ns), med(w.region_spin_ns)
                lines.append(f"  {v.clock:6s} clock, {w.kept}: two threads registering at each parallel region: "
                             f"barrier sleeping {sleep / 1e6:.3f} ms per region, spinning {spin / 1e6:.3f} ms "
                             f"({spin / sleep:.1f}x)")
    for r in idle:
        lines.append(f"idle load, {r.clock} clock: {r.procs} idle processes with counters enabled: "
                     f"daemon CPU {r.cpu:.2f}% of one core, RSS {r.rss / 1024:.1f} MiB "
                     f"(nothing enabled: {r.base_cpu:.2f}%, {r.base_rss / 1024:.1f} MiB): "
                     f"{r.rss_per_proc:.2f} KiB per process; enabling them all from one client {r.enable_s:.1f} s; "
                     f"{r.sweep} (on average {sweep_share(r.sweep)} of one core)")
    if lst is not None:
        for name, target in LISTING_TARGETS.items():
            mine, proc = lst.figure(f"{name} <mount>"), lst.figure(f"{name} /proc")
            lines.append(f"listing, {lst.procs} extra processes, median of {lst.rounds}: {name} of the mount "
                         f"{mine:.1f} ms, of /proc {proc:.1f} ms: {mine / proc:.2f}x "
                         f"({'PASS' if mine / proc <= target else 'MISS'} <= {target:g}x); "
                         f"once the owners' lifetime has lapsed {lst.figure(f'{name} <mount>, cold'):.1f} ms")
    if up is not None:
        mine, base = up.figure("perfex -e 0 true"), up.figure(up.baseline)
        lines.append(f"perfex start-up, median of {len(up.times[up.baseline])}: perfex -e 0 true {mine:.1f} ms, "
                     f"{up.baseline} {base:.1f} ms: {mine / base:.2f}x "
                     f"({'PASS' if mine / base <= STARTUP_TARGET else 'MISS'} <= {STARTUP_TARGET:g}x); "
                     f"the interpreter alone (python3 -c pass) {up.figure('python3 -c pass'):.1f} ms, "
                     f"without site (python3 -IS -c pass) {up.figure('python3 -IS -c pass'):.1f} ms; "
                     f"perfex through site (python3 -m hwperfd.perfex -e 0 true) "
                     f"{up.figure('python3 -m hwperfd.perfex -e 0 true'):.1f} ms")
    lines.append(f"load average at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    return "\n".join(lines)



# -- the report: docs/performance.md ---------------------------------------------


@dataclass
class Figure:
    """One row of the report: a figure next to its floor (or baseline) and its goal."""

    what: str
    value: str
    floor: str = ""
    ratio: str = ""
    goal: str = ""
    verdict: str = ""


def passes(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def figures(args, lat: list[Latency], idle: list[IdleResult], lst: ListingResult | None,
            up: StartupResult | None, vpc: list[VperfctrReads]) -> list[Figure]:
    rows: list[Figure] = []
    for res in lat:
        floor = res.figure(res.floor)
        gate = res.placement == args.gate
        for s in res.others:
            if s.state:
                continue
            ratio = res.ratio(s)
            rows.append(Figure(
                f"PIOCGETEVCTRS round trip, {s.name}, placement {res.placement}", f"{res.figure(s):.1f} us",
                f"{floor:.1f} us (C libfuse)", f"{ratio:.2f}x",
                f"<= {TARGET_RATIO:g}x" if s.gated and gate else "", passes(ratio <= TARGET_RATIO) if s.gated and gate else "",
            ))  # fmt: skip
        for s in res.others:
            if s.gated and gate:
                cpu, fcpu = med(s.cpu_per_call[res.placement]), med(res.floor.cpu_per_call[res.placement])
                rows.append(Figure(
                    f"server CPU per call, {s.name}, placement {res.placement}", f"{cpu:.1f} us",
                    f"{fcpu:.1f} us (C libfuse)", f"{cpu / fcpu:.2f}x", f"<= {CPU_TARGET_RATIO:g}x",
                    passes(cpu / fcpu <= CPU_TARGET_RATIO),
                ))  # fmt: skip
        for page in (s for s in res.others if s.state):
            ioctl = next(s for s in res.others if s.gated and s.pid == page.pid)
            fast = res.figure(page)
            rows.append(Figure(
                f"own counters from the state page, {ioctl.short} clock, placement {res.placement}",
                f"{fast * 1000:.0f} ns", f"{floor:.1f} us (C libfuse); ioctl {res.figure(ioctl):.1f} us",
                f"ioctl / page {res.figure(ioctl) / fast:.0f}x", f"<= {PAGE_TARGET_US:g} us",
                passes(fast <= PAGE_TARGET_US),
            ))  # fmt: skip
    if lat:
        for s in lat[0].others:
            if s.gated and s.python is not None:
                page_us, ioctl_us = s.python
                rows.append(Figure(f"Python client's own read from the page, {s.short} clock", f"{page_us:.1f} us",
                                   f"ioctl {ioctl_us:.1f} us", f"ioctl / page {ioctl_us / page_us:.1f}x"))
    for v in vpc:
        page, ioctl = med(v.page_ns), med(v.ioctl_ns)
        rows.append(Figure(
            f"vperfctr_read_ctrs from the page, {v.clock} clock, placement {args.gate}", f"{page:.0f} ns",
            f"VPERFCTR_READ_STATE {ioctl / 1000:.1f} us", f"ioctl / page {ioctl / page:.0f}x",
            f"<= {PAGE_TARGET_US:g} us", passes(page <= PAGE_TARGET_US * 1000),
        ))  # fmt: skip
        for w in (v, v.given):
            if w is None or not w.reg_ns:
                continue
            reg, cpu = med(w.reg_ns), med(w.reg_cpu_ns)
            rows.append(Figure(
                f"a thread's perfctr registration as PAPI makes it (open, control, unlink, close), {v.clock} clock, "
                f"{w.kept}",
                f"{reg / 1000:.1f} us (daemon CPU {cpu / 1000:.1f} us)", f"VPERFCTR_READ_STATE {ioctl / 1000:.1f} us",
                f"{reg / ioctl:.2f} read round trips",
            ))  # fmt: skip
            sleep, spin = med(w.region_sleep_ns), med(w.region_spin_ns)
            rows.append(Figure(
                f"two threads registering at each parallel region (omptough's shape), spinning, {v.clock} clock, "
                f"{w.kept}",
                f"{spin / 1e6:.3f} ms per region", f"barrier sleeping {sleep / 1e6:.3f} ms", f"{spin / sleep:.1f}x",
            ))  # fmt: skip
    for r in idle:
        rows.append(Figure(
            f"daemon CPU, {r.procs} idle processes counting, {r.clock} clock", f"{r.cpu:.2f}% of one core",
            f"{r.base_cpu:.2f}% (nothing enabled)", "", f"< {IDLE_CPU_TARGET:g}%", passes(r.cpu < IDLE_CPU_TARGET),
        ))  # fmt: skip
        rows.append(Figure(
            f"daemon RSS per idle counting process, {r.clock} clock", f"{r.rss_per_proc:.2f} KiB",
            f"{r.base_rss / 1024:.1f} MiB in all (nothing enabled)", "", f"< {RSS_PER_PROC_TARGET_KIB:g} KiB",
            passes(r.rss_per_proc < RSS_PER_PROC_TARGET_KIB),
        ))  # fmt: skip
        rows.append(Figure(f"enabling {r.procs} processes from one client, {r.clock} clock", f"{r.enable_s:.1f} s"))
        if r.sweep:
            rows.append(Figure(f"the sweep, {r.clock} clock", r.sweep, ratio=f"{sweep_share(r.sweep)} of one core"))
    if lst is not None:
        for name, target in LISTING_TARGETS.items():
            mine, proc = lst.figure(f"{name} <mount>"), lst.figure(f"{name} /proc")
            rows.append(Figure(
                f"`{name}` of the mount, {lst.procs} extra processes", f"{mine:.1f} ms", f"{proc:.1f} ms (/proc)",
                f"{mine / proc:.2f}x", f"<= {target:g}x", passes(mine / proc <= target),
            ))  # fmt: skip
            cold = lst.figure(f"{name} <mount>, cold")
            rows.append(Figure(f"`{name}` of the mount after the owners' lifetime lapsed", f"{cold:.1f} ms",
                               f"{proc:.1f} ms (/proc)", f"{cold / proc:.2f}x"))
    if up is not None:
        mine, base = up.figure("perfex -e 0 true"), up.figure(up.baseline)
        rows.append(Figure("`perfex -e 0 true`", f"{mine:.1f} ms", f"{base:.1f} ms (`{up.baseline}`)",
                           f"{mine / base:.2f}x", f"<= {STARTUP_TARGET:g}x", passes(mine / base <= STARTUP_TARGET)))
        for name in ("python3 -c pass", "python3 -IS -c pass", "python3 -m hwperfd.perfex -e 0 true"):
            rows.append(Figure(f"`{name}`", f"{up.figure(name):.1f} ms", f"{base:.1f} ms (`{up.baseline}`)",
                               f"{up.figure(name) / base:.2f}x"))
    return rows


def bench_modules(folders: list[Path]) -> list[tuple[Path, str]]:
    """Every bench module: <topic>.py with a top-level main() in each folder
    (bench/ by default), found anew on each run, with why it cannot run (a
    file that does not parse is still listed, so the report says so)."""
    found = []
    for path in sorted(path for folder in folders for path in folder.glob("*.py")):
        if path.parent.resolve() == BENCH and path.stem in NOT_MODULES:
            continue
        try:
            tree = ast.parse(path.read_text(), str(path))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
            found.append((path, f"it does not parse: {type(exc).__name__}: {exc}"))
            continue
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            found.append((path, ""))
    return found


@dataclass
class ModuleRun:
    path: Path
    status: int | None  # None: did not finish (timed out, or could not start)
    output: str
    seconds: float
    why: str = ""  # why it did not finish

    @property
    def ok(self) -> bool:
        """It ran to its end and printed its figures: exit status 0, or 1
        (a goal missed) from a module that did not die of an exception."""
        return self.status == 0 or (self.status == 1 and "Traceback (most recent call last)" not in self.output)

    @property
    def met(self) -> bool:
        return self.status == 0

    def state(self) -> str:
        if self.status is None:
            return self.why
        return f"exit status {self.status}"


def run_module(path: Path, quick: bool, timeout: float) -> ModuleRun:
    """``python3 bench/<topic>.py``, as its author runs it; its output is its figures.
    It runs in a process group of its own, which goes whole when it times out
    or this run is stopped: a module's daemons are its children, and a module
    killed alone would leave them running, mounted."""
    env = {**os.environ, QUICK_ENV: "1" if quick else "0"}
    start = time.monotonic()
    try:
        process = subprocess.Popen([sys.executable, str(path)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    except OSError as exc:
        return ModuleRun(path, None, "", time.monotonic() - start, f"could not start: {exc}")
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = stop_group(process)
        return ModuleRun(path, None, out + err, time.monotonic() - start, f"timed out after {timeout:g} s")
    except BaseException:  # this run's SIGTERM or Ctrl-C: the module's group goes with it
        stop_group(process)
        raise
    return ModuleRun(path, process.returncode, out + err, time.monotonic() - start)


def stop_group(process: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM to a module's process group (each daemon in it unmounts on
    SIGTERM), SIGKILL to what is left after MODULE_GRACE seconds; what it
    printed meanwhile."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.communicate(timeout=MODULE_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return process.communicate()


# A module may give figures the report puts in a table, one per line:
#     figure: WHAT | VALUE | FLOOR OR BASELINE | GOAL | PASS or MISS
# (the last three optional); the rest of its output is shown as it printed it.
FIGURE_LINE = re.compile(r"^figure:\s*(.+)$")
# A module's output in the report: at most this many of its last lines.
MODULE_LINES = 400


def module_figures(output: str) -> list[Figure]:
    rows = []
    for line in output.splitlines():
        match = FIGURE_LINE.match(line.strip())
        if match:
            cells = [c.strip() for c in match[1].split("|")] + [""] * 4
            rows.append(Figure(cells[0], cells[1], cells[2], "", cells[3], cells[4]))
    return rows


def tail(text: str, lines: int) -> str:
    kept = text.rstrip("\n").splitlines()
    if len(kept) <= lines:
        return "\n".join(kept)
    return "\n".join([f"[{len(kept) - lines} earlier lines left out]", *kept[-lines:]])


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    return (f"{platform.node()}: {os.cpu_count()} CPUs ({model or platform.machine()}), Linux {platform.release()}, "
            f"Python {platform.python_version()}")


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def report(args, argv: list[str], started: str, load: tuple[float, float, float], rows: list[Figure],
           modules: list[ModuleRun], failed: list[str]) -> str:
    """docs/performance.md, whole: what ran, where, when, and every figure beside its floor and goal."""
    end = os.getloadavg()
    lines = [
        "# Performance",
        "",
        "<!-- Generated by bench/run.py from one run; do not edit. Run it again to replace it. -->",
        "",
        f"- command: `python3 bench/run.py{''.join(' ' + a for a in argv)}`"
        + (" (quick: a smoke test, not a measurement)" if args.quick else ""),
        f"- date: {started}",
        f"- machine: {machine()}",
        f"- load average (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start, "
        f"{end[0]:.2f} {end[1]:.2f} {end[2]:.2f} at the end",
        f"- placement: the gate is `{args.gate}` ({PLACEMENT_TEXT[args.gate]}); timed: "
        + ", ".join(f"`{p}`" for p in args.placements),
        f"- rounds: {args.rounds} interleaved rounds of {args.calls} calls; "
        "each figure the median of the rounds' medians",
        f"- bench modules: {len(modules)} run, {sum(not m.ok for m in modules)} failed, "
        f"{sum(m.ok and not m.met for m in modules)} missed a goal",
        "",
        "What each figure measures and why it is fast: [speed.md](speed.md).",
        "",
        "## Figures",
        "",
    ]
    if rows:
        lines += table(rows)
    elif not failed:
        lines.append("(no part of run.py's own benchmark ran)")
    for line in failed:
        lines += ["", line]
    lines += ["", "## Bench modules", ""]
    if not modules:
        lines.append("(none ran)")
    for m in modules:
        lines += [f"### {m.path.stem}", ""]
        if not m.ok:
            # Its figures are left out: a module that failed measured nothing one can trust.
            lines += [f"`python3 bench/{m.path.name}` failed ({m.state()}, {m.seconds:.1f} s): skipped, its "
                      "figures left out. Its last lines:", "", "```text", tail(m.output, 30), "```", ""]
            continue
        missed = "" if m.met else " - a goal missed (exit status 1)"
        lines += [f"`python3 bench/{m.path.name}`: {m.seconds:.1f} s{missed}", ""]
        own = module_figures(m.output)
        if own:
            lines += [*table(own), ""]
        lines += ["```text", tail(m.output, MODULE_LINES), "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def table(rows: list[Figure]) -> list[str]:
    lines = ["| figure | value | floor or baseline | ratio | goal | |", "|---|---|---|---|---|---|"]
    return lines + [f"| {cell(r.what)} | {cell(r.value)} | {cell(r.floor)} | {cell(r.ratio)} | {cell(r.goal)} "
                    f"| {cell(r.verdict)} |" for r in rows]


PLACEMENT_TEXT = {
    "same": "servers and client on CPU 0",
    "split": "servers on CPU 0, client on CPU 1",
    "free": "the scheduler's choice",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=10000, help="timed ioctls per client run (default 10000)")
    p.add_argument("--warmup", type=int, default=1000, help="untimed ioctls first (default 1000)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per target (default 5)")
    p.add_argument("--placement", default="all",
                   help=f"comma-separated subset of {','.join(PLACEMENTS)}, or all (the default)")
    p.add_argument("--gate", choices=PLACEMENTS, default="same",
                   help="placement whose ratios decide PASS/MISS and the exit status (default same)")
    p.add_argument("--clocks", default="manual,real", help="hwperfd clocks to time (default manual,real)")
    p.add_argument("--no-pyfuse3-floor", dest="pyfuse3_floor", action="store_false",
                   help="skip the reference no-op pyfuse3 server")
    p.add_argument("--cpus", type=int, default=2, help="hwperfd --cpus (default 2)")
    p.add_argument("--procs", type=int, default=2000, help="idle processes with counters enabled (default 2000)")
    p.add_argument("--idle-seconds", type=float, default=10, help="wall time of each CPU measurement (default 10)")
    p.add_argument("--idle-clocks", default="real", help="daemon clocks for the idle part (default real)")
    p.add_argument("--list-procs", type=int, default=10000,
                   help="extra idle processes while timing ls of the mount (default 10000)")
    p.add_argument("--list-rounds", type=int, default=9, help="interleaved ls runs per command (default 9)")
    p.add_argument("--startup-runs", type=int, default=30, help="interleaved perfex start-up runs (default 30)")
    p.add_argument("--no-latency", action="store_true", help="skip part 1")
    p.add_argument("--no-perfctr", action="store_true", help="skip perfctr's own reads (part 1)")
    p.add_argument("--no-idle", action="store_true", help="skip part 2")
    p.add_argument("--no-listing", action="store_true", help="skip part 3")
    p.add_argument("--no-startup", action="store_true", help="skip part 4")
    p.add_argument("--no-modules", action="store_true", help="skip the bench modules (bench/<topic>.py)")
    p.add_argument("--modules", default="", help="comma-separated bench modules to run (default: every one found)")
    p.add_argument("--module-dir", type=Path, action="append",
                   help="where to find bench modules (repeatable; default bench/)")
    p.add_argument("--module-timeout", type=float, default=1800, help="seconds per bench module (default 1800)")
    p.add_argument("--output", type=Path, default=REPORT, help=f"the report (default {REPORT.relative_to(ROOT)})")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test of every part in seconds: tiny counts, one round, the gate placement only, "
                   f"{QUICK_ENV}=1 for the modules; figures mean nothing")
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.warmup, args.rounds, args.placement = 200, 20, 1, args.gate
        args.procs, args.idle_seconds, args.list_procs, args.list_rounds = 5, 0.5, 20, 1
        args.startup_runs, args.module_timeout = 2, min(args.module_timeout, 300)
    args.placements = list(PLACEMENTS) if args.placement == "all" else args.placement.split(",")
    args.clocks = [c for c in args.clocks.split(",") if c]
    args.idle_clocks = [c for c in args.idle_clocks.split(",") if c]
    for x in args.placements:
        if x not in PLACEMENTS:
            p.error(f"unknown placement {x!r}")
    for x in args.clocks + args.idle_clocks:
        if x not in ("manual", "real"):
            p.error(f"unknown clock {x!r}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bench/run.py must run as root (hwperfd mounts with allow_other)", file=sys.stderr)
        return 2
    for tool in (os.environ.get("CC", "cc"), "pkg-config", "fusermount3"):
        if shutil.which(tool) is None:
            print(f"bench/run.py needs {tool} (apt-get install gcc pkg-config libfuse3-dev fuse3)", file=sys.stderr)
            return 2
    # A SIGTERM must unwind through the clean-ups below, like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="hwperfd-bench-"))
    os.chmod(tmp, 0o755)
    lat: list[Latency] = []
    idle: list[IdleResult] = []
    lst: ListingResult | None = None
    up: StartupResult | None = None
    vpc: list[VperfctrReads] = []
    modules: list[ModuleRun] = []
    failed: list[str] = []  # parts of run.py's own benchmark that failed, a line each

    def part(name: str, run):
        """One part; one that fails is reported and the others still run."""
        try:
            return run()
        except Exception as exc:  # any failure of a part is reported, not fatal
            log(traceback.format_exc())
            failed.append(f"Part {name} failed, its figures left out: {type(exc).__name__}: {exc}")
            return None

    try:
        if not args.no_latency:
            def timed():
                server_bin, client_bin = build(tmp)
                return latency(args, tmp, server_bin, client_bin)

            lat = part("latency", timed) or []
        if not args.no_perfctr:
            vpc = part("perfctr's own reads", lambda: vperfctr_reads(args, tmp)) or []
        if not args.no_idle:
            for clock in args.idle_clocks:
                done = part(f"idle load ({clock} clock)", lambda clock=clock: idle_load(args, tmp, clock))
                if done is not None:
                    idle.append(done)
        if not args.no_listing:
            lst = part("listing", lambda: listing(args, tmp))
        if not args.no_startup:
            if lst is not None:
                time.sleep(5)  # the listing's idle processes have just exited all at once
            up = part("perfex start-up", lambda: startup(args, tmp))
        if not args.no_modules:
            wanted = {m for m in args.modules.split(",") if m}
            for path, problem in bench_modules(args.module_dir or [BENCH]):
                if wanted and path.stem not in wanted:
                    continue
                log(f"\n----- bench module {path.stem} -----")
                if problem:
                    modules.append(ModuleRun(path, None, "", 0.0, problem))
                else:
                    modules.append(run_module(path, args.quick, args.module_timeout))
                log(modules[-1].output.rstrip("\n") if modules[-1].ok else f"failed: {modules[-1].state()}\n"
                    + tail(modules[-1].output, 30))
    finally:
        for child in tmp.iterdir():
            if child.is_dir() and is_mounted(child):  # belt and braces
                subprocess.run(["fusermount3", "-u", "-z", str(child)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    log("\n----- summary -----\n" + summary(args, lat, idle, lst, up, vpc) + "\n-------------------")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report(args, sys.argv[1:] if argv is None else list(argv), started, load,
                                  figures(args, lat, idle, lst, up, vpc), modules, failed))
    log(f"written: {args.output}")
    gate = [res for res in lat if res.placement == args.gate]
    pages = all(res.figure(s) <= PAGE_TARGET_US for res in gate for s in res.others if s.state)
    pages = pages and all(med(v.page_ns) <= PAGE_TARGET_US * 1000 for v in vpc)
    cpu = all(res.cpu_ratio(s) <= CPU_TARGET_RATIO for res in gate for s in res.others if s.gated)
    ran = all(m.ok for m in modules) and not failed  # every module and part measured
    met_modules = all(m.met for m in modules)
    if args.quick:  # a smoke test: every part ran; its figures decide nothing
        return 0 if ran else 1
    met = pages and cpu and all(verdict(res.ratio(s)) == "PASS" for res in gate for s in res.others if s.gated)
    return 0 if met and met_modules and ran else 1


if __name__ == "__main__":
    sys.exit(main())
