#!/usr/bin/env python3
"""hwperfd benchmark: root's request latency and the daemon's memory under
event storms by an unprivileged user.

    python3 bench/storm.py [--stormers N] [--seconds S] [--rounds R] [--kinds K,...]

Mounts a fresh hwperfd (--clock real) under a temporary directory, measures
root's ``cat <mount>/perfctr`` (open, read, close) for a quiet baseline, then
starts N processes as uid 65534 (bench/storm_client.c) that for S seconds,
as fast as they can, create and join threads (``threads``: processes hwperfd
does not count), fork children that exit at once (``forks``), or create and
join threads after a libcpc bind with CPC_BIND_LWP_INHERIT (``inherit``:
every thread gets a context of its own), timing the same read all the
while; after each storm the daemon's RSS is taken again once it has caught
up.  Prints the median and p99 latency quiet and under each storm (targets
50 ms and 200 ms), what the stormers made, and the daemon's RSS before,
after each storm, and the ratio (target: back within 10% of the baseline).
Needs root.
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
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]

KINDS = ("threads", "forks", "inherit")


def build(folder: Path) -> Path:
    """bench/storm_client.c, linked with the tree's libcpc, where uid 65534 may run it."""
    out = folder / "storm_client"
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", f"-I{ROOT / 'include'}", "-o", str(out),
                    str(ROOT / "bench" / "storm_client.c"), f"-L{ROOT / 'lib'}", f"-Wl,-rpath,{ROOT / 'lib'}",
                    "-lcpc", "-pthread"], check=True)  # fmt: skip
    return out


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


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


def figures(label: str, times: list[float]) -> str:
    times = sorted(times)
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    median = statistics.median(times)
    return f"{label:<32} median {median * 1e3:7.2f} ms   p99 {p99 * 1e3:7.2f} ms   ({len(times)} reads)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stormers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1, help="storms of each kind")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"storms to run, of {', '.join(KINDS)}")
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
    client = build(folder)
    log = open(folder / "hwperfd.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "hwperfd", "--clock", "real", str(mount)],
                              stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip
    ok = True
    try:
        node = mount / "perfctr"
        deadline = time.monotonic() + 15
        while not node.exists():
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError("hwperfd did not mount")
            time.sleep(0.05)
        quiet = sample(node, 2.0)
        base = rss_kib(daemon.pid)
        print(figures("quiet", quiet))
        print(f"daemon RSS baseline     {base} KiB")
        env = {**os.environ, "HWPERFD_MOUNT": str(mount)}
        for kind, round_ in [(kind, r) for kind in kinds for r in range(args.rounds)]:
            stormers = [
                subprocess.Popen([*NOBODY, str(client), kind, str(args.seconds)],
                                 stdout=subprocess.PIPE, text=True, cwd="/", env=env)  # fmt: skip
                for _ in range(args.stormers)
            ]
            stormy = sample(node, args.seconds)
            made = sum(int(p.communicate()[0] or 0) for p in stormers)
            time.sleep(2.0)  # the daemon catches up
            after = rss_kib(daemon.pid)
            times = sorted(stormy)
            median, p99 = statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]
            ok &= median < 0.050 and p99 < 0.200 and after <= base * 1.10
            made_what = "processes" if kind == "forks" else "threads"
            print(figures(f"{kind} {round_ + 1} ({made} {made_what})", stormy))
            print(f"daemon RSS after {kind} {round_ + 1}  {after} KiB ({after / base:.2f}x baseline)")
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
