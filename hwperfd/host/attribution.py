"""Dividing a process's (or a thread's) exact CPU time into user and system time.

Linux knows a task's CPU time to the nanosecond (its CPU clock) but tells
user from system time only by sampling a tick at a time: /proc/<pid>/stat's
utime and stime are that split, scaled to the exact total and truncated to
USER_HZ ticks (10 ms).  Dividing the whole total in stat's latest ratio at
every read, as a first design did, moves time already counted whenever a
tick lands: counts then run ahead of the CPU time they stand for, and lose a
tick's worth in the interval where a system tick appears.

What "stat's" split is below comes from the caller (hwperfd/clock.py
``_sampled``): the task's own tick samples scaled to its run time where
taskstats tells them (stat holds every answer to the highest system time an
earlier read saw), else stat's ticks.

The rule here (``Attribution``):

* Time counted stays counted.  Only CPU time new since the last reading is
  divided; user and system time each only grow, and together they are the
  CPU clock's total, never more.
* New time is system time at the rate stat's stime grew over the last
  ``WINDOW_NS`` or more of CPU time, plus a ``DECAY_NS`` share of the system
  time stat reports and not yet counted: a lone 10 ms stime step (which on a
  user-mode loop is mostly rounding, the real system time being a few
  samples of 4 ms spread over seconds) is spread over seconds, not taken
  out of one 200 ms interval, while a process that keeps calling the kernel
  is split at its real rate.
* System time never runs ahead of stat's (``room``): what stat has not yet
  reported goes to user time until it does.
* At exit the kernel's exit accounting (what wait4 reports) is reached as
  far as the two rules above allow (``settle``).

Between two looks at stat the division is a pure function of the CPU clock
(``at``), with the carried fraction of a nanosecond (``carry``) kept so that
taking a new base on the same line changes nothing; a state page holds the
same numbers and its readers do the same arithmetic in C
(``hwperfd_state_elapsed`` in include/hwperfd/state.h, ``elapsed`` here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The system share of new time is a fraction of this.
SHARE_ONE = 1 << 32
#: CPU time over which stat's system rate is taken (at least).
WINDOW_NS = 2_000_000_000
#: System time stat reported and not yet counted goes at 1/DECAY_NS of new time per ns.
DECAY_NS = 2 * WINDOW_NS


def elapsed(total: int, base: tuple[int, int], share: int, carry: int, room: int) -> tuple[int, int]:
    """User and system time past ``base`` for a CPU clock reading ``total``:
    the new time, ``share`` of SHARE_ONE of it system time (with ``carry``
    over SHARE_ONE carried in), at most ``room`` of it.  What the state
    pages' readers compute."""
    dt = total - base[0] - base[1]
    if dt <= 0:
        return 0, 0
    ds = min((carry + dt * share) >> 32, room, dt)
    return dt - ds, ds


@dataclass
class Attribution:
    """One context's counted user and system time, and the line new time follows."""

    user_ns: int  # counted at the base
    system_ns: int
    ticks: tuple[int, int]  # stat's (utime, stime) at the last look
    share: int = 0  # of SHARE_ONE: the system part of time past the base
    carry: int = 0  # the fraction of a ns of system time carried at the base, over SHARE_ONE
    room: int = 0  # system time that may still be counted past the base
    last: tuple[int, int] = (0, 0)  # the last times ``at`` gave
    marks: list[tuple[int, int]] = field(default_factory=list)  # (total, stime ns) at looks, oldest first
    begun_ns: int = 0  # when the line was begun (CLOCK_MONOTONIC): a line begun before its pid's birth is another's

    @classmethod
    def start(cls, total: int, ticks: tuple[int, int], tick_ns: int) -> Attribution:
        """A context first seen with CPU time ``total``: its history divided as
        stat divides it (only what follows is counted, so this is a label)."""
        system = min(total, ticks[1] * tick_ns)
        att = cls(total - system, system, ticks, last=(total - system, system))
        att.marks.append((total, ticks[1] * tick_ns))
        return att

    @classmethod
    def resume(cls, total: int, ticks: tuple[int, int], tick_ns: int, floor: tuple[int, int]) -> Attribution:
        """A context a former daemon counted to ``floor`` (its times then), seen
        again with CPU time ``total``: divided as ``start`` divides it, but
        neither mode below ``floor``.  The former line counted as user time
        the system time stat had not yet reported; stat's split of the whole
        history would take that back from user mode, and a count resting on
        ``floor`` would stand still until user time caught up."""
        user, system = floor
        if total <= user + system:
            att = cls(user, system, ticks, last=floor)
        else:
            system = min(max(ticks[1] * tick_ns, system), total - user)
            att = cls(total - system, system, ticks, last=(total - system, system))
        att.marks.append((max(total, user + system), ticks[1] * tick_ns))
        return att

    @property
    def base(self) -> tuple[int, int]:
        return self.user_ns, self.system_ns

    def at(self, total: int) -> tuple[int, int]:
        """The times at CPU clock ``total``; never below what it gave before."""
        du, ds = elapsed(total, self.base, self.share, self.carry, self.room)
        times = (self.user_ns + du, self.system_ns + ds)
        if times[0] >= self.last[0] and times[1] >= self.last[1]:
            self.last = times
        return self.last

    def rebase(self) -> None:
        """Take the last reading as the base, on the same line: every later
        reading is what it would have been."""
        dt = self.last[0] + self.last[1] - self.user_ns - self.system_ns
        ds = self.last[1] - self.system_ns
        if ds < self.room:  # not capped: the fraction of a ns goes on
            self.carry = (self.carry + dt * self.share) % SHARE_ONE
        # An exit's split (``settle``) may take more system time than the
        # room left: none is left then, not a negative amount.
        self.room = max(0, self.room - ds)
        self.user_ns, self.system_ns = self.last

    def look(self, ticks: tuple[int, int], tick_ns: int) -> None:
        """From the last reading on, new time follows stat's ``ticks`` (read
        no earlier than that reading's CPU clock)."""
        self.rebase()
        total = self.user_ns + self.system_ns
        stime_ns = ticks[1] * tick_ns
        self.room = max(0, stime_ns - self.system_ns)
        first_total, first_stime = self.marks[0]
        # Over a window at least, even for a younger process: stat's stime
        # moves in 10 ms steps, and the few ms of a user-mode loop's system
        # time (its start-up's too) show as one step seconds later.  A young
        # process that keeps calling the kernel is split short of its rate
        # meanwhile; its exit settles what is left (``settle``).
        span = max(total - first_total, WINDOW_NS)
        rate = ((stime_ns - first_stime) * SHARE_ONE) // span + (self.room * SHARE_ONE) // DECAY_NS
        self.share = min(SHARE_ONE, max(0, rate))
        self.carry = 0
        self.ticks = ticks
        # Marks about half a window apart: the oldest one kept is at least a
        # window back (once there is a window), and at most four are kept.
        if total - self.marks[-1][0] >= WINDOW_NS // 2:
            self.marks.append((total, stime_ns))
        while len(self.marks) > 1 and total - self.marks[1][0] >= WINDOW_NS:
            del self.marks[0]

    def settle(self, total: int, final: tuple[int, int]) -> tuple[int, int]:
        """The times at exit, ``total`` in all: the kernel's exit split
        ``final`` (scaled to ``total``), as near as monotonicity allows."""
        last = self.last
        dt = total - last[0] - last[1]
        if dt <= 0:
            return last
        whole = final[0] + final[1]
        system = total * final[1] // whole if whole else 0
        system = min(max(system, last[1]), last[1] + dt)
        self.last = (total - system, system)
        return self.last
