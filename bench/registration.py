#!/usr/bin/env python3
"""A thread's registration as PAPI's IRIX substrate makes it, under hwperfd-run.

    python3 bench/registration.py [--calls N] [--rounds R]

Mounts hwperfd (r10000, the default real clock) in a temporary directory and
runs bench/irix_register_client.c under hwperfd-run's shim: in a thread of
its own, N times, open "/proc/%05d" of getpid(), PIOCGETEVCTRL, close (what
PAPI does at every thread it registers, at each OpenMP region of omptough).
The shim answers the thread's opens after its first with a duplicate of the
descriptor it keeps; with HWPERFD_PROC_KEEP=0 every open and close reaches
the daemon, which is the baseline.  The rounds are interleaved; each figure
is the median of the per-round medians, with the daemon's CPU per
registration.  (perfctr's registration, which libperfctr keeps, is timed by
run.py's perfctr part.)  HWPERFD_BENCH_QUICK=1: 1 round of 100.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import run as runner  # noqa: E402  (bench/run.py: servers' start and stop)

from hwperfd.run import preload_library  # noqa: E402

RESULT = re.compile(r"RESULT reg_ns=(\d+) reg_p99_ns=(\d+)")
WAYS = {"kept by the shim": {}, "opened anew (HWPERFD_PROC_KEEP=0)": {"HWPERFD_PROC_KEEP": "0"}}


def main(argv: list[str] | None = None) -> int:
    quick = os.environ.get(runner.QUICK_ENV) == "1"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100 if quick else 2000)
    parser.add_argument("--rounds", type=int, default=1 if quick else 5)
    args = parser.parse_args(argv)
    got: dict[str, list[tuple[float, float, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="hwperfd-registration-") as name:
        tmp = Path(name)
        os.chmod(tmp, 0o755)
        client = tmp / "irix_register_client"
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-Wall", "-Werror", "-I", str(ROOT / "include"), "-o",
                        str(client), str(BENCH / "irix_register_client.c"), "-lpthread"], check=True)  # fmt: skip
        daemon = runner.start_hwperfd(tmp, "real", 2, tag="-registration")
        try:
            env = {**os.environ, "HWPERFD_MOUNT": str(daemon.mount), "LD_PRELOAD": str(preload_library())}
            for _ in range(args.rounds):
                for way, extra in WAYS.items():
                    before = runner.cpu_ns(daemon.pid)
                    argv = [str(client), "-n", str(args.calls), "-w", str(max(10, args.calls // 10))]
                    done = subprocess.run(argv, capture_output=True, text=True, env={**env, **extra}, timeout=600)
                    spent = runner.cpu_ns(daemon.pid) - before
                    match = RESULT.search(done.stdout)
                    if done.returncode != 0 or not match:
                        raise RuntimeError(f"irix_register_client ({way}) failed:\n{done.stdout}{done.stderr}")
                    calls = args.calls + max(10, args.calls // 10)
                    got[way].append((int(match[1]) / 1000, int(match[2]) / 1000, spent / calls / 1000))
        finally:
            runner.stop_server(daemon)

    def med(way: str, i: int) -> float:
        return statistics.median(r[i] for r in got[way])

    load = os.getloadavg()
    print(f"IRIX registration (open own /proc/%05d, PIOCGETEVCTRL, close) in a thread, r10000, real clock, "
          f"median of {args.rounds} rounds x {args.calls}, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
          + (" [quick: figures mean little]" if quick else ""))
    for way in WAYS:
        print(f"  {way:36s} {med(way, 0):8.1f} us (p99 {med(way, 1):8.1f} us), daemon CPU {med(way, 2):6.1f} us")
    kept, anew = list(WAYS)
    print(f"figure: a thread's IRIX registration as PAPI's IRIX substrate makes it, {kept} | "
          f"{med(kept, 0):.1f} us = {med(kept, 0) / med(anew, 0):.2f}x (daemon CPU {med(kept, 2):.1f} us) | "
          f"{med(anew, 0):.1f} us {anew} (daemon CPU {med(anew, 2):.1f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
