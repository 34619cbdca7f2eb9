"""The running service: the counter kernel, the filesystem and their tasks.

Imported only once the command line and the machine have been checked, so
that ``hwperfd --help`` and set-up errors need neither FUSE nor root.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import itertools
import logging
import os
import signal
import sqlite3
import time
from fractions import Fraction
from typing import Awaitable, Callable, Iterable

# The ioctl bridge must be loaded before pyfuse3 (it interposes on libfuse).
from hwperfd.procfs import bridge  # noqa: I001

import pyfuse3
import trio

from hwperfd.clock import ManualClock, RealClock
from hwperfd.counters.durable import DurableSetup
from hwperfd.counters.kernel import CounterKernel, Signal
from hwperfd.counters.lifecycle import Event, Execed, Exited, Forked, Lifecycle, Lost
from hwperfd.counters.store import SetupStore
from hwperfd.counters.threads import (
    ProcessExeced,
    ProcessExited,
    ThreadCreated,
    ThreadEvent,
    ThreadExited,
    ThreadTable,
    coalesce,
)
from hwperfd.cpc.node import CpcNode
from hwperfd.cpu.models import MODELS
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.host import cpulatency, netlink, procevents, processes, taskstats, timerfd
from hwperfd.host.clockrate import host_mhz
from hwperfd.host.cpualarm import CpuAlarms
from hwperfd.host.cpulatency import AwakeCpus
from hwperfd.irix.files import IrixFiles
from hwperfd.node import MountFilesFactory, NodeFactory
from hwperfd.pctr.node import PctrNode
from hwperfd.perfctr.node import PerfctrNode
from hwperfd.procfs.fs import PID_INODE_BASE, ProcFs
from hwperfd.procfs.statepages import DEFAULT_DIR, DEFAULT_PER_USER, StatePages
from hwperfd.signals import SignalSender
from hwperfd.startup import SetupError, notify
from hwperfd.trace import recorder as trace, session as trace_session

log = logging.getLogger("hwperfd")

REAP_INTERVAL = 1.0  # the sweep's pace without process events
SWEEP_INTERVAL = 60.0  # with them: the sweep is only a safety net
# ... and checks at most this many processes each time (one /proc read each,
# about 20 us of CPU): 10 000 counting processes are all checked every 5 minutes.
SWEEP_LIMIT = 2000
ZOMBIE_INTERVAL = 0.05  # how soon a reaped zombie's counts reach its parent
MAX_ZOMBIE_INTERVAL = 1.0
MIN_TICK_NS = 100_000  # the overflow tick's shortest sleep
LINGERING = 64  # processes left in the thread-event filter after their last thread context
LINGER_BUDGET_NS = 2_000_000  # longest that a burst of ioctls keeps trio's other tasks waiting
# Datagrams taken from each netlink stream before the daemon answers anyone
# again: a storm's backlog is applied a slice at a time, with requests
# served between slices, and never held as one list.
EVENT_SLICE = 64
MAX_HELD = 16 * EVENT_SLICE  # exit records waiting for their process's exit event
# The connector carries two events (fork, exit) for each process exit record:
# while it is behind, a round takes half a slice of records, and none while
# this many process exits are held.  A slice of both ran the records ahead
# until MAX_HELD gave up the oldest, applied before their forks were heard.
HELD_AHEAD = 4 * EVENT_SLICE
# Slices that wait for queued FUSE requests to be answered first, at most,
# before the next is taken anyway (requests alone never stop the events).
YIELDS_TO_REQUESTS = 8
# A burst is worked off before a request is answered, as far as this many
# slices; a backlog longer than that is a storm, and requests go ahead of it.
STORM_SLICES = 8
# Most of the daemon's own CPU time a counting process's own request spends
# working off the backlog queued before it (real clock): past it, Linux's
# totals of its waited-for children stand in for the exits still queued
# (Lifecycle.credit_unseen).  CPU time, not wall time: on a loaded machine
# the daemon waits for a CPU between slices, and a wall-time budget ran out
# before the few exits of a pipeline were applied (perfex -mp reported its
# processes as "unseen" at load average 27).
COUNTING_BUDGET_NS = 5_000_000
# Longest it works off that backlog in any case (the manual clock, or Linux's
# totals not to be had): past it the request is answered with what the
# daemon knows, as other requests in a storm are.  Draining it all kept a
# manual-clock daemon from its SIGTERM for 8 s under 3 stormers.
COUNTING_LIMIT_NS = 250_000_000
PAGE_REFRESH = 0.1  # how often state pages take stat's user:system ratio anew (real clock)
MAX_PID_INODE = 1 << 31  # process files' inodes lie between PID_INODE_BASE and the nodes'
# A start puts back at most this many processes' set-up before it mounts;
# past that, each family's when it is first asked about, and the rest in
# slices of PUT_BACK_SLICE seconds once serving, requests answered between
# (docs/restart.md).
RESTORE_AT_START = 64
PUT_BACK_SLICE = 0.002
# The set-up store's journal goes into its database this long after its
# first entry since the last time (hwperfd/counters/store.py): whatever
# number of calls changed a record meanwhile, it is written once.  The
# journal alone survives a kill; the flush only bounds it (and a start's
# reading of it), so it waits long enough to cost a busy daemon's calls
# little: at 50 ms, a flush of one record fell every 15 calls of a program
# setting its controls and took a third of the store's cost of a call.
STORE_FLUSH_DELAY = 1.0


def store_name(mount: str) -> str:
    """The set-up store of one mount point (as its state pages' directory is named)."""
    return f"setup-{hashlib.sha256(os.path.realpath(mount).encode()).hexdigest()[:16]}.sqlite"


async def resilient(task: Callable[[], Awaitable[None]]) -> None:
    """Run a background task; if /proc fails it (the daemon ran short of
    descriptors or memory), log one line and start it again a second later."""
    while True:
        try:
            return await task()
        except OSError as exc:
            log.warning("%s: %s; restarting it", task.__name__, exc)
        await trio.sleep(1)


# The personalities, as they register with the filesystem (hwperfd/node.py).
# IRIX answers the mount's own files (root, control node, process and pinfo
# files: r10k_counters(5)'s /proc); the others' nodes sit in the mount's
# root, in this order (their inodes and listing follow it): OpenBSD's
# /dev/pctr, Solaris libcpc's kernel side, Linux perfctr's /dev/perfctr.  A
# new personality adds its node here.
MOUNT_FILES: MountFilesFactory = IrixFiles
PERSONALITY_NODES: tuple[NodeFactory, ...] = (PctrNode, CpcNode, PerfctrNode)


def default_mhz(args: argparse.Namespace) -> Fraction | None:
    """--mhz if given.  Else, on the real clock, an amd64 model counts at the
    host's rate: its programs read the host's TSC with rdtsc themselves, and
    on a Core 2 or a K8 the TSC and the cycle counter tick together (PAPI's
    zero compares the two).  Otherwise the model's own rate (None), which
    the manual clock keeps so its counts are the same on every host."""
    if args.mhz:
        return Fraction(args.mhz)
    model = MODELS.get(args.cpu_type)
    if args.clock == "real" and model is not None and model.arch == "amd64":
        return host_mhz()
    return None


class Daemon:
    def __init__(self, args: argparse.Namespace, mount: str) -> None:
        self.mount = mount
        self.early_stop: list[int] = []  # the SIGTERM or SIGINT that stops it (taken early, before the loop's receiver)
        self.unmounted = False  # the mount was taken away from outside; nothing is left to unmount
        self.event_buffer: int = getattr(args, "event_buffer", 32 << 20)
        try:
            self.cpus = CpuSet(args.cpus, args.cpu_type, default_mhz(args))
        except (ValueError, ZeroDivisionError) as exc:
            raise SetupError(str(exc)) from None
        self.clock = ManualClock(args.cpus) if args.clock == "manual" else RealClock(args.cpus)
        if getattr(args, "trace", None):
            trace_session.start(args.trace, self.clock, args.trace_size)
        self.signals = SignalSender()
        self._dirty: set[int] = set()  # pids whose state the kernel let go or changed outside a call
        self._answering = False  # an ioctl is being answered: it writes what changed before it answers
        self._overflowed: set[int] = set()  # pids owed overflow signals since their last write
        self._unwritten: set[int] = set()  # pids the last write had to leave: their signals wait
        self.signals.held = self._held_for_store
        self.kernel = CounterKernel(
            self.cpus, self.clock, signal=self._owe, gone=self._gone, cancel=self._end_owed
        )
        self.kernel.host_time = isinstance(self.clock, RealClock)
        self.lifecycle = Lifecycle(self.kernel, processes, self.clock, host_time=isinstance(self.clock, RealClock))
        # Per-thread contexts (libcpc per-LWP binds, perfctr's vperfctr): their
        # threads run the profile their process runs.
        self.threads = ThreadTable(
            self.cpus.model, self.cpus.mhz, self.clock, self._profile, processes.read_thread_start,
            host_time=isinstance(self.clock, RealClock),
            process_cpu_ns=processes.read_cpu_total if isinstance(self.clock, RealClock) else None,
            running_start=processes.read_running_thread_start,
        )
        # Idle signalling processes wait on their CPU clocks' alarms, not on
        # the wall clock (hwperfd/host/cpualarm.py); made in the loop's thread.
        self.alarms: CpuAlarms | None = None
        if isinstance(self.clock, RealClock):
            try:
                self.alarms = CpuAlarms()
            except OSError as exc:  # no signalfd here: idle contexts are looked at by the wall clock
                log.warning("CPU-clock alarms off: %s", exc)
        self.threads.alarms = self.kernel.alarms = self.alarms
        self.events: procevents.ProcessEvents | None = None
        # Thread events reach the daemon only for processes with thread
        # contexts: the connector socket's filter drops the rest in the kernel.
        self.threads.on_processes_changed = self._refilter
        self.filtered_for: frozenset[int] | None = None
        self.filter_sets = 0  # how often the thread-event filter was set (a status line)
        self._thread_version = 0  # the kernel's thread_version the filter was last built for
        self.accounting: taskstats.ExitAccounting | None = None
        # Exit records held back a round (see _catch_up_events).
        self._held: list[taskstats.ExitRecord] = []
        # Slices in a row that left events queued: past STORM_SLICES, a
        # storm's backlog, which requests are answered ahead of.
        self._behind = 0
        # When the newest process event applied happened (CLOCK_MONOTONIC, ns).
        self._heard_to = 0
        # Set when a request may have armed overflow signals, or a process
        # exited: the periodic tasks sleep on these while they have no work.
        self._controls_changed: trio.Event | None = None
        # The overflow tick's timer descriptor; with the alarms, what ends a
        # burst of ioctls the bridge answers (bridge.linger): a burst never
        # holds back what falls due.
        self._timer = timerfd.create()
        self._exits_seen: trio.Event | None = None
        # The last sweep: processes it checked and the daemon's CPU time it took.
        self.swept: tuple[int, int] = (0, 0)
        self.fs = ProcFs(
            self.kernel,
            clock=self.clock,
            mount=mount,
            files=MOUNT_FILES,
            threads=self.threads,
            signal=self.signals.owe,
            deliver=self._send_now,
            stored_first=self._store_then_send,
            on_time_moved=self._time_moved,
            catch_up_events=self._catch_up_for_request,
            on_controls_changed=self._wake_tick,
            status=self._status,
            quiet=lambda pid: not self.lifecycle.has_zombies(pid),
            nodes=PERSONALITY_NODES,
        )
        self.fs.state_pages = StatePages.create(
            self.kernel,
            self.clock,
            getattr(args, "state_dir", DEFAULT_DIR),
            mount,
            getattr(args, "state_pages", DEFAULT_PER_USER),
            must_ask=lambda pid: self.fs.faults.armed(pid, "PIOCGETEVCTRS"),
        )
        if self.fs.state_pages is not None:
            self.fs.state_pages.on_retire = self.fs.fast.drop_page
        # The set-up store (docs/restart.md): what an earlier daemon set up
        # comes back before the mount; every change is written before the
        # call that made it answers.
        self.durable: DurableSetup | None = None
        store_dir = getattr(args, "state_dir", DEFAULT_DIR) if getattr(args, "store", True) else ""
        store = SetupStore.open(store_dir, store_name(mount))
        if store is not None:
            self.durable = DurableSetup(
                store, self.kernel, processes.read_start, host_time=isinstance(self.clock, RealClock)
            )
            at_once = getattr(args, "restore_at_start", None)
            found = self.durable.restore(self.clock, at_once=RESTORE_AT_START if at_once is None else at_once)
            for node in self.fs.nodes.values():
                if hasattr(node, "setup") and hasattr(node, "restore_setup"):
                    self.durable.add_source(node)  # type: ignore[arg-type]
            self.durable.restore_sources()
            if found.later:
                log.info("set-up: %d processes' records put back as they are asked for", found.later)
            else:
                self._restored()
            if found.processes and not found.later:
                self.lifecycle.restored()
            self._record_setup(all_pids=True)
            self.fs.after_write = lambda pid: self._record_setup([pid] if pid is not None else (), all_pids=pid is None)
            store.on_journal = self._wake_flush
        self._journaled: trio.Event | None = None

    def _wake_flush(self) -> None:
        if self._journaled is not None:
            self._journaled.set()

    async def _flush_store(self) -> None:
        """The store's journal into its database a moment after its first
        entry: off the calls' paths, each record once however often it changed."""
        while self.durable is not None:
            self._journaled = trio.Event()
            if not self.durable.store.unflushed:
                await self._journaled.wait()
            await trio.sleep(STORE_FLUSH_DELAY)
            if self.durable is None:
                return
            try:
                self.durable.store.flush()
            except (sqlite3.Error, OSError) as exc:
                # What it held is in the journal still, which the next start takes in.
                log.warning("set-up store: %s (written at the next flush)", exc)

    def _restored(self) -> None:
        """Every record of the store is back (or refused)."""
        assert self.durable is not None
        found = self.durable.found
        if found.processes or found.system or found.refused:
            log.info(
                "set-up restored: %d processes%s, %d records refused",
                found.processes, ", system mode" if found.system else "", found.refused,
            )  # fmt: skip
        trace.active.daemon("restored", processes=found.processes, system=found.system, refused=found.refused)

    def _put_back(self, pids: Iterable[int]) -> None:
        """The set-up of ``pids``' families, if the store still holds it
        unread: before anything looks at them."""
        durable = getattr(self, "durable", None)  # None too while the store is being opened
        if durable is None or not durable.pending:
            return
        put = durable.take(pids, processes.children)
        if put:
            self.lifecycle.restored(put)
            self._record_setup(put)
            self._wake_tick()  # thresholds passed while no daemon ran signal now
        if not durable.pending:
            self._restored()

    async def _put_back_rest(self) -> None:
        """Once serving: the records no request has asked for yet, a slice at
        a time, with requests answered between slices."""
        while self.durable is not None and self.durable.pending:
            until = time.monotonic() + PUT_BACK_SLICE
            while self.durable is not None and self.durable.pending and time.monotonic() < until:
                self._put_back(list(itertools.islice(self.durable.pending, 1)))
            await trio.sleep(0)

    def _profile(self, pid: int) -> WorkloadProfile:
        """The workload profile ``pid``'s threads run (its set-up put back first)."""
        self._put_back((pid,))
        return self.kernel.profile(pid)

    def _status(self) -> list[str]:
        return [
            f"process events lost {self.lifecycle.rescans} times (rescanned), "
            f"children's time recovered {self.lifecycle.credited_ns} ns",
            f"overflow signals sent {self.signals.sent}, dropped {self.signals.dropped}"
            f" ({self.signals.refused} past a user's target cap), merged {self.signals.merged}",
            f"sweep every {SWEEP_INTERVAL if self.events is not None else REAP_INTERVAL:g} s: "
            f"the last checked {self.swept[0]} of {len(self.kernel.known())} processes "
            f"in {self.swept[1] / 1e6:.1f} ms of CPU",
            f"process files and nodes opened {self.fs.opened}",
            f"counter reads answered from state pages in the bridge: {self.fs.fast.answered()}",
            f"thread events let through for {len(self.filtered_for or ())} processes, "
            f"the filter set {self.filter_sets} times",
            self._store_status(),
            self._alarm_status(),
            trace_session.status(),
        ]

    def _alarm_status(self) -> str:
        alarms = self.alarms
        if alarms is None:
            return "CPU-clock alarms off"
        kind = "perf task-clock events" if alarms.precise else "process-clock timers only (perf not allowed)"
        return f"CPU-clock alarms: {len(alarms)} processes, {alarms.armed} armed, {alarms.rung} rung; {kind}"

    def _store_status(self) -> str:
        durable = getattr(self, "durable", None)
        if durable is None:
            return "set-up store off"
        # What the store costs: records compared against what was last written
        # grow with what calls change, never with what a process holds.
        return (
            f"set-up store: {durable.writes} writes of {durable.records} records, "
            f"{durable.looked} thread records compared"
        )

    def _refilter(self) -> None:
        """Let through the thread events of the processes with thread
        contexts (before a bind's reply: its threads' forks must come), and
        of those with IRIX counters on a thread's own file (its end frees them)."""
        self._thread_version = self.kernel.thread_version
        if self.events is None:
            return
        watched = self.threads.processes() | self.kernel.thread_processes()
        if watched == self.filtered_for:
            return
        # Processes that let their last thread context go stay let through
        # until another change, up to LINGERING of them: a program that
        # registers its threads one after another (PAPI's, at each parallel
        # region) would otherwise have the filter rebuilt twice a thread.
        # More events pass meanwhile, which the daemon takes as any others.
        kept = self.filtered_for
        if kept is not None and watched < kept and len(kept) - len(watched) <= LINGERING:
            return
        self.events.watch_threads(watched)
        self.filtered_for = watched
        self.filter_sets += 1

    def _wake_tick(self) -> None:
        if self._controls_changed is not None:
            self._controls_changed.set()

    def _owe(self, owed: Signal) -> None:
        """Overflow signals of IRIX counters: the counts that raised them are
        written before they are sent (``_record_setup``)."""
        self._overflowed.add(owed.tid or owed.pid)  # a thread's own counters are kept under its tid
        self.signals.owe(owed)

    def _gone(self, pid: int) -> None:
        """The kernel let a process's state go (or a thread's own, under its
        tid): so does everything else kept for it.  The clock's line for the
        thread goes too unless a thread context still counts it: a later
        thread given the tid would be held to it, its counts standing still
        until it outran the old thread's time."""
        self._dirty.add(pid)
        if not self.threads.has_thread(pid):
            self.clock.forget_thread(pid)
        self.signals.forget(pid)
        self.fs.faults.forget(pid)
        if self.fs.state_pages is not None:
            self.fs.state_pages.retire(pid)

    def _send_now(self, pid: int, tid: int) -> bool:
        """What is owed to thread ``tid`` of ``pid`` goes ahead of its call's
        answer; what raised it (libcpc's frozen set) is written first, as the
        tick writes before its signals go: a restart between the two finds
        the overflow owed (``CpcDevice.restored``), never already signalled
        and then crossed again."""
        if not self.signals.owes(pid, tid):
            return False
        sent = self.signals.sent
        self._store_then_send(pid, tid, lambda: self.signals.send_now(pid, tid))
        return self.signals.sent > sent

    def _end_owed(self, pid: int, sig: int, tid: int) -> None:
        """Counters stop raising ``sig`` in mid-call: what they raised goes
        before the answer (``SignalSender.end``), written first as any
        signal that goes at once."""
        if self.signals.owed(pid, sig, tid):
            self._store_then_send(pid, tid, lambda: self.signals.end(pid, sig, tid))

    def _store_then_send(self, pid: int, tid: int, send: Callable[[], object]) -> None:
        """Every overflow signal that goes at once - the sender's (``_send_now``)
        and those a personality sends itself (perfctr's, its mask in si_value) -
        goes once the store has the process's records and the thread's
        contexts as they are now, the counters stopped at the overflow (a write
        in mid-call)."""
        self.threads.touched.add(tid)
        self._record_setup((pid,))
        send()

    def _time_moved(self, pid: int) -> None:
        if pid >= 0:
            self._put_back((pid,))
        if self.durable is not None:
            self.durable.sync_clock(self.clock)
        # Under the manual clock, overflow signals follow the advance at once.
        self.kernel.catch_up([pid, *self.kernel.thread_records(pid)] if pid >= 0 else [])
        for ctx in self.threads.of_process(pid) if pid >= 0 else ():
            self.threads.catch_up(ctx)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            # Every handler is synchronous, so more reader tasks buy nothing; one
            # saves a task hand-off and a lock per request, and the bridge's
            # follow-on answering (--linger) requires it.
            nursery.start_soon(self._serve_requests, nursery.cancel_scope)
            nursery.start_soon(self.signals.run)
            nursery.start_soon(resilient, self._sweep)
            nursery.start_soon(resilient, self._reap_zombies)
            nursery.start_soon(resilient, self._follow_processes)
            nursery.start_soon(self._put_back_rest)
            nursery.start_soon(self._flush_store)
            if isinstance(self.clock, RealClock):
                nursery.start_soon(resilient, self._tick)
                if self.fs.state_pages is not None:
                    nursery.start_soon(resilient, self._refresh_pages)
            if self.alarms is not None:
                nursery.start_soon(resilient, self._ring)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                log.info(
                    "mounted at %s (%s x%d at %g MHz, %s clock)",
                    self.mount, self.cpus.type.name, len(self.cpus), float(self.cpus.mhz), self.clock.name,
                )
                notify("READY=1\nSTATUS=serving " + self.mount)
                if not self.early_stop:  # else it came while mounting, before the receiver was up
                    async for signum in signals:
                        self.early_stop.append(signum)
                        break
                log.info("%s: unmounting", signal.Signals(self.early_stop[0]).name)
                notify("STOPPING=1")
            nursery.cancel_scope.cancel()

    async def _serve_requests(self, serving: trio.CancelScope) -> None:
        """Answer FUSE requests until the kernel ends the connection: someone
        unmounted the filesystem (umount(8), fusermount3 -u), and with the
        mount gone the daemon's work is done - it stops as at a SIGTERM, its
        set-up store closed, so a daemon started again finds its state."""
        await pyfuse3.main(1, 1)
        self.unmounted = True
        log.info("%s was unmounted: stopping", self.mount)
        notify("STOPPING=1")
        serving.cancel()

    async def _sweep(self) -> None:
        """The safety net under the events: once a minute (every second when
        there are no process events to learn ends from) let go of processes
        whose end was never heard."""
        while True:
            await trio.sleep(SWEEP_INTERVAL if self.events is not None else REAP_INTERVAL)
            self._catch_up_events()
            began = time.thread_time_ns()
            parents = self.lifecycle.zombie_parents()
            checked, let_go = self.lifecycle.sweep(SWEEP_LIMIT if self.events is not None else None)
            self._record_setup(parents)
            if let_go | self.threads.sweep():
                self._changed()
            if self.alarms is not None:
                self.alarms.prune(lambda pid: self.threads.alarm_wanted(pid) or self.kernel.alarm_wanted(pid))
            for pid in self.fs.faults.pids():
                if not processes.exists(pid):
                    self.fs.faults.forget(pid)
            self.swept = (checked, time.thread_time_ns() - began)

    async def _tick(self) -> None:
        """Catch up what may raise overflow signals when each is due: no
        sooner than its nearest overflow could come (its headroom at the
        fullest rate), so the look lands on the overflow, and an idle
        counting process costs nothing until then.  Sleeps until the soonest
        is due, or a request changes controls."""
        while True:
            now = time.monotonic_ns()
            self.kernel.tick(self.kernel.signalling(now), now)
            for ctx in self.threads.interrupting(now):
                self.threads.tick(ctx, now)
            if self._overflowed or self.threads.touched:
                self._record_setup()  # before the signals they owe go
            dues = [due for due in (self.kernel.next_due(now), self.threads.next_due()) if due is not None]
            self._controls_changed = trio.Event()
            if not dues:
                await self._controls_changed.wait()
                continue
            await self._sleep_until(max(min(dues), time.monotonic_ns() + MIN_TICK_NS), self._controls_changed)

    async def _ring(self) -> None:
        """A process's CPU-clock alarm rang: what waits on it is due a look,
        and the tick wakes for it."""
        alarms = self.alarms
        assert alarms is not None
        while True:
            await trio.lowlevel.wait_readable(alarms)
            pids = alarms.rang()
            if self.threads.alarmed(pids) + self.kernel.alarmed(pids):
                self._wake_tick()

    def linger_wakers(self) -> list[int]:
        """The descriptors that ring when the daemon's own work falls due
        (the overflow tick's timer, the CPU-clock alarms): each ends a burst
        of ioctls the bridge answers inline."""
        return [self._timer] + ([self.alarms.fileno()] if self.alarms is not None else [])

    async def _sleep_until(self, deadline_ns: int, woken: trio.Event) -> None:
        """Sleep until ``deadline_ns`` (monotonic) on a timer descriptor, to
        the microsecond, or until ``woken`` is set."""
        timer = self._timer
        timerfd.arm(timer, deadline_ns)
        async with trio.open_nursery() as nursery:

            async def ring() -> None:
                await trio.lowlevel.wait_readable(timer)
                nursery.cancel_scope.cancel()

            async def wake() -> None:
                await woken.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(ring)
            nursery.start_soon(wake)
        timerfd.disarm(timer)  # woken first: it must not ring, unheard, through the bursts that follow
        timerfd.drain(timer)

    async def _refresh_pages(self) -> None:
        """State pages follow stat's user:system ratio at this pace."""
        pages = self.fs.state_pages
        assert pages is not None
        while True:
            await trio.sleep(PAGE_REFRESH)
            if len(pages):
                self._catch_up_events()
                pages.refresh()

    async def _reap_zombies(self) -> None:
        """Fold zombies their parents have reaped: soon after the exit, then
        less and less often while they stay (a request on a parent folds its
        own at once, so this pace only matters to nobody waiting)."""
        delay = ZOMBIE_INTERVAL
        while True:
            if not self.lifecycle.unsettled():
                self._exits_seen = trio.Event()
                await self._exits_seen.wait()
                delay = ZOMBIE_INTERVAL
            await trio.sleep(delay)
            self._catch_up_events()
            parents = self.lifecycle.zombie_parents()
            settled = self.lifecycle.settle()
            self._record_setup(parents)
            if settled:
                self._changed(parents)
                delay = ZOMBIE_INTERVAL
            else:
                delay = min(delay * 2, MAX_ZOMBIE_INTERVAL)

    async def _follow_processes(self) -> None:
        """Forks and execs from the kernel's process-events connector; exits
        from taskstats, which also gives each exiting process's final CPU time."""
        if not procevents.available():
            log.info("process events connector unavailable: no fork/exit inheritance")
            return
        async with contextlib.AsyncExitStack() as stack:
            if taskstats.available():
                self.accounting = await stack.enter_async_context(taskstats.ExitAccounting(self.event_buffer))
                # A thread's own record matters only to a context on it or
                # to a counting process (see _exit_events).
                self.accounting.keep_thread = lambda tgid, tid: (
                    self.threads.has_thread(tid) or self.kernel.is_counting(tgid)
                )
            else:
                log.info("taskstats unavailable: a child reaped at once may lose its last CPU time")
            self.events = await stack.enter_async_context(procevents.ProcessEvents(self.event_buffer))
            self._refilter()
            # Reads answered in C ask the daemon whenever either stream has news.
            self.fs.fast.watch([sub.fileno() for sub in (self.events, self.accounting) if sub is not None])
            try:
                # Waiting without reading: what the connector sent is taken
                # and applied in slices, with no checkpoint inside one and
                # requests served between them.
                fuse = next((fd for fd, what in _descriptors().items() if what == "/dev/fuse"), -1)
                while await self.events.wait_readable():
                    while True:
                        for _ in range(YIELDS_TO_REQUESTS if fuse >= 0 else 0):
                            if not netlink.readable([fuse], 0):
                                break
                            await trio.sleep(0)  # a request is queued: it goes first
                        if not self._catch_up_events(None):
                            break
                        await trio.sleep(0)
            finally:
                self.fs.fast.watch(None)
                self.events = self.accounting = None

    def _catch_up_for_request(self, pid: int | None) -> None:
        """Before a request: what the kernel has reported, as ever, while it
        is no storm (up to ``STORM_SLICES`` slices); in a storm (the event
        loop has been behind that many slices running) the request is
        answered ahead of the backlog, with what the daemon knows, and only
        ``pid``'s reaped children are looked at.  No user's storm makes
        another's request wait for it."""
        if pid is not None:
            self._put_back((pid,))
        # A counting process's own file waits for the backlog the kernel had
        # queued when the request came: its own fork storm must not leave its
        # children's counts out (a cap of 64, then 4096 slices, lost 40%,
        # then 20% of a counted storm's on CI), and what another user's
        # storm queues meanwhile is not its to wait for (draining all of it
        # stalled every request for the storm's length).
        if pid is not None and self.kernel.is_tracked(pid):
            asked = time.monotonic_ns()
            spent = time.thread_time_ns()
            budget = self.lifecycle.host_time
            while True:
                more = self._catch_up_events(pid)
                # A counting process's exit record waits for its connector exit,
                # which the kernel queues after waking the parent (exit_notify,
                # then proc_exit_connector): a reaped worker's may follow the request.
                held = any(r.whole_group and self.kernel.is_tracked(r.pid) for r in self._held
                           if isinstance(r, taskstats.TaskExit))  # fmt: skip
                if not (held or (more and self._heard_to < asked)):
                    break
                waited = time.monotonic_ns() - asked
                if waited > COUNTING_LIMIT_NS:
                    self._ahead_of_backlog(pid)
                    break  # answered with what is known (docs/trust.md)
                if budget and time.thread_time_ns() - spent > COUNTING_BUDGET_NS:
                    # Another user's storm is queued ahead of its children's
                    # ends: what Linux says its waited-for children used stands
                    # in for them until their exits come (then matched); while
                    # its /proc files do not answer, the backlog is worked off.
                    credited = self.lifecycle.credit_unseen(pid)
                    if credited:
                        self._record_setup((pid,))
                        self._changed((pid,))
                    if credited is not None:
                        self._ahead_of_backlog(pid)
                        break
                    budget = False
        elif self._behind < STORM_SLICES:
            for _ in range(STORM_SLICES):
                if not self._catch_up_events(pid):
                    break
        elif pid is not None and self.lifecycle.settle(pid):
            self._record_setup((pid,))
            self._changed((pid,))

    def _ahead_of_backlog(self, pid: int) -> None:
        """A request of ``pid`` is answered ahead of queued events: the
        children it forked before the call, whose forks may be among them,
        are taken in first, as the kernel's order has it (a release or a
        control change must not decide what they inherited)."""
        # A start is known to a tick: one within a tick of the last event
        # heard may be a fork not heard yet.
        heard = self.lifecycle.host.boot_ns(self._heard_to) - processes.TICK_NS if self._heard_to else 0
        taken = self.lifecycle.take_in_children((pid,), since_ns=max(1, heard))
        if taken:
            self._record_setup((pid, *taken))
            self._changed((pid, *taken))

    def _catch_up_events(self, pid: int | None = None) -> bool:
        """Apply what the kernel has reported (``Lifecycle`` orders it), then
        fold ``pid``'s children reaped since: a parent that has just returned
        from wait(2) must see its child's counts.  At most ``EVENT_SLICE``
        datagrams of each stream are taken: True when more are queued (a
        storm's backlog; a request is answered after one slice, not after
        all of it).

        Exits come from taskstats when it is there: the kernel queues them
        before the parent can be woken, while the connector's exit event comes
        after it (do_exit: taskstats_exit, exit_notify, proc_exit_connector).
        """
        changed = more = False
        touched: set[int] = set()  # pids whose set-up the events may change
        paged: set[int] = set()  # and those whose pages they may change besides
        # One poll(2) for both streams first: before most requests neither has news.
        if self.events is not None and (self._held or netlink.any_pending((self.events, self.accounting))):
            # Taskstats, the connector, then taskstats again.  A child's fork
            # event is queued before its exit record, and an exit record
            # before the process's connector exit event (do_exit: taskstats_exit,
            # exit_notify, proc_exit_connector).  So the first drain's records
            # all have their forks in the connector's drain after it, and a
            # connector exit's record is in one of the two drains.  A record of
            # the second drain whose process's end the connector has not told
            # yet waits a round: its fork may still be queued, and a record
            # applied before its fork would lose the child's counts.
            held = self._held
            behind = self.events.backlog  # the last round left connector events queued
            ahead = behind and sum(1 for r in held if isinstance(r, taskstats.TaskExit) and r.whole_group) >= HELD_AHEAD
            records = held + ([] if ahead else self._drain_accounting(EVENT_SLICE // 2 if behind else EVENT_SLICE))
            more = ahead or (self.accounting is not None and self.accounting.backlog)
            seen = self.events.drain_nowait(EVENT_SLICE)
            more |= self.events.backlog
            self._heard_to = next((e.timestamp_ns for e in reversed(seen) if not isinstance(e, procevents.Overrun)),
                                  self._heard_to)  # fmt: skip
            ended = {e.tgid for e in seen if isinstance(e, procevents.ExitEvent)}
            records += self._records_for(seen, records)
            if self.events.backlog and not any(isinstance(e, procevents.Overrun) for e in seen):
                # The connector's slice may stop short of these records'
                # forks: each waits for its process's exit to be read, but
                # only so many wait (past them the oldest go, as after a loss).
                records, self._held = taskstats.announced(records, ended)
                records += self._held[: max(0, len(self._held) - MAX_HELD)]
                del self._held[: max(0, len(self._held) - MAX_HELD)]
                announced: list[taskstats.ExitRecord] = []
            else:
                announced, self._held = taskstats.announced(self._drain_accounting(), ended)
                more |= self.accounting is not None and self.accounting.backlog
            self.fs.fast.hold(bool(self._held))
            already = {id(record) for record in held}
            records += announced
            batch = self._exit_events(records)
            # taskstats' whole-group exits: every thread of those processes is gone.
            whole_groups = [ProcessExited(item.pid) for item in batch if isinstance(item, Exited)]
            forks: list[Event] = []  # in the order they happened: a child's own forks come after its fork
            threads: list[ThreadEvent] = []
            for event in seen:
                if isinstance(event, procevents.ForkEvent):
                    if event.child_pid == event.child_tgid:
                        forks.append(Forked(event.parent_tgid, event.child_tgid, event.cpu, event.timestamp_ns))
                    else:
                        threads.append(ThreadCreated(event.child_tgid, event.child_pid, at_ns=event.timestamp_ns))
                elif isinstance(event, procevents.ExecEvent):
                    threads.append(ProcessExeced(event.tgid, event.timestamp_ns))
                    if event.pid == event.tgid:
                        batch.append(Execed(event.pid))
                elif isinstance(event, procevents.ExitEvent):
                    if self.accounting is None and event.pid != event.tgid:
                        self._thread_ended(event.tgid, event.pid)
                    if event.pid != event.tgid and self.kernel.thread_gone(event.pid):
                        touched.add(event.pid)
                        changed = True
                    threads.append(ThreadExited(event.tgid, event.pid))
                    self.signals.forget_thread(event.tgid, event.pid)
                    if event.pid == event.tgid:
                        batch.append(Exited(event.pid, event.parent_tgid))
                else:
                    batch.append(Lost())
            threads = [*coalesce(threads), *whole_groups]
            paged.update(event.pid for event in threads)  # a thread's process: its page's line
            for item in batch:
                if isinstance(item, (Exited, Execed)):
                    touched.update((item.pid, self.kernel.parent_of(item.pid)))
                    if isinstance(item, Exited):
                        touched.add(item.parent)
                elif isinstance(item, Lost):
                    touched.update(self.kernel.known())
            touched.update(p for f in forks if isinstance(f, Forked) for p in (f.parent, f.child))
            if self.durable is not None and self.durable.pending:
                # Set-up still unread of processes these events are about.
                lost = any(isinstance(item, Lost) for item in batch)
                self._put_back(list(self.durable.pending) if lost else touched)
            if threads:
                changed |= self.threads.apply(threads) > 0
            if any(isinstance(item, Lost) for item in batch):
                changed |= self.threads.sweep() > 0
            batch = forks + batch
            if batch:
                armed = self.fs.faults.pids()
                for item in batch:
                    if isinstance(item, Exited):
                        self.fs.listing.exited(item.pid)
                        if item.pid in armed:
                            self.fs.faults.forget(item.pid)  # a later process may get the pid
                unsettled = self.lifecycle.unsettled()
                changed |= self.lifecycle.apply(batch)
                if self.lifecycle.unsettled() > unsettled and self._exits_seen is not None:
                    self._exits_seen.set()
            for record in self._held:
                # A held process exit is applied a round later, but its times
                # are final now: a read of the zombie meanwhile settles on them
                # (told once: a storm holds hundreds, round after round; and
                # after the forks: its process's own, if among them, makes the
                # clock drop what it kept for the pid's predecessor).
                if isinstance(record, taskstats.TaskExit) and record.whole_group and id(record) not in already:
                    self.clock.exited(record.pid, *record.split())
        if pid is not None:
            changed |= self.lifecycle.settle(pid)
            touched.add(pid)
        if self._answering:
            self._dirty |= touched  # written with what the call changes, before it answers
        elif touched or self._dirty or self.threads.touched:
            self._record_setup(touched)
        if changed:
            self._changed(touched | paged)
        self._behind = self._behind + 1 if more else 0
        return more

    def answer_ioctl(  # noqa: PLR0913 - the bridge's handler signature
        self, ino: int, fh: int, cmd: int, arg: int, data: bytes, out_size: int, flags: int,
        pid: int, uid: int, gid: int,
    ) -> tuple[int, bytes]:  # fmt: skip
        """The filesystem's ioctl, then the set-up it changed written to the
        store: a call answers only once what it set up would survive a restart."""
        target = ino - PID_INODE_BASE
        if self.durable is not None and self.durable.pending:
            self._put_back((pid, target) if 0 < target < MAX_PID_INODE else (pid,))
        self._answering = self.durable is not None
        self.threads.begin_call()
        try:
            reply = self.fs.ioctl(ino, fh, cmd, arg, data, out_size, flags, pid, uid, gid)
            if self.kernel.thread_version != self._thread_version:
                self._refilter()  # an IRIX thread's own counters: its end must come through
            return reply
        except OSError as exc:
            if exc.errno in (errno.EBUSY, errno.EAGAIN):
                trace.active.refused(self.fs.personality(ino), pid, uid, cmd, exc.errno)
            raise
        finally:
            self._answering = False
            try:
                if self.durable is not None:
                    self._record_setup(
                        (pid, target) if 0 < target < MAX_PID_INODE else (pid,), nodes=ino in self.fs.nodes
                    )
            finally:
                self.threads.end_call()

    def _record_setup(self, pids: Iterable[int] = (), *, all_pids: bool = False, nodes: bool = True) -> None:
        """Write the set-up of ``pids`` (and of every pid let go or changed
        since the last write) that changed; all of it if ``all_pids``.
        ``nodes``: the personalities' records (perfctr, libcpc, pctr) may
        have changed besides the thread contexts the thread table names; a
        call on a process file changes none of theirs."""
        if self.durable is None:
            return
        dirty, self._dirty = self._dirty, set()
        overflowed, self._overflowed = self._overflowed, set()
        dirty.update(pids)
        left: set[int] = set()
        touched: set[int] = set()
        try:
            if all_pids:
                left |= self.durable.sync_all()
            left |= self.durable.sync(dirty, overflowed)
            touched = self.threads.take_touched()
            if nodes or touched or all_pids:
                self.durable.sync_sources(None if all_pids else dirty | touched)
        except (sqlite3.Error, OSError) as exc:
            # The call still answers: its set-up holds until the daemon stops,
            # and the next write tries again.
            self._dirty |= dirty
            self._overflowed |= overflowed
            self.threads.touched |= touched
            log.warning("set-up store: %s (a restart now would lose the latest changes)", exc)
        if left:
            # Processes stuck where their /proc files wait (hwperfd.host.procread):
            # theirs wait for the next write, and so do their overflow signals.
            self._dirty |= left
            self._overflowed |= left & overflowed
            log.info("set-up store: %d processes' start unreadable now; written later", len(left))
        self._unwritten = left

    def _held_for_store(self, pid: int) -> bool:
        """Whether the overflow signals of ``pid`` (a process, or a thread with
        counters of its own) wait: its record, which holds the counts that
        raised them, could not be written yet (tried again here)."""
        if pid not in self._unwritten:
            return False
        self._record_setup()
        return pid in self._unwritten

    def close_store(self) -> None:
        """On a clean stop: everything written, and the store removed if it holds nothing."""
        if self.durable is not None:
            self._record_setup(all_pids=True)
            self.durable.store.close(remove_if_empty=True)
            self.durable = None

    def _changed(self, pids: Iterable[int] | None = None) -> None:
        """Processes or threads came or went: texts render anew, and the state
        pages show it (a page of a context that ended goes).  ``pids``: the
        processes the change was about, whose pages alone are written anew;
        None: every page."""
        self.fs.changed()
        if self.fs.state_pages is not None:
            if pids is None:
                self.fs.state_pages.publish()
            else:
                self.fs.state_pages.publish_changed(pids)

    def _thread_ended(self, pid: int, tid: int) -> None:
        """A thread of a counting process ended: its CPU time, for perfex -mp's blocks."""
        if self.kernel.is_counting(pid):
            times = self.clock.thread_times(pid, tid)
            if times is not None:
                self.kernel.thread_exited(pid, tid, times)

    def _records_for(self, seen: list[procevents.ProcessEvent], records: list[taskstats.ExitRecord]) -> list:
        """Exit records taken until every counted process whose connector exit
        is in ``seen`` has its own (each is queued before that exit): one
        read after its exit was applied came too late to be folded, and the
        child counted what the clock last read of it (none: a storm's
        children lost half their counts)."""
        if self.accounting is None:
            return []
        forked: set[int] = set()  # children of counting processes forked in this slice (no /proc read)
        for e in seen:
            if isinstance(e, procevents.ForkEvent) and e.child_pid == e.child_tgid:
                if e.parent_tgid in forked or self.kernel.is_tracked(e.parent_tgid):
                    forked.add(e.child_tgid)
        missing = {
            e.tgid for e in seen
            if isinstance(e, procevents.ExitEvent) and e.pid == e.tgid
            and (e.tgid in forked or self.kernel.is_tracked(e.tgid))
        }  # fmt: skip
        missing -= {r.pid for r in records if isinstance(r, taskstats.TaskExit) and r.whole_group}
        extra: list[taskstats.ExitRecord] = []
        while missing:
            got = self._drain_accounting()
            extra += got
            missing -= {r.pid for r in got if isinstance(r, taskstats.TaskExit) and r.whole_group}
            if not self.accounting.backlog:
                break
        return extra

    def _drain_accounting(self, limit: int = EVENT_SLICE) -> list[taskstats.ExitRecord]:
        return self.accounting.drain_nowait(limit) if self.accounting is not None else []

    def _exit_events(self, records: list[taskstats.ExitRecord]) -> list[Event]:
        batch: list[Event] = []
        for record in records:
            if isinstance(record, taskstats.TaskExit):
                if record.whole_group:
                    batch.append(Exited(record.pid, record.ppid, record.comm, record.split()))
                if record.tgid and record.pid != record.tgid and not record.aggregate:
                    # Only threads of processes something counts: a thread
                    # storm of an uncounted process costs no more than this test.
                    self.kernel.thread_gone(record.pid)  # its own IRIX counters go with it
                    if self.threads.has_process(record.tgid) or self.kernel.is_counting(record.tgid):
                        # A thread's last run, for its per-thread counters (applied after this).
                        self.clock.thread_exited(record.tgid, record.pid, *record.split())
                        # Queued before its process can be waited for (do_exit:
                        # taskstats_exit, then exit_notify): perfex -mp finds it.
                        self._thread_ended(record.tgid, record.pid)
            else:
                batch.append(Lost())
        return batch


def _descriptors() -> dict[int, str]:
    """This process's open descriptors and what each is."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the listing's own, closed since
    return found


def _unmount_on_kill(spare: int, opened: dict[int, str]) -> None:
    """auto_unmount, made reliable: a killed daemon's fusermount3 (which
    libfuse leaves waiting on a socket) unmounts only if, once that socket
    closes, opening the mount answers ENOTCONN - that is, once /dev/fuse is
    released too.  An exiting process releases its files in the reverse of
    their order (fput's task work runs last-in first-out), so the socket,
    numbered above /dev/fuse, went first; fusermount3 could look before the
    connection was aborted (ECONNABORTED) and leave the mount (a killed
    daemon stayed mounted about one time in four on a loaded machine).
    The socket moves to ``spare``, below /dev/fuse, and closes on exec."""
    fuse, sockets = None, []
    for fd, target in _descriptors().items():
        if opened.get(fd) == target:
            continue
        if target == "/dev/fuse":
            fuse = fd
        elif target.startswith("socket:"):
            sockets.append(fd)
    if fuse is not None and len(sockets) == 1 and spare < fuse:
        os.dup2(sockets[0], spare, inheritable=False)
        os.close(sockets[0])
    else:
        os.close(spare)


def _keep_cpus_awake() -> AwakeCpus:
    try:
        awake = AwakeCpus()
    except OSError as exc:
        raise SetupError(f"--keep-cpus-awake: cannot hold {cpulatency.PATH}: {exc.strerror}") from None
    log.info("every CPU kept out of its idle states while the daemon runs (%s: 0 us)", cpulatency.PATH)
    return awake


def serve(args, mount: str) -> int:
    """Mount, serve until SIGTERM/SIGINT, unmount."""
    daemon = Daemon(args, mount)
    # A SIGTERM or SIGINT from the mount on, before the loop's receiver is
    # up, stops the daemon as one after: by default it would end the
    # process with the mount left behind for fusermount3 to clean up.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: daemon.early_stop.append(signum))
    bridge.install(daemon.answer_ioctl)
    bridge.linger(args.linger * 1000, LINGER_BUDGET_NS if args.linger else 0, daemon.linger_wakers())
    options = set(pyfuse3.default_options)
    options |= {"fsname=hwperfd", "subtype=hwperfd", "allow_other", "default_permissions", "auto_unmount"}
    if args.debug:
        options.add("debug")
    # Held from before the mount to after the unmount, let go on every way out.
    awake = _keep_cpus_awake() if getattr(args, "keep_cpus_awake", False) else None
    try:
        spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # the lowest free descriptor, for _unmount_on_kill
        opened = _descriptors()
        try:
            pyfuse3.init(daemon.fs, mount, options)
        except RuntimeError as exc:
            os.close(spare)
            raise SetupError(f"cannot mount {mount}: {exc}") from None
        _unmount_on_kill(spare, opened)
        if not bridge.hooked():
            pyfuse3.close(unmount=True)
            raise SetupError("the ioctl bridge did not hook pyfuse3's FUSE session (libfuse too new?)")
        try:
            trio.run(daemon.run)
        finally:
            daemon.fs.stop_notifications()
            pyfuse3.close(unmount=not daemon.unmounted)
            bridge.install(None)
            if daemon.fs.state_pages is not None:
                daemon.fs.state_pages.close()
            daemon.close_store()
            if trace_session.current() is not None:
                trace.active.daemon("stopped")
                trace_session.stop()
        return 0
    finally:
        if awake is not None:
            awake.close()
