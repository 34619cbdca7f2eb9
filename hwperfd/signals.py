"""Overflow signals, sent as the kernel sends them at the overflow interrupt.

Every overflow owes its own signal, as on IRIX, where the kernel sent one
while servicing each overflow interrupt (r10k_counters(5)).  The sender
keeps a count per target and signal and sends the next once the target has
taken the previous, so none is lost to the daemon's own pace: a look that
finds two overflows at once sends two signals.  A standard signal (below
SIGRTMIN) does not queue: an overflow merges with one still pending at the
target only where the kernel would have merged it at the interrupt - the
target blocks the signal (in a handler of it, or by its mask), so the
pending one stays.  One pending and not blocked is on its way (the target
has not run since it was sent): the next waits for it, as the interrupt,
taken on the target's own CPU, came only after the earlier signal was
delivered.  Real-time signals queue and are never merged.  Whatever is
owed for a signal ends when the counters that raise it do (``cancel``: a
release, or a control with another signal).

A process is its pid and its start time: every signal goes through a pidfd
opened on that process, so none can reach a later process that reuses the
pid, and whatever is owed dies with the process (``forget``).  Before each
signal the sender asks what kill(2) would: the user who armed the signal
must still be allowed to signal the target (its real or saved uid is theirs),
else the signals stop - a setuid program that became fully root is out of a
user's reach, here as in the kernel.

Profiling ticks (HWPERF_PROFENABLE) are sent only while the target catches
them: its library's handler records them, and a process whose exec reset the
handler would be killed by the real-time signal they come on.

Bounds that keep a client from making the daemon spin or grow: at most
``MAX_OWED`` signals are owed per process and signal - beyond that they
merge, as a pending standard signal does; a signal the target ignores is
dropped at once (delivering it would do nothing); and each target that still
has the last one pending (blocked, or a slow handler) is looked at less and
less often, down to once per ``MAX_BACKOFF`` seconds, so a thousand blocked
targets cost what one does; and one unprivileged user has signals owed to at
most ``MAX_TARGETS_PER_USER`` processes and threads at a time (each holds a
pidfd): past that, new targets' signals are dropped and counted; and a call
that ends a signal sends at most ``END_BURST`` of it at once.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from hwperfd.counters.kernel import Signal
from hwperfd.host import processes
from hwperfd.trace import recorder as trace

log = logging.getLogger(__name__)

MAX_OWED = 10_000  # per (process, signal): 5 s of delivery at full speed
MAX_TARGETS_PER_USER = 4096  # processes and threads one unprivileged user has signals owed to
MIN_POLL = 0.0005
MAX_POLL = 0.01  # the IRIX clock tick
MAX_BACKOFF = 1.0  # longest a target with its signal still pending waits for a look
# Real-time signals that go at once when a call ends their counters' signal
# (``SignalSender.end``): POSIX's least sigqueue depth (_POSIX_SIGQUEUE_MAX).
# More owed merge, so a release costs the daemon a bounded burst, whatever
# a client let pile up.
END_BURST = 32
_UNIGNORABLE = (signal.SIGKILL, signal.SIGSTOP)


@dataclass
class _Target:
    """Signals owed to one process (pid and start), or to one thread of it
    (tid, 0 for the process), through one pidfd."""

    pid: int
    start: int
    tid: int
    owner: tuple[int, int] | None
    pidfd: int
    owed: dict[int, int]  # signal -> count
    caught_only: set[int] = field(default_factory=set)  # signals sent only while caught
    next_look: float = 0.0
    backoff: float = MIN_POLL


@dataclass(frozen=True)
class _Status:
    pending: int  # mask of signals pending for the thread itself (SigPnd)
    ignored: int
    uids: tuple[int, ...]  # real, effective, saved, fs
    zombie: bool = False  # exited: every signal is discarded
    caught: int = 0  # mask of signals with a handler
    shared: int = 0  # mask of signals pending for the process (ShdPnd)
    blocked: int = 0  # the thread's signal mask (SigBlk)


def _status(pid: int, tid: int = 0) -> _Status | None:
    path = f"/proc/{pid}/task/{tid}/status" if tid else f"/proc/{pid}/status"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    pending = shared = blocked = ignored = 0
    uids: tuple[int, ...] = ()
    zombie = False
    caught = 0
    for line in data.split(b"\n"):
        if line.startswith(b"State:"):
            zombie = line.split()[1:2] == [b"Z"]
        elif line.startswith(b"SigPnd:"):
            pending = int(line.split()[1], 16)
        elif line.startswith(b"ShdPnd:"):
            shared = int(line.split()[1], 16)
        elif line.startswith(b"SigBlk:"):
            blocked = int(line.split()[1], 16)
        elif line.startswith(b"SigIgn:"):
            ignored = int(line.split()[1], 16)
        elif line.startswith(b"SigCgt:"):
            caught = int(line.split()[1], 16)
        elif line.startswith(b"Uid:"):
            uids = tuple(int(x) for x in line.split()[1:])
    return _Status(pending, ignored, uids, zombie, caught, shared, blocked)


def _every_thread_blocks(pid: int, bit: int) -> bool:
    """Whether every thread of ``pid`` blocks the signal of ``bit``: a signal
    pending for the process stays pending only then (the kernel hands it to
    any thread that does not block it)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        status = _status(pid, int(tid))
        if status is not None and not status.blocked & bit:
            return False
    return True


def may_signal(owner: tuple[int, int] | None, uids: tuple[int, ...]) -> bool:
    """kill(2)'s rule for the user who armed the signal: the target's real or
    saved uid is theirs (root may signal anyone)."""
    if owner is None:
        return True
    return len(uids) >= 3 and owner[0] in (uids[0], uids[2])


class SignalSender:
    def __init__(self, max_per_user: int = MAX_TARGETS_PER_USER) -> None:
        self.max_per_user = max_per_user
        self._per_user: dict[int, int] = {}  # targets per unprivileged uid that armed them
        self._targets: dict[tuple[int, int, int], _Target] = {}  # (pid, start, tid)
        self._by_pid: dict[int, set[tuple[int, int, int]]] = {}
        self._wakeup = trio.Event()
        self.sent = 0
        self.merged = 0  # merged with one pending and blocked at the target, or owed beyond MAX_OWED
        self.dropped = 0  # owed to processes that went, ignored them, or left the owner's reach
        self.refused = 0  # of those: owed past the per-user target cap
        self.polls = 0
        self.looks = 0  # status reads of targets
        #: Whether the signals of a process (or of a thread, for its own
        #: counters) wait: the counts that raised them are not in the set-up
        #: store yet (the daemon's; see ``_send_one``).
        self.held: Callable[[int], bool] = lambda pid: False

    def owe(self, owed: Signal) -> None:
        """Called by the kernel model from the trio thread."""
        key = (owed.pid, owed.start, owed.tid)
        target = self._targets.get(key)
        if target is None:
            if not owed.tid and any(k[1] != owed.start and not k[2] for k in self._by_pid.get(owed.pid, ())):
                self.forget(owed.pid)  # a process that went: a later one has the pid
            if owed.tid:
                pidfd = processes.open_thread_pidfd(owed.pid, owed.tid, owed.thread_start)
            else:
                # A process whose start the daemon never learnt (its fork
                # heard only once it was gone) cannot be told from a later
                # one at its pid, which fork storms bring round in minutes:
                # its signals are dropped, never sent to whoever has the pid.
                pidfd = processes.open_pidfd(owed.pid, owed.start) if owed.start else None
            if pidfd is None:
                self.dropped += owed.count
                return
            uid = owed.owner[0] if owed.owner else 0
            if uid and self._per_user.get(uid, 0) >= self.max_per_user:
                # Each target holds a pidfd: one user cannot take the daemon's descriptors.
                os.close(pidfd)
                self.dropped += owed.count
                self.refused += owed.count
                return
            target = self._targets[key] = _Target(owed.pid, owed.start, owed.tid, owed.owner, pidfd, {})
            self._by_pid.setdefault(owed.pid, set()).add(key)
            self._count(target, +1)
        if target.owner != owed.owner:
            self._count(target, -1)
            target.owner = owed.owner
            self._count(target, +1)
        if not owed.caught_only:
            # An overflow signal armed on the tick's number goes as armed: the
            # ticks owed before it no longer decide whether it is sent.
            target.caught_only.discard(owed.signal)
        elif not target.owed.get(owed.signal):
            target.caught_only.add(owed.signal)
        total = target.owed.get(owed.signal, 0) + owed.count
        if total > MAX_OWED:
            self.merged += total - MAX_OWED
            total = MAX_OWED
        target.owed[owed.signal] = total
        trace.active.signal_owed(owed.pid, owed.tid, owed.signal, owed.count)
        target.next_look, target.backoff = 0.0, MIN_POLL
        self._wakeup.set()

    def owed(self, pid: int, sig: int, tid: int = 0) -> int:
        for key in self._by_pid.get(pid, ()):
            if key[2] == tid:
                return self._targets[key].owed.get(sig, 0)
        return 0

    def owes(self, pid: int, tid: int) -> bool:
        """Whether any signal is owed to thread ``tid`` of ``pid``."""
        return any(key[2] == tid and self._targets[key].owed for key in self._by_pid.get(pid, ()))

    def cancel(self, pid: int, sig: int, tid: int = 0) -> None:
        """The counters that raised ``sig`` for ``pid`` (``tid`` 0), or for its
        thread ``tid``, were released or now raise another: nothing more of it
        is sent there (another thread's own counters may raise it still)."""
        for key in list(self._by_pid.get(pid, ())):
            if key[2] != tid:
                continue
            target = self._targets[key]
            count = target.owed.pop(sig, 0)
            self.dropped += count
            if not target.owed:
                self._forget_target(target)

    def end(self, pid: int, sig: int, tid: int = 0) -> bool:
        """The counters that raise ``sig`` for ``pid`` (``tid`` 0), or for its
        thread ``tid``, stop raising it (a release, or a control with another
        signal), in a call about to answer: what they raised goes now, as on
        IRIX each overflow's signal went at its interrupt, before any later
        call took effect - of a real-time signal up to ``END_BURST`` owed
        (they queue), of a standard one the next (the target cannot take it
        before the call returns, and the rest would merge with it there) -
        and nothing of it after.  True if a signal went."""
        sent = self.sent
        now = time.monotonic()
        for key in [k for k in self._by_pid.get(pid, ()) if k[2] == tid]:
            target = self._targets[key]
            if target.owed.get(sig):
                self._send_one(key, target, now, only=sig, burst=END_BURST)
            left = target.owed.pop(sig, 0)
            self.merged += left
            if key in self._targets and not target.owed:
                self._forget_target(target)
        return self.sent > sent

    def forget(self, pid: int) -> None:
        """The process at ``pid`` is gone: what it and its threads were owed
        goes with it."""
        for key in self._by_pid.pop(pid, set()):
            self._drop(self._targets.pop(key))

    def forget_thread(self, pid: int, tid: int) -> None:
        """Thread ``tid`` of ``pid`` is gone: what it was owed goes with it."""
        keys = self._by_pid.get(pid, set())
        for key in [k for k in keys if k[2] == tid]:
            keys.discard(key)
            self._drop(self._targets.pop(key))
        if not keys:
            self._by_pid.pop(pid, None)

    def _drop(self, target: _Target) -> None:
        self.dropped += sum(target.owed.values())
        os.close(target.pidfd)
        self._count(target, -1)

    def _count(self, target: _Target, step: int) -> None:
        """Keep the per-user count of targets (root's are not counted)."""
        uid = target.owner[0] if target.owner else 0
        if uid:
            left = self._per_user.get(uid, 0) + step
            if left > 0:
                self._per_user[uid] = left
            else:
                self._per_user.pop(uid, None)

    def _forget_target(self, target: _Target) -> None:
        """Let one target go (a process's, or one thread's)."""
        key = (target.pid, target.start, target.tid)
        if self._targets.pop(key, None) is None:
            return
        keys = self._by_pid.get(target.pid, set())
        keys.discard(key)
        if not keys:
            self._by_pid.pop(target.pid, None)
        self._drop(target)

    def send_now(self, pid: int, tid: int) -> bool:
        """Send what is owed to thread ``tid`` of ``pid`` now, not at the
        sender's next round: a call of that thread is about to take effect,
        and its overflow must come first.  True if a signal went."""
        sent = self.sent
        for key in [k for k in self._by_pid.get(pid, ()) if k[2] == tid]:
            target = self._targets[key]
            target.next_look = 0.0
            self._send_one(key, target, time.monotonic())
        return self.sent > sent

    def targets(self) -> int:
        return len(self._targets)

    async def run(self) -> None:
        delay = MIN_POLL
        while True:
            if not self._targets:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                delay = MIN_POLL
                continue
            self.polls += 1
            now = time.monotonic()
            delay = MIN_POLL if self._send_round(now) else min(delay * 2, MAX_POLL)
            soonest = min(t.next_look for t in self._targets.values()) if self._targets else now
            with trio.move_on_after(max(delay, soonest - now)):
                await self._wakeup.wait()
            self._wakeup = trio.Event()

    def _send_round(self, now: float) -> bool:
        """Send the next owed signal to every target that has taken the last;
        True if any was sent."""
        progressed = False
        for key, target in list(self._targets.items()):
            if target.next_look > now:
                continue
            progressed |= self._send_one(key, target, now)
        return progressed

    def _send_one(
        self, key: tuple[int, int, int], target: _Target, now: float, only: int = 0, burst: int = 1
    ) -> bool:
        """Send the next owed signals to one target that has taken the last;
        True if any was sent.  ``only``: that signal alone; ``burst``: up to
        that many of an owed real-time signal go at once, even while one is
        pending (``end``)."""
        progressed = False
        if self.held(target.pid) or (target.tid and self.held(target.tid)):
            # Sent before the store has what raised it, a restart between the
            # two would find the overflow owed and send it again.
            target.backoff = min(target.backoff * 2, MAX_BACKOFF)
            target.next_look = now + target.backoff
            return False
        self.looks += 1
        status = _status(target.pid, target.tid)
        if status is None or status.zombie or not processes.pidfd_alive(target.pidfd):
            self._forget_target(target)  # an exited process takes no more signals
            return False
        if not may_signal(target.owner, status.uids):
            owner = target.owner[0] if target.owner else 0
            log.info("pid %d left the reach of uid %d: its overflow signals stop", target.pid, owner)
            self._forget_target(target)
            return False
        sent_here = False
        for sig, count in list(target.owed.items()):
            if only and sig != only:
                continue
            bit = 1 << (sig - 1)
            if status.ignored & bit and sig not in _UNIGNORABLE:
                del target.owed[sig]  # delivery would do nothing
                self.dropped += count
                continue
            if sig in target.caught_only and not status.caught & bit:
                del target.owed[sig]  # a profiling tick nobody records (an exec reset the handler)
                self.dropped += count
                continue
            if (status.pending if target.tid else status.shared) & bit and not (burst > 1 and _queues(sig)):
                if not _queues(sig) and self._stays_pending(target, status, bit):
                    # A standard signal does not queue: the kernel merges an
                    # overflow's with the one pending (kernel/signal.c,
                    # legacy_queue), which the target blocks.
                    del target.owed[sig]
                    self.merged += count
                    trace.active.signal_merged(target.pid, target.tid, sig, count)
                continue  # a real-time signal, or one on its way: the next waits for it
            went = 0
            try:
                for _ in range(min(count, burst) if _queues(sig) else 1):
                    signal.pidfd_send_signal(target.pidfd, sig)
                    went += 1
                    self.sent += 1
                    trace.active.signal_sent(target.pid, target.tid, sig)
            except ProcessLookupError:
                self._forget_target(target)
                break
            except OSError as exc:
                if not went:
                    log.info("cannot send signal %d to %d: %s", sig, target.pid, exc)
                    del target.owed[sig]
                    continue
                count = went  # the target's queue is full: the rest would not queue either
            progressed = sent_here = True
            if count <= went:
                del target.owed[sig]
            else:
                target.owed[sig] = count - went
        if key not in self._targets:
            return progressed
        if not target.owed:
            self._forget_target(target)
        elif sent_here:
            target.next_look, target.backoff = 0.0, MIN_POLL
        else:
            # Still pending there: look again later, later each time.
            target.backoff = min(target.backoff * 2, MAX_BACKOFF)
            target.next_look = now + target.backoff
        return progressed

    @staticmethod
    def _stays_pending(target: _Target, status: _Status, bit: int) -> bool:
        """Whether a signal pending at ``target`` stays pending: the thread
        blocks it, or, sent to the process, every thread does.  Pending and
        not blocked, it is on its way in (delivered when the thread runs)."""
        if not status.blocked & bit:
            return False
        return bool(target.tid) or _every_thread_blocks(target.pid, bit)


def _queues(sig: int) -> bool:
    """Real-time signals queue; standard ones merge while pending and blocked."""
    return sig >= signal.SIGRTMIN
