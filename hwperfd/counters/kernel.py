"""The IRIX kernel's counter virtualization (r10k_counters(5), Operation Modes).

User mode: each process has its own control block, saved and restored across
context switches, so any number of processes share the two hardware
counters.  A process's own counters may count its kernel time too (K, for
root).  System mode: root counting in kernel mode, on every CPU at once,
one block per CPU summed into a global block when read; only syssgi's
HWPERF_ENSYSCNTRS takes it (IRIX 6.5's PIOCENEVCTRS always enables the
process's own counters, HWPERF_PROC in prioctl.c's piocenevctrsex, whatever
the page's "either in user mode or system mode" suggests).  System mode
outranks user mode; taking it displaces user-mode processes, whose generation
number is bumped so their readers know the counts are no longer to be trusted.

Everything is synchronous and takes CPU time from a ``TimeSource``, so the
model runs the same under the host's real clock and under a manual clock.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from hwperfd.counters.block import ControlBlock
from hwperfd.counters.dues import DueTimes
from hwperfd.counters.errors import CounterError, CountersBusy, InvalidRequest, NotInUse, NotPermitted, NoSuchProcess
from hwperfd.counters.request import SLOTS, CounterRequest
from hwperfd.counters.snapshot import Snapshot, rates
from hwperfd.counters.threads import CpuAlarm
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.trace import recorder as trace

CpuTimes = tuple[int, int]  # cumulative (user_ns, system_ns)
SYSTEM_MODE_SERVICE = "irix-system-mode"  # the name IRIX system mode reserves the hardware under


class TimeSource(Protocol):
    def process_times(self, pid: int) -> CpuTimes | None: ...

    def thread_times(self, pid: int, tid: int) -> CpuTimes | None: ...

    def cpu_times(self, cpu: int) -> CpuTimes: ...

    def resume_line(self, pid: int, seen: CpuTimes) -> None:
        """Counts of ``pid`` put back from a former daemon rest on ``seen``:
        its times must not read below them in either mode."""
        ...


class Task(Protocol):
    """What the kernel needs to know of a process (host ProcessInfo fits).

    Optional, read with ``getattr``: ``start`` (its start time; with the pid,
    the process's identity), ``euid``/``suid``/``gid``/``egid``/``sgid`` and
    ``dumpable`` (the credentials the kernel's ptrace-read rule looks at);
    ``thread_of``: for a thread other than its process's main one, that
    process (its counters are then the thread's own: see ``enable``).
    Read-only members, so that frozen records and lazy properties fit too.
    """

    @property
    def pid(self) -> int: ...
    @property
    def uid(self) -> int: ...
    @property
    def pgid(self) -> int: ...
    @property
    def processor(self) -> int: ...


INT_MAX = 2**31 - 1  # generations travel as the ioctl's int return value
# Profiling ticks come on one of Linux's real-time signals (glibc's SIGRTMIN is
# 34 at the least): no program's standard signal is ever sent for them.
MIN_TICK_SIGNAL, MAX_TICK_SIGNAL = 34, 64

#: How many folded descendants a process lists one by one (perfex -mp);
#: beyond that their counts still add up, under one "others" entry.
MAX_DESCENDANTS = 1024


def start_of(target: object) -> int:
    """The target's start time, 0 when unknown."""
    return int(getattr(target, "start", 0) or 0)


def ptrace_readable(uid: int, gid: int, target: object) -> bool:
    """The kernel's PTRACE_MODE_READ rule for an unprivileged caller (what
    /proc/<pid>/io asks): every uid and gid of the target equals the caller's,
    and the target is dumpable (a setuid or setgid exec makes it not)."""
    tuid: int = target.uid  # type: ignore[attr-defined]
    uids = (tuid, getattr(target, "euid", tuid), getattr(target, "suid", tuid))
    tgid = getattr(target, "gid", gid)
    gids = (tgid, getattr(target, "egid", tgid), getattr(target, "sgid", tgid))
    return all(u == uid for u in uids) and all(g == gid for g in gids) and bool(getattr(target, "dumpable", True))


@dataclass(frozen=True)
class Caller:
    pid: int
    uid: int
    gid: int
    pgid: int
    start: int = 0  # with pid, who the caller is (0: not read); an overflow signal's target needs it

    @property
    def root(self) -> bool:
        return self.uid == 0


@dataclass(frozen=True)
class Restore:
    """Saved counters to continue from: PIOCENEVCTRSEX's hwperf_profevctraux_t,
    which IRIX's checkpoint/restart filled from PIOCGETEVCTRS."""

    generation: int  # 0: a new generation, as PIOCENEVCTRS
    counts: tuple[int, ...]

    @property
    def empty(self) -> bool:
        return not self.generation and not any(self.counts)

    def validate(self, request: CounterRequest) -> None:
        if not 0 <= self.generation <= INT_MAX:
            raise InvalidRequest(f"generation {self.generation} is outside 0..{INT_MAX}")
        if len(self.counts) != SLOTS:
            raise InvalidRequest("saved counts have 32 slots")


SIGNAL_TICK_NS = 10_000_000  # the IRIX clock tick
# A process's start is known to a clock tick (stat's starttime) and a fork's
# time converted to the same clock to a few microseconds: a start past a
# record's ``born_by`` by more than this is another process's.
START_SLACK_NS = 20_000_000
MIN_WAIT_NS = 100_000  # the least wait between two looks at one signalling process
# A signalling process waiting on its CPU clock's alarm is looked at by the wall
# clock only this often besides, should the alarm never ring.
ALARMED_WAIT_NS = 60_000_000_000
# Not run over looks this far apart: idle, and its alarm is armed.
IDLE_NS = 50_000_000
# A process whose library times its own overflows (overflow_left) is looked
# at by the tick this long past the instant it was told: the tick is the
# fallback, for a timer that could not ring.
TIMED_GRACE_NS = 1_000_000
# And, while it does not run at all, each look that finds it idle doubles the
# wait up to this: its timer sees to it when it runs again (an idle timed
# process costs a look every 10 s; an overflow its timer missed comes late,
# never lost), as for libperfctr's and libcpc's timed threads.
TIMED_IDLE_MAX_NS = 10_000_000_000


class State(enum.Enum):
    ENABLED = "enabled"
    RELEASED = "released"
    LOST = "lost"  # displaced by system mode; counts frozen until re-enabled


@dataclass(slots=True)
class _Credit:
    """Children's time a record counted from Linux's totals (credit_children)
    that no fold has matched yet, per mode, with the counts it added for it."""

    user_ns: int
    system_ns: int
    user_counts: list[int]
    system_counts: list[int]

    def take(self, user_ns: int, system_ns: int) -> tuple[CpuTimes, list[int]]:
        """Match up to (user_ns, system_ns) of a fold against this credit:
        the time matched, and the counts the credit had added for it."""
        matched = (min(user_ns, self.user_ns), min(system_ns, self.system_ns))
        counts = [0] * len(self.user_counts)
        for held, counted, part in (
            (self.user_ns, self.user_counts, matched[0]),
            (self.system_ns, self.system_counts, matched[1]),
        ):
            if not part:
                continue
            for i, c in enumerate(counted):
                share = c * part // held
                counted[i] -= share
                counts[i] += share
        self.user_ns -= matched[0]
        self.system_ns -= matched[1]
        return matched, counts

    @property
    def spent(self) -> bool:
        return not (self.user_ns or self.system_ns)


@dataclass(slots=True)
class _ProcessRecord:
    pid: int
    block: ControlBlock
    generation: int
    state: State
    seen: CpuTimes
    cpu: int
    # Children PIOCSAVECCNTRS named: a frozenset, replaced on change, so the
    # many processes that name none share the one empty set.
    save_children: frozenset[int] = frozenset()
    start: int = 0  # with pid, the process's identity (0: not known)
    # While ``start`` is not known: the latest start (ns since boot, as
    # ``start``) the process can have, its fork's time; 0 if not known either.
    born_by: int = 0
    owner: tuple[int, int] | None = None  # (uid, gid) of who set it up; None: root
    # CPU time of waited-for children: Linux's total when counting began,
    # and what the children folded in since brought (see credit_children).
    children_base: CpuTimes = (0, 0)
    children_ns: CpuTimes = (0, 0)
    lossy: bool = False  # counted while process events were lost: reconcile with Linux's totals
    credit: _Credit | None = None  # children's time counted from Linux's totals, not matched by a fold yet
    exited: bool = False
    parent: int = 0
    comm: str = ""
    folded: bool = False  # counts already added to the parent
    descendants: list[tuple[int, str, tuple[int, ...]]] = field(default_factory=list)
    # Threads other than the main one that ended while counting: (tid, user_ns,
    # system_ns) of each, for perfex -mp's per-thread blocks.
    threads: list[tuple[int, int, int]] = field(default_factory=list)
    # HWPERF_PROFENABLE: each overflow is a PC tick the process's own library
    # records on this signal, instead of hwp_ovflw_sig (0: not profiling).
    profiling: int = 0
    suspended: bool = False  # HWPERF_PROF_CTR_SUSP: counting stopped until HWPERF_PROF_CTR_CONT
    # The call that set these counters up as they stand ("enable", "profile",
    # "control"; "" for none) and its caller's pid (the thread's, as FUSE
    # names it): a call the old daemon wrote and died before answering is
    # repeated on the new one, which answers it as the old would have
    # (``_repeated``).
    made_by: str = ""
    made_by_pid: int = 0

    def own_counts(self) -> tuple[int, ...]:
        """Counts less everything folded in from descendants (each listed with its own)."""
        folded = [sum(column) for column in zip(*(counts for _, _, counts in self.descendants))] or [0] * 32
        return tuple(c - f for c, f in zip(self.block.counts, folded))


@dataclass
class _SystemRecord:
    request: CounterRequest
    generation: int
    per_cpu: list[ControlBlock]
    seen: list[CpuTimes]
    signal_to: int | None = None  # overflow signals' target: the syssgi caller
    signal_start: int = 0  # and its start (0: not known; then no signal goes)


@dataclass(frozen=True)
class Signal:
    """Overflow signals owed to one process, or one thread of it: who it is
    (pid and start; tid and its start), who armed them (``owner`` (uid,
    gid), None for root), and how many."""

    pid: int
    start: int
    owner: tuple[int, int] | None
    signal: int
    count: int
    # A signal for one thread (per-thread contexts): its tid and start time.
    tid: int = 0
    thread_start: int = 0
    # A profiling tick: only worth sending while the process catches the
    # signal (its library's handler); after an exec it would kill it.
    caught_only: bool = False


@dataclass(frozen=True)
class CounterView:
    """A consistent snapshot of one context's counters, for readers."""

    state: State
    generation: int
    request: CounterRequest
    counts: tuple[int, ...]
    active_ns: tuple[int, ...]
    enabled_ns: int
    profile: str
    profiling: bool = False  # HWPERF_PROFENABLE: overflows are PC ticks
    suspended: bool = False  # HWPERF_PROF_CTR_SUSP: not counting until CONT


def may_access(caller: Caller, target: Task) -> bool:
    """r10k_counters(5) THE COUNTERS: another process's counters are reachable
    when it "belongs to the same process group or is root"; hwperfd also
    requires what Linux asks to read /proc/<pid>/io (``ptrace_readable``), so a
    shared process group never crosses users, nor reaches a setuid program."""
    if caller.root or caller.pid == target.pid:
        return True
    return ptrace_readable(caller.uid, caller.gid, target) and caller.pgid == target.pgid


def holder_of(caller: Caller) -> tuple[int, int]:
    """Who holds system mode: the syssgi caller, pid and start."""
    return caller.pid, caller.start


def owner_of(caller: Caller) -> tuple[int, int] | None:
    return None if caller.root else (caller.uid, caller.gid)


class CounterKernel:
    def __init__(
        self,
        cpus: CpuSet,
        time: TimeSource,
        *,
        signal: Callable[[Signal], None] = lambda owed: None,
        gone: Callable[[int], None] = lambda pid: None,
        cancel: Callable[[int, int, int], None] = lambda pid, sig, tid: None,
    ) -> None:
        self.cpus = cpus
        self.time = time
        self._signal = signal
        self._gone = gone  # a process's state went: whatever it was owed goes too
        # (pid, signal, tid): the counters of the process (tid 0) or of its thread no longer raise the
        # signal; what is owed of it goes now, or not at all.
        self._cancel = cancel
        self._procs: dict[int, _ProcessRecord] = {}
        # Records kept under a thread's tid (not its process's main one): the
        # thread's process, whose clock has the thread's own CPU time.
        self._thread_of: dict[int, int] = {}
        self.thread_version = 0  # moves whenever a thread's own record comes or goes
        # Pids given a request that can raise overflow signals: signalling()
        # looks at those of these that are due, not at every record (10 000
        # processes may be counting, and a thousand may be armed and idle).
        # Each maps to when it next needs a look (monotonic ns; 0: now).
        self._armed = DueTimes()
        # Pids whose library times their overflows (overflow_left): [the CPU
        # time at the last look, the idle wait] (kept while they are armed).
        self._timed: dict[int, list[int]] = {}
        # Alarms on processes' CPU clocks (the host's, ``threads.CpuAlarm``):
        # a signalling process that has not run since the last look waits on
        # one, not on the wall clock; pid -> the CPU ns armed.  And each
        # armed pid's CPU ns at the last look.
        self.alarms: CpuAlarm | None = None
        self._alarm_at: dict[int, int] = {}
        self._looked: dict[int, tuple[int, int]] = {}  # pid -> (CPU ns at a look, since when unchanged)
        self.host_cpus = os.cpu_count() or 1  # a process's CPU time runs this much faster than the wall at most
        self._profiles: dict[int, WorkloadProfile] = {}
        self._system: _SystemRecord | None = None
        # Records a restart put back that no call of the process that set
        # them up has reached since: its first may repeat the call the old
        # daemon wrote but did not answer (``_repeated``).  And system mode's.
        self._put_back: set[int] = set()
        self._system_put_back = False
        # The clock is the host's (real): a process's library may time its
        # own overflows (overflow_left); on the manual clock they follow the advance.
        self.host_time = False
        self._system_generation = 0
        self.default_profile = WorkloadProfile()

    # -- user mode through /proc ------------------------------------------

    def enable(
        self, caller: Caller, target: Task, request: CounterRequest, restore: Restore | None = None
    ) -> int:
        """PIOCENEVCTRS: acquire the counters for ``target``; returns the generation.

        Always the process's own counters (IRIX 6.5's piocenevctrsex passes
        HWPERF_PROC): kernel mode counts its own kernel time and needs only
        root.  A ``target`` that is a thread other than its process's main
        one (``thread_of``) counts that thread's CPU time alone, as each
        member of an IRIX share group (sproc(2)) is a process with counters
        of its own.  PIOCENEVCTRSEX passes ``restore``: counting starts from those
        counts and, if its generation is not 0, under that generation.
        """
        request.validate(self.cpus, root=caller.root)
        if restore is not None:
            restore.validate(request)
        self._check_access(caller, target)
        repeated = self._repeated(caller, target, "enable", request)
        if repeated is not None:
            return repeated
        if self._system is not None:
            raise CountersBusy("the counters are in use in system mode")
        record, seen, generation = self._fresh_start(target)
        block = ControlBlock(request)
        if restore is not None and not restore.empty:
            if restore.generation:
                if record is not None and restore.generation <= record.generation:
                    # A generation names one set of counts; readers compare them.
                    raise InvalidRequest(
                        f"generation {restore.generation} is not above this process's last ({record.generation})"
                    )
                generation = restore.generation
            block.start_from(restore.counts)
        self._count(target, block, generation, seen, start_of(target), owner_of(caller), made=("enable", caller.pid))
        return generation

    def read(self, caller: Caller, target: Task) -> tuple[int, tuple[int, ...]]:
        """PIOCGETEVCTRS: the 64-bit virtual counters and the generation."""
        self._check_access(caller, target)
        record = self._record(target)
        if self._put_back:
            self._repeated(caller, target, "", None)
        self._catch_up(record)
        return record.generation, tuple(record.block.counts)

    def control(self, caller: Caller, target: Task) -> tuple[int, CounterRequest]:
        """PIOCGETEVCTRL: fails when the counters are not in use (PAPI relies on it):
        ESRCH if it never used them, EINVAL if they are released or lost."""
        self._check_access(caller, target)
        record = self._record(target)
        if self._put_back:
            self._repeated(caller, target, "", None)
        if record.state is not State.ENABLED:
            raise self._not_in_use(target.pid)
        return record.generation, record.block.request

    def set_control(self, caller: Caller, target: Task, request: CounterRequest) -> int:
        """PIOCSETEVCTRL: change events without releasing.

        IRIX 6.5's hwperf_change_control is hwperf_disable_counters then
        hwperf_enable_counters as the process's own (HWPERF_PROC), and each
        bumps the generation: enabled counters restart every slot at zero
        under a generation 2 higher, kernel mode counts the process's own
        kernel time (root only), and profiling and a suspension end.  On
        released counters the disable does nothing, so they count again 1
        higher (PAPI's IRIX substrate stops with PIOCRELEVCTRS and starts
        with PIOCSETEVCTRL).  ESRCH on a process that never used them
        (piocsetevctrl: no counter structure).  Unlike IRIX, whose disable
        came first, a refused request leaves the counters as they were.
        """
        request.validate(self.cpus, root=caller.root)
        self._check_access(caller, target)
        record = self._record(target)
        repeated = self._repeated(caller, target, "control", request)
        if repeated is not None:
            return repeated
        if self._restartable(record):
            return self._restart(record, target, request, caller.pid)
        if record.state is not State.ENABLED:
            raise self._not_in_use(target.pid)
        if record.generation > INT_MAX - 2:
            raise InvalidRequest(f"pid {target.pid} has used up its generations")
        self._catch_up(record)
        self._end_signals(record, request.signal)
        owner = record.owner if record.owner is None else owner_of(caller)
        generation = record.generation + 2
        self._count(
            target, ControlBlock(request), generation, record.seen, record.start, owner, record.comm,
            made=("control", caller.pid),
        )  # fmt: skip
        return generation

    def release(self, caller: Caller, target: Task) -> None:
        """PIOCRELEVCTRS: stop counting; the counts stay readable while the process lives.

        Releasing released counters succeeds and changes nothing (PAPI_stop
        may run twice; IRIX's disable returned 0 when nothing was enabled).
        """
        self._check_access(caller, target)
        record = self._current(target)
        if self._put_back:
            self._repeated(caller, target, "", None)
        if record is not None and self._restartable(record):
            return
        if record is None or record.state is State.RELEASED:
            raise self._not_in_use(target.pid)
        self._catch_up(record)
        self._end_signals(record)
        record.state = State.RELEASED
        record.profiling, record.suspended = 0, False
        trace.active.released(target.pid, "released")

    def lose(self, pid: int) -> int:
        """Take a process's counters away, as system mode would (for tests of
        clients that must notice); returns the new generation."""
        record = self._procs.get(pid)
        if record is None or record.state is not State.ENABLED:
            raise self._not_in_use(pid)
        self._displace(record)
        return record.generation

    def save_child_counts(self, caller: Caller, parent: Task, child_pid: int) -> None:
        """PIOCSAVECCNTRS: add ``child_pid``'s counts to ``parent`` when it exits.

        The caller checks that ``child_pid`` is ``parent``'s child: the set
        holds only children, so it is as bounded as they are.
        """
        self._check_access(caller, parent)
        self._current(parent)
        record = self._parent_record(parent.pid, start_of(parent))
        record.save_children = record.save_children | {child_pid}
        trace.active.save_children(parent.pid, child_pid)

    # -- event-counter profiling (syssgi HWPERF_PROFENABLE) --------------------

    def enable_profiling(self, caller: Caller, target: Task, request: CounterRequest, tick_signal: int) -> int:
        """HWPERF_PROFENABLE: acquire the caller's counters for profiling.

        IRIX's evc_profil enabled them as a process's own (HWPERF_PROC) with
        the profiling flag: at each threshold overflow the kernel recorded
        the user PC in the sprofil buffers and sent no signal.  Here the
        process's library records it, on ``tick_signal``.  The refusals are
        hwperf_enable_counters': EBUSY while system mode holds the counters
        or when the process already uses them; EINVAL for a bad request;
        EPERM for kernel mode without root.
        """
        request.validate(self.cpus, root=caller.root)
        if not MIN_TICK_SIGNAL <= tick_signal <= MAX_TICK_SIGNAL:
            raise InvalidRequest(f"profiling ticks come on a real-time signal ({MIN_TICK_SIGNAL}..{MAX_TICK_SIGNAL})")
        self._check_access(caller, target)
        repeated = self._repeated(caller, target, "profile", request, tick_signal)
        if repeated is not None:
            return repeated
        if self._system is not None:
            raise CountersBusy("the counters are in use in system mode")
        record, seen, generation = self._fresh_start(target)
        comm = record.comm if record else ""
        block = ControlBlock(request)
        self._count(
            target, block, generation, seen, start_of(target), owner_of(caller), comm, tick_signal,
            made=("profile", caller.pid),
        )  # fmt: skip
        return generation

    def disable_profiling(self, caller: Caller, target: Task) -> None:
        """HWPERF_PROFENABLE with no region to profile: IRIX's evc_profil then
        disabled the process's counters, whatever enabled them, and returned 0."""
        self._check_access(caller, target)
        record = self._current(target)
        if record is None or record.state is not State.ENABLED:
            return
        self._catch_up(record)
        self._end_signals(record)  # no profiling tick comes after evc_profil has stopped
        record.state = State.RELEASED
        record.profiling, record.suspended = 0, False

    def suspend(self, caller: Caller, target: Task, suspended: bool) -> None:
        """HWPERF_PROF_CTR_SUSP / _CONT: the caller's enabled counters stop
        counting, or go on; anything else is left alone (returns 0 either way).

        <sys/hwperfmacros.h>: "suspend counters for caller... until continue
        request".  The suspended counters stay acquired: their counts and
        controls can be read and another acquire is EBUSY.
        """
        self._check_access(caller, target)
        record = self._current(target)
        if record is None or record.state is not State.ENABLED or record.exited:
            return
        self._catch_up(record)
        record.suspended = suspended
        if not suspended:
            self._armed.unpark(record.pid)  # a suspended process waits out of the tick's way

    def end_profiling(self, pid: int) -> bool:
        """exec(2): IRIX disabled counters set up for profiling (the buffers
        they fill went with the old image); True if some were."""
        record = self._procs.get(pid)
        if record is None or not record.profiling or record.state is not State.ENABLED:
            return False
        self._catch_up(record)
        record.state = State.RELEASED
        record.profiling, record.suspended = 0, False
        trace.active.released(pid, "exec ended profiling")
        return True

    def profiling_signal(self, pid: int) -> int:
        """The signal ``pid``'s profiling ticks come on (0: not profiling)."""
        record = self._procs.get(pid)
        return record.profiling if record is not None and record.state is State.ENABLED else 0

    def is_suspended(self, pid: int) -> bool:
        record = self._procs.get(pid)
        return record is not None and record.state is State.ENABLED and record.suspended

    def view(self, pid: int, start: int = 0) -> CounterView | None:
        record = self._procs.get(pid)
        if record is None or (start and record.start and record.start != start):
            return None
        self._catch_up(record)
        block = record.block
        return CounterView(
            record.state,
            record.generation,
            block.request,
            tuple(block.counts),
            tuple(block.active_ns),
            block.enabled_ns,
            self.profile(pid).name,
            profiling=bool(record.profiling) and record.state is State.ENABLED,
            suspended=record.suspended and record.state is State.ENABLED,
        )

    def snapshot(self, pid: int) -> Snapshot | None:
        """``pid``'s user-mode counters as a state page shows them (None:
        nothing kept for it); ``hwperfd.counters.snapshot`` says when a
        reader must ask the daemon instead."""
        record = self._procs.get(pid)
        if record is None:
            return None
        slots = rates(self.cpus[record.cpu], record.block, self.profile(pid))
        request = record.block.request
        fallback = (
            slots is None
            or record.state is not State.ENABLED
            or record.exited
            or record.lossy
            or bool(record.save_children)
            or bool(request.signal and any(request.thresholds))
            # Profiling ticks need the daemon to see each overflow; suspended
            # counters do not move with CPU time.
            or bool(record.profiling and any(request.thresholds))
            or record.suspended
        )
        counts = slots or tuple((count, 0, 0, 0, 0) for count in record.block.counts)
        return Snapshot(record.generation, record.seen, counts, fallback)

    # -- profiles ------------------------------------------------------------

    def profile(self, pid: int) -> WorkloadProfile:
        return self._profiles.get(pid, self.default_profile)

    def set_profile(self, pid: int, profile: WorkloadProfile) -> None:
        """Counting so far stays with the old profile; new time uses the new one."""
        record = self._procs.get(pid)
        if record is not None:
            self._catch_up(record)
        self._profiles[pid] = profile

    # -- process lifecycle ----------------------------------------------------

    def fork(self, parent_pid: int, child_pid: int, child_cpu: int = 0, child_start: int = 0, born_by: int = 0) -> None:
        """The child inherits the parent's control with zeroed counts (u-area copy).

        A record still held under the child's pid belongs to a process that is
        gone (the pid is new again): it goes first.
        """
        if child_pid != parent_pid and (child_pid in self._procs or child_pid in self._profiles):
            self.forget(child_pid)
        if parent_pid in self._profiles:
            self._profiles[child_pid] = self._profiles[parent_pid]
        parent = self._procs.get(parent_pid)
        if parent is None or parent.state is not State.ENABLED or parent.exited:
            return
        self._procs[child_pid] = _ProcessRecord(
            child_pid,
            ControlBlock(parent.block.request),
            parent.generation,
            State.ENABLED,
            (0, 0),
            child_cpu % len(self.cpus),
            start=child_start,
            born_by=0 if child_start else born_by,
            owner=parent.owner,
            parent=parent_pid,
            lossy=parent.lossy,
            # profil(2): profiling "remains on in child and parent both after a
            # fork"; the child's copy of the library records into its own buffers.
            profiling=parent.profiling,
            suspended=parent.suspended,
        )
        self._note_armed(child_pid, parent.block.request, parent.profiling)
        trace.active.forked(parent_pid, child_pid, True, parent.generation)

    def exit(
        self, pid: int, parent_pid: int, parent_waiting: bool, comm: str = "", final: CpuTimes | None = None
    ) -> None:
        """A process exited; it stays readable as a zombie until reaped.

        r10k_counters(5): "if the kernel sees that the parent is waiting for
        it it will add the child's 64-bit counters to those of the parent";
        PIOCSAVECCNTRS asks for the same without waiting.  ``final``: its
        last CPU time from the kernel's exit record, which names this very
        process (a time source asked by pid may by now see a later one).
        """
        record = self._procs.get(pid)
        if record is None or record.exited:
            return
        self._catch_up(record, final)
        record.exited, record.parent = True, parent_pid
        record.comm = comm or record.comm
        parent = self._procs.get(parent_pid)
        if parent_waiting or (parent is not None and pid in parent.save_children):
            self._fold(record)
        trace.active.exited(pid, parent_pid, record.folded)

    def reaped(self, pid: int, parent_alive: bool) -> None:
        """The zombie is gone: a parent that reaped it through wait(2) gets
        its counts if it has not already; then the state is freed."""
        record = self._procs.get(pid)
        if record is not None and record.exited and not record.folded and parent_alive:
            self._fold(record)
        self.forget(pid)

    def forget(self, pid: int) -> None:
        """Free the state of a process that is gone."""
        self._procs.pop(pid, None)
        self._put_back.discard(pid)
        if self._thread_of.pop(pid, None) is not None:
            self.thread_version += 1
        self._armed.discard(pid)  # signalling() runs only on the real clock's tick
        self._timed.pop(pid, None)
        self._profiles.pop(pid, None)
        self._gone(pid)

    def thread_gone(self, tid: int) -> bool:
        """Thread ``tid`` (not a process's main thread) ended: its own
        counters go with it, as an exited share-group member's do when
        nobody waits for it; True if it had some."""
        if tid not in self._thread_of:
            return False
        self.forget(tid)
        return True

    def thread_record(self, tid: int) -> int:
        """The process whose thread ``tid`` has counters of its own, else 0."""
        return self._thread_of.get(tid, 0)

    def thread_records(self, pid: int) -> list[int]:
        """The threads of process ``pid`` with counters of their own."""
        return [tid for tid, process in self._thread_of.items() if process == pid]

    def thread_processes(self) -> frozenset[int]:
        """The processes some of whose threads have counters of their own:
        their threads' ends must be seen."""
        return frozenset(self._thread_of.values())

    def revoke(self, target: Task) -> bool:
        """What a less privileged user set up on ``target`` goes when the
        process gains privilege (a setuid or setgid exec, a credential change),
        as Linux ends ptrace and /proc access then; True if something went."""
        record = self._procs.get(target.pid)
        if record is None or record.owner is None:
            return False
        if start_of(target) and record.start and record.start != start_of(target):
            self.forget(target.pid)
            return True
        if ptrace_readable(*record.owner, target):
            return False
        self.forget(target.pid)
        return True

    def identity(self, pid: int) -> tuple[int, tuple[int, int] | None] | None:
        """(start, owner) of the process the kernel holds state for at ``pid``."""
        record = self._procs.get(pid)
        return None if record is None else (record.start, record.owner)

    def _fold(self, child: _ProcessRecord) -> None:
        child.folded = True
        if not child.parent:  # its parent was never known: nobody to fold into
            return
        trace.active.folded(child.pid, child.parent, tuple(child.block.counts))
        parent = self._parent_record(child.parent)
        brought = (child.seen[0] + child.children_ns[0], child.seen[1] + child.children_ns[1])
        credited = [0] * SLOTS
        if parent.credit is not None:
            # Linux's totals may already have brought this child in (its end
            # was learnt late, after credit_children counted it): what the
            # credit counted for it is taken back, the child's own counts
            # stand instead, and the parent's counts never go backwards.
            matched, credited = parent.credit.take(*brought)
            brought = (brought[0] - matched[0], brought[1] - matched[1])
            if parent.credit.spent:
                parent.credit = None
            _add_unseen(parent.descendants, [-c for c in credited])
        before = list(parent.block.counts)
        parent.block.add(child.block)
        for i, taken in enumerate(credited):
            if taken:
                parent.block.counts[i] = max(before[i], parent.block.counts[i] - taken)
        for entry in [(child.pid, child.comm, child.own_counts()), *child.descendants]:
            _list_descendant(parent.descendants, entry)
        parent.children_ns = (parent.children_ns[0] + brought[0], parent.children_ns[1] + brought[1])
        parent.save_children = parent.save_children - {child.pid}

    def mark_lossy(self, pids: Iterable[int] | None = None) -> None:
        """Events were lost while these processes (all if None) counted."""
        records = self._procs.values() if pids is None else filter(None, map(self._procs.get, pids))
        for record in records:
            if record.state is State.ENABLED and not record.exited:
                record.lossy = True

    def is_lossy(self, pid: int) -> bool:
        record = self._procs.get(pid)
        return record is not None and record.lossy

    def credit_children(self, pid: int, waited_ns: CpuTimes) -> CpuTimes:
        """Counts of children whose end was lost: ``waited_ns`` is what Linux
        says the process's waited-for children used in all (cutime, cstime);
        what it says beyond the base and the children folded in is counted
        now, in the process's control and profile, under one descendant
        entry named "unseen".  Returns the time credited."""
        record = self._procs.get(pid)
        if record is None or record.state is not State.ENABLED or record.exited:
            return (0, 0)
        extra = tuple(
            max(0, now - base - folded)
            for now, base, folded in zip(waited_ns, record.children_base, record.children_ns)
        )
        if not any(extra):
            return (0, 0)
        self._catch_up(record)
        cpu, profile = self.cpus[record.cpu], self.profile(pid)
        gained = []
        for user_ns, system_ns in ((extra[0], 0), (0, extra[1])):
            before = list(record.block.counts)
            record.block.advance(cpu, user_ns, system_ns, profile)
            gained.append([a - b for a, b in zip(record.block.counts, before)])
        _add_unseen(record.descendants, [u + s for u, s in zip(*gained)])
        record.children_ns = (record.children_ns[0] + extra[0], record.children_ns[1] + extra[1])
        credit = record.credit or _Credit(0, 0, [0] * SLOTS, [0] * SLOTS)
        credit.user_ns += extra[0]
        credit.system_ns += extra[1]
        credit.user_counts = [a + b for a, b in zip(credit.user_counts, gained[0])]
        credit.system_counts = [a + b for a, b in zip(credit.system_counts, gained[1])]
        record.credit = credit
        return (extra[0], extra[1])

    def saving(self, pid: int) -> frozenset[int]:
        """The children PIOCSAVECCNTRS named on ``pid`` that have not exited yet."""
        record = self._procs.get(pid)
        return record.save_children if record else frozenset()

    def unsave(self, parent_pid: int, child_pid: int) -> None:
        """A named child exited with nothing to fold (it never counted): the
        name goes, so the set stays as small as the parent's living children."""
        record = self._procs.get(parent_pid)
        if record is not None:
            record.save_children = record.save_children - {child_pid}

    def thread_exited(self, pid: int, tid: int, times: CpuTimes) -> None:
        """A thread of a counting process ended after running ``times``.

        IRIX 6.5 kept counters per uthread and summed them for the process;
        here the process counts as one, and each thread's CPU time lets a
        reader (perfex -mp) share the counts out among its threads."""
        record = self._procs.get(pid)
        if record is None or record.exited or record.state is not State.ENABLED or tid == pid:
            return
        _list_thread(record.threads, (tid, times[0], times[1]))

    def threads(self, pid: int) -> list[tuple[int, int, int]]:
        """(tid, user_ns, system_ns) of the threads of ``pid`` that ended while
        it counted, then its main thread's (the rest of its CPU time); empty
        when no other thread was seen."""
        record = self._procs.get(pid)
        if record is None or not record.threads:
            return []
        user = record.seen[0] - sum(t[1] for t in record.threads)
        system = record.seen[1] - sum(t[2] for t in record.threads)
        return [*record.threads, (pid, max(0, user), max(0, system))]

    def descendants(self, pid: int) -> list[tuple[int, str, tuple[int, ...]]]:
        """Processes whose counts were folded into ``pid``, each with its own counts."""
        record = self._procs.get(pid)
        return list(record.descendants) if record else []

    def has_exited(self, pid: int) -> bool:
        record = self._procs.get(pid)
        return record is not None and record.exited

    def comm_of(self, pid: int) -> str:
        record = self._procs.get(pid)
        return record.comm if record else ""

    def note_comm(self, pid: int, comm: str) -> None:
        """Remember a process's name while it can still be read (for -mp reports)."""
        record = self._procs.get(pid)
        if record is not None:
            record.comm = comm

    def parent_of(self, pid: int) -> int:
        record = self._procs.get(pid)
        return record.parent if record else 0

    def is_known(self, pid: int) -> bool:
        """Anything kept for ``pid``: counters or a profile."""
        return pid in self._procs or pid in self._profiles

    def has_profile(self, pid: int) -> bool:
        return pid in self._profiles

    def is_counting(self, pid: int) -> bool:
        """Enabled and not exited: what its forks inherit."""
        record = self._procs.get(pid)
        return record is not None and record.state is State.ENABLED and not record.exited

    def counting(self) -> list[int]:
        return [r.pid for r in self._procs.values() if r.state is State.ENABLED and not r.exited]

    def is_tracked(self, pid: int) -> bool:
        return pid in self._procs

    def known(self) -> list[int]:
        """Every pid the kernel keeps anything for (counters or a profile)."""
        return list(set(self.tracked()) | set(self._profiles))

    def tracked(self) -> list[int]:
        """Pids with counter state."""
        return list(self._procs)

    # -- system mode (syssgi) -----------------------------------------------

    def enable_system(self, caller: Caller, request: CounterRequest) -> int:
        """HWPERF_ENSYSCNTRS: forcibly acquire the counters in system mode."""
        if not caller.root:
            raise NotPermitted("system mode needs root")
        request.validate(self.cpus, root=True)
        if not request.kernel_mode:
            raise InvalidRequest("system mode needs at least one event counted in kernel mode")
        system = self._system
        holder = None if system is None else (system.signal_to, system.signal_start)
        if self._system_put_back and holder == holder_of(caller):
            assert system is not None
            # As for a process's own counters (``_repeated``): the holder's
            # first call after a restart may repeat the one the old daemon
            # wrote and died before answering.
            self._system_put_back = False
            if system.request == request:
                return system.generation
        if system is not None:
            raise CountersBusy("the counters are already in use in system mode")
        generation = self._acquire_system(request)
        # r10k_counters(5): hwp_ovflw_sig is "what signal the user program would
        # like to receive": the program that made the syssgi call.
        assert self._system is not None
        self._system.signal_to, self._system.signal_start = holder_of(caller)
        return generation

    def read_system(self) -> tuple[int, tuple[int, ...]]:
        system = self._require_system()
        self._catch_up_system(system)
        # Per-CPU blocks are coalesced into the global one on every read.
        return system.generation, tuple(map(sum, zip(*(b.counts for b in system.per_cpu))))

    def read_cpu(self, cpu: int) -> tuple[int, tuple[int, ...]] | None:
        """HWPERF_GET_CPUCNTRS: None for an invalid cpuid (the call returns 0)."""
        system = self._system
        if system is None or not 0 <= cpu < len(self.cpus):
            return None
        self._catch_up_system(system)
        return system.generation, tuple(system.per_cpu[cpu].counts)

    def system_control(self) -> tuple[int, CounterRequest]:
        system = self._require_system()
        return system.generation, system.request

    def set_system_control(self, caller: Caller, request: CounterRequest) -> int:
        if not caller.root:
            raise NotPermitted("HWPERF_SET_SYSEVCTRL needs root")
        request.validate(self.cpus, root=True)
        system = self._require_system()
        if not request.kernel_mode:
            raise InvalidRequest("system mode needs at least one event counted in kernel mode")
        self._catch_up_system(system)
        if (system.signal_to, system.request.signal) != (caller.pid, request.signal):
            self._end_system_signal(system)
        for block in system.per_cpu:
            block.reprogram(request)
        system.request = request
        system.signal_to, system.signal_start = caller.pid, caller.start
        self._system_generation += 1
        system.generation = self._system_generation
        return system.generation

    def release_system(self, caller: Caller) -> None:
        if not caller.root:
            raise NotPermitted("HWPERF_RELSYSCNTRS needs root")
        self._release_system()

    @property
    def system_mode(self) -> bool:
        return self._system is not None

    # -- time ----------------------------------------------------------------

    def catch_up(self, pids: Iterable[int] | None = None) -> None:
        """Bring blocks up to date (overflow signals are raised on the way)."""
        for pid in list(self._procs) if pids is None else pids:
            record = self._procs.get(pid)
            if record is not None:
                self._catch_up(record)
        if self._system is not None:
            self._catch_up_system(self._system)

    def signalling(self, now: int | None = None) -> list[int]:
        """Pids whose counters may raise overflow signals: they need timely
        catch-up.  With ``now``, only those due a look by then (``tick``)."""
        pids = []
        for pid in self._armed if now is None else self._armed.ready(now):
            r = self._procs.get(pid)
            if r is not None and r.state is State.ENABLED and _arms_signals(r.block.request, r.profiling):
                if not r.suspended and (now is None or (self._armed.get(pid) or 0) <= now):
                    pids.append(pid)
            else:
                # Every way back to counting with signals (enable, set_control,
                # a restart, a fork) notes the pid again.
                self._armed.discard(pid)
                self._timed.pop(pid, None)
                self._looked.pop(pid, None)
        target = self.system_signal_target()
        if target is not None and target not in pids:
            pids.append(target)  # catch_up() brings system mode up to date too
        return pids

    def tick(self, pids: Iterable[int], now: int) -> None:
        """The clock's look at processes that signal: catch each up, and note
        when it next needs one - not before its nearest overflow could come
        (a process runs at most one CPU ns per wall ns on each of its threads,
        so the headroom is divided among the host's CPUs).  A process whose
        library times its overflows (``overflow_left``) and that has not run
        since the last look waits twice as long each time, up to
        ``TIMED_IDLE_MAX_NS``."""
        for pid in pids:
            record = self._procs.get(pid)
            if record is None:
                continue
            self._catch_up(record)
            if pid in self._armed:
                headroom = record.block.headroom_ns(self.cpus[record.cpu], self.profile(pid), bool(record.profiling))
                timed = self._timed.get(pid)
                ran = sum(record.seen)
                if headroom is None:
                    wait = 1 << 62
                elif (
                    (timed is not None or (self.alarms is not None and self.alarms.precise))
                    and headroom
                    and self._idle_since(pid, ran, now)
                    and self._alarm(pid, ran + headroom)
                ):
                    # Not run since the last look: its CPU clock rings when it
                    # has run as much as the overflow needs; the wall clock's
                    # look is a fallback.  (Where the host has only POSIX
                    # CPU-clock timers, only for a process timed by its
                    # library: one on another process can ring tens of ms of
                    # CPU late, docs/overflow.md.)
                    if timed is not None:
                        timed[1] = 0
                    wait = ALARMED_WAIT_NS
                elif timed is not None and ran == timed[0]:
                    # Not run since the last look: its own timer sees to it when it does.
                    timed[1] = min(max(2 * timed[1], headroom + TIMED_GRACE_NS), TIMED_IDLE_MAX_NS)
                    wait = timed[1]
                else:
                    if timed is not None:
                        timed[0], timed[1] = ran, 0
                    wait = max(headroom // self.host_cpus, MIN_WAIT_NS)
                self._armed.set(pid, now + wait)
                if self._looked.get(pid, (-1, 0))[0] != ran:
                    self._looked[pid] = (ran, now)
        if self._system is not None:
            self._catch_up_system(self._system)

    def overflow_left(self, target: Task, now: int) -> tuple[int | None, int, bool, int]:
        """HWPERFD_PIOCOVFLNS: ``target``'s counters (a process's, or a
        thread's own) caught up - an overflow found on the way is raised -
        and then (the CPU ns of their clock before the nearest overflow
        interrupt could come, at the fullest rate; the signal; whether the
        clock is a thread's own; the CPU time they were caught up to).  None when none can come (nothing
        interrupts, suspended, the clock is manual).  Asked by the process
        itself, whose library arms a timer on it (docs/overflow.md): from
        then on the tick's look waits ``TIMED_GRACE_NS`` past that instant
        (``now``, monotonic ns, plus the CPU ns left: a thread runs at most
        one CPU ns per wall ns), as the fallback, and while the process does
        not run at all each look doubles the wait up to ``TIMED_IDLE_MAX_NS``."""
        record = self._current(target)
        if record is None or record.state is not State.ENABLED:
            return None, 0, False, 0
        thread = record.pid in self._thread_of
        sig = record.profiling or record.block.request.signal
        self._catch_up(record)
        at = sum(record.seen)
        if not self.host_time or record.exited or record.suspended or record.pid not in self._armed:
            return None, sig, thread, at
        headroom = record.block.headroom_ns(self.cpus[record.cpu], self.profile(record.pid), bool(record.profiling))
        if headroom is None:
            return None, sig, thread, at
        self._armed.set(record.pid, max(self._armed.get(record.pid) or 0, now + headroom + TIMED_GRACE_NS))
        self._timed[record.pid] = [at, 0]
        return headroom, sig, thread, at

    def _idle_since(self, pid: int, ran: int, now: int) -> bool:
        """Whether ``pid`` has not run for ``IDLE_NS`` of the looks: one
        merely blocked in a call a moment (its library's look) is not idle."""
        looked = self._looked.get(pid)
        return looked is not None and looked[0] == ran and now - looked[1] >= IDLE_NS

    def _alarm(self, pid: int, at: int) -> bool:
        """Arm ``pid``'s CPU-clock alarm at ``at`` (a process's record only:
        a thread's own time is not its process's clock)."""
        if self.alarms is None or pid in self._thread_of:
            return False
        if self._alarm_at.get(pid) == at:
            return True
        if not self.alarms.arm(pid, at):
            return False
        self._alarm_at[pid] = at
        return True

    def alarmed(self, pids: Iterable[int]) -> int:
        """The alarms of ``pids`` rang: those still signalling are due a look
        now.  Returns how many."""
        woken = 0
        for pid in pids:
            self._alarm_at.pop(pid, None)
            if pid in self._armed:
                self._armed.set(pid, 0)
                woken += 1
        return woken

    def alarm_wanted(self, pid: int) -> bool:
        """Whether ``pid``'s alarm is still of use (it signals)."""
        if pid in self._alarm_at and pid not in self._armed:
            del self._alarm_at[pid]
        return pid in self._alarm_at

    def next_due(self, now: int) -> int | None:
        """When the soonest signalling process needs a look (None: none does);
        system mode, whose CPUs are not timed apart, every IRIX clock tick."""
        due = self._armed.soonest(lambda pid: (r := self._procs.get(pid)) is None or r.suspended)
        if self.system_signal_target() is not None:
            due = now + SIGNAL_TICK_NS if due is None else min(due, now + SIGNAL_TICK_NS)
        return due

    def _end_system_signal(self, system: _SystemRecord) -> None:
        """System mode, caught up, stops raising its signal at its holder
        (a release, or a control from another process or with another
        signal): what it raised goes before the call answers, as
        ``_end_signals``."""
        if system.request.signal and system.signal_to is not None:
            self._cancel(system.signal_to, system.request.signal, 0)

    def system_signal_target(self) -> int | None:
        """The process system mode's overflow signals go to, while it holds
        system mode with a signal armed."""
        system = self._system
        if system is not None and system.request.signal and any(system.request.thresholds):
            return system.signal_to
        return None

    # -- internals -----------------------------------------------------------

    def _fresh_start(self, target: Task) -> tuple[_ProcessRecord | None, CpuTimes, int]:
        """What acquiring ``target``'s counters anew starts from: its record
        (None if it has none), its CPU times now and the next generation.
        EBUSY while it counts already; ESRCH if gone; EINVAL past INT_MAX."""
        record = self._current(target)
        if record is not None and record.state is State.ENABLED:
            raise CountersBusy(f"pid {target.pid} is already using the counters")
        if record is None:
            process = int(getattr(target, "thread_of", 0) or 0)
            if process and process != target.pid:
                self._thread_of[target.pid] = process
                self.thread_version += 1
        seen = self._times(target.pid)
        if seen is None:
            raise NoSuchProcess(f"pid {target.pid} is gone")
        generation = record.generation + 1 if record else 1
        if generation > INT_MAX:
            raise InvalidRequest(f"pid {target.pid} has used up its generations")
        return record, seen, generation

    def _end_signals(self, record: _ProcessRecord, keep: int = 0) -> None:
        """The counters, caught up, stop raising their signals (a release, or
        a control with another signal): what they raised goes before the call
        answers, and nothing after (``cancel``: IRIX sent each overflow's
        signal at its interrupt, so none came after the call returned)."""
        process = self._thread_of.get(record.pid)
        pid, tid = (record.pid, 0) if process is None else (process, record.pid)
        for sig in (record.block.request.signal, record.profiling):
            if sig and sig != keep:
                self._cancel(pid, sig, tid)

    def _note_armed(self, pid: int, request: CounterRequest, profiling: int = 0) -> None:
        self._timed.pop(pid, None)  # a new set-up: its library's look comes after it
        if _arms_signals(request, profiling):
            self._armed.set(pid, 0)

    def _catch_up(self, record: _ProcessRecord, now: CpuTimes | None = None) -> None:
        if now is None:
            now = self._times(record.pid)
        if now is None:
            return
        user = max(0, now[0] - record.seen[0])
        system = max(0, now[1] - record.seen[1])
        record.seen = (max(now[0], record.seen[0]), max(now[1], record.seen[1]))
        if record.state is not State.ENABLED or record.exited or record.suspended or not (user or system):
            return
        cpu = self.cpus[record.cpu]
        # Profiling ticks come from every slot's threshold (HWPERF_PROFENABLE
        # sets the counters up for them); hwp_ovflw_sig only from those whose
        # interrupt enable bit is set.
        overflows = record.block.advance(cpu, user, system, self.profile(record.pid), every=bool(record.profiling))
        trace.active.ran(record.pid, record.cpu, record.block, self.cpus.type, user + system, overflows)
        if overflows and record.profiling:
            # Profiling: a PC tick per overflow, never hwp_ovflw_sig (IRIX's
            # r1nk_perf_intr_action sends no signal to a profiling process).
            self._signal(self._signal_for(record, record.profiling, overflows, caught_only=True))
        elif overflows and record.block.request.signal:
            self._signal(self._signal_for(record, record.block.request.signal, overflows))

    def _signal_for(self, record: _ProcessRecord, sig: int, count: int, caught_only: bool = False) -> Signal:
        """A record's overflow signals go to its process, or for a thread's
        own record to that thread alone: on IRIX each member of a share group
        was a process, signalled on its own (sproc(2))."""
        process = self._thread_of.get(record.pid)
        if process is None:
            return Signal(record.pid, record.start, record.owner, sig, count, caught_only=caught_only)
        return Signal(process, 0, record.owner, sig, count, record.pid, record.start, caught_only)

    def _catch_up_system(self, system: _SystemRecord) -> None:
        for i, block in enumerate(system.per_cpu):
            now = self.time.cpu_times(i)
            before = system.seen[i]
            user, sys_ = max(0, now[0] - before[0]), max(0, now[1] - before[1])
            system.seen[i] = (max(now[0], before[0]), max(now[1], before[1]))
            if user or sys_:
                overflows = block.advance(self.cpus[i], user, sys_, self.default_profile)
                trace.active.ran(0, i, block, self.cpus.type, user + sys_, overflows)
                target = system.signal_to
                if overflows and system.request.signal and target is not None:
                    self._signal(Signal(target, system.signal_start, None, system.request.signal, overflows))

    def _acquire_system(self, request: CounterRequest) -> int:
        self._system_put_back = False  # a new holder: no repeat of the old one's call
        # System mode is a system-wide user of the hardware: it takes the
        # reservation every personality shares (seed 002, perfctr_cpu_reserve).
        holder = self.cpus.reservation.reserve(SYSTEM_MODE_SERVICE)
        if holder is not None:
            raise CountersBusy(f"hardware taken by '{holder}'")
        for record in self._enabled():
            self._displace(record)
        self._system_generation += 1
        self._system = _SystemRecord(
            request,
            self._system_generation,
            [ControlBlock(request) for _ in self.cpus.cpus],
            [self.time.cpu_times(i) for i in range(len(self.cpus))],
        )
        trace.active.system_mode(self._system_generation, True)
        return self._system_generation

    def _displace(self, record: _ProcessRecord) -> None:
        """Displaced users will not count again until explicitly restarted;
        the new generation tells their readers."""
        self._catch_up(record)
        record.state = State.LOST
        record.generation += 1
        trace.active.generation(record.pid, record.generation - 1, record.generation, "lost")

    def _release_system(self) -> None:
        system = self._require_system()
        self._catch_up_system(system)
        self._end_system_signal(system)
        self._system = None
        trace.active.system_mode(system.generation, False)
        self.cpus.reservation.release(SYSTEM_MODE_SERVICE)

    @staticmethod
    def _restartable(record: _ProcessRecord) -> bool:
        """Counters this process acquired and released itself (not lost to
        system mode, not a parent that only asked for its children's counts)."""
        return record.state is State.RELEASED and bool(record.block.request.in_use)

    def _restart(self, record: _ProcessRecord, target: Task, request: CounterRequest, by: int) -> int:
        """Count again after a release: every slot from zero, as a fresh
        PIOCENEVCTRS would, under a generation above every earlier one."""
        if self._system is not None:
            raise CountersBusy("the counters are in use in system mode")
        seen = self._times(target.pid)
        if seen is None or record.exited:
            raise NoSuchProcess(f"pid {target.pid} is gone")
        generation = record.generation + 1
        start = record.start or start_of(target)
        self._count(
            target, ControlBlock(request), generation, seen, start, record.owner, record.comm, made=("control", by)
        )
        return generation

    def put_back(self, record: _ProcessRecord) -> None:
        """A record a restart found in the store counts again here."""
        self._procs[record.pid] = record
        self._note_armed(record.pid, record.block.request, record.profiling)
        if record.made_by_pid:
            self._put_back.add(record.pid)

    def put_back_system(self, system: _SystemRecord) -> None:
        self._system = system
        self._system_put_back = True

    def _repeated(
        self, caller: Caller, target: Task, how: str, request: CounterRequest | None, profiling: int = 0
    ) -> int | None:
        """The answer the old daemon owed, if this call repeats the one that
        set ``target``'s counters up as a restart found them; else None.

        A call in flight when the daemon died is repeated on the next one by
        our libraries and the hwperfd-run shim (lib/reconnect.h).  If the
        old daemon had written its change, the repeat finds it done:
        PIOCENEVCTRS would answer EBUSY and PIOCSETEVCTRL would restart the
        counts two generations further.  So the first call of the caller
        that made that change, after a restart, answers the old daemon's
        answer when it is the same call with the same request; any other
        first call (a read included) ends the chance, and later ones are
        answered as usual.  A program that repeats its own enable on purpose
        just after a restart gets its generation, not EBUSY: the one case
        the two cannot be told apart (docs/restart.md)."""
        if target.pid not in self._put_back:
            return None
        record = self._current(target)  # a later process at the pid repeats nothing
        if record is None or record.made_by_pid != caller.pid:
            return None
        self._put_back.discard(target.pid)
        if (
            how == record.made_by
            and record.state is State.ENABLED
            and not record.exited
            and record.block.request == request
            and record.profiling == profiling
        ):
            return record.generation
        return None

    def _count(
        self,
        target: Task,
        block: ControlBlock,
        generation: int,
        seen: CpuTimes,
        start: int,
        owner: tuple[int, int] | None,
        comm: str = "",
        profiling: int = 0,
        made: tuple[str, int] = ("", 0),
    ) -> None:
        """``target`` counts under ``block`` from its CPU time ``seen`` on; the
        children it waits for count from Linux's total for them now; ``made``
        names the call that set it up and its caller."""
        self._put_back.discard(target.pid)
        self._procs[target.pid] = _ProcessRecord(
            target.pid,
            block,
            generation,
            State.ENABLED,
            seen,
            target.processor % len(self.cpus),
            start=start,
            owner=owner,
            children_base=getattr(target, "children_ns", (0, 0)),
            comm=comm,
            profiling=profiling,
            made_by=made[0],
            made_by_pid=made[1],
        )
        self._note_armed(target.pid, block.request, profiling)
        trace.active.programmed(target.pid, self._procs[target.pid].cpu, generation, block, self.cpus.type)

    def _require_system(self) -> _SystemRecord:
        if self._system is None:
            raise NotInUse("the counters are not in use in system mode")
        return self._system

    def _enabled(self) -> list[_ProcessRecord]:
        return [r for r in self._procs.values() if r.state is State.ENABLED]

    def _record(self, target: Task) -> _ProcessRecord:
        """``target``'s record; ESRCH if it never used the counters, as
        IRIX's piocgetevctrs, piocgetevctrl and piocsetevctrl answer a
        process with no counter structure yet."""
        record = self._current(target)
        if record is None:
            raise NoSuchProcess(f"pid {target.pid} has never used the counters")
        return record

    def _current(self, target: Task) -> _ProcessRecord | None:
        """The record of ``target`` itself: one left under its pid by an
        earlier process (the pid was reused before its end was applied)
        is that process's, and goes."""
        record = self._procs.get(target.pid)
        start = start_of(target)
        if record is not None and start and record.start and record.start != start:
            self.forget(target.pid)
            return None
        if record is not None and start and not record.start:
            if record.born_by and start > record.born_by + START_SLACK_NS:
                # Started after the fork that made the record: a later process
                # the pid came round to (fork storms wrap pid_max in minutes)
                # before the child's end was applied.  Taken for the child, it
                # found the counters busy, or counted on from the child's counts.
                self.forget(target.pid)
                return None
            record.start = start
        return record

    def _times(self, pid: int) -> CpuTimes | None:
        """The CPU time a record under ``pid`` counts: its process's, or for
        a thread's own record, the thread's."""
        process = self._thread_of.get(pid)
        if process is not None:
            return self.time.thread_times(process, pid)
        return self.time.process_times(pid)

    def _not_in_use(self, pid: int) -> CounterError:
        """EINVAL for a live process without counters; ESRCH for one that is
        gone (root's calls never look the target up before this)."""
        if self._times(pid) is None:
            return NoSuchProcess(f"pid {pid} is gone")
        return NotInUse(f"pid {pid} is not using the counters")

    def _parent_record(self, pid: int, start: int = 0) -> _ProcessRecord:
        record = self._procs.get(pid)
        if record is None:
            seen = self._times(pid) or (0, 0)
            record = _ProcessRecord(
                pid, ControlBlock(CounterRequest.build([])), 1, State.RELEASED, seen, 0, start=start
            )
            self._procs[pid] = record
        return record

    @staticmethod
    def _check_access(caller: Caller, target: Task) -> None:
        if not may_access(caller, target):
            raise NotPermitted(f"pid {caller.pid} may not use the counters of pid {target.pid}")


def _list_descendant(listed: list[tuple[int, str, tuple[int, ...]]], entry: tuple[int, str, tuple[int, ...]]) -> None:
    """Add one folded process to a bounded list: past MAX_DESCENDANTS the
    rest add up under a last entry named "others" (pid 0)."""
    if len(listed) < MAX_DESCENDANTS - 1:
        listed.append(entry)
        return
    if len(listed) == MAX_DESCENDANTS - 1:
        listed.append((0, "others", (0,) * len(entry[2])))
    pid, comm, counts = listed[-1]
    listed[-1] = (pid, comm, tuple(a + b for a, b in zip(counts, entry[2])))


def _list_thread(listed: list[tuple[int, int, int]], entry: tuple[int, int, int]) -> None:
    """Add one ended thread to a bounded list: past MAX_DESCENDANTS the rest
    add up under a last entry of tid 0."""
    if len(listed) < MAX_DESCENDANTS - 1:
        listed.append(entry)
        return
    if len(listed) == MAX_DESCENDANTS - 1:
        listed.append((0, 0, 0))
    _, user, system = listed[-1]
    listed[-1] = (0, user + entry[1], system + entry[2])


def _add_unseen(listed: list[tuple[int, str, tuple[int, ...]]], delta: list[int]) -> None:
    """Counts of children known only from Linux's totals, under one entry
    named "unseen" kept first in the list."""
    if listed and listed[0][:2] == (0, "unseen"):
        listed[0] = (0, "unseen", tuple(max(0, a + b) for a, b in zip(listed[0][2], delta)))
    elif any(delta):
        listed.insert(0, (0, "unseen", tuple(max(0, d) for d in delta)))


def _arms_signals(request: CounterRequest, profiling: int = 0) -> bool:
    """Whether counting under ``request`` can raise overflow signals (or,
    profiling on signal ``profiling``, PC ticks)."""
    return bool(request.signal or profiling) and any(request.thresholds)
