"""The running service: the counter kernel, the filesystem and their tasks.

Imported only once the command line and the machine have been checked, so
that ``hwperfd --help`` and set-up errors need neither FUSE nor root.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
from fractions import Fraction

# The ioctl bridge must be loaded before pyfuse3 (it interposes on libfuse).
from hwperfd.procfs import bridge  # noqa: I001

import pyfuse3
import trio

from hwperfd.clock import ManualClock, RealClock
from hwperfd.counters.kernel import CounterKernel
from hwperfd.cpu.pmu import CpuSet
from hwperfd.daemon import SetupError, notify
from hwperfd.host import procevents, processes, taskstats
from hwperfd.procfs.fs import ProcFs
from hwperfd.signals import SignalSender

log = logging.getLogger("hwperfd")

REAP_INTERVAL = 1.0
ZOMBIE_INTERVAL = 0.05  # how soon a reaped zombie's counts reach its parent
SIGNAL_TICK = 0.01  # the IRIX clock tick: overflow signals are timely to it
LINGER_BUDGET_NS = 2_000_000  # longest that a burst of ioctls keeps trio's other tasks waiting


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
        self.accounting: taskstats.ExitAccounting | None = None
        # Set when a request may have armed overflow signals, or a process
        # exited: the periodic tasks sleep on these while they have no work.
        self._controls_changed: trio.Event | None = None
        self._exits_seen: trio.Event | None = None
        self.fs = ProcFs(
            self.kernel,
            clock=self.clock,
            mount=mount,
            on_time_moved=self._time_moved,
            catch_up_events=self._catch_up_events,
            on_controls_changed=self._wake_tick,
        )

    @staticmethod
    def _is_running(pid: int) -> bool:
        info = processes.read_process(pid)
        return info is not None and info.running

    def _wake_tick(self) -> None:
        if self._controls_changed is not None:
            self._controls_changed.set()

    def _time_moved(self, pid: int) -> None:
        # Under the manual clock, overflow signals follow the advance at once.
        self.kernel.catch_up([pid] if pid >= 0 else [])

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            # Every handler is synchronous, so more reader tasks buy nothing; one
            # saves a task hand-off and a lock per request, and the bridge's
            # follow-on answering (--linger) requires it.
            nursery.start_soon(pyfuse3.main, 1, 1)
            nursery.start_soon(self.signals.run)
            nursery.start_soon(self._reap)
            nursery.start_soon(self._reap_zombies)
            nursery.start_soon(self._follow_processes)
            if isinstance(self.clock, RealClock):
                nursery.start_soon(self._tick)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                log.info(
                    "mounted at %s (%s x%d, %s clock)", self.mount, self.cpus.type.name, len(self.cpus), self.clock.name
                )
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
            for pid in set(self.kernel.known()) | self.fs.faults.pids():
                if not processes.exists(pid):
                    self._gone(pid)

    async def _tick(self) -> None:
        """Catch up processes that asked for overflow signals, every clock tick
        while there are any; otherwise sleep until a request changes controls."""
        while True:
            pids = self.kernel.signalling()
            if not pids:
                self._controls_changed = trio.Event()
                await self._controls_changed.wait()
                continue
            self.kernel.catch_up(pids)
            await trio.sleep(SIGNAL_TICK)

    async def _reap_zombies(self) -> None:
        while True:
            if not self.kernel.exited():
                self._exits_seen = trio.Event()
                await self._exits_seen.wait()
            await trio.sleep(ZOMBIE_INTERVAL)
            self._catch_up_events()

    def _gone(self, pid: int) -> None:
        # Its exit event may still be queued: apply it first, or the reaper
        # would free the counts before they reach the parent.
        self._catch_up_events()
        self.fs.faults.forget(pid)
        if self.kernel.is_tracked(pid):
            self._reaped(pid)
        else:
            self.kernel.forget(pid)  # a profile set on a process that never counted

    def _reaped(self, pid: int) -> None:
        # Children it reaped before it went are its to fold first.
        self._fold_reaped_children(pid)
        parent = self.kernel.parent_of(pid)
        # A zombie parent still did its waiting before it exited.
        self.kernel.reaped(pid, parent_alive=bool(parent) and os.path.exists(f"/proc/{parent}"))
        self.clock.forget(pid)

    def _note_comm(self, pid: int) -> None:
        # Names are read while the process lives: it may be reaped before its exit is heard.
        if self.kernel.is_tracked(pid):
            info = processes.read_process(pid)
            if info is not None:
                self.kernel.note_comm(pid, info.comm)

    def _fold_reaped_children(self, pid: int) -> None:
        for child in self.kernel.exited():
            if self.kernel.parent_of(child) == pid and not os.path.exists(f"/proc/{child}"):
                self._fold_reaped_children(child)
                self.kernel.reaped(child, parent_alive=True)
                self.clock.forget(child)

    async def _follow_processes(self) -> None:
        """Forks from the kernel's process-events connector; exits from
        taskstats, which also gives each exiting process's final CPU time."""
        if not procevents.available():
            log.info("process events connector unavailable: no fork/exit inheritance")
            return
        async with contextlib.AsyncExitStack() as stack:
            if taskstats.available():
                self.accounting = await stack.enter_async_context(taskstats.ExitAccounting())
            else:
                log.info("taskstats unavailable: a child reaped at once may lose its last CPU time")
            self.events = await stack.enter_async_context(procevents.ProcessEvents())
            try:
                async for event in self.events:
                    self._catch_up_events(event)
            finally:
                self.events = self.accounting = None

    def _catch_up_events(self, first: procevents.ProcessEvent | None = None) -> None:
        """Apply what the kernel has reported, in an order that keeps counts:
        forks first (a child must be tracked before its exit is applied), then
        exits, then fold zombies reaped since - a parent that has just returned
        from wait(2) must see its child's counts.

        Exits come from taskstats when it is there: the kernel queues them
        before the parent can be woken, while the connector's exit event comes
        after it (do_exit: taskstats_exit, exit_notify, proc_exit_connector).
        """
        if self.events is not None:
            exits = self._take_accounting()
            events = ([first] if first is not None else []) + self.events.drain_nowait()
            for event in events:
                if isinstance(event, procevents.ForkEvent) and event.child_pid == event.child_tgid:
                    self.kernel.fork(event.parent_tgid, event.child_tgid)
                    self._note_comm(event.child_tgid)
                elif isinstance(event, procevents.ExecEvent) and event.pid == event.tgid:
                    self._note_comm(event.pid)
            for record in exits:
                self._exited(record.pid, record.ppid, record.comm)
            for event in events:
                if isinstance(event, procevents.ExitEvent) and event.pid == event.tgid:
                    self._exited(event.pid, event.parent_tgid, "")
        for pid in self.kernel.exited():
            if not os.path.exists(f"/proc/{pid}"):
                self._reaped(pid)

    def _take_accounting(self) -> list[taskstats.TaskExit]:
        """Exit records: every process's final CPU time goes to the clock (the
        fork that makes it interesting may not be applied yet)."""
        if self.accounting is None:
            return []
        exits = []
        for record in self.accounting.drain_nowait():
            if isinstance(record, taskstats.TaskExit) and record.whole_group:
                self.clock.exited(record.pid, record.user_ns, record.system_ns)
                exits.append(record)
        return exits

    def _exited(self, pid: int, parent_hint: int, comm_hint: str) -> None:
        if not self.kernel.is_tracked(pid) or self.kernel.has_exited(pid):
            return
        # Its counts must include the children it has already reaped.
        self._fold_reaped_children(pid)
        info = processes.read_process(pid)
        if info is None:
            # Reaped before we heard: its parent waited for it.
            self.kernel.exit(pid, parent_hint, True, self.kernel.comm_of(pid) or comm_hint)
            self._reaped(pid)
            return
        self.kernel.exit(pid, info.ppid, processes.waiting_for_child(info.ppid), info.comm)
        if self._exits_seen is not None:
            self._exits_seen.set()


def serve(args, mount: str) -> int:
    """Mount, serve until SIGTERM/SIGINT, unmount."""
    daemon = Daemon(args, mount)
    bridge.install(daemon.fs.ioctl)
    bridge.linger(args.linger * 1000, LINGER_BUDGET_NS if args.linger else 0)
    options = set(pyfuse3.default_options)
    options |= {"fsname=hwperfd", "subtype=hwperfd", "allow_other", "default_permissions", "auto_unmount"}
    if args.debug:
        options.add("debug")
    try:
        pyfuse3.init(daemon.fs, mount, options)
    except RuntimeError as exc:
        raise SetupError(f"cannot mount {mount}: {exc}") from None
    if not bridge.hooked():
        pyfuse3.close(unmount=True)
        raise SetupError("the ioctl bridge did not hook pyfuse3's FUSE session (libfuse too new?)")
    try:
        trio.run(daemon.run)
    finally:
        pyfuse3.close(unmount=True)
        bridge.install(None)
    return 0
