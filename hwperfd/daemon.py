"""hwperfd: mount a /proc of live processes serving IRIX event-counter ioctls."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

# The ioctl bridge must be loaded before pyfuse3 (it interposes on libfuse).
from hwperfd.procfs import bridge  # noqa: I001

import pyfuse3
import trio

from hwperfd.clock import ManualClock, RealClock
from hwperfd.counters.kernel import CounterKernel
from hwperfd.cpu.pmu import CPU_TYPES, CpuSet
from hwperfd.host import processes
from hwperfd.procfs.fs import ProcFs
from hwperfd.signals import SignalSender

log = logging.getLogger("hwperfd")

DEFAULT_MOUNT = "/run/hwperfd"
REAP_INTERVAL = 1.0
SIGNAL_TICK = 0.01  # the IRIX clock tick: overflow signals are timely to it


class SetupError(Exception):
    """A problem the user must fix; printed as one line, exit status 1."""


def default_mount() -> str:
    return os.environ.get("HWPERFD_MOUNT") or DEFAULT_MOUNT


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hwperfd",
        description="Mount a /proc whose files serve the IRIX R10000/R12000 event-counter ioctls.",
    )
    parser.add_argument(
        "mountpoint", nargs="?", default=None,
        help=f"where to mount (default: $HWPERFD_MOUNT or {DEFAULT_MOUNT}, created if missing)",
    )  # fmt: skip
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="emulated CPUs (default: host CPUs)")
    parser.add_argument("--cpu-type", choices=sorted(CPU_TYPES), default="r10000")
    parser.add_argument("--mhz", type=str, default=None, help="emulated clock rate (default 195 / 300)")
    parser.add_argument(
        "--clock", choices=("real", "manual"), default="real",
        help="real: host CPU time drives the counters; manual: time moves only when written to <mount>/control",
    )  # fmt: skip
    parser.add_argument("--debug", action="store_true", help="log every request")
    return parser.parse_args(argv)


def mounted_at(path: str) -> str | None:
    """The fstype mounted exactly at ``path`` (read from mountinfo, so a dead
    FUSE server cannot hang us), or None."""
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        found = None
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            if point == real:
                found = fields[fields.index("-") + 1]
        return found


def prepare_mountpoint(path: str, explicit: bool) -> str:
    if os.geteuid() != 0:
        raise SetupError("hwperfd must run as root: it mounts with allow_other and reads every process's /proc")
    if not os.path.exists("/dev/fuse"):
        raise SetupError("/dev/fuse is missing: load the fuse module (modprobe fuse) or install fuse3")
    fstype = mounted_at(path)
    if fstype is not None:
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                raise
            # A crashed daemon left its mount behind: clear it.
            log.warning("clearing stale mount at %s", path)
            subprocess.run(["fusermount3", "-u", "-z", path], check=False)
            if mounted_at(path) is not None:
                subprocess.run(["umount", "-l", path], check=False)
        else:
            raise SetupError(f"{path} is already mounted ({fstype}); is another hwperfd running?")
    if not os.path.isdir(path):
        if explicit and not os.path.exists(path):
            raise SetupError(f"mount point {path} does not exist (create it with: mkdir -p {path})")
        if os.path.exists(path):
            raise SetupError(f"mount point {path} is not a directory")
        os.makedirs(path, exist_ok=True)
    return os.path.realpath(path)


def notify(message: str) -> None:
    """systemd's sd_notify, in the few lines the protocol needs."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())


class Daemon:
    def __init__(self, args: argparse.Namespace, mount: str) -> None:
        self.mount = mount
        try:
            self.cpus = CpuSet(args.cpus, args.cpu_type, Fraction(args.mhz) if args.mhz else None)
        except (ValueError, ZeroDivisionError) as exc:
            raise SetupError(str(exc)) from None
        self.clock = ManualClock(args.cpus) if args.clock == "manual" else RealClock(args.cpus)
        self.signals = SignalSender()
        self.kernel = CounterKernel(
            self.cpus, self.clock, is_running=self._is_running, signal=self.signals.owe
        )
        self.fs = ProcFs(self.kernel, clock=self.clock, mount=mount, on_time_moved=self._time_moved)

    @staticmethod
    def _is_running(pid: int) -> bool:
        info = processes.read_process(pid)
        return info is not None and info.running

    def _time_moved(self, pid: int) -> None:
        # Under the manual clock, overflow signals follow the advance at once.
        self.kernel.catch_up([pid] if pid >= 0 else [])

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pyfuse3.main)
            nursery.start_soon(self.signals.run)
            nursery.start_soon(self._reap)
            if isinstance(self.clock, RealClock):
                nursery.start_soon(self._tick)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                log.info("mounted at %s (%s x%d, %s clock)", self.mount, self.cpus.type.name, len(self.cpus), self.clock.name)
                notify("READY=1\nSTATUS=serving " + self.mount)
                async for signum in signals:
                    log.info("%s: unmounting", signal.Signals(signum).name)
                    notify("STOPPING=1")
                    break
            nursery.cancel_scope.cancel()

    async def _reap(self) -> None:
        """Free the state of processes that are gone (zombies stay until reaped)."""
        while True:
            await trio.sleep(REAP_INTERVAL)
            for pid in self.kernel.tracked():
                if processes.read_process(pid) is None:
                    self.kernel.forget(pid)
                    self.clock.forget(pid)

    async def _tick(self) -> None:
        """Catch up processes that asked for overflow signals, every clock tick."""
        while True:
            await trio.sleep(SIGNAL_TICK)
            pids = self.kernel.signalling()
            if pids:
                self.kernel.catch_up(pids)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="hwperfd: %(levelname)s %(message)s",
    )
    try:
        mount = prepare_mountpoint(args.mountpoint or default_mount(), explicit=args.mountpoint is not None)
        daemon = Daemon(args, mount)
    except SetupError as exc:
        print(f"hwperfd: {exc}", file=sys.stderr)
        return 1
    bridge.install(daemon.fs.ioctl)
    options = set(pyfuse3.default_options)
    options |= {"fsname=hwperfd", "subtype=hwperfd", "allow_other", "default_permissions", "auto_unmount"}
    if args.debug:
        options.add("debug")
    try:
        pyfuse3.init(daemon.fs, mount, options)
    except RuntimeError as exc:
        print(f"hwperfd: cannot mount {mount}: {exc}", file=sys.stderr)
        return 1
    try:
        trio.run(daemon.run)
    finally:
        pyfuse3.close(unmount=True)
        bridge.install(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
