#!/usr/bin/env python3
"""hwperfd benchmark: root's request latency and the daemon's memory under
event storms by an unprivileged user.

    python3 bench/storm.py [--stormers N] [--seconds S] [--rounds R] [--kinds K,...] [--nice N]

Mounts a fresh hwperfd (--clock real) under a temporary directory, measures
root's ``cat <mount>/perfctr`` (open, read, close) for a quiet baseline, then
starts N processes as uid 65534 (bench/storm_client.c) that for S seconds,
as fast as they can, create and join threads (``threads``: processes hwperfd
does not count), fork children that exit at once (``forks``), or create and
join threads after a libcpc bind with CPC_BIND_LWP_INHERIT (``inherit``:
every thread gets a context of its own), timing the same read all the
while, and a root process that counts itself reading its counts through
the daemon (PIOCGETEVCTRS, not its state page: a counting process's own
request works off the event backlog the kernel had queued before it);
after each storm the daemon's RSS is taken again once it has caught up.
Prints the median and p99 latency of both quiet and under each storm
(targets 50 ms and 200 ms), what the stormers made, and the daemon's RSS
before, after each storm, and the ratio (target: back within 10% of the
baseline), and the daemon's CPU time per process or thread made.  The
daemon shares the CPUs with the stormers and everything else at its nice
value (--nice, 0 by default): on a loaded machine it is then behind on
the events, always runnable, and a request waits for its turn on a CPU
(the latency is the scheduler's); a service in a cgroup of its own is not
starved by its users.  Needs root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.storm_parts import Counted, build_client, rss_kib  # noqa: E402 - after the tree is on the path

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]

KINDS = ("threads", "forks", "inherit")


def cpu_s(pid: int) -> float:
    """The process's CPU time (user + system) so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_node(path: Path) -> float:
    began = time.perf_counter()
    with open(path, "rb") as f:
        f.read()
    return time.perf_counter() - began


def sample(path: Path, seconds: float, gap: float = 0.005) -> list[float]:
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out.append(read_node(path))
        time.sleep(gap)
    return out


def percentiles(times: list[float]) -> tuple[float, float]:
    """(median, p99)"""
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def figures(label: str, times: list[float]) -> str:
    median, p99 = percentiles(times)
    return f"{label:<40} median {median * 1e3:7.2f} ms   p99 {p99 * 1e3:7.2f} ms   ({len(times)} reads)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stormers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1, help="storms of each kind")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"storms to run, of {', '.join(KINDS)}")
    parser.add_argument("--nice", type=int, default=0,
                        help="the daemon's nice value (a loaded machine's CPU share, as a service's own cgroup "
                             "would give it beside its users')")  # fmt: skip
    if os.environ.get("HWPERFD_BENCH_QUICK") == "1":  # bench/run.py --quick: a smoke test
        parser.set_defaults(stormers=2, seconds=1.0, rounds=1)
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if not set(kinds) <= set(KINDS):
        parser.error(f"--kinds: of {', '.join(KINDS)}")
    if os.geteuid() != 0:
        print("bench/storm.py needs root", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="hwperfd-storm-"))
    os.chmod(folder, 0o755)
    mount = folder / "mnt"
    mount.mkdir()
    client = build_client(folder / "storm_client")
    log = open(folder / "hwperfd.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "hwperfd", "--clock", "real", "--state-dir", f"{mount}-state",
                               str(mount)],
                              stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip
    ok = True
    try:
        os.setpriority(os.PRIO_PROCESS, daemon.pid, args.nice)
        node = mount / "perfctr"
        deadline = time.monotonic() + 15
        while not node.exists():
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError("hwperfd did not mount")
            time.sleep(0.05)
        counted = Counted(mount, 2.0)
        counted.start()
        quiet = sample(node, 2.0)
        print(f"daemon nice {args.nice}, load average {os.getloadavg()[0]:.1f}")
        print(figures("quiet", quiet))
        print(figures("quiet, root's counting process", counted.times()))
        base = rss_kib(daemon.pid)
        print(f"daemon RSS baseline     {base} KiB")
        env = {**os.environ, "HWPERFD_MOUNT": str(mount)}
        for kind, round_ in [(kind, r) for kind in kinds for r in range(args.rounds)]:
            counted = Counted(mount, args.seconds)
            stormers = [
                subprocess.Popen([*NOBODY, str(client), kind, str(args.seconds)],
                                 stdout=subprocess.PIPE, text=True, cwd="/", env=env)  # fmt: skip
                for _ in range(args.stormers)
            ]
            used = cpu_s(daemon.pid)
            counted.start()
            stormy = sample(node, args.seconds)
            made = sum(int(p.communicate()[0] or 0) for p in stormers)
            own = counted.times()
            load = os.getloadavg()[0]
            time.sleep(2.0)  # the daemon catches up
            used = cpu_s(daemon.pid) - used
            after = rss_kib(daemon.pid)
            for times in (stormy, own):
                median, p99 = percentiles(times)
                ok &= median < 0.050 and p99 < 0.200
            ok &= after <= base * 1.10
            made_what = "processes" if kind == "forks" else "threads"
            print(figures(f"{kind} {round_ + 1} ({made} {made_what})", stormy))
            print(figures(f"{kind} {round_ + 1}, root's counting process", own))
            print(f"daemon RSS after {kind} {round_ + 1}  {after} KiB ({after / base:.2f}x baseline)")
            # The daemon's cost per event: its CPU time over the storm and the
            # catching up after it, per process or thread the stormers made.
            print(f"daemon CPU for {kind} {round_ + 1}  {used:.2f} s, {used / max(made, 1) * 1e6:.1f} us per "
                  f"{made_what[:-2] if kind == 'forks' else 'thread'} (load average {load:.1f})")  # fmt: skip
    except Exception:
        log.flush()
        print((folder / "hwperfd.log").read_text()[-3000:], file=sys.stderr)  # what the daemon said
        raise
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        subprocess.run(["fusermount3", "-u", "-z", str(mount)], check=False, capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
    print("targets (median < 50 ms, p99 < 200 ms, RSS within 10%):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
