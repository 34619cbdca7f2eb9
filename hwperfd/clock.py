"""Where CPU time comes from: the host (real) or the tests (manual).

The counter kernel asks a clock how much user and system time a process (or
an emulated CPU) has used in all; counts are computed lazily from that, so an
idle process costs nothing.  Under the manual clock time moves only when
told, so every count is predictable.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, NamedTuple

from hwperfd.host import processes, taskstats
from hwperfd.host.attribution import SHARE_ONE, Attribution

CpuTimes = tuple[int, int]


class ManualClock:
    """CPU time moves only through ``advance`` and ``advance_cpu``."""

    name = "manual"

    def __init__(self, cpus: int) -> None:
        self._processes: dict[int, CpuTimes] = {}
        self._threads: dict[int, CpuTimes] = {}  # tid -> times; a process's main thread has tid == pid
        self._cpus: list[CpuTimes] = [(0, 0)] * cpus
        self.elapsed_ns = 0  # every advance so far, one after another: the trace's emulated time

    def process_times(self, pid: int) -> CpuTimes | None:
        times = self._processes.get(pid)
        if times is not None:
            return times
        return (0, 0) if processes.exists(pid) else None

    def cpu_times(self, cpu: int) -> CpuTimes:
        return self._cpus[cpu]

    def thread_times(self, pid: int, tid: int) -> CpuTimes | None:
        times = self._threads.get(tid)
        if times is not None:
            return times
        return (0, 0) if processes.read_thread_start(pid, tid) is not None else None

    def advance(self, pid: int, user_ns: int, system_ns: int = 0) -> None:
        """``pid`` ran this long: its main thread did."""
        self.advance_thread(pid, pid, user_ns, system_ns)

    def advance_thread(self, pid: int, tid: int, user_ns: int, system_ns: int = 0) -> None:
        """Thread ``tid`` of ``pid`` ran this long: so did its process."""
        if user_ns < 0 or system_ns < 0:
            raise ValueError("time only moves forward")
        self.elapsed_ns += user_ns + system_ns
        for table, key in ((self._processes, pid), (self._threads, tid)):
            user, system = table.get(key, (0, 0))
            table[key] = (user + user_ns, system + system_ns)

    def advance_cpu(self, cpu: int, user_ns: int, system_ns: int = 0) -> None:
        if user_ns < 0 or system_ns < 0:
            raise ValueError("time only moves forward")
        if not 0 <= cpu < len(self._cpus):
            raise ValueError(f"no CPU {cpu}")
        user, system = self._cpus[cpu]
        self._cpus[cpu] = (user + user_ns, system + system_ns)
        self.elapsed_ns += user_ns + system_ns

    def forget(self, pid: int) -> None:
        self._processes.pop(pid, None)
        self._threads.pop(pid, None)

    def forget_thread(self, tid: int) -> None:
        self._threads.pop(tid, None)

    def thread_exited(self, pid: int, tid: int, user_ns: int, system_ns: int) -> None:
        """Manual time is exact already; the host's accounting is ignored."""

    def born(self, pid: int, at_ns: int) -> None:
        """Manual time is what the tests gave each pid, kept as given."""

    def resume_line(self, pid: int, seen: CpuTimes) -> None:
        """Manual time is exact: there is no line to keep."""

    def resume_thread_line(self, pid: int, tid: int, seen: CpuTimes) -> None:
        """As ``resume_line``."""

    def thread_born(self, tid: int, at_ns: int) -> None:
        """As ``born``."""

    def tsc_ns(self, cpu: int) -> int:
        """The TSC's time base: a manual CPU has no idle time, so its TSC
        moves exactly with ``advance_cpu`` (user + system)."""
        user, system = self._cpus[cpu]
        return user + system

    def exited(self, pid: int, user_ns: int, system_ns: int) -> None:
        """Manual time is exact already; the host's accounting is ignored."""


class RealClock:
    """The host's CPU time.  Emulated CPU i takes an equal share of host CPU
    ``i % host_cpus``, so N emulated CPUs together see the whole machine.

    A process's (or thread's) time is divided into user and system time by
    an ``Attribution`` kept for it from the first time it is asked about
    (``hwperfd.host.attribution`` says how and why); a process nobody asks
    about costs nothing.  stat is read at most once a tick per context, and
    not at all while a state page holds the context's line: then the line
    changes only when the page is written (``page_line``)."""

    name = "real"

    FINALS_KEPT = 4096  # exit records of processes nobody has asked about yet
    KEPT = 4096  # attributions of contexts not held by a page, least recently asked dropped first

    def __init__(self, cpus: int) -> None:
        self._cpus = cpus
        self._final: OrderedDict[int, CpuTimes] = OrderedDict()
        self._atts: OrderedDict[int, tuple[int, Attribution]] = OrderedDict()  # pid -> (stat read at, line)
        self._held: set[int] = set()  # pids with a state page
        self._thread_atts: OrderedDict[int, tuple[int, Attribution]] = OrderedDict()  # tid -> (stat read at, line)
        self._thread_held: set[int] = set()
        self._thread_final: OrderedDict[tuple[int, int], CpuTimes] = OrderedDict()  # (pid, tid) -> exit record

    # -- processes ---------------------------------------------------------------

    def process_times(self, pid: int) -> CpuTimes | None:
        """The process's counted user and system time now (one clock_gettime;
        stat at most once a tick).  Once it has exited, the kernel's exit
        accounting is reached as far as what was counted allows."""
        if pid in self._final:
            return self._exited_times(pid)
        return self._times(self._atts, self._held, pid, processes.read_cpu_ticks_state, processes.read_cpu_total)

    def _times(
        self,
        atts: OrderedDict[int, tuple[int, Attribution]],
        held: set[int],
        key: int,
        read_ticks: Callable[[int], processes.StatTicks | None],
        read_total: Callable[[int], int | None],
    ) -> CpuTimes | None:
        entry = atts.get(key)
        now = time.monotonic_ns()
        if entry is None or now - entry[0] >= processes.TICK_NS:
            # A held line does not change here, but a zombie still settles:
            # nobody reads its page any more, and its exit is written to it.
            ticks = read_ticks(key)  # before the clock: stat is never ahead of it
            total = read_total(key)
            if ticks is None or total is None:
                return None
            utime, stime, zombie, _ = ticks
            if entry is None:
                if zombie:
                    # First asked about as a zombie (its exit record still
                    # queued behind a storm): its whole time is split as
                    # wait4 will report it, not all as the user time stat's
                    # truncated ticks would make of a process under a tick.
                    system = self._zombie_system(key, total, stime, read_ticks)
                    times = (total - system, system)
                    att = Attribution(times[0], times[1], (utime, stime), last=times, marks=[(total, system)])
                else:
                    att = Attribution.start(total, _sampled(key, ticks, total), 1)
                att.begun_ns = now  # before stat was read: a predecessor's line is always older than a birth
                atts[key] = (now, att)
                if len(atts) > self.KEPT:
                    self._drop_oldest(atts, held)
                return att.last
            att = entry[1]
            if zombie:
                # Its stat is final: wait4 will report a system time within
                # the tick stat truncated it to (the kernel's own split, when
                # it tells it), reached as far as what was counted allows,
                # before any exit record.
                system = self._zombie_system(key, total, stime, read_ticks, att.at(total)[1])
                att.settle(total, (total - system, system))
                atts[key] = (now, att)
                return att.last
            if key in held:
                # Its stat is looked at once a tick too (for a zombie), not
                # at every read: a read of stat may wait on a worker.
                atts[key] = (now, att)
                return att.at(total)
            att.at(total)
            att.look(_sampled(key, ticks, total), 1)
            atts[key] = (now, att)
            atts.move_to_end(key)
            return att.last
        total = read_total(key)
        return None if total is None else entry[1].at(total)

    @staticmethod
    def _zombie_system(
        key: int, total: int, stime: int, read_ticks: Callable[[int], processes.StatTicks | None], counted: int = 0
    ) -> int:
        """The system time wait4 will report for zombie ``key`` of ``total``
        ns: the kernel's own split when it tells it (a process's, not a
        thread's), else ``counted``, put within the tick stat's ``stime``
        truncates it to."""
        split = _zombie_split(key, total) if read_ticks is processes.read_cpu_ticks_state else None
        return _within_tick(counted if split is None else split[1], stime, total)

    def _drop_oldest(self, atts: OrderedDict[int, tuple[int, Attribution]], held: set[int]) -> None:
        """Past ``KEPT`` the least recently asked about goes (one a page holds
        never): asked about again, it starts a new line from stat."""
        for key in atts:
            if key not in held:
                del atts[key]
                return

    def _exited_times(self, pid: int) -> CpuTimes | None:
        info = processes.read_process(pid)
        final = self._final[pid]
        if info is not None and not info.zombie and (
            not info.exiting or (processes.read_cpu_total(pid) or 0) < sum(final)
        ):
            # A live process under that pid that is not exiting, or has run
            # less than the record says, is a new one: the record was its
            # predecessor's, kept since that exit (every exit's is, and a
            # fork of an uncounted parent clears none).  The process the
            # record is of is in the rest of its exit (do_exit sends the
            # record before exit_notify makes it a zombie: PF_EXITING).
            self.forget(pid)
            return self.process_times(pid)
        total = final[0] + final[1]
        clock = processes.read_cpu_total(pid) if info is not None else None
        if clock:
            # A zombie's CPU clock is final and exact, the rest of its exit
            # included, which its exit record (made earlier) is not; and the
            # record's run time may be an estimate above it (elapsed time
            # less run-queue waits counts a VM's stolen time too).
            total = clock
        target = _scaled(final, total)
        ticks = processes.read_cpu_ticks_state(pid) if info is not None else None
        if ticks is not None and ticks[2]:
            # A tick may land in the rest of the exit, after the record: the
            # zombie's own accounting has it (wait4 reports that split), put
            # within the tick of the zombie's stat.
            split = _zombie_split(pid, total)
            system = _within_tick(target[1] if split is None else split[1], ticks[1], total)
            target = (total - system, system)
        entry = self._atts.get(pid)
        if entry is None:
            # Never asked about while it ran: its exit split is the whole story.
            times = target
            entry = (0, Attribution(times[0], times[1], (0, 0), last=times, marks=[(total, times[1])]))
            self._atts[pid] = entry
        return entry[1].settle(total, target)

    def exited(self, pid: int, user_ns: int, system_ns: int) -> None:
        """The kernel's exit accounting for ``pid`` (what wait4 reports for it):
        its last word on CPU time, which outlives the /proc entry a parent may
        reap at once.  Kept for every exit, as it may arrive before the fork
        that makes the process interesting is applied."""
        self._final[pid] = (user_ns, system_ns)
        self._final.move_to_end(pid)
        while len(self._final) > self.FINALS_KEPT:
            self._final.popitem(last=False)

    def forget(self, pid: int) -> None:
        self._final.pop(pid, None)
        self._atts.pop(pid, None)
        self._held.discard(pid)

    def born(self, pid: int, at_ns: int) -> None:
        """A process was forked as ``pid`` at ``at_ns`` (CLOCK_MONOTONIC; 0:
        unknown, and nothing is dropped).  What is kept under the pid from
        before then was a predecessor's, and would hold the newborn's times
        to its own: its line's floor (counts stuck at the old process's
        times, or above the newborn's CPU time) and its exit split.  Its
        exit record goes whatever its age (an exit is applied after the
        forks of its batch, so the newborn's own is recorded after this);
        a line begun since the birth was the newborn's, asked about before
        its fork was applied, and stays."""
        if not at_ns:
            return
        self._final.pop(pid, None)
        self._thread_final.pop((pid, pid), None)
        entry = self._atts.get(pid)
        if entry is not None and entry[1].begun_ns < at_ns:
            del self._atts[pid]
            self._held.discard(pid)
        self.thread_born(pid, at_ns)  # its main thread's tid

    def resume_line(self, pid: int, seen: CpuTimes) -> None:
        """A restarted daemon put back counts of ``pid`` that a former daemon
        counted to its times ``seen``: the line goes on from there, neither
        mode below (``Attribution.resume``)."""
        self._resume(self._atts, pid, seen, processes.read_cpu_ticks_state, processes.read_cpu_total)

    def resume_thread_line(self, pid: int, tid: int, seen: CpuTimes) -> None:
        """As ``resume_line``, for thread ``tid``'s context."""
        self._resume(
            self._thread_atts,
            tid,
            seen,
            lambda t: _running(processes.read_task_cpu_ticks(pid, t)),
            lambda t: processes.read_thread_run_ns(pid, t),
        )

    def _resume(
        self,
        atts: OrderedDict[int, tuple[int, Attribution]],
        key: int,
        seen: CpuTimes,
        read_ticks: Callable[[int], processes.StatTicks | None],
        read_total: Callable[[int], int | None],
    ) -> None:
        entry = atts.get(key)
        floor = seen if entry is None else (max(seen[0], entry[1].last[0]), max(seen[1], entry[1].last[1]))
        if entry is not None and floor == entry[1].last:
            return  # its line is already at or past what was counted
        now = time.monotonic_ns()
        ticks = read_ticks(key)
        total = read_total(key)
        if ticks is None or total is None or ticks[2]:
            return  # gone, or a zombie: its exit split is its last word (``_times``)
        att = Attribution.resume(total, _sampled(key, ticks, total), 1, floor)
        att.begun_ns = now if entry is None else entry[1].begun_ns
        atts[key] = (now, att)
        if len(atts) > self.KEPT:
            self._drop_oldest(atts, self._held if atts is self._atts else self._thread_held)

    def hold_split(self, pid: int, held: bool) -> None:
        """A process that reads its own counts from a state page divides its
        CPU time on the line the page shows; the daemon must keep to the same
        line until it writes the page again (``page_line``), or a read through
        it could fall below a read from the page a moment earlier."""
        if held:
            self._held.add(pid)
        else:
            self._held.discard(pid)

    def page_line(self, pid: int, seen: CpuTimes, fresh: bool) -> PageLine | None:
        """The line a state page of ``pid`` shows from ``seen`` (the counts'
        times, which a catch-up has just taken from this clock): a new base
        there, and stat's ratio read anew if ``fresh`` and a tick old."""
        return self._page_line(self._atts, pid, seen, fresh, processes.read_cpu_ticks_state)

    def _page_line(
        self,
        atts: OrderedDict[int, tuple[int, Attribution]],
        key: int,
        seen: CpuTimes,
        fresh: bool,
        read_ticks: Callable[[int], processes.StatTicks | None],
    ) -> PageLine | None:
        entry = atts.get(key)
        if entry is None or entry[1].last != seen:
            return None
        att = entry[1]
        now = time.monotonic_ns()
        ticks = read_ticks(key) if fresh and now - entry[0] >= processes.TICK_NS else None
        if ticks is not None:
            att.look(_sampled(key, ticks, sum(seen)), 1)
            atts[key] = (now, att)
        else:
            att.rebase()
        return PageLine(SHARE_ONE - att.share, att.share, att.carry, att.room)

    # -- CPUs ----------------------------------------------------------------------

    def cpu_times(self, cpu: int) -> CpuTimes:
        host = processes.read_system_cpu_times()
        index = cpu % len(host)
        sharing = len(range(index, self._cpus, len(host)))
        return host[index].user_ns // sharing, host[index].system_ns // sharing

    def tsc_ns(self, cpu: int) -> int:
        """The TSC's time base: wall time since the host booted (CLOCK_MONOTONIC),
        as a TSC starts at 0 at boot (pctr(4)); the same on every CPU."""
        return time.monotonic_ns()

    # -- threads -------------------------------------------------------------------

    def thread_times(self, pid: int, tid: int) -> CpuTimes | None:
        """One thread's counted user and system time: its exact run time
        (schedstat) divided as a process's is."""
        times = self._times(
            self._thread_atts,
            self._thread_held,
            tid,
            lambda t: _running(processes.read_task_cpu_ticks(pid, t)),
            lambda t: processes.read_thread_run_ns(pid, t),
        )
        if times is None:
            # Gone: its exit record, if taskstats has told us, is its last word.
            final = self._thread_final.get((pid, tid))
            entry = self._thread_atts.get(tid)
            if final is not None and entry is not None:
                return entry[1].settle(max(final[0] + final[1], sum(entry[1].last)), final)
            return final
        return times

    def thread_exited(self, pid: int, tid: int, user_ns: int, system_ns: int) -> None:
        """The kernel's exit accounting for thread ``tid`` of ``pid``: the
        time it ran after the daemon last looked would otherwise go with its
        /proc entry.  The last ``FINALS_KEPT`` are kept."""
        self._thread_final[(pid, tid)] = (user_ns, system_ns)
        self._thread_final.move_to_end((pid, tid))
        while len(self._thread_final) > self.FINALS_KEPT:
            self._thread_final.popitem(last=False)

    def hold_thread_split(self, tid: int, held: bool) -> None:
        """As ``hold_split``, for a thread's page."""
        if held:
            self._thread_held.add(tid)
        else:
            self._thread_held.discard(tid)

    def thread_page_line(self, tid: int, seen: CpuTimes, fresh: bool) -> PageLine | None:
        """As ``page_line``, for thread ``tid``'s page.  ``fresh`` only while
        the thread waits: while it runs its schedstat lags its own clock, and
        a new ratio from that point could take a later read below an earlier one."""
        return self._page_line(
            self._thread_atts, tid, seen, fresh, lambda t: _running(processes.read_thread_cpu_ticks(t))
        )

    def forget_thread(self, tid: int) -> None:
        self._thread_atts.pop(tid, None)
        self._thread_held.discard(tid)

    def thread_born(self, tid: int, at_ns: int) -> None:
        """As ``born``, for a thread created as ``tid``."""
        entry = self._thread_atts.get(tid)
        if at_ns and entry is not None and entry[1].begun_ns < at_ns:
            self.forget_thread(tid)


class PageLine(NamedTuple):
    """What a state page shows of the line its context's time follows past
    its base: shares of new time (user, system, over SHARE_ONE together),
    the carried fraction of a ns and the system time still allowed."""

    share_user: int
    share_system: int
    carry: int
    room: int


def _running(ticks: tuple[int, int] | None) -> processes.StatTicks | None:
    """A thread's ticks, as a process's are read (a thread is no zombie, and
    its tick samples are its own)."""
    return None if ticks is None else processes.StatTicks(ticks[0], ticks[1], False, True)


def _sampled(task: int, ticks: processes.StatTicks, total: int) -> tuple[int, int]:
    """``total`` ns divided into (user, system) as the kernel would divide it
    now: task ``task``'s own tick samples (taskstats, to the microsecond)
    scaled to ``total``, as cputime_adjust() scales them for wait4.  Where
    they are not the whole context's (a process of several threads) or
    taskstats does not answer, stat's.

    Not stat's where the samples can be had: stat holds each answer to a
    floor its earlier reads left (task_struct.prev_cputime), and a read made
    before the first user-mode sample puts the whole run time so far to
    system time (cputime_adjust: no utime, all stime).  The daemon's own
    reads of a new process's stat (its start time, at its first calls) are
    such reads: on a busy CPU a process can run 40 ms before a tick finds it
    in user mode, and its stat then says 40 ms of system time for good, where
    wait4 will report a few.  The samples carry no floor."""
    if ticks.alone and not ticks.zombie:
        record = taskstats.task_record(task)
        if record is not None:
            return taskstats.adjusted_split(record.user_ns, record.system_ns, total)
    system = min(ticks.stime * processes.TICK_NS, total)
    return total - system, system


def _zombie_split(pid: int, total: int) -> CpuTimes | None:
    """The split wait4 will report for zombie ``pid`` of ``total`` ns: its
    tick samples to the microsecond (taskstats; stat truncates them to
    USER_HZ ticks) dividing its exact run time as the kernel's
    cputime_adjust() does.  Only for a process that never had a second
    thread: the zombie leader's record is then the whole process's."""
    group = taskstats.group_record(pid)
    if group is None or group.total_ns:
        return None
    task = taskstats.task_record(pid)
    if task is None:
        return None
    return taskstats.adjusted_split(task.user_ns, task.system_ns, total)


def _within_tick(system: int, stime: int, total: int) -> int:
    """``system`` ns put within the tick that stat's ``stime`` ticks truncate
    (and within ``total``)."""
    low = stime * processes.TICK_NS
    return min(max(system, low), low + processes.TICK_NS - 1, total)


def _scaled(final: CpuTimes, total: int) -> CpuTimes:
    """``total`` divided as ``final`` divides its own."""
    whole = final[0] + final[1]
    if whole == 0:
        return total, 0
    system = total * final[1] // whole
    return total - system, system
