"""``<mount>/perfctr``: Linux perfctr 2.6's /dev/perfctr and vperfctr files
(drivers/perfctr/{init,virtual,global}.c) on the emulated PMU.

One node serves both.  An open handle is /dev/perfctr until ``VPERFCTR_ATTACH``
binds it to a thread's virtual perfctr (what VPERFCTR_CREAT/OPEN did by
returning a new descriptor); from then on it is that vperfctr's file, which
may be passed to another process (perfex hands it to its parent).

Virtual perfctrs (one per thread, ``Vperfctr``) each run a private
``PmuCpu``: the thread's view of the counters, fed with the thread's CPU
time at the workload profile's rates.  Their TSC runs while the thread runs
(perfctr samples the TSC at every switch in and out), so it is the thread's
CPU time in cycles.  Global mode (``GlobalPerfctr``) programs each emulated
CPU's shared hardware and holds the machine's reservation while started.

The driver's rules, in its order, are kept in the handlers; the errnos are
in ``ERRNO``, mapped once in ``PerfctrDevice.__call__``.
"""

from __future__ import annotations

import errno
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from hwperfd.counters.errors import CountersLimit
from hwperfd.counters.percpu import CpuTimeSeen
from hwperfd.counters.threads import ThreadContext, ThreadTable
from hwperfd.cpu.core import CpuState, PmuCpu, identify_overflow, ireload, resume, sample, suspend
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.host import tasks
from hwperfd.trace import recorder as trace
from hwperfd.perfctr import control as ctl
from structs import perfctr as abi

log = logging.getLogger(__name__)

SERVICE = "perfctr"  # its name in the per-thread contexts
GLOBAL_SERVICE = "perfctr-global"  # global mode's name in the reservation
VIRTUAL_SERVICE = "perfctr-virtual"  # the reservation's holder while any vperfctr exists
MIN_INTERVAL_USEC = 10000  # gperfctr_start: a sampling interval below 10 ms is EINVAL
#: si_value of an overflow signal the daemon queues: this tag in the high 32
#: bits, the overflown-counter mask in the low 32 (libperfctr re-raises it
#: with si_code SI_PMC_OVF).
OVF_TAG = 0x50435452
MAX_HOLDERS = 16


class PerfctrError(Exception):
    """A refusal of the perfctr driver, in its terms (see ERRNO)."""


class NotAVperfctr(PerfctrError):
    """A vperfctr call on a handle bound to none (virtual.c: -EINVAL)."""


class UnknownCall(PerfctrError):
    """An ioctl neither driver serves (the ``default:`` cases: -EINVAL)."""


class Unlinked(PerfctrError):
    """CONTROL or IRESUME on a perfctr whose thread is gone or unlinked (-ESRCH)."""


class NoSuchThread(PerfctrError):
    """VPERFCTR_CREAT/OPEN of a thread that does not exist (-ESRCH)."""


class NotAttached(PerfctrError):
    """Another thread's perfctr without having it stopped under ptrace (ptrace_check_attach: -ESRCH)."""


class Exists(PerfctrError):
    """VPERFCTR_CREAT on a thread that has a perfctr (-EEXIST)."""


class NothingPending(PerfctrError):
    """VPERFCTR_IRESUME with no overflow to resume from (-EPERM)."""


class OverflowFirst(PerfctrError):
    """A call of the thread made after an overflow whose signal it has not
    handled yet (-EINTR): the signal is delivered as the call returns, and
    libperfctr makes the call again, so the handler runs before it takes
    effect, as the overflow interrupt would have come first on hardware."""


class Busy(PerfctrError):
    """The hardware is taken: "hardware taken by '...'" (-EBUSY)."""


class BadCpu(PerfctrError):
    """Global mode on a CPU that does not exist, or a too short interval (-EINVAL)."""


class NoGlobalImode(PerfctrError):
    """Global mode does not permit i-mode counters (-EPERM)."""


class NotRoot(PerfctrError):
    """hwperfd's rule: only root starts, stops or programs global mode (-EPERM)."""


class NotBound(PerfctrError):
    """VPERFCTR_ATTACH on a handle that is already a vperfctr's (-EBUSY)."""


ERRNO: dict[type[Exception], int] = {
    NotAVperfctr: errno.EINVAL,
    UnknownCall: errno.EINVAL,
    Unlinked: errno.ESRCH,
    NoSuchThread: errno.ESRCH,
    NotAttached: errno.ESRCH,
    Exists: errno.EEXIST,
    NothingPending: errno.EPERM,
    Busy: errno.EBUSY,
    OverflowFirst: errno.EINTR,
    BadCpu: errno.EINVAL,
    NoGlobalImode: errno.EPERM,
    NotRoot: errno.EPERM,
    NotBound: errno.EBUSY,
    CountersLimit: errno.EAGAIN,
    ctl.Invalid: errno.EINVAL,
    ctl.Forbidden: errno.EPERM,
}


class Clock(Protocol):
    def cpu_times(self, cpu: int) -> tuple[int, int]: ...

    def tsc_ns(self, cpu: int) -> int: ...


Signaller = Callable[[tasks.Task, int, int, int], None]  # (thread, signal, mask, uid that armed it)


@dataclass
class Vperfctr:
    """One thread's virtual perfctr (virtual.c's ``struct vperfctr``).  While
    linked it rides on the thread's context in the shared ``ThreadTable``
    (``ctx``: identity, CPU time, the private ``PmuCpu``); unlinked (the
    thread exited, or VPERFCTR_UNLINK) it keeps its final state for the
    handles that still refer to it."""

    ctx: ThreadContext | None
    pmu: PmuCpu
    owner: tasks.Task | None = None
    state: CpuState = field(default_factory=CpuState)
    user: ctl.PerfctrControl = ctl.EMPTY
    si_signo: int = 0
    flags: int = 0
    iresume_cstatus: int = 0
    signalled: bool = False  # an overflow signal went to the thread since its last call
    deferred: int = 0  # the call answered EINTR for an overflow: its retry takes effect
    quiet: bool = False  # an overflow found now raises no signal: the deferred call ends the counters
    handles: int = 0
    freed: bool = False
    holds: bool = True  # part of the machine's reservation: while it can still count
    exited: ThreadContext | None = None  # a main thread gone: its last time is the process's exit accounting
    sums: list[int] = field(default_factory=lambda: [0] * abi.NR_CTRS)  # pmc[].sum, all 18 of them
    # Processes that called through a handle of it (at most MAX_HOLDERS): after
    # a restart of the daemon, their reopened files find it again (``adopt``).
    holders: list[int] = field(default_factory=list)

    def sync(self) -> None:
        """The active counters' sums into the full array (perfctr keeps every
        pmc[].sum, so a stopped perfctr still reads its last counts)."""
        for i, pmc in enumerate(self.state.pmc):
            self.sums[i] = pmc.sum

    @property
    def cstatus(self) -> int:
        return self.state.cstatus

    @property
    def running(self) -> bool:
        return self.state.cstatus != 0


class Virtual:
    """Every thread's vperfctr, on the shared per-thread contexts."""

    def __init__(
        self,
        cpus: CpuSet,
        threads: ThreadTable,
        signal: Signaller,
        process_times: Callable[[int], tuple[int, int] | None] = lambda pid: None,
        profile: Callable[[int], WorkloadProfile] = lambda pid: WorkloadProfile(),
        may_follow: Callable[[int, int], bool] = lambda uid, pid: True,
    ) -> None:
        self.cpus = cpus
        self.threads = threads
        self._signal = signal
        self._may_follow = may_follow  # (owner uid, pid): may the owner still ptrace-read the process
        self._process_times = process_times
        self._profile = profile
        self.live = 0  # objects that can still count (linked, or a main thread's last run due)
        threads.register(SERVICE, on_exec=self._on_exec, on_exit=self._on_exit, on_overflow=self._on_overflow)

    # -- time --

    def profile(self, pid: int) -> WorkloadProfile:
        """The workload profile process ``pid`` runs (its threads count at its rates)."""
        return self._profile(pid)

    @staticmethod
    def tsc(perfctr: Vperfctr) -> int:
        """The virtual TSC: it runs while the thread runs."""
        ctx = perfctr.ctx or perfctr.exited
        return perfctr.pmu.tsc.at(ctx.ran_ns if ctx is not None else 0)

    def catch_up(self, perfctr: Vperfctr, upto: int | None = None) -> None:
        """``upto``: as far as the thread's CPU clock read that (an iresume's,
        ``ThreadTable.catch_up``)."""
        if perfctr.ctx is not None:
            self.threads.catch_up(perfctr.ctx, upto)
            self._settle(perfctr)

    def _on_overflow(self, ctx: ThreadContext, mask: int) -> None:
        if isinstance(ctx.data, Vperfctr):
            self._settle(ctx.data)

    def _settle(self, perfctr: Vperfctr) -> None:
        """Bring the sums up to the counters; an i-mode overflow suspends
        them and signals the thread (virtual.c's ihandler)."""
        if not perfctr.running:
            return
        tsc = self.tsc(perfctr)
        sample(perfctr.state, perfctr.pmu, tsc)
        state = perfctr.state
        if state.nrictrs and any(perfctr.pmu.pending(p.map) for p in state.pmc[state.nractrs :]):
            suspend(state, perfctr.pmu, tsc)
            mask = identify_overflow(state, perfctr.pmu)
            perfctr.iresume_cstatus = state.cstatus
            # Suspend a-mode and i-mode counters, leaving only the TSC on.
            state.cstatus = ctl.x86_cstatus(True, 0, 0) if state.has_tsc else 0
            state.tsc_start = tsc
            if perfctr.si_signo and perfctr.owner is not None and not perfctr.quiet:
                armed_by = perfctr.ctx.owner if perfctr.ctx is not None else 0
                perfctr.signalled = True  # before the signal: a store written first has it
                self._signal(perfctr.owner, perfctr.si_signo, mask, armed_by)

    def overflow_first(self, perfctr: Vperfctr, cmd: int, ends: bool, upto: int | None = None) -> bool:
        """Before a call of the perfctr's own thread takes effect: True when
        an overflow signal the thread has not yet handled is pending (the
        call answers EINTR and is made again after the handler ran).  The
        retry of that call takes effect whatever happened since - a period
        shorter than the round trip cannot hold the thread in a loop - and,
        when it stops or unlinks the counters (``ends``), an overflow of
        theirs found then raises no signal after them."""
        retry = perfctr.deferred == cmd
        self.catch_up(perfctr, upto)
        signalled, perfctr.signalled = perfctr.signalled, False
        if retry:
            perfctr.deferred, perfctr.quiet = 0, False
            return False
        owner = perfctr.owner
        if not signalled or owner is None or not tasks.signal_pending(owner.tgid, owner.tid, perfctr.si_signo):
            return False
        # Until the retry, an overflow of counters it ends raises nothing
        # (the clock's tick may look at the thread in between).
        perfctr.deferred, perfctr.quiet = cmd, ends
        return True

    # -- life --

    def _on_exec(self, ctx: ThreadContext) -> bool:
        """exec(2) keeps the state unless VPERFCTR_CONTROL_CLOEXEC (virtual.c
        ``__vperfctr_flush``), or unless the owner may no longer ptrace-read
        the process (a setuid or setgid image): then, as IRIX and libcpc do,
        the vperfctr is unlinked at the exec, its counts from before it
        stay the owner's, and nothing the privileged image runs reaches them."""
        perfctr = ctx.data
        if isinstance(perfctr, Vperfctr) and (
            perfctr.flags & abi.VPERFCTR_CONTROL_CLOEXEC or not self._may_follow(ctx.owner, ctx.pid)
        ):
            self.threads.catch_up(ctx)
            self._unlinked(perfctr)  # the thread lives on: its counts end here
            return False
        return True

    def _on_exit(self, ctx: ThreadContext) -> None:
        """exit_thread -> vperfctr_unlink.  The thread table has caught the
        context up from the clock's last word on the thread (its taskstats
        exit record); a main thread's comes with its process's exit
        accounting, after this event, so its final counts are taken at the
        next look (``finish``)."""
        perfctr = ctx.data
        if not isinstance(perfctr, Vperfctr):
            return
        if ctx.tid == ctx.pid and perfctr.running:
            perfctr.exited = ctx
            perfctr.ctx = None
            perfctr.owner = None
            self._let_go(perfctr)  # its thread is gone: it counts no further
            self.maybe_free(perfctr)  # no handle left (closed at exit before this event): nobody will look
            return
        self._unlinked(perfctr)

    def finish(self, perfctr: Vperfctr) -> None:
        """Count an exited main thread's last run from its process's final CPU
        time, then unlink with the final counts."""
        ctx = perfctr.exited
        if ctx is None:
            return
        perfctr.exited = None
        final = self._process_times(ctx.pid)
        if final is not None:
            user, system = max(0, final[0] - ctx.seen[0]), max(0, final[1] - ctx.seen[1])
            if user or system:
                ctx.seen = (ctx.seen[0] + user, ctx.seen[1] + system)
                ctx.ran_ns += user + system
                profile = self._profile(ctx.pid)
                ctx.cpu.run(user, system, profile.rates, profile.exl_share)
        perfctr.ctx = ctx
        self._unlinked(perfctr)

    def get(self, tid: int) -> Vperfctr | None:
        ctx = self.threads.get(SERVICE, tid)
        return ctx.data if ctx is not None and isinstance(ctx.data, Vperfctr) else None

    def alive(self, perfctr: Vperfctr) -> bool:
        """Whether the owner is still the thread it was (a gone owner's
        perfctr is unlinked with its final counts: exit_thread)."""
        ctx = perfctr.ctx
        if ctx is None:
            return False
        if self.threads.get(SERVICE, ctx.tid) is not ctx:
            self._unlinked(perfctr)
            return False
        return True

    def unlink(self, perfctr: Vperfctr, upto: int | None = None) -> None:
        """``upto``: the thread's CPU clock when it unlinked (VPERFCTR_UNLINK_NS)."""
        ctx = perfctr.ctx
        if ctx is None:
            return
        self.catch_up(perfctr, upto)
        self._unlinked(perfctr)
        self.threads.detach(SERVICE, ctx.tid)

    def _unlinked(self, perfctr: Vperfctr) -> None:
        if perfctr.ctx is None:
            return
        self._settle(perfctr)
        if perfctr.running:
            suspend(perfctr.state, perfctr.pmu, self.tsc(perfctr))
        perfctr.sync()
        perfctr.ctx = None
        perfctr.owner = None
        perfctr.state.cstatus = 0
        perfctr.iresume_cstatus = 0
        self._let_go(perfctr)
        self.maybe_free(perfctr)

    def _let_go(self, perfctr: Vperfctr) -> None:
        """An unlinked vperfctr counts no more: it leaves the machine's
        reservation, though handles may keep it (and its frozen counts) for
        good.  A reservation is held only by counters that can count: an fd
        kept open must not veto root's global counters, pctr or cpc_bind_cpu."""
        if perfctr.holds:
            perfctr.holds = False
            self.live -= 1
            if not self.live:
                self.cpus.reservation.release(VIRTUAL_SERVICE)

    def maybe_free(self, perfctr: Vperfctr) -> None:
        if perfctr.exited is not None and perfctr.handles <= 0:
            self.finish(perfctr)
        if perfctr.ctx is None and perfctr.exited is None and perfctr.handles <= 0 and not perfctr.freed:
            perfctr.freed = True
            self._let_go(perfctr)

    def holders(self) -> list[str]:
        """Who holds the perfctr-virtual reservation: uid and thread of each
        vperfctr that can still count."""
        out = []
        for ctx in self.threads.contexts(SERVICE):
            if isinstance(ctx.data, Vperfctr) and ctx.data.holds:
                out.append(f"uid {ctx.owner} pid {ctx.pid} tid {ctx.tid}")
        return out

    def create(self, task: tasks.Task, uid: int) -> Vperfctr:
        # virtual.c's inc_nrctrs: the first vperfctr takes the machine's
        # reservation for all of them, the last one freed gives it back.
        holder = self.cpus.reservation.reserve(VIRTUAL_SERVICE)
        if holder is not None:
            raise Busy(f"hardware taken by '{holder}'")
        try:
            ctx = self.threads.attach(SERVICE, task.tgid, task.tid, uid)
        except BaseException as exc:
            if not self.live:
                self.cpus.reservation.release(VIRTUAL_SERVICE)
            if isinstance(exc, LookupError):
                raise NoSuchThread(f"no thread {task.tid}") from None
            raise
        perfctr = Vperfctr(ctx, ctx.cpu, task)
        ctx.data = perfctr
        self.live += 1
        return perfctr

    def reap(self) -> None:
        """Unlink the perfctrs of threads that have gone."""
        for ctx in list(self.threads.contexts(SERVICE)):
            if isinstance(ctx.data, Vperfctr):
                self.alive(ctx.data)

    # -- the "system calls" (virtual.c sys_vperfctr_*) --

    def control(
        self, perfctr: Vperfctr, request: ctl.PerfctrControl, si_signo: int, preserve: int, flags: int,
        since: int | None = None,
    ) -> None:
        """``since``: the thread's CPU clock when it made the control
        (VPERFCTR_CONTROL_NS, its own thread's), where the control takes
        effect; before the daemon's last look at the thread only over time
        in which nothing of the vperfctr has counted yet."""
        if perfctr.ctx is None:
            raise Unlinked("attempt to update an unlinked perfctr")
        if since is not None and perfctr.user == ctl.EMPTY and not perfctr.state.cstatus:
            self.threads.rewind(perfctr.ctx, since)
        self.catch_up(perfctr, since)
        if perfctr.running:
            suspend(perfctr.state, perfctr.pmu, self.tsc(perfctr))
        # virtual.c clears a pending overflow only if the perfctr runs; one
        # without the TSC is stopped after its overflow (cstatus 0), and its
        # IRESUME would then put the old counter layout over the new control's
        # counters.  Any control replaces what the overflow was of.
        perfctr.iresume_cstatus = 0
        # perfctr_cpu_update_control: cstatus is 0 until the data is taken,
        # so a refused control leaves the counters stopped.
        perfctr.state.cstatus = 0
        perfctr.sync()
        ctl.check(self.cpus.model, request, pcint=self.cpus.model.overflow_interrupt)
        ctl.take(self.cpus.model, perfctr.state, request, perfctr.sums)
        perfctr.user = request
        if not perfctr.state.cstatus:
            return
        perfctr.si_signo = si_signo
        if not perfctr.state.has_tsc:
            perfctr.state.tsc_sum = 0
        for i, pmc in enumerate(perfctr.state.pmc):
            if not preserve & (1 << i):
                pmc.sum = perfctr.sums[i] = 0
        perfctr.flags = flags
        resume(perfctr.state, perfctr.pmu, self.tsc(perfctr))
        if since is not None and perfctr.ctx is not None:
            # The time since the control counts, unless an overflow could fall in it.
            self.threads.catch_up_within(perfctr.ctx)
            self._settle(perfctr)

    def iresume(self, perfctr: Vperfctr, upto: int | None = None) -> None:
        """``upto``: the thread's CPU clock as it made the call
        (VPERFCTR_IRESUME_NS), where the counters start again; the rest of
        the call's time counts."""
        if perfctr.ctx is None:
            raise Unlinked("attempt to resume an unlinked perfctr")
        if not perfctr.iresume_cstatus & (0x7F << 16):
            raise NothingPending("no overflow to resume from")
        self.catch_up(perfctr, upto)
        if perfctr.running:
            suspend(perfctr.state, perfctr.pmu, self.tsc(perfctr))
        perfctr.state.cstatus = perfctr.iresume_cstatus
        perfctr.iresume_cstatus = 0
        ireload(perfctr.state)
        resume(perfctr.state, perfctr.pmu, self.tsc(perfctr))
        if upto is not None and perfctr.ctx is not None:
            # The call's time from the resume on counts, unless an overflow could fall in it.
            self.threads.catch_up_within(perfctr.ctx)
            self._settle(perfctr)

    def left_ns(self, perfctr: Vperfctr, caller: int, caught_up: bool = False) -> int:
        """VPERFCTR_OVERFLOW_NS (hwperfd): the vperfctr's own thread asks
        how much of its CPU time may pass before its nearest i-mode overflow
        (libperfctr arms a timer on it, docs/overflow.md).  The look catches
        the counters up first, so a call at the instant finds the overflow
        and signals the thread as it returns; NO_OVERFLOW when none can come
        (or one is pending), and to any other thread."""
        ctx = perfctr.ctx
        if ctx is None or ctx.tid != caller:
            return abi.NO_OVERFLOW
        if not caught_up:
            self.catch_up(perfctr)
        left = self.threads.left_ns(ctx) if perfctr.running else None
        return abi.NO_OVERFLOW if left is None else left

    def read_state(self, perfctr: Vperfctr) -> tuple[int, int, list[int]]:
        """(cstatus, tsc sum, pmc sums) brought up to date."""
        self.catch_up(perfctr)
        perfctr.sync()
        return perfctr.state.cstatus, perfctr.state.tsc_sum, list(perfctr.sums)


class GlobalPerfctr:
    """global.c: per-CPU control of the shared hardware, started and stopped
    for all CPUs at once, with the machine's reservation while started."""

    def __init__(self, cpus: CpuSet, clock: Clock, profile: Callable[[], WorkloadProfile], virtual: Virtual) -> None:
        self.cpus = cpus
        self.clock = clock
        self._profile = profile
        self._virtual = virtual
        self.states = [CpuState() for _ in range(len(cpus))]
        self.users = [ctl.EMPTY for _ in range(len(cpus))]
        self.nr_active = 0
        self.ours = False  # hardware_is_ours
        self._seen = CpuTimeSeen(clock, len(cpus))

    def tsc(self, cpu: int) -> int:
        return self.cpus.pmus[cpu].tsc.at(self.clock.tsc_ns(cpu))

    def _catch_up(self, cpu: int) -> None:
        user, system = self._seen.take(cpu)
        state = self.states[cpu]
        if not (self.ours and state.cstatus):
            return
        if user or system:
            profile = self._profile()
            self.cpus.pmus[cpu].run(user, system, profile.rates, profile.exl_share)
        sample(state, self.cpus.pmus[cpu], self.tsc(cpu))

    def control(self, cpu: int, request: ctl.PerfctrControl) -> int:
        if not 0 <= cpu < len(self.cpus):
            raise BadCpu(f"no CPU {cpu}")
        if request.nrictrs:
            raise NoGlobalImode("global mode does not permit i-mode counters")
        if self.ours:
            raise Busy("global-mode counters are running: stop them first")
        if self.cpus.model.control != "x86" and request.nractrs:
            # perfctr's generic x86 driver (TSC only): any counter is -EINVAL
            raise BadCpu(f"the {self.cpus.model.name} has no perfctr counters")
        state = self.states[cpu]
        state.tsc_start = state.tsc_sum = 0
        state.pmc = []
        state.cstatus = 0
        ctl.check(self.cpus.model, request)
        ctl.take(self.cpus.model, state, request)
        self.users[cpu] = request
        if state.cstatus:
            self.nr_active += 1
        return self.nr_active

    def start(self, interval_usec: int) -> int:
        if interval_usec and interval_usec < MIN_INTERVAL_USEC:
            raise BadCpu(f"a sampling interval of {interval_usec} us is below {MIN_INTERVAL_USEC}")
        if self.nr_active > 0 and not self.ours:
            self._virtual.reap()  # vperfctrs of threads gone give the reservation back
            holder = self.cpus.reservation.reserve(GLOBAL_SERVICE)
            if holder is not None:
                raise Busy(f"hardware taken by '{holder}'")
            self.ours = True
            for cpu, state in enumerate(self.states):
                self._seen.restart(cpu)
                if state.cstatus:
                    pmu = self.cpus.pmus[cpu]
                    for pmc in state.pmc:
                        pmu.write(pmc.map, 0)
                    resume(state, pmu, self.tsc(cpu))
            trace.active.cpu_programmed(GLOBAL_SERVICE, self.cpus.pmus)
        return self.nr_active

    def stop(self) -> None:
        self.nr_active = 0
        if self.ours:
            for cpu, state in enumerate(self.states):
                self._catch_up(cpu)
                if state.cstatus:
                    suspend(state, self.cpus.pmus[cpu], self.tsc(cpu))
                state.cstatus = 0
            trace.active.cpu_programmed(GLOBAL_SERVICE, self.cpus.pmus)
            self.ours = False
            self.cpus.reservation.release(GLOBAL_SERVICE)

    def read(self, cpu: int) -> tuple[ctl.PerfctrControl, int, list[int]]:
        if not 0 <= cpu < len(self.cpus):
            raise BadCpu(f"no CPU {cpu}")
        self._catch_up(cpu)
        state = self.states[cpu]
        return self.users[cpu], state.tsc_sum, [p.sum for p in state.pmc]


def _sums(tsc: int, pmcs: list[int]) -> dict[str, object]:
    pad = [0] * (abi.NR_CTRS - len(pmcs))
    return {"tsc": tsc, "pmc": [p & 0xFFFFFFFFFFFFFFFF for p in pmcs] + pad}


class PerfctrDevice:
    """The ioctl dispatch of ``<mount>/perfctr`` (init.c, virtual.c, global.c)."""

    def __init__(
        self,
        cpus: CpuSet,
        clock: Clock,
        threads: ThreadTable,
        default_profile: Callable[[], WorkloadProfile],
        signal: Signaller | None = None,
        *,
        process_times: Callable[[int], tuple[int, int] | None] = lambda pid: None,
        profile: Callable[[int], WorkloadProfile] = lambda pid: WorkloadProfile(),
        may_follow: Callable[[int, int], bool] = lambda uid, pid: True,
    ) -> None:
        self.cpus = cpus
        self.virtual = Virtual(cpus, threads, signal or send_overflow, process_times, profile, may_follow)
        self.globl = GlobalPerfctr(cpus, clock, default_profile, self.virtual)
        self._bound: dict[int, Vperfctr] = {}  # handle -> its vperfctr
        # vperfctrs put back from the set-up store, by the processes that held them
        self.adoptable: dict[int, list[Vperfctr]] = {}

    @property
    def supported(self) -> bool:
        return self.cpus.model.control == "x86"

    def info(self) -> bytes:
        model = self.cpus.model
        features = abi.PERFCTR_FEATURE_RDTSC
        if self.supported:
            features |= abi.PERFCTR_FEATURE_RDPMC
            if model.overflow_interrupt:
                features |= abi.PERFCTR_FEATURE_PCINT
        return abi.perfctr_info.build({
            "abi_version": abi.PERFCTR_ABI_VERSION,
            "driver_version": abi.DRIVER_VERSION.encode().ljust(32, b"\0"),
            "cpu_type": abi.CPU_TYPES.get(model.name, abi.PERFCTR_X86_GENERIC),
            "cpu_features": features,
            "cpu_khz": int(self.cpus.mhz * 1000),
            "tsc_to_cpu_mult": 1,
            "_reserved": [0, 0, 0],
        })  # fmt: skip

    def cpu_mask(self, forbidden: bool) -> bytes:
        words = [0] * abi.CPU_MASK_WORDS
        if not forbidden:
            for cpu in range(len(self.cpus)):
                words[cpu // 32] |= 1 << (cpu % 32)
        return abi.perfctr_cpu_mask.build({"nrwords": (len(self.cpus) + 31) // 32, "mask": words})

    def bound(self, fh: int) -> Vperfctr | None:
        """The vperfctr handle ``fh`` is bound to, if any."""
        return self._bound.get(fh)

    def bound_tid(self, fh: int) -> int | None:
        """The thread whose linked vperfctr ``fh`` is bound to, if any."""
        perfctr = self._bound.get(fh)
        return perfctr.ctx.tid if perfctr is not None and perfctr.ctx is not None else None

    def release(self, fh: int) -> None:
        perfctr = self._bound.pop(fh, None)
        if perfctr is not None:
            perfctr.handles -= 1
            self.virtual.maybe_free(perfctr)

    def __call__(self, fh: int, cmd: int, arg: int, data: bytes, tid: int, uid: int) -> tuple[int, bytes]:
        try:
            return self._dispatch(fh, cmd, arg, data, tid, uid)
        except (PerfctrError, ctl.ControlRefused, CountersLimit) as exc:
            log.debug("perfctr: %s", exc)
            raise OSError(ERRNO[type(exc)], str(exc)) from None

    def _dispatch(self, fh: int, cmd: int, arg: int, data: bytes, tid: int, uid: int) -> tuple[int, bytes]:
        # Calls any perfctr file answers (init.c and virtual.c alike).
        if cmd == abi.PERFCTR_ABI:
            return 0, abi.PERFCTR_ABI_VERSION.to_bytes(4, "little")
        if cmd == abi.PERFCTR_INFO:
            return 0, self.info()
        if cmd in (abi.PERFCTR_CPUS, abi.PERFCTR_CPUS_FORBIDDEN):
            return 0, self.cpu_mask(cmd == abi.PERFCTR_CPUS_FORBIDDEN)
        if cmd == abi.PERFCTR_THREAD_CLOCKS:
            stamps = self.supported and self.virtual.threads.host_time
            return 0, int(stamps).to_bytes(4, "little")
        perfctr = self._bound.get(fh)
        if perfctr is None and cmd in _VIRTUAL and self.adoptable:
            perfctr = self._adopt(fh, tid)
        if perfctr is not None and cmd in _VIRTUAL:
            self._held_by(perfctr, tid)
        if cmd == abi.VPERFCTR_ATTACH:
            if perfctr is not None:
                raise NotBound("this file is a vperfctr already")
            request = _ATTACH.parse(data)
            return 0, self._attach(fh, request.tid, bool(request.creat), tid, uid)
        if cmd in _VIRTUAL:
            if perfctr is None:
                raise NotAVperfctr("not a vperfctr file")
            return self._virtual_call(perfctr, cmd, data, tid)
        if cmd == abi.GPERFCTR_READ:
            request = _GSTATE.parse(data)
            user, tsc, pmcs = self.globl.read(request.cpu)
            return 0, _GSTATE.build(
                {"cpu": request.cpu, "cpu_control": user.build(), "sum": _sums(tsc, pmcs), "_reserved": [0] * 4}
            )
        if cmd in (abi.GPERFCTR_CONTROL, abi.GPERFCTR_START, abi.GPERFCTR_STOP):
            if uid != 0:
                raise NotRoot("global-mode counters are root's")
            if cmd == abi.GPERFCTR_CONTROL:
                request = _GCONTROL.parse(data)
                return self.globl.control(request.cpu, ctl.PerfctrControl.parse(request.cpu_control)), b""
            if cmd == abi.GPERFCTR_START:
                return self.globl.start(arg & 0xFFFFFFFF), b""
            self.globl.stop()
            return 0, b""
        raise UnknownCall(f"unknown ioctl {cmd:#010x}")

    def _attach(self, fh: int, target: int, creat: bool, caller: int, uid: int) -> bytes:
        """vperfctr_attach: tid 0 is the caller; another thread must be
        stopped under the caller's ptrace."""
        if creat and not self.supported:
            raise UnknownCall(f"the {self.cpus.model.name} has no perfctr counters")
        tid = target or caller
        task = tasks.read_task(tid)
        if task is None:
            raise NoSuchThread(f"no thread {tid}")
        if tid != caller:
            self._check_attach(task, caller)
        perfctr = self.virtual.get(tid)
        if creat:
            if perfctr is not None:
                raise Exists(f"thread {tid} has a perfctr")
            perfctr = self.virtual.create(task, uid)
        if perfctr is not None:
            perfctr.handles += 1
            self._bound[fh] = perfctr
            self._held_by(perfctr, caller)
        return b""

    def _held_by(self, perfctr: Vperfctr, tid: int) -> None:
        if len(perfctr.holders) >= MAX_HOLDERS:
            return
        task = tasks.read_task(tid) if tid != (perfctr.ctx.tid if perfctr.ctx is not None else 0) else None
        tgid = task.tgid if task is not None else (perfctr.ctx.pid if perfctr.ctx is not None else 0)
        if tgid and tgid not in perfctr.holders:
            perfctr.holders.append(tgid)

    def _adopt(self, fh: int, tid: int) -> Vperfctr | None:
        """A handle opened after a restart of the daemon, making a vperfctr
        call: the vperfctr put back from the store that its process held
        (its thread's own first), as if the handle had never been lost."""
        task = tasks.read_task(tid)
        if task is None:
            return None
        mine = [p for p in self.adoptable.get(task.tgid, ()) if p.ctx is not None and not p.freed]
        if not mine:
            self.adoptable.pop(task.tgid, None)
            return None
        chosen = next((p for p in mine if p.ctx is not None and p.ctx.tid == tid), mine[0] if len(mine) == 1 else None)
        if chosen is not None:
            chosen.handles += 1
            self._bound[fh] = chosen
        return chosen

    @staticmethod
    def _check_attach(task: tasks.Task, caller: int) -> None:
        """ptrace_check_attach(tsk, 0): traced by the caller and stopped."""
        if task.tracer != caller or task.state not in ("t", "T"):
            raise NotAttached(f"thread {task.tid} is not stopped under the caller's ptrace")

    def _virtual_call(self, perfctr: Vperfctr, cmd: int, data: bytes, caller: int) -> tuple[int, bytes]:
        virtual = self.virtual
        virtual.finish(perfctr)
        live = virtual.alive(perfctr)
        if cmd == abi.VPERFCTR_OVERFLOW_NS:
            return 0, abi.OVERFLOW_NS_PACK.pack(virtual.left_ns(perfctr, caller) if live else abi.NO_OVERFLOW)
        if live and perfctr.ctx is not None and perfctr.ctx.tid != caller:
            task = tasks.read_task(perfctr.ctx.tid)
            if task is not None:
                self._check_attach(task, caller)
        # VPERFCTR_IRESUME_NS tells the thread's CPU clock as it called: the
        # counters stood until then (its own thread's alone).
        upto = None
        own = perfctr.ctx is not None and perfctr.ctx.tid == caller
        if cmd in _STAMPED:
            # VPERFCTR_CONTROL_NS and VPERFCTR_UNLINK_NS: libperfctr's calls
            # made earlier, told late; a stamp is its own thread's alone.
            if not own:
                raise UnknownCall("a CPU-clock stamp is the vperfctr's own thread's")
            upto = int.from_bytes(data[:8], "little")
            data = data[8 : 8 + abi.VPERFCTR_CONTROL_SIZE]
        elif cmd == abi.VPERFCTR_IRESUME_NS and own:
            upto = int.from_bytes(data[:8], "little") or None  # the copy-in is 8 bytes (_IOWR); none reads as 0
        controls = cmd in (abi.VPERFCTR_CONTROL, abi.VPERFCTR_CONTROL_NS)
        request, control = _control(data) if controls else ((0, 0, 0), None)
        if live and own and cmd != abi.VPERFCTR_READ_CONTROL:
            unlinks = cmd in (abi.VPERFCTR_UNLINK, abi.VPERFCTR_UNLINK_NS)
            ends = unlinks or (control is not None and not _starts(control))
            if virtual.overflow_first(perfctr, cmd, ends, None if controls else upto):
                raise OverflowFirst("an overflow signal comes first")
        if controls:
            virtual.control(perfctr, _checked(control), *request, since=upto)
            return 0, b""
        if cmd in (abi.VPERFCTR_IRESUME, abi.VPERFCTR_IRESUME_NS):
            virtual.iresume(perfctr, upto)
            if cmd == abi.VPERFCTR_IRESUME_NS:
                return 0, abi.OVERFLOW_NS_PACK.pack(virtual.left_ns(perfctr, caller, caught_up=True))
            return 0, b""
        if cmd in (abi.VPERFCTR_UNLINK, abi.VPERFCTR_UNLINK_NS):
            virtual.unlink(perfctr, upto)
            return 0, b""
        if cmd == abi.VPERFCTR_READ_CONTROL:
            return 0, _CONTROL.build({
                "si_signo": perfctr.si_signo, "cpu_control": perfctr.user.build(), "preserve": 0,
                "flags": perfctr.flags, "_reserved": [0] * 3,
            })  # fmt: skip
        cstatus, tsc, pmcs = virtual.read_state(perfctr)
        wrapped = [p & 0xFFFFFFFFFFFFFFFF for p in pmcs]
        if cmd == abi.VPERFCTR_READ_SUM:
            return 0, abi.SUM_CTRS_PACK.pack(tsc, *wrapped)
        return 0, abi.VPERFCTR_STATE_PACK.pack(cstatus, tsc, *wrapped)

    def describe(self) -> str:
        """What reading the node shows: perfctr_info, for people and scripts."""
        model = self.cpus.model
        self.virtual.reap()
        lines = [
            f"abi_version {abi.PERFCTR_ABI_VERSION:#010x}",
            f"driver_version {abi.DRIVER_VERSION}",
            f"model {model.name}",
            f"vendor {model.vendor}",
            "cpuid {} {} {}".format(*model.cpuid),  # family, model, stepping
            f"cpu_type {abi.CPU_TYPES.get(model.name, abi.PERFCTR_X86_GENERIC)}",
            f"counters {model.registers if self.supported else 0}",
            f"cpu_khz {int(self.cpus.mhz * 1000)}",
            f"cpus {len(self.cpus)}",
            f"vperfctrs {sum(1 for _ in self.virtual.threads.contexts(SERVICE))}",
            f"global {'running' if self.globl.ours else 'stopped'} active-cpus {self.globl.nr_active}",
            f"reserved-by {self.cpus.reservation.holder or '-'}",
            *(f"holder perfctr-virtual {who}" for who in self.virtual.holders()),
            *(["holder perfctr-global uid 0"] if self.globl.ours else []),
        ]
        return "\n".join(lines) + "\n"


_STAMPED = (abi.VPERFCTR_CONTROL_NS, abi.VPERFCTR_UNLINK_NS)
_VIRTUAL = frozenset({
    abi.VPERFCTR_CONTROL, abi.VPERFCTR_IRESUME, abi.VPERFCTR_UNLINK, abi.VPERFCTR_READ_SUM,
    abi.VPERFCTR_READ_CONTROL, abi.VPERFCTR_READ_STATE, abi.VPERFCTR_OVERFLOW_NS,
    abi.VPERFCTR_IRESUME_NS, abi.VPERFCTR_CONTROL_NS, abi.VPERFCTR_UNLINK_NS,
})  # fmt: skip


# The personality's structs, compiled: construct's interpreted parse of a
# vperfctr_control costs more than the rest of the call.
_CONTROL = abi.vperfctr_control.compile()
_GSTATE = abi.gperfctr_cpu_state.compile()
_GCONTROL = abi.gperfctr_cpu_control.compile()
_ATTACH = abi.vperfctr_attach.compile()


# PAPI makes a VPERFCTR_CONTROL at every start, stop and multiplexing switch:
# struct unpacks vperfctr_control's words ~15x faster than construct builds
# its containers.  The words in structs.perfctr's order: si_signo, then
# cpu_control (tsc_on, nractrs, nrictrs, pmc_map, evntsel, evntsel_high,
# ireset, _reserved), preserve, flags, _reserved.
_N = abi.NR_CTRS
_CONTROL_WORDS = struct.Struct(f"<i3I{_N}I{_N}I{_N + 2}I{_N}i4I2I3I")
assert _CONTROL_WORDS.size == abi.VPERFCTR_CONTROL_SIZE
_EVNTSEL_AT = 4 + _N
_HIGH_AT = _EVNTSEL_AT + _N
_IRESET_AT = _HIGH_AT + _N + 2
_PRESERVE_AT = _IRESET_AT + _N + 4


def _control(data: bytes) -> tuple[tuple[int, int, int], ctl.PerfctrControl | Exception]:
    """A VPERFCTR_CONTROL's (si_signo, preserve, flags) and its cpu_control,
    parsed once for every use of the call; what it failed with, kept to be
    raised where the call uses it."""
    if len(data) == _CONTROL_WORDS.size:
        w = _CONTROL_WORDS.unpack(data)
        control = ctl.PerfctrControl(
            w[1], w[2], w[3], w[4:_EVNTSEL_AT], w[_EVNTSEL_AT:_HIGH_AT], w[_HIGH_AT:_IRESET_AT],
            w[_IRESET_AT : _IRESET_AT + _N],
        )  # fmt: skip
        return (w[0], w[_PRESERVE_AT], w[_PRESERVE_AT + 1]), control
    try:
        request = _CONTROL.parse(data)
        return (request.si_signo, request.preserve, request.flags), ctl.PerfctrControl.parse(request.cpu_control)
    except Exception as exc:  # noqa: BLE001 - raised by _checked
        return (0, 0, 0), exc


def _checked(control: ctl.PerfctrControl | Exception | None) -> ctl.PerfctrControl:
    if isinstance(control, Exception):
        raise control
    assert control is not None
    return control


def _starts(control: ctl.PerfctrControl | Exception) -> bool:
    """Whether a VPERFCTR_CONTROL's data runs any counter (vperfctr_stop's does
    not); one that does not parse is refused later."""
    if isinstance(control, Exception):
        return True
    return bool(control.tsc_on or control.nractrs or control.nrictrs)


def send_overflow(task: tasks.Task, sig: int, mask: int, armed_by: int) -> None:
    """Queue the overflow signal to the owning thread if it is still the same
    thread and the user who set the counters up may still signal it under
    kill(2)'s rule (its real or saved uid is theirs): a thread that became
    another user's (a set-uid exec keeps the state) is out of their reach."""
    now = tasks.read_task(task.tid)
    if now is None or now.start != task.start:
        return
    if armed_by != 0 and armed_by not in (now.uids[0], now.uids[2]):
        log.info("perfctr overflow signal to thread %d dropped: uid %d may not signal it", task.tid, armed_by)
        return
    try:
        tasks.queue_signal(task.tgid, task.tid, sig, (OVF_TAG << 32) | (mask & 0xFFFFFFFF))
    except OSError as exc:
        log.info("perfctr overflow signal to thread %d: %s", task.tid, exc)
