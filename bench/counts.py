#!/usr/bin/env python3
"""Counts against CPU time: a user-mode loop on an r10000 mount read every
~200 ms of CPU time (tests/integration/interval_loop.c), and perfex on short
programs.

    python3 bench/counts.py [--reads N] [--interval MS] [--runs R]

Part 1 prints, per clock-mode pair, the ratio of counted time to the CPU
clock's time over each interval (min / median / max; 1.0 is exact, above
1.0 a count ran ahead of time) and the exit totals against wait4's user and
system time (difference in ms; one tick is 10 ms).  Part 2 runs
``perfex -e 0`` on programs of 1 ms to 1 s of CPU time and prints cycles /
(wait4 user+system x clock rate).  Needs root (it mounts hwperfd).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MHZ = 200
EXL_SHARE = 10


def mount(where: Path, *args: str) -> subprocess.Popen:
    where.mkdir(parents=True, exist_ok=True)
    log = open(where.parent / f"{where.name}.log", "w")
    argv = [sys.executable, "-m", "hwperfd", *args, "--state-dir", f"{where}-state", str(where)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 15
    while not (where / "control").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"hwperfd did not mount at {where}")
        time.sleep(0.02)
    return proc


def unmount(proc: subprocess.Popen, where: Path) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    subprocess.run(["fusermount3", "-u", "-z", str(where)], check=False, capture_output=True)


def ns(cycles: int) -> float:
    return cycles * 1000 / MHZ


def loop(program: Path, where: Path, reads: int, interval: int):
    sys.path.insert(0, str(ROOT))
    from hwperfd.client import ProcessCounters

    proc = subprocess.Popen([str(program), str(where), str(reads), str(interval)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = [proc.stdout.readline()]
    with ProcessCounters(proc.pid, mount=where, fast=False) as counters:
        lines += proc.stdout.readlines()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        _, final = counters.read()
    _, _, usage = os.wait4(proc.pid, 0)
    rows = [tuple(int(v) for v in line.split()[1:]) for line in lines if line.startswith("read ")]
    ratios: dict[str, list[float]] = {"user": [], "user+exl": []}
    # Each row: the CPU clock before and after the read, the generation, the two counts.
    for (c0, _, _, u0, b0), (c1, _, _, u1, b1) in zip(rows, rows[1:]):
        ratios["user"].append(ns(u1 - u0) / (c1 - c0))
        ratios["user+exl"].append(ns(b1 - b0) / (c1 - c0))
    exits = {
        "wait4 stime/(utime+stime) (%)": 100 * usage.ru_stime / (usage.ru_utime + usage.ru_stime),
        "user - wait4 utime (ms)": (ns(final[0]) - usage.ru_utime * 1e9) / 1e6,
        "exl x10 - wait4 stime (ms)": ((ns(final[16]) - ns(final[0])) * EXL_SHARE - usage.ru_stime * 1e9) / 1e6,
    }
    return ratios, exits


def perfex_short(where: Path, spin: Path, ms: int, runs: int) -> list[tuple[float, float]]:
    """perfex's runner (in this process, so the child's rusage is this
    process's RUSAGE_CHILDREN gain) on ``spin MS``: (counted user ms, wait4 user ms)."""
    import resource

    sys.path.insert(0, str(ROOT))
    from hwperfd.perfex import runner
    from hwperfd.perfex.plan import choose

    out = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        m = runner.run([str(spin), str(ms)], choose([0], "r10000"), where)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append((ns(m.raw[0]) / 1e6, (after.ru_utime - before.ru_utime) * 1e3))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=15)
    parser.add_argument("--interval", type=int, default=200)
    parser.add_argument("--runs", type=int, default=2)
    if os.environ.get("HWPERFD_BENCH_QUICK") == "1":  # bench/run.py --quick: a smoke test
        parser.set_defaults(reads=3, interval=50, runs=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hwperfd-bench-counts-"))
    program = work / "interval_loop"
    source = ROOT / "tests/integration/interval_loop.c"
    subprocess.run(["cc", "-O2", "-I", str(ROOT / "include"), "-o", str(program), str(source)], check=True)
    spin = work / "spin_cpu"
    subprocess.run(["cc", "-O2", "-o", str(spin), str(ROOT / "tests/perfex/spin_cpu.c")], check=True)
    where = work / "mnt"
    proc = mount(where, "--clock", "real", "--cpus", "2", "--mhz", str(MHZ))
    try:
        print(f"Part 1: a user-mode loop read every {args.interval} ms of CPU time, {args.reads} reads, "
              f"r10000 at {MHZ} MHz")  # fmt: skip
        for run in range(args.runs):
            ratios, exits = loop(program, where, args.reads, args.interval)
            for mode, values in ratios.items():
                print(f"  run {run} {mode:9s} counted/CPU per interval: min {min(values):.4f} "
                      f"median {statistics.median(values):.4f} max {max(values):.4f}")  # fmt: skip
            print(f"  run {run} exit: " + ", ".join(f"{k} {v:+.3f}" for k, v in exits.items()))
        print("Part 2: perfex -e 0 (user mode) on programs of MS ms of CPU time: counted / wait4 ru_utime")
        for ms in (1, 15, 150, 1000):
            pairs = perfex_short(where, spin, ms, 5 if ms < 1000 else 2)
            ratios = [c / u for c, u in pairs if u]
            worst = max(abs(c - u) for c, u in pairs)
            print(f"  {ms:5d} ms: ratio min {min(ratios):.4f} median {statistics.median(ratios):.4f} "
                  f"max {max(ratios):.4f}; largest difference {worst:.3f} ms")  # fmt: skip
    finally:
        unmount(proc, where)


if __name__ == "__main__":
    main()
