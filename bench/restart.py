#!/usr/bin/env python3
"""hwperfd restart benchmark (docs/restart.md).

    python3 bench/restart.py [--procs N] [--calls N] [--rounds R]

Part 1 (restart).  Mounts hwperfd (--clock real), starts PROCS processes
(``sleep``) and enables counters on each through the mount, so the set-up
store holds PROCS records.  Then kills the daemon with SIGKILL, starts
another on the same mount point and times, from the kill, the first
PIOCGETEVCTRS answered on one of them (what a program riding out the
restart waits).  For reference: the same from a fresh start with nothing
to put back.  Goal: under 1 s with 10 000 processes.

Part 2 (durability's cost).  bench/setctrl_client.c times PIOCSETEVCTRL round
trips (each changes what is counted, so each is written before it answers)
against hwperfd with the store and with --no-store, pinned to CPU 0 with the
daemons, one call on each in turn (so both see the machine's load alike),
over ROUNDS; the figure is the median of the per-round
medians, and the ratio store / no store against the goal of 1.10.  Beside it,
the daemons' CPU time per call (every thread's, from schedstat): on a loaded
machine a round trip is mostly waiting for CPU 0, and that figure is not.

Needs root and a C compiler.  Everything is unmounted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hwperfd.client import ProcessCounters, user  # noqa: E402
from hwperfd.daemon import mounted_at  # noqa: E402


def mounted(path: Path) -> bool:
    return mounted_at(str(path)) is not None


def start(mount: Path, log: Path, *args: str, pin: str | None = None) -> subprocess.Popen:
    try:
        mount.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # a killed daemon's mount, not yet unmounted (ENOTCONN): the new daemon clears it
    argv = [sys.executable, "-m", "hwperfd", *args, "--state-dir", f"{mount}-state", str(mount)]
    if pin is not None:
        argv = ["taskset", "-c", pin, *argv]
    proc = subprocess.Popen(argv, stdout=open(log, "a"), stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if mounted(mount) and (mount / "control").exists():
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(log.read_text())
        time.sleep(0.005)
    raise RuntimeError("hwperfd did not mount")


def stop(proc: subprocess.Popen, mount: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if mounted(mount):
        subprocess.run(["fusermount3", "-u", "-z", str(mount)], check=False)


def first_answer(mount: Path, pid: int, since: float) -> float:
    """Seconds from ``since`` to the first PIOCGETEVCTRS answered on ``pid``'s
    file (an errno of the daemon's own, EINVAL for no counters, is an answer)."""
    while True:
        try:
            with ProcessCounters(pid, mount=mount, fast=False) as pc:
                pc.read()
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTCONN, errno.ECONNABORTED):
                time.sleep(0.002)
                continue
        return time.monotonic() - since


def restart_part(base: Path, procs: int) -> None:
    mount, log = base / "mnt", base / "restart.log"
    sleepers: list[subprocess.Popen] = []
    daemon = start(mount, log)
    try:
        began = time.monotonic()
        for _ in range(procs):
            sleepers.append(subprocess.Popen(["sleep", "3600"]))
        for child in sleepers:
            with ProcessCounters(child.pid, mount=mount, fast=False) as pc:
                pc.enable({0: user(0)})
        print(f"{procs} processes counting (set up in {time.monotonic() - began:.1f} s)")
        t0 = time.monotonic()
        daemon.kill()
        daemon.wait()
        daemon = start(mount, log)
        took = first_answer(mount, sleepers[len(sleepers) // 2].pid, t0)
        print(f"restart: kill to first answered call with {procs} counted processes: {took:.3f} s (goal < 1 s)")
        stop(daemon, mount)
        for child in sleepers:
            child.kill()
        for child in sleepers:
            child.wait()
        sleepers.clear()
        t0 = time.monotonic()
        daemon = start(mount, log)
        took_fresh = first_answer(mount, os.getpid(), t0)
        print(f"reference: start to first answered call with nothing to put back: {took_fresh:.3f} s")
    finally:
        for child in sleepers:
            child.kill()
        stop(daemon, mount)


def cpu_ns(pid: int) -> int:
    """CPU time every thread of ``pid`` has run, in ns (schedstat's first field)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def cost_part(base: Path, calls: int, rounds: int) -> None:
    client = base / "setctrl_client"
    subprocess.run(
        ["cc", "-O2", f"-I{ROOT / 'include'}", "-o", str(client), str(ROOT / "bench" / "setctrl_client.c")],
        check=True,
    )
    mounts = {"store": base / "m-store", "no store": base / "m-none"}
    daemons = {
        "store": start(mounts["store"], base / "store.log", pin="0"),
        "no store": start(mounts["no store"], base / "none.log", "--no-store", pin="0"),
    }
    medians: dict[str, list[float]] = {name: [] for name in mounts}
    cpu: dict[str, list[float]] = {name: [] for name in mounts}
    try:
        for _ in range(rounds):
            before = {name: cpu_ns(proc.pid) for name, proc in daemons.items()}
            out = subprocess.run(
                ["taskset", "-c", "0", str(client), "-n", str(calls), *map(str, mounts.values())],
                check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            by_mount = {}
            for row in out.splitlines():
                fields = dict(item.split("=", 1) for item in row.split()[1:])
                by_mount[fields["mount"]] = float(fields["median_us"])
            for name, mount in mounts.items():
                medians[name].append(by_mount[str(mount)])
                cpu[name].append((cpu_ns(daemons[name].pid) - before[name]) / 1e3 / (calls + 200))  # 200 untimed first
        figures = {name: statistics.median(values) for name, values in medians.items()}
        ratio = figures["store"] / figures["no store"]
        print(
            f"PIOCSETEVCTRL round trip: {figures['store']:.1f} us with the store, "
            f"{figures['no store']:.1f} us without; ratio {ratio:.2f} (goal <= 1.10)"
        )
        used = {name: statistics.median(values) for name, values in cpu.items()}
        print(
            f"PIOCSETEVCTRL daemon CPU per call: {used['store']:.1f} us with the store, "
            f"{used['no store']:.1f} us without; ratio {used['store'] / used['no store']:.2f}"
        )
    finally:
        for name, proc in daemons.items():
            stop(proc, mounts[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    if os.environ.get("HWPERFD_BENCH_QUICK") == "1":  # bench/run.py --quick: a smoke test
        parser.set_defaults(procs=50, calls=50, rounds=1)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if os.geteuid() != 0:
        sys.exit("bench/restart.py needs root (it mounts hwperfd)")
    with tempfile.TemporaryDirectory(prefix="hwperfd-restart-bench-") as tmp:
        base = Path(tmp)
        os.chmod(base, 0o755)
        cost_part(base, args.calls, args.rounds)
        try:
            restart_part(base, args.procs)
        except BaseException:
            # The daemon says why it refused a call (a warning): keep that
            # with the failure, since the folder goes with it.
            log = base / "restart.log"
            if log.exists():
                print("----- restart.log (last 40 lines) -----", file=sys.stderr)
                print("\n".join(log.read_text(errors="replace").splitlines()[-40:]), file=sys.stderr)
            raise


if __name__ == "__main__":
    main()
