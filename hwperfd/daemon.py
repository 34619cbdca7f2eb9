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
from hwperfd.host import procevents, processes
from hwperfd.procfs.fs import ProcFs
from hwperfd.signals import SignalSender

log = logging.getLogger("hwperfd")

DEFAULT_MOUNT = "/run/hwperfd"
REAP_INTERVAL = 1.0
ZOMBIE_INTERVAL = 0.05  # how soon a reaped zombie's counts reach its parent
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
        self.events: procevents.ProcessEvents | None = None
        self.fs = ProcFs(
            self.kernel,
            clock=self.clock,
            mount=mount,
            on_time_moved=self._time_moved,
            catch_up_events=self._catch_up_events,
        )

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
            nursery.start_soon(self._reap_zombies)
            nursery.start_soon(self._follow_processes)
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
            self._catch_up_events()
            for pid in self.kernel.tracked():
                if processes.read_process(pid) is None:
                    self._gone(pid)

    async def _reap_zombies(self) -> None:
        while True:
            await trio.sleep(ZOMBIE_INTERVAL)
            for pid in self.kernel.exited():
                if processes.read_process(pid) is None:
                    self._gone(pid)

    def _gone(self, pid: int) -> None:
        info = None
        record_parent = self.kernel.parent_of(pid)
        if record_parent:
            info = processes.read_process(record_parent)
        self.kernel.reaped(pid, parent_alive=info is not None and not info.zombie)
        self.clock.forget(pid)

    async def _follow_processes(self) -> None:
        """Fork and exit, as the kernel's process-events connector reports them."""
        if not procevents.available():
            log.info("process events connector unavailable: no fork/exit inheritance")
            return
        async with procevents.ProcessEvents() as events:
            self.events = events
            try:
                async for event in events:
                    self._apply(event)
            finally:
                self.events = None

    def _catch_up_events(self) -> None:
        if self.events is not None:
            for event in self.events.drain_nowait():
                self._apply(event)

    def _apply(self, event) -> None:
        if isinstance(event, procevents.ForkEvent):
            if event.child_pid == event.child_tgid:  # a process, not a thread
                self.kernel.fork(event.parent_tgid, event.child_tgid)
        elif isinstance(event, procevents.ExitEvent):
            if event.pid == event.tgid and event.pid in self.kernel.tracked():
                info = processes.read_process(event.pid)
                if info is None:
                    # Already reaped by the time we heard: its parent waited.
                    parent = processes.read_process(event.parent_tgid)
                    self.kernel.exit(event.pid, event.parent_tgid, parent is not None)
                    self.kernel.reaped(event.pid, parent_alive=parent is not None)
                    self.clock.forget(event.pid)
                    return
                waiting = processes.waiting_for_child(info.ppid)
                self.kernel.exit(event.pid, info.ppid, waiting, info.comm)

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
    if not bridge.hooked():
        pyfuse3.close(unmount=True)
        print("hwperfd: the ioctl bridge did not hook pyfuse3's FUSE session (libfuse too new?)", file=sys.stderr)
        return 1
    try:
        trio.run(daemon.run)
    finally:
        pyfuse3.close(unmount=True)
        bridge.install(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
