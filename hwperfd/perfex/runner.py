"""Run a command with its counters on, and collect its counts at exit.

perfex enables counters on itself, spawns the command (posix_spawn: a
vfork, so the child does not pay for copying perfex's memory) and releases
its own: the command inherits the counters at its fork, with zeroed counts
(r10k_counters(5)), and is counted from its first instruction, over the very
CPU time wait4(2) reports for it.  Without fork inheritance (a daemon
without the process-events connector) or when perfex cannot count itself,
perfex forks; the child blocks on a pipe until perfex has enabled counters
on the child's pid, then execs the command (the Python child's own exit
from perfex's memory is then counted too).  With -s the command is spawned
uncounted and counting starts at SIGUSR1 (one that came while perfex
started counts it from its first instruction).  Descendants inherit the
counters at fork and hwperfd folds their counts into their parent when the
parent waits for them (r10k_counters(5)), so when the command exits its own
file holds the whole tree's counts.  perfex waits with WNOWAIT, reads the
zombie's counts through the file it opened before, then reaps it.

While it waits perfex takes SIGCHLD - and with -s SIGUSR1/SIGUSR2 - through
sigwaitinfo, with those signals blocked, so no signal is lost between a
check and a wait and no handler runs in the middle of an ioctl.
"""

from __future__ import annotations

import errno
import os
import sys

import structs
from hwperfd.client import ProcessCounters
from hwperfd.perfex.plan import EventPlan

TYPE_CHECKING = False  # typing stays off perfex's start-up (hwperfd/records.py)
if TYPE_CHECKING:
    import signal
    from typing import Callable, NamedTuple
else:
    import _signal as signal  # signal's C module: no enum on perfex's start-up (hwperfd/perfex/__init__.py)

    from hwperfd.records import NamedTuple

SLOTS = 32
EXIT_PERFEX = 125  # perfex itself failed (as env(1), nice(1), timeout(1))
EXIT_CANNOT_RUN = 126
EXIT_NOT_FOUND = 127


class PerfexError(RuntimeError):
    """perfex could not do its job; the message is for the user."""

    def __init__(self, message: str, status: int = EXIT_PERFEX) -> None:
        super().__init__(message)
        self.status = status


class ProcessShare(NamedTuple):
    """One process's own counts (32 slots), as folded into the command; or
    one thread's share of the command's (``thread_of``: its process)."""

    pid: int  # a thread's tid: what IRIX's sproc'd threads' pids were
    comm: str
    raw: tuple[int, ...]
    thread_of: int = 0


class Measurement:
    """What one run of the command produced."""

    __slots__ = ("pid", "exit_code", "signal", "raw", "enabled_ns", "active_ns", "processes", "started", "lost")

    def __init__(
        self,
        pid: int,
        exit_code: int,
        signal: int | None,
        raw: tuple[int, ...],
        enabled_ns: int,
        active_ns: tuple[int, ...],
        processes: list[ProcessShare] | None = None,
        started: bool = True,
        lost: bool = False,
    ) -> None:
        self.pid = pid
        self.exit_code = exit_code  # what perfex exits with: the code, or 128 + signal
        self.signal = signal
        self.raw = raw  # slot counts: the command and every folded descendant
        self.enabled_ns = enabled_ns  # the command's own counting time (summed over -s intervals)
        self.active_ns = active_ns  # per slot, the part of enabled_ns it was loaded
        self.processes = [] if processes is None else processes  # descendants, then the command
        self.started = started  # False: -s and SIGUSR1 never came
        self.lost = lost  # the generation changed: counts are incomplete


class _Counting:
    """The counters of the command, started and stopped (-s) as asked."""

    def __init__(self, counters: ProcessCounters, plan: EventPlan, notice: Callable[[str], None]) -> None:
        self.counters = counters
        self.plan = plan
        self.notice = notice
        self.counting = False
        self.started = False
        self.lost = False
        self.generation = 0
        self.raw = [0] * SLOTS
        self.active = [0] * SLOTS
        self.enabled = 0
        # What the command's file held when counting stopped: descendants
        # keep counting (perfex(1) -s: "counting for descendants of the child
        # will not be affected"), and what they fold in meanwhile is kept.
        self._stopped_at: tuple[tuple[int, ...], tuple[int, ...], int] | None = None

    def inherited(self, generation: int) -> None:
        """The command inherited counters at its fork (generation 0: it did
        not, and counting starts now)."""
        if not generation:
            self.start()
            return
        self.generation = generation
        self.counting = self.started = True

    def start(self) -> bool:
        if self.counting:
            self.notice("got SIGUSR1 but already counting: ignored")
            return False
        self.keep_folded()  # enabling starts the command's counts afresh
        self.generation = self.counters.enable(self.plan.specs())
        self.counting = self.started = True
        return True

    def stop(self, release: bool = True) -> None:
        if not self.counting:
            self.notice("got SIGUSR2 but not counting: ignored")
            return
        usage = self.counters.read_usage()
        if usage.generation != self.generation:
            self.lost = True
        active = usage.active_ns
        for slot in range(SLOTS):
            self.raw[slot] += usage.counts[slot]
            self.active[slot] += active[slot]
        self.enabled += usage.enabled_ns
        self._stopped_at = (tuple(usage.counts), tuple(active), usage.enabled_ns)
        if release:
            self.counters.release()
        self.counting = False

    def keep_folded(self) -> None:
        """Add what descendants folded into the command since counting stopped."""
        if self._stopped_at is None:
            return
        counts, active, enabled = self._stopped_at
        self._stopped_at = None
        usage = self.counters.read_usage()
        now_active = usage.active_ns
        for slot in range(SLOTS):
            self.raw[slot] += max(0, usage.counts[slot] - counts[slot])
            self.active[slot] += max(0, now_active[slot] - active[slot])
        self.enabled += max(0, usage.enabled_ns - enabled)


def run(
    argv: list[str],
    plan: EventPlan,
    mount: str | os.PathLike[str] | None,  # None: the default mount
    *,
    signal_control: bool = False,
    notice: Callable[[str], None] = lambda text: None,
    processes: bool = True,
) -> Measurement:
    """Run ``argv`` once under counting; raise PerfexError if perfex cannot.

    ``processes=False`` leaves the command's text view unread (one FUSE read,
    and the daemon's making of it, fewer): the measurement's ``processes`` is
    then the command alone with the totals, as perfex without -mp needs."""
    control = {signal.SIGUSR1, signal.SIGUSR2} if signal_control else set()
    forwarded = {signal.SIGTERM, signal.SIGHUP}
    waited = {signal.SIGCHLD} | control | forwarded
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    import hwperfd.perfex

    # The command starts with the mask perfex started with (hold_start_signals).
    child_mask = hwperfd.perfex.startup_mask if hwperfd.perfex.startup_mask is not None else old_mask
    # As time(1) does: a ^C or ^\ is for the command; perfex reports after it.
    # SIGCHLD must not be ignored (an inherited SIG_IGN would reap the command
    # behind perfex's back); the waited-for signals stay blocked, so their
    # default actions never run.
    dispositions = {sig: signal.SIG_IGN for sig in (signal.SIGINT, signal.SIGQUIT)}
    dispositions.update({sig: signal.SIG_DFL for sig in (signal.SIGCHLD, *control)})
    saved = {sig: signal.signal(sig, action) for sig, action in dispositions.items()}
    # A SIGUSR1 that came while perfex started (held by hold_start_signals)
    # came before the command ran: it is counted from its first instruction.
    from_birth = not control or _take_pending(signal.SIGUSR1)
    if control and from_birth:
        notice("SIGUSR1: counting started")
    try:
        return _run(argv, plan, mount, from_birth, forwarded, waited, child_mask, notice, processes)
    finally:
        for sig, action in saved.items():
            signal.signal(sig, action)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def _take_pending(sig: int) -> bool:
    """Accept ``sig`` if it is pending (blocked), without waiting."""
    return sig in signal.sigpending() and signal.sigtimedwait({sig}, 0) is not None


def _run(argv, plan, mount, from_birth, forwarded, waited, old_mask, notice, processes) -> Measurement:
    sys.stdout.flush()
    sys.stderr.flush()
    spawned = _spawn_inheriting(argv, plan, mount, old_mask, counted=from_birth)
    if spawned is None:
        return _run_forked(argv, plan, mount, from_birth, forwarded, waited, old_mask, notice, processes)
    pid, generation, counters = spawned
    status = None
    try:
        try:
            if counters is None:
                counters = ProcessCounters(pid, mount=mount)
            counting = _Counting(counters, plan, notice)
            if from_birth:
                counting.inherited(generation)
        except OSError as exc:
            raise PerfexError(f"cannot count pid {pid}: {_why(exc)}") from None
        summary, comm = _wait_and_read(argv, pid, counters, counting, forwarded, waited, notice, processes)
    finally:
        if counters is not None:
            counters.close()
        status = _reap(pid)
    return _measurement(pid, status, counting, summary, comm)


def _spawn_inheriting(argv, plan, mount, old_mask, counted: bool) -> tuple[int, int, ProcessCounters | None] | None:
    """Spawn the command counted from birth (its pid, generation and, when
    already open, its file), or None where perfex must fall back to forking
    and enabling the child."""
    generation = 0
    own = None
    if counted:
        try:
            # fast=False: perfex does not read its own counters, so it needs
            # no state page (one ioctl less, and no page for the daemon to make).
            own = ProcessCounters(mount=mount, fast=False)
        except OSError:
            return None
        try:
            generation = own.enable(plan.specs())
        except OSError as exc:
            try:
                if exc.errno == errno.EBUSY and _system_mode(own):
                    raise PerfexError(f"cannot count pid {os.getpid()}: {_why(exc)}") from None
            finally:
                own.close()
            return None  # perfex itself counts already (nested perfex): fork instead
    try:
        pid = _spawn(argv, old_mask, own.fd if own is not None else -1)
    finally:
        if own is not None:
            # Served after hwperfd has applied the fork: the child keeps its copy.
            # perfex's file stays open across the spawn (one look-up, open and
            # release fewer than opening it again), closed in the child first.
            try:
                own.release()
            except OSError as exc:
                # EINVAL: perfex's own counters are gone already; whether the
                # command got its copy is what the inheritance check decides.
                if exc.errno != errno.EINVAL:
                    raise
            finally:
                own.close()
    if not counted:
        return pid, generation, None
    inherited, child = _inherited(pid, mount, generation)
    if not inherited:
        # No fork inheritance here: count from now on.
        return pid, 0, child
    return pid, generation, child


def _system_mode(own: ProcessCounters) -> bool:
    try:
        own.control()
    except OSError:
        return True  # not counting itself: the EBUSY was system mode's
    return False


def _inherited(pid: int, mount: str | os.PathLike[str] | None, generation: int) -> tuple[bool, ProcessCounters | None]:
    """Whether the command inherited counters of ``generation``, and its file
    (kept open for the run: one open and look-up less)."""
    try:
        child = ProcessCounters(pid, mount=mount)
    except OSError:
        return False, None
    try:
        return child.control()[0] == generation, child
    except OSError:
        return False, child


def _spawn(argv: list[str], old_mask, close: int = -1) -> int:
    """posix_spawnp with the signals as the command should have them.

    ``close``, a file of the mount, is closed in the child before its exec:
    closed by the exec instead (close-on-exec), its FUSE flush would wait
    while the child holds the exec lock that reading its /proc/<pid>/stat -
    which hwperfd does - needs."""
    actions = [(os.POSIX_SPAWN_CLOSE, close)] if close >= 0 else None
    try:
        return os.posix_spawnp(
            argv[0],
            argv,
            os.environ,
            file_actions=actions,
            setsigmask=old_mask,
            setsigdef=(signal.SIGINT, signal.SIGQUIT),
        )
    except OSError as exc:
        code = exc.errno or errno.ENOEXEC
        status = EXIT_NOT_FOUND if code == errno.ENOENT else EXIT_CANNOT_RUN
        raise PerfexError(f"cannot run {argv[0]}: {os.strerror(code)}", status) from None


def _reap(pid: int) -> int | None:
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return None


def _run_forked(argv, plan, mount, from_birth, forwarded, waited, old_mask, notice, processes) -> Measurement:
    go_read, go_write = os.pipe()  # both ends close on exec
    err_read, err_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the command-to-be
        _child(argv, go_read, go_write, err_read, err_write, old_mask)
    os.close(go_read)
    os.close(err_write)
    counters = None
    try:
        try:
            counters = ProcessCounters(pid, mount=mount)
            counting = _Counting(counters, plan, notice)
            if from_birth:
                counting.start()
        except OSError as exc:
            os.close(go_write)  # the child sees EOF and leaves without exec
            os.waitpid(pid, 0)
            raise PerfexError(f"cannot count pid {pid}: {_why(exc)}") from None
        os.write(go_write, b"g")
        os.close(go_write)
        failed = os.read(err_read, 64)
        if failed:
            os.waitpid(pid, 0)
            code = int(failed)
            exit_status = EXIT_NOT_FOUND if code == errno.ENOENT else EXIT_CANNOT_RUN
            raise PerfexError(f"cannot run {argv[0]}: {os.strerror(code)}", exit_status)
        summary, comm = _wait_and_read(argv, pid, counters, counting, forwarded, waited, notice, processes)
    finally:
        if counters is not None:
            counters.close()
        os.close(err_read)
        status = _reap(pid)
    return _measurement(pid, status, counting, summary, comm)


_EXIT_LOOK_S = 0.1  # how long perfex waits for a signal before it looks for the command's exit itself


def _wait_and_read(argv, pid, counters, counting, forwarded, waited, notice, processes=True) -> tuple[str, str]:
    """Serve signals until the command exits; read its zombie's counts:
    (its text view if ``processes``, else "", and its name)."""
    try:
        # The command's exit is seen through its SIGCHLD, in the order the
        # signals are taken: a SIGUSR1 or SIGUSR2 still pending at the exit
        # (perfex was slow to come here) is served first, as it came first.
        while True:
            # A process-directed signal goes to any thread that does not block
            # it: where the runner shares its process with other threads (a
            # library user's, a test runner's), the command's SIGCHLD can be
            # taken and discarded there.  So the exit is also looked for
            # whenever no signal came for a while.
            info = signal.sigtimedwait(waited, _EXIT_LOOK_S)
            if info is None or info.si_signo == signal.SIGCHLD:
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    break
                continue
            elif info.si_signo == signal.SIGUSR1:
                try:
                    if counting.start():
                        notice("SIGUSR1: counting started")
                except OSError as exc:
                    notice(f"SIGUSR1: cannot start counting: {_why(exc)}")
            elif info.si_signo == signal.SIGUSR2:
                was = counting.counting
                try:
                    counting.stop()
                except OSError as exc:
                    notice(f"SIGUSR2: cannot stop counting: {_why(exc)}")
                    continue
                if was:
                    notice("SIGUSR2: counting stopped")
            elif info.si_signo in forwarded:
                os.kill(pid, info.si_signo)

        # The command is a zombie: its file still answers.
        if counting.counting:
            counting.stop(release=False)
        else:
            counting.keep_folded()
        return counters.summary() if processes else "", _comm(pid) or _command_name(argv)
    except OSError as exc:
        raise PerfexError(f"reading the counters of pid {pid} failed: {exc.strerror or exc}") from None


def _measurement(pid: int, status: int | None, counting: _Counting, summary: str, comm: str) -> Measurement:
    code = os.waitstatus_to_exitcode(status) if status is not None else EXIT_PERFEX
    return Measurement(
        pid=pid,
        exit_code=code if code >= 0 else 128 - code,
        signal=-code if code < 0 else None,
        raw=tuple(counting.raw),
        enabled_ns=counting.enabled,
        active_ns=tuple(counting.active),
        processes=_shares(pid, comm, counting.raw, summary, bool(counting.plan.mode & ~structs.HWPERF_CNTEN_U)),
        started=counting.started,
        lost=counting.lost,
    )


def _child(argv, go_read, go_write, err_read, err_write, old_mask) -> None:
    """Wait for perfex's go, then become the command.  Never returns."""
    try:
        os.close(go_write)
        os.close(err_read)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        if os.read(go_read, 1) != b"g":
            os._exit(EXIT_PERFEX)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(err_write, str(exc.errno or errno.ENOEXEC).encode())
            os._exit(EXIT_NOT_FOUND if exc.errno == errno.ENOENT else EXIT_CANNOT_RUN)
    except BaseException:
        pass
    os._exit(EXIT_PERFEX)


def _why(exc: OSError) -> str:
    if exc.errno == errno.EBUSY:
        return "the counters are busy (held in system mode)"
    return exc.strerror or str(exc)


def _command_name(argv: list[str]) -> str:
    return os.path.basename(argv[0])[:15]


def _comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip().replace(" ", "_") or None
    except OSError:
        return None


def descendants(summary: str) -> list[ProcessShare]:
    """The ``descendant PID COMM C0 .. C31`` lines of a process's text view."""
    return [
        ProcessShare(int(words[1]), words[2], tuple(int(x) for x in words[3:]))
        for words in _lines(summary, "descendant", 35)
        if words[1].isdecimal() and words[2] and all(x.isdecimal() for x in words[3:])
    ]


def _lines(text: str, first: str, count: int) -> list[list[str]]:
    """The lines of ``text`` that are ``count`` words parted by single
    spaces, ``first`` the first, white space after them allowed (parsed by
    hand: ``re`` would cost perfex's start-up more than the parse)."""
    out = []
    for line in text.split("\n"):
        words = line.rstrip().split(" ")
        if len(words) == count and words[0] == first and not any(c.isspace() for w in words for c in w):
            out.append(words)
    return out


def _shares(pid: int, comm: str, totals: list[int], summary: str, kernel_time: bool) -> list[ProcessShare]:
    """The folded descendants, then the command: one block per thread when
    it had more than one (perfex(1), -mp: "the counters for each thread"),
    its counts shared out by each thread's CPU time in the counted modes
    (``kernel_time``: system time too), the main thread last."""
    folded = descendants(summary)
    own = [max(0, t - sum(d.raw[slot] for d in folded)) for slot, t in enumerate(totals)]
    threads = [
        (int(words[1]), int(words[2]), int(words[3]))
        for words in _lines(summary, "thread", 4)
        if all(x.isdecimal() for x in words[1:])
    ]
    if len(threads) < 2:
        return folded + [ProcessShare(pid, comm, tuple(own))]
    weights = [user + (system if kernel_time else 0) for _, user, system in threads]
    columns = [_apportion(count, weights) for count in own]
    return folded + [
        ProcessShare(tid, comm, tuple(column[i] for column in columns), thread_of=pid)
        for i, (tid, _, _) in enumerate(threads)
    ]


# -- projection ------------------------------------------------------------------


class Projected:
    """One event's count, scaled for multiplexing, and how much of the time it was counted."""

    __slots__ = ("count", "raw", "fraction")

    def __init__(self, count: int, raw: int, fraction: float | None) -> None:
        self.count = count
        self.raw = raw
        self.fraction = fraction  # None: never counted

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Projected):
            return NotImplemented
        return (self.count, self.raw, self.fraction) == (other.count, other.raw, other.fraction)

    def __hash__(self) -> int:
        return hash((self.count, self.raw, self.fraction))

    def __repr__(self) -> str:
        return f"Projected(count={self.count!r}, raw={self.raw!r}, fraction={self.fraction!r})"


def _scale(value: int, numerator: int, denominator: int) -> int:
    from fractions import Fraction  # only -a scales: not imported on every run

    exact = Fraction(value * numerator, denominator)
    return int(exact + Fraction(1, 2))  # round half up; counts are non-negative


def project(m: Measurement, plan: EventPlan, times_16: bool = False) -> dict[int, Projected]:
    """Event number -> projected count.

    perfex(1), -a: counts "are normalized by multiplying by 16 to give an
    estimate of the values they would have had for exclusive counting".
    hwperfd reports how long each slot was really loaded (cm_active_ns)
    against how long counting was on (cm_enabled_ns), and folds a child's
    times with its counts, so by default the whole tree's counts are scaled
    by exactly that ratio (by the number of events sharing the counter only
    when a slot was never loaded).  ``times_16`` is the page's rule: every
    count times the events sharing its counter (16 with -a), for comparing
    with IRIX-era output.  Without multiplexing nothing is scaled.
    """
    return {e.number: _project_slot(m, plan, e.slot, e.counter, m.raw[e.slot], times_16) for e in plan.events}


def _project_slot(m: Measurement, plan: EventPlan, slot: int, counter: int, raw: int, times_16: bool) -> Projected:
    enabled, active = m.enabled_ns, m.active_ns[slot]
    time_fraction = active / enabled if enabled else None
    if not plan.multiplexed:
        return Projected(raw, raw, time_fraction if enabled else (1.0 if raw else None))
    count = _scale(raw, enabled, active) if active and not times_16 else raw * plan.slots_on_counter(counter)
    if count:
        return Projected(count, raw, raw / count)
    return Projected(0, raw, time_fraction if time_fraction else None)


def project_shares(shares: list[ProcessShare], plan: EventPlan, totals: dict[int, Projected]) -> list[dict[int, int]]:
    """Each process's counts (-mp) under the one rule of ``project``: every
    event's projected total is shared out in proportion to the processes'
    raw counts (largest remainders get the rounding), so the blocks add up
    to the total exactly."""
    out: list[dict[int, int]] = [{} for _ in shares]
    for e in plan.events:
        raws = [share.raw[e.slot] for share in shares]
        for block, part in zip(out, _apportion(totals[e.number].count, raws)):
            block[e.number] = part
    return out


def _apportion(total: int, weights: list[int]) -> list[int]:
    whole = sum(weights)
    if not whole:
        return [0] * len(weights)
    parts = [total * w // whole for w in weights]
    rest = total - sum(parts)
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in by_remainder[:rest]:
        parts[i] += 1
    return parts
