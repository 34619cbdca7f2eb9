"""Per-thread counter contexts: what libcpc's per-LWP binds and perfctr's
vperfctr give one thread.

A context is one thread's view of the counter hardware for one service
("cpc", "perfctr"): a private ``PmuCpu`` of the daemon's model that the
personality programs as its driver would program the real registers on
every switch to that thread, and that counts only the thread's own CPU time.
The personality keeps its own state (a perfctr control and state, a cpc set)
in ``data``; this module keeps the contexts, plays each thread's new CPU time
through them, and follows threads through creation, exec and exit.

Order-sensitive rules live here and are driven by events as data
(``apply``), so they are unit-tested without a host:

* a thread is its tid and its start time: a context whose thread has gone is
  never handed to a later thread given the same tid (``get`` checks);
* a thread's exit ends its contexts (the service's ``on_exit`` sees them
  first); a process's exit ends all of its threads';
* a thread created by a thread with a context gets its own copy when the
  service's ``inherit`` hook returns data for it (libcpc's
  CPC_BIND_LWP_INHERIT; perfctr gives children nothing);
* an exec keeps the contexts the service's ``on_exec`` keeps (perfctr's
  state survives exec unless its CLOEXEC flag is set);
* every unprivileged user holds at most ``PER_USER`` contexts (EAGAIN):
  no user can grow the daemon without bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
import heapq
import itertools
import time
from typing import Any, Protocol

from hwperfd.counters.errors import CountersLimit
from hwperfd.cpu.core import PmuCpu
from hwperfd.cpu.models import CpuModel
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.trace import recorder as trace

CpuTimes = tuple[int, int]
PER_USER = 1024  # contexts one unprivileged uid may hold, all services together
MIN_WAIT_NS = 100_000  # a look finds an overflow still pending (its service has not taken it): not sooner again
# A context whose own thread times its overflows (``left_ns``): the tick's
# look, the fallback, waits this long past the instant the thread was told.
TIMED_GRACE_NS = 1_000_000
# ... and while its thread does not run at all, the wait doubles at each look, up to this:
# an idle timed thread costs a look every 10 s at most, and should its timer not ring, its
# overflow comes late, never lost.
TIMED_IDLE_MAX_NS = 10_000_000_000
# Those idle looks fall on a grid of this step, so that many idle threads share one wake-up of
# the tick (each wake-up goes through every context).
TIMED_IDLE_GRID_NS = 100_000_000


# A context whose process's CPU clock an alarm watches (``CpuAlarm``) is looked at by the
# wall clock only this often besides, should the alarm never ring.
ALARMED_WAIT_NS = 60_000_000_000
# Not run over looks this far apart: idle, and its alarm is armed (one merely
# blocked a moment in a call, its library's look, is not).
IDLE_NS = 50_000_000


class CpuAlarm(Protocol):
    """The host's alarms on CPU clocks (hwperfd.host.cpualarm): a process's,
    rung up to tens of ms of CPU late on a busy machine, and, where
    ``precise``, a thread's, rung on its instant."""

    precise: bool

    def arm(self, pid: int, cpu_ns: int) -> bool: ...

    def arm_thread(self, pid: int, tid: int, start: int, after_ns: int) -> bool: ...


class ThreadClock(Protocol):
    def thread_times(self, pid: int, tid: int) -> CpuTimes | None: ...

    def forget_thread(self, tid: int) -> None: ...

    def thread_born(self, tid: int, at_ns: int) -> None: ...

    def resume_thread_line(self, pid: int, tid: int, seen: CpuTimes) -> None: ...


# -- what the host reports, as data ----------------------------------------------


@dataclass(frozen=True)
class ThreadCreated:
    """A thread was created in ``pid``.  Linux's process-events connector
    names the process's parent, not the creating thread (cn_proc reports
    ``real_parent``, which CLONE_THREAD shares), so ``parent_tid`` is 0 when
    the creator is unknown."""

    pid: int
    tid: int
    parent_tid: int = 0
    at_ns: int = 0  # when (CLOCK_MONOTONIC; 0: unknown)


@dataclass(frozen=True)
class ThreadExited:
    pid: int
    tid: int


@dataclass(frozen=True)
class ProcessExited:
    pid: int


@dataclass(frozen=True)
class ProcessExeced:
    pid: int
    at_ns: int = 0  # when (CLOCK_MONOTONIC; 0: unknown)


ThreadEvent = ThreadCreated | ThreadExited | ProcessExited | ProcessExeced


def coalesce(events: Iterable[ThreadEvent]) -> list[ThreadEvent]:
    """``events`` less the creation of each thread whose end follows among
    them: a thread already gone when its creation is applied gets no
    context (and a look for it could find a later thread given its tid), so
    a storm of short-lived threads costs no look at all.  Its end stays (a
    dictionary look-up; it ends any context an earlier thread with the tid
    left), and the rest keep their order."""
    batch = list(events)
    born: dict[tuple[int, int], int] = {}
    stillborn: set[int] = set()
    for at, event in enumerate(batch):
        if isinstance(event, ThreadCreated):
            born[(event.pid, event.tid)] = at
        elif isinstance(event, ThreadExited):
            created = born.pop((event.pid, event.tid), None)
            if created is not None:
                stillborn.add(created)
    return [event for at, event in enumerate(batch) if at not in stillborn] if stillborn else batch


@dataclass(eq=False)
class ThreadContext:
    """One thread's counters for one service."""

    service: str
    pid: int
    tid: int
    start: int  # the thread's start time: with the tid, its identity
    owner: int  # the uid that set it up
    cpu: PmuCpu
    seen: CpuTimes  # the thread's CPU times counted so far
    data: Any = None  # the personality's own state
    running: bool = True  # False: time passes uncounted (suspended, stopped)
    ran_ns: int = 0  # CPU time counted while running, for a virtual TSC
    serial: int = 0  # order of attachment: the latest inheriting context is the one copied
    # The tick's next look (monotonic ns), valid while cpu.version is due_version.
    due: int = 0
    due_version: int = -1
    timed: bool = False  # its thread's library arms a timer at each overflow instant (left_ns)
    looked: int = -1  # CPU ns (user + system) counted at the tick's last look
    idle_wait: int = 0  # the tick's last wait while the timed thread did not run
    process_looked: int = -1  # its process's CPU ns (all threads) read before the tick's last look
    still_since: int = 0  # when a look first found ``looked`` unchanged (monotonic ns)
    attached_ns: int = 0  # when it was set up (CLOCK_MONOTONIC): an exec reported late is not its


@dataclass
class _Hooks:
    inherit: Callable[[ThreadContext], Any] | None = None
    on_exec: Callable[[ThreadContext], bool] | None = None
    on_exit: Callable[[ThreadContext], None] | None = None
    on_overflow: Callable[[ThreadContext, int], None] | None = None
    on_inherited: Callable[[ThreadContext], None] | None = None


@dataclass
class _Bookkeeping:
    by_tid: dict[int, dict[str, ThreadContext]] = field(default_factory=dict)
    by_pid: dict[int, set[int]] = field(default_factory=dict)
    per_owner: dict[int, int] = field(default_factory=dict)


class ThreadTable:
    def __init__(
        self,
        model: CpuModel,
        mhz: Fraction,
        clock: ThreadClock,
        profile: Callable[[int], WorkloadProfile],
        start_of: Callable[[int, int], int | None],
        per_user: int = PER_USER,
        host_time: bool = False,
        process_cpu_ns: Callable[[int], int | None] | None = None,
        running_start: Callable[[int, int], int | None] | None = None,
    ) -> None:
        """``profile(pid)`` is the workload profile a process runs (set per
        process, shared by its threads); ``start_of(pid, tid)`` the start
        time of a live thread, None if gone; ``host_time``: the clock is the
        host's, whose overflow instants a thread's own timer can catch
        (``left_ns``); ``process_cpu_ns(pid)`` the CPU ns all of a process's
        threads have run (None if gone): one system call, where a thread's
        own time takes /proc reads, so the tick's look at a thread whose
        process has not run since the last look reads nothing more;
        ``running_start(pid, tid)`` the start of a thread that lives and has
        not begun its exit, None otherwise."""
        self.host_time = host_time
        self._process_cpu_ns = process_cpu_ns
        self.model = model
        self.mhz = mhz
        self.clock = clock
        self._profile = profile
        self._start_of = start_of
        self._running_start = running_start
        # Within one request (``begin_call``): tid -> the start already read
        # for it.  None outside a request: every ``get`` reads it.
        self._checked: dict[int, int] | None = None
        self.per_user = per_user
        self._hooks: dict[str, _Hooks] = {}
        self._books = _Bookkeeping()
        self._serial = 0
        # The tick's schedule: (due, serial, context) entries, the soonest
        # first; an entry is void once its context's due or registers have
        # changed since.  Contexts whose registers changed (or that start or
        # resume counting) need a look at once and wait in ``_unscheduled``;
        # so a wake-up of the tick costs what is due, not a pass over all.
        self._heap: list[tuple[int, int, ThreadContext]] = []
        self._unscheduled: dict[ThreadContext, None] = {}
        self._entries = itertools.count()  # ties in the heap go by entry, never by context
        #: Threads whose contexts came, went, overflowed or were kept across
        #: an exec since the set-up store last looked (``take_touched``).
        self.touched: set[int] = set()
        #: Called when a process gains its first context or loses its last:
        #: thread events of other processes need not reach the table.
        self.on_processes_changed: Callable[[], None] | None = None
        #: Alarms on threads' or processes' CPU clocks (the host's): an idle
        #: context waits on one, not on the wall clock (``_schedule``); pid ->
        #: (the process's CPU ns armed, -1 for threads' alarms, the contexts
        #: waiting).
        self.alarms: CpuAlarm | None = None
        self._alarmed: dict[int, tuple[int, set[ThreadContext]]] = {}

    def processes(self) -> frozenset[int]:
        """The processes with a context on any of their threads."""
        return frozenset(self._books.by_pid)

    def has_process(self, pid: int) -> bool:
        return pid in self._books.by_pid

    def has_thread(self, tid: int) -> bool:
        """Whether thread ``tid`` has a context of any service."""
        return tid in self._books.by_tid

    def register(
        self,
        service: str,
        *,
        inherit: Callable[[ThreadContext], Any] | None = None,
        on_exec: Callable[[ThreadContext], bool] | None = None,
        on_exit: Callable[[ThreadContext], None] | None = None,
        on_overflow: Callable[[ThreadContext, int], None] | None = None,
        on_inherited: Callable[[ThreadContext], None] | None = None,
    ) -> None:
        """``on_inherited(ctx)`` runs on a context ``inherit`` just gave a new
        thread, before any of its time is counted: the service programs the
        new thread's counters (libcpc presets them, and may owe a signal)."""
        self._hooks[service] = _Hooks(inherit, on_exec, on_exit, on_overflow, on_inherited)

    # -- contexts --------------------------------------------------------------

    def attach(self, service: str, pid: int, tid: int, owner: int, data: Any = None) -> ThreadContext:
        """A new context on thread ``tid`` of ``pid``, counting from now; it
        replaces the service's earlier context on that thread.

        Raises LookupError if there is no such thread, CountersLimit when
        ``owner`` (not root) already holds ``per_user`` contexts."""
        start = self._start_of(pid, tid)
        times = self.clock.thread_times(pid, tid) if start is not None else None
        if start is None or times is None:
            raise LookupError(f"no thread {tid} in process {pid}")
        old = self._books.by_tid.get(tid, {}).get(service)
        # The limit is checked before the earlier context goes, so a refusal
        # leaves it (another user's, perhaps) in place; replacing one's own is
        # not a new one.
        held = self._books.per_owner.get(owner, 0) - (old is not None and old.owner == owner)
        if owner != 0 and held >= self.per_user:
            raise CountersLimit(f"uid {owner} holds {self.per_user} counting contexts")
        if old is not None:
            self._drop(old)
            # Dropping it may have let the clock forget the thread's time (the
            # manual clock starts it again from 0): count from the time now.
            times = self.clock.thread_times(pid, tid) or (0, 0)
        self._serial += 1
        pmu = PmuCpu(0, self.model, self.mhz, freeze=True)
        ctx = ThreadContext(
            service, pid, tid, start, owner, pmu, times, data, serial=self._serial, attached_ns=time.monotonic_ns()
        )
        self._add(ctx)
        trace.active.attached(ctx)
        return ctx

    def get(self, service: str, tid: int) -> ThreadContext | None:
        """The service's context on thread ``tid``, if that thread is still the
        one it was set up on (a later thread with the tid gets nothing)."""
        ctx = self._books.by_tid.get(tid, {}).get(service)
        if ctx is None:
            return None
        checked = self._checked
        if checked is not None and checked.get(tid) == ctx.start:
            return ctx
        if self._start_of(ctx.pid, tid) != ctx.start:
            self._end(ctx)
            return None
        if checked is not None:
            checked[tid] = ctx.start
        return ctx

    def begin_call(self) -> None:
        """A request begins: within it, a thread's identity is read once.
        A call looks at its context several times (the call itself, then
        the state page it writes: whether it counts, its identity, its
        snapshot), each a /proc read of the thread's start, which for a
        thread other than the caller is handed to a worker (procread); a
        tid is not taken by a new thread within one request."""
        self._checked = {}

    def end_call(self) -> None:
        self._checked = None

    def detach(self, service: str, tid: int) -> ThreadContext | None:
        ctx = self._books.by_tid.get(tid, {}).get(service)
        if ctx is not None:
            self._drop(ctx)
        return ctx

    def contexts(self, service: str | None = None) -> Iterator[ThreadContext]:
        for per_service in list(self._books.by_tid.values()):
            for ctx in list(per_service.values()):
                if service is None or ctx.service == service:
                    yield ctx

    def on_threads(self, service: str, tids: Iterable[int]) -> list[ThreadContext]:
        """The service's contexts on the threads ``tids`` (not the other
        threads of a process whose main thread is named)."""
        by_tid = self._books.by_tid
        found = [by_tid[tid].get(service) for tid in tids if tid in by_tid]
        return [ctx for ctx in found if ctx is not None]

    def of_process(self, pid: int) -> list[ThreadContext]:
        return self._of_process(pid)

    def sweep(self) -> int:
        """End the contexts whose thread has gone unheard (events lost)."""
        gone = [ctx for ctx in self.contexts() if self._start_of(ctx.pid, ctx.tid) != ctx.start]
        for ctx in gone:
            self._end(ctx)
        return len(gone)

    def owned_by(self, owner: int) -> int:
        return self._books.per_owner.get(owner, 0)

    def __len__(self) -> int:
        return sum(len(v) for v in self._books.by_tid.values())

    # -- kept across a restart of the daemon (docs/restart.md) ------------------

    def take_touched(self) -> set[int]:
        touched, self.touched = self.touched, set()
        return touched

    @staticmethod
    def saved(ctx: ThreadContext) -> list[Any]:
        """A context's own part as plain data: identity, owner, the CPU time
        counted to, its registers (the personality keeps ``data``)."""
        return [ctx.pid, ctx.tid, ctx.start, ctx.owner, list(ctx.seen), int(ctx.running), ctx.ran_ns,
                ctx.cpu.saved()]  # fmt: skip

    def restore(self, service: str, saved: Any, data: Any) -> ThreadContext | None:
        """Put back a context ``saved`` gave, if its thread is still the one it
        was set up on (a tid taken again gets nothing): its next catch-up
        counts the thread's CPU time since the write, downtime included.
        ValueError for a form that is not one."""
        if not isinstance(saved, list) or len(saved) != 8:
            raise ValueError("not a thread context")
        pid, tid, start, owner, seen, running, ran_ns, registers = saved
        if not all(type(v) is int for v in (pid, tid, start, owner, running, ran_ns)) or pid <= 0 or tid <= 0:
            raise ValueError("not a thread context")
        if not isinstance(seen, list) or len(seen) != 2 or not all(type(v) is int for v in seen):
            raise ValueError("not a thread context")
        if self._start_of(pid, tid) != start or service in self._books.by_tid.get(tid, {}):
            return None
        pmu = PmuCpu(0, self.model, self.mhz, freeze=True)
        pmu.load(registers)
        self._serial += 1
        ctx = ThreadContext(service, pid, tid, start, owner, pmu, (seen[0], seen[1]), data, bool(running), ran_ns,
                            serial=self._serial)  # fmt: skip
        self._add(ctx)
        self.clock.resume_thread_line(pid, tid, ctx.seen)
        return ctx

    # -- time ------------------------------------------------------------------

    def catch_up(self, ctx: ThreadContext, upto: int | None = None) -> bool:
        """Play the thread's CPU time since the last catch-up through its
        counters (only while ``running``); False if the thread is gone.
        ``upto``: only as far as the thread's CPU clock read that (``_upto``).

        A counter that overflows is reported to the service's ``on_overflow``
        with the mask of overflowed counters."""
        now = self.clock.thread_times(ctx.pid, ctx.tid)
        if now is None:
            return False
        if upto is not None and self.host_time:
            now = _upto(ctx.seen, now, upto)
        user = max(0, now[0] - ctx.seen[0])
        system = max(0, now[1] - ctx.seen[1])
        ctx.seen = (max(now[0], ctx.seen[0]), max(now[1], ctx.seen[1]))
        if ctx.running and (user or system):
            ctx.ran_ns += user + system
            profile = self._profile(ctx.pid)
            mask = ctx.cpu.run(user, system, profile.rates, profile.exl_share)
            trace.active.ran_thread(ctx, user + system, mask)
            hooks = self._hooks.get(ctx.service)
            if mask:
                self.touched.add(ctx.tid)
            if mask and hooks is not None and hooks.on_overflow is not None:
                hooks.on_overflow(ctx, mask)
        return True

    def rewind(self, ctx: ThreadContext, cpu_ns: int) -> None:
        """Move the last look at the thread back to ``cpu_ns`` on its CPU
        clock (from the thread itself: a set-up it made before the daemon
        heard of it, libperfctr's vperfctr that counted its TSC alone), so
        that the time since counts.  The caller has checked that nothing of
        the context has counted yet; the clock is the host's, or the stamp
        means nothing.  Not before 0, nor past the last look."""
        total = ctx.seen[0] + ctx.seen[1]
        if not self.host_time or cpu_ns >= total:
            return
        cpu_ns = max(0, cpu_ns)
        user = ctx.seen[0] * cpu_ns // total
        ctx.seen = (user, cpu_ns - user)

    def catch_up_within(self, ctx: ThreadContext) -> bool:
        """Catch up, where no interrupting overflow can fall in the time
        since the last catch-up (it is under the headroom at the fullest
        rate); else pass that time over uncounted.  For a restart's own call
        (``_upto``): a period shorter than the call's way in would otherwise
        overflow again inside every restart, and the program would never
        get back to its own code (perfctr's examples/signal, ireset -25).
        False if the thread is gone."""
        now = self.clock.thread_times(ctx.pid, ctx.tid)
        if now is None:
            return False
        new = now[0] + now[1] - ctx.seen[0] - ctx.seen[1]
        headroom = ctx.cpu.headroom_ns(self._profile(ctx.pid).rates) if ctx.running else None
        if headroom is not None and new >= headroom:
            ctx.ran_ns += max(0, new)
            ctx.seen = (max(now[0], ctx.seen[0]), max(now[1], ctx.seen[1]))
            return True
        return self.catch_up(ctx)

    def set_running(self, ctx: ThreadContext, running: bool) -> None:
        """Start or stop counting the thread's time; time up to now is
        counted in the old state."""
        self.catch_up(ctx)
        ctx.running = running
        if running:
            ctx.due_version = -1  # its wait was worked out while it did not count: look at once
            self._unscheduled[ctx] = None

    def interrupting(self, now: int | None = None) -> list[ThreadContext]:
        """Contexts with a counter whose overflow interrupts that are due a
        look at ``now``: the service catches these up (``tick``) so their
        signals are not late.  A context far from any overflow waits out its
        headroom (a thread runs at most one CPU ns per wall ns), so counters
        bound with interrupts cost no /proc reads until an overflow can come."""
        now = time.monotonic_ns() if now is None else now
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, ctx = heapq.heappop(heap)
            self._unscheduled[ctx] = None  # due: waits there until looked at (``_schedule``)
        found = []
        for ctx in list(self._unscheduled):
            due = self._due(ctx) if self._live(ctx) else None
            if due is not None and due <= now:
                found.append(ctx)
            else:
                del self._unscheduled[ctx]  # nothing due, or its entry in the heap stands
        return found

    def next_due(self) -> int | None:
        """When the soonest interrupting context needs a look (None: none does)."""
        soonest = None
        for ctx in list(self._unscheduled):
            due = self._due(ctx) if self._live(ctx) else None
            if due is None:
                del self._unscheduled[ctx]
            elif soonest is None or due < soonest:
                soonest = due
        heap = self._heap
        while heap:
            due, _, ctx = heap[0]
            if self._entry_stands(due, ctx):
                return due if soonest is None else min(due, soonest)
            heapq.heappop(heap)
        return soonest

    @staticmethod
    def _due(ctx: ThreadContext) -> int | None:
        if not (ctx.running and ctx.cpu.interrupts):
            return None
        return ctx.due if ctx.due_version == ctx.cpu.version else 0

    def _live(self, ctx: ThreadContext) -> bool:
        return self._books.by_tid.get(ctx.tid, {}).get(ctx.service) is ctx

    def _entry_stands(self, due: int, ctx: ThreadContext) -> bool:
        return ctx.due == due and ctx.due_version == ctx.cpu.version and self._live(ctx) and self._due(ctx) is not None

    def tick(self, ctx: ThreadContext, now: int | None = None) -> None:
        """The tick's look at an interrupting context: catch it up, and say
        when it next needs one: when its nearest overflow could come."""
        total = self._process_cpu_ns(ctx.pid) if self._process_cpu_ns is not None else None
        if total is None or total != ctx.process_looked:
            # Read before the thread's own time: a run in between shows at the next look.
            ctx.process_looked = -1 if total is None else total
            self.catch_up(ctx)
        self._schedule(ctx, now)

    def left_ns(self, ctx: ThreadContext) -> int | None:
        """Asked by the context's own thread, just caught up (its thread is
        blocked in the call, so the host's account of its CPU time is exact):
        the CPU ns before its nearest overflow could come, for its library to
        arm a timer on (docs/overflow.md); None when none can, or one is
        pending, or the clock is not the host's.  From then on the tick's
        look waits ``TIMED_GRACE_NS`` past that instant: it is the fallback."""
        if not self.host_time:
            return None
        ctx.timed = True
        ctx.idle_wait = 0
        return self._schedule(ctx) or None

    def _schedule(self, ctx: ThreadContext, now: int | None = None) -> int | None:
        headroom = ctx.cpu.headroom_ns(self._profile(ctx.pid).rates) if ctx.running else None
        ran = sum(ctx.seen)
        at = time.monotonic_ns() if now is None else now
        if ran != ctx.looked:
            ctx.still_since = at
        if headroom is None:
            wait = 1 << 62
        elif (
            headroom
            and ran == ctx.looked
            and at - ctx.still_since >= IDLE_NS
            and self._alarm(ctx, headroom)
        ):
            # Not run since the last look: its thread's CPU clock rings when
            # it has run as much as the overflow needs, and the wall clock's
            # look is a fallback.  Where only its process's clock can be
            # timed (the thread's own time is part of it), only for a thread
            # that times itself: that alarm was seen to ring 55 ms of CPU late
            # on a loaded 2-CPU VM, and the overflows of a thread the daemon
            # alone looks at would be found that late (docs/overflow.md).
            ctx.idle_wait = 0
            wait = ALARMED_WAIT_NS
        elif ctx.timed and headroom and ran == ctx.looked:
            # Not run since the last look: its own timer will see to it when it does.
            ctx.idle_wait = min(max(2 * ctx.idle_wait, headroom + TIMED_GRACE_NS), TIMED_IDLE_MAX_NS)
            wait = max(ctx.idle_wait, headroom + TIMED_GRACE_NS)
        else:
            ctx.idle_wait = 0
            wait = max(headroom + (TIMED_GRACE_NS if ctx.timed and headroom else 0), MIN_WAIT_NS)
        ctx.looked = ran
        ctx.due = at + wait
        if ctx.idle_wait:
            ctx.due += -ctx.due % TIMED_IDLE_GRID_NS
        ctx.due_version = ctx.cpu.version
        self._unscheduled.pop(ctx, None)
        if headroom is not None:
            heap = self._heap
            if len(heap) > 64 and len(heap) > 4 * len(self._books.by_tid):
                # Void entries pile up when contexts are looked at before they are due: sift them out.
                standing = {entry[2]: entry for entry in heap if self._entry_stands(entry[0], entry[2])}
                heap[:] = standing.values()
                heapq.heapify(heap)
            heapq.heappush(heap, (ctx.due, next(self._entries), ctx))
        return headroom

    def _alarm(self, ctx: ThreadContext, headroom: int) -> bool:
        """Arm the alarm of ``ctx``'s thread ``headroom`` of its CPU time
        ahead; or, for a thread that times itself, that of its process at
        its CPU clock of the last look plus ``headroom`` (or sooner, for
        another of its contexts)."""
        alarms = self.alarms
        if alarms is None:
            return False
        if alarms.precise and alarms.arm_thread(ctx.pid, ctx.tid, ctx.start, headroom):
            self._alarmed.setdefault(ctx.pid, (-1, set()))[1].add(ctx)
            return True
        # Past the thread events' caps, a self-timed thread's process clock.
        if not ctx.timed or ctx.process_looked < 0:
            return False
        at = ctx.process_looked + headroom
        armed = self._alarmed.get(ctx.pid)
        if armed is not None and 0 <= armed[0] <= at:  # a process alarm (-1: threads' alone)
            armed[1].add(ctx)
            return True
        if not alarms.arm(ctx.pid, at):
            return False
        self._alarmed[ctx.pid] = (at, {ctx, *(armed[1] if armed is not None else ())})
        return True

    def alarmed(self, pids: Iterable[int]) -> int:
        """The alarms of ``pids`` rang: their contexts are due a look now.
        Returns how many."""
        woken = 0
        for pid in pids:
            armed = self._alarmed.pop(pid, None)
            for ctx in armed[1] if armed is not None else ():
                if self._live(ctx) and ctx.due_version == ctx.cpu.version:
                    ctx.due = 0
                    self._unscheduled[ctx] = None
                    woken += 1
        return woken

    def alarm_wanted(self, pid: int) -> bool:
        """Whether an alarm of ``pid`` still has a context waiting on it."""
        armed = self._alarmed.get(pid)
        if armed is None:
            return False
        armed[1].intersection_update([ctx for ctx in armed[1] if self._live(ctx)])
        if not armed[1]:
            del self._alarmed[pid]
        return bool(armed[1])

    # -- the host's events -------------------------------------------------------

    def apply(self, events: Iterable[ThreadEvent]) -> int:
        """Follow threads through what the host reported, in order; returns
        how many contexts were made or ended."""
        changed = 0
        for event in events:
            if isinstance(event, ThreadCreated):
                # The clock's word on an earlier thread of the tid is not this one's.
                self.clock.thread_born(event.tid, event.at_ns)
                changed += self._created(event)
            elif isinstance(event, ThreadExited):
                for ctx in list(self._books.by_tid.get(event.tid, {}).values()):
                    if ctx.pid == event.pid and not self._still_runs(ctx):
                        # Its last run counts: the clock may still know it (the
                        # kernel's exit accounting), though /proc has let it go.
                        self.catch_up(ctx)
                        self._end(ctx)
                        changed += 1
            elif isinstance(event, ProcessExited):
                for ctx in self._of_process(event.pid):
                    if self._still_runs(ctx):
                        continue
                    self.catch_up(ctx)  # as for one thread: its last run counts
                    self._end(ctx)
                    changed += 1
            else:
                changed += self._execed(event.pid, event.at_ns)
        return changed

    def _still_runs(self, ctx: ThreadContext) -> bool:
        """Whether the thread ``ctx`` was set up on still runs, not in its
        exit: an exit reported late (behind other users' fork storms) was a
        predecessor's under the same pid or tid, taken again meanwhile (a
        busy machine wraps pid_max in minutes)."""
        return self._running_start is not None and self._running_start(ctx.pid, ctx.tid) == ctx.start

    def _created(self, event: ThreadCreated) -> int:
        """Each service whose context on the creating thread inherits gives
        the new thread a copy.  When the creator is unknown, the process's
        latest inheriting context of the service stands for it (a program
        binds with inheritance and then creates its threads)."""
        made = 0
        creators: dict[str, tuple[ThreadContext, Any]] = {}
        known = self._books.by_tid.get(event.parent_tid, {}) if event.parent_tid else {}
        candidates = [c for c in known.values() if c.pid == event.pid] or sorted(
            self._of_process(event.pid), key=lambda c: c.serial
        )
        for ctx in candidates:
            hooks = self._hooks.get(ctx.service)
            if hooks is None or hooks.inherit is None or ctx.tid == event.tid:
                continue
            data = hooks.inherit(ctx)
            if data is not None:
                creators[ctx.service] = (ctx, data)
        for service, (ctx, data) in creators.items():
            try:
                new = self.attach(service, event.pid, event.tid, ctx.owner, data)
            except (LookupError, CountersLimit):
                continue  # the thread is gone already, or its owner has all they may
            made += 1
            hooks = self._hooks.get(service)
            if hooks is not None and hooks.on_inherited is not None:
                hooks.on_inherited(new)
        return made

    def _execed(self, pid: int, at_ns: int = 0) -> int:
        """exec(2) leaves one thread, with the process's pid as its tid
        (the others' exits are reported on their own).  A context set up
        after the exec (``at_ns``) is the new image's own: the report came
        late, behind a daemon that waited for a CPU, and the program had
        already opened its counters (PAPI's perfctr control has CLOEXEC)."""
        ended = 0
        for ctx in self._of_process(pid):
            if at_ns and ctx.attached_ns > at_ns:
                continue
            hooks = self._hooks.get(ctx.service)
            keep = hooks is not None and hooks.on_exec is not None and hooks.on_exec(ctx)
            if keep:
                self.touched.add(ctx.tid)  # the service may have changed it (libcpc notes the exec)
            else:
                self._end(ctx)
                ended += 1
        return ended

    # -- bookkeeping -------------------------------------------------------------

    def _of_process(self, pid: int) -> list[ThreadContext]:
        return [
            ctx for tid in list(self._books.by_pid.get(pid, ())) for ctx in self._books.by_tid.get(tid, {}).values()
            if ctx.pid == pid
        ]

    def _add(self, ctx: ThreadContext) -> None:
        self.touched.add(ctx.tid)
        self._unscheduled[ctx] = None  # never looked at: due at once
        ctx.cpu.on_change = lambda: self._unscheduled.__setitem__(ctx, None)
        self._books.by_tid.setdefault(ctx.tid, {})[ctx.service] = ctx
        new = ctx.pid not in self._books.by_pid
        self._books.by_pid.setdefault(ctx.pid, set()).add(ctx.tid)
        # The books are whole before the hook runs: should it fail, _drop still balances them.
        self._books.per_owner[ctx.owner] = self._books.per_owner.get(ctx.owner, 0) + 1
        if new and self.on_processes_changed is not None:
            self.on_processes_changed()

    def _end(self, ctx: ThreadContext) -> None:
        hooks = self._hooks.get(ctx.service)
        if hooks is not None and hooks.on_exit is not None:
            hooks.on_exit(ctx)
        self._drop(ctx)

    def _drop(self, ctx: ThreadContext) -> None:
        per_service = self._books.by_tid.get(ctx.tid)
        if per_service is None or per_service.get(ctx.service) is not ctx:
            return
        del per_service[ctx.service]
        self._unscheduled.pop(ctx, None)
        ctx.cpu.on_change = None
        trace.active.detached(ctx)
        self.touched.add(ctx.tid)
        if not per_service:
            del self._books.by_tid[ctx.tid]
            self.clock.forget_thread(ctx.tid)  # nothing counts this thread any more
        if not any(other.pid == ctx.pid for other in per_service.values()):
            tids = self._books.by_pid.get(ctx.pid)
            if tids is not None:
                tids.discard(ctx.tid)
                if not tids:
                    del self._books.by_pid[ctx.pid]
                    if self.on_processes_changed is not None:
                        self.on_processes_changed()
        left = self._books.per_owner[ctx.owner] - 1
        if left:
            self._books.per_owner[ctx.owner] = left
        else:
            del self._books.per_owner[ctx.owner]


def _upto(seen: CpuTimes, now: CpuTimes, cpu_ns: int) -> CpuTimes:
    """The times at ``cpu_ns`` on the thread's CPU clock, between ``seen``
    and ``now``: a thread restarting its own frozen counters tells its clock
    as it made the call, as a real restart takes effect inside the call,
    while the daemon looks once the thread has blocked in it, a round trip
    of the thread's CPU time later (tens of us on a VM whose idle CPUs
    halt).  The time is the thread's own, so a false one moves nothing but
    within the call: before ``seen`` it is ``seen``, past ``now`` it is
    ``now``.  The part of the call is divided as its whole is."""
    new = now[0] + now[1] - seen[0] - seen[1]
    upto = cpu_ns - seen[0] - seen[1]
    if new <= 0 or upto >= new:
        return now
    if upto <= 0:
        return seen
    user = max(0, now[0] - seen[0]) * upto // new
    return seen[0] + user, seen[1] + upto - user
