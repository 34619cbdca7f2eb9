"""The overflow-signal sender on its own: a signal owed per overflow, in a
bounded backlog, a standard one merging only with one pending and blocked
at the target, no busy polling, and signals that reach only the process
they were armed for.  The backlog tests use a real-time signal (RT, as the
counted ones here), which a blocked target keeps pending without merging."""

import os
import signal
import subprocess
import sys
import time

import pytest
import trio

from hwperfd.counters.kernel import Signal
from hwperfd.host import processes
from hwperfd.signals import END_BURST, MAX_OWED, SignalSender
from tests.waiting import wait_for

RT = signal.SIGRTMIN + 2
BLOCKS_SIGUSR1 = (
    "import signal, sys\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN + 2})\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)
IGNORES_SIGUSR1 = BLOCKS_SIGUSR1.replace("signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN + 2})", "signal.signal(signal.SIGRTMIN + 2, signal.SIG_IGN)")
COUNTS_SIGUSR1 = (
    "import signal, sys\n"
    "got = []\n"
    "signal.signal(signal.SIGRTMIN + 2, lambda *a: got.append(1))\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
    "print(len(got), flush=True)\n"
)


def owed(pid: int, count: int, sig: int = RT, owner=None, start=None) -> Signal:
    return Signal(pid, processes.read_start(pid) if start is None else start, owner, sig, count)


def run_sender(owes: list[Signal], seconds: float) -> SignalSender:
    """Owe the signals and let the sender work for ``seconds``."""

    async def main():
        sender = SignalSender()
        for item in owes:
            sender.owe(item)
        with trio.move_on_after(seconds):
            await sender.run()
        return sender

    return trio.run(main)


def spawn(code: str, *prefix: str) -> subprocess.Popen:
    child = subprocess.Popen([*prefix, sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"ready\n"
    return child


def test_owed_signals_are_capped_and_the_rest_merge():
    async def main():
        me = os.getpid()
        sender = SignalSender()
        sender.owe(owed(me, MAX_OWED - 10))
        sender.owe(owed(me, 510))
        sender.owe(owed(me, 3, signal.SIGUSR2))  # a standard signal too: one owed per overflow
        sender.owe(owed(me, MAX_OWED, signal.SIGUSR2))
        assert sender.owed(me, RT) == MAX_OWED
        assert sender.owed(me, signal.SIGUSR2) == MAX_OWED
        assert sender.merged == 500 + 3
        sender.cancel(me, signal.SIGUSR2)  # its counters were released
        assert sender.owed(me, signal.SIGUSR2) == 0 and sender.owed(me, RT) == MAX_OWED
        sender.forget(me)
        assert sender.owed(me, RT) == 0 and sender.targets() == 0

    trio.run(main)


def test_sender_backs_off_while_its_signal_stays_pending():
    """A target that blocks the signal keeps it pending: one is sent, the
    rest wait, and the sender looks at it less and less often."""
    child = spawn(BLOCKS_SIGUSR1)
    try:
        sender = run_sender([owed(child.pid, 5)], 0.5)
        assert sender.sent == 1
        assert sender.owed(child.pid, RT) == 4
        assert sender.looks < 20  # 1000 at the 0.5 ms pace of a sender that makes progress
    finally:
        child.kill()
        child.wait()


TAKES_QUEUED = (
    "import signal, sys\n"
    "both = {signal.SIGRTMIN + 2, signal.SIGUSR2}\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, both)\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
    "got = {s: 0 for s in both}\n"
    "while (info := signal.sigtimedwait(both, 0)) is not None:\n"
    "    got[info.si_signo] += 1\n"
    "print(got[signal.SIGRTMIN + 2], got[signal.SIGUSR2], flush=True)\n"
)


def test_ending_a_signal_sends_the_real_time_ones_owed_in_a_bounded_burst_and_one_standard():
    """A release ends its signal in mid-call: real-time signals queue, so
    those owed go at once though the first is still pending, up to
    END_BURST (the rest merge); of a standard one the next goes and the
    rest merge with it; nothing stays owed to be sent after the call."""
    child = spawn(TAKES_QUEUED)
    try:
        sender = SignalSender()
        sender.owe(owed(child.pid, 5))
        sender.owe(owed(child.pid, 4, signal.SIGUSR2))
        assert sender.end(child.pid, RT) and sender.sent == 5
        assert sender.end(child.pid, signal.SIGUSR2) and sender.sent == 6 and sender.merged == 3
        assert sender.owed(child.pid, RT) == sender.owed(child.pid, signal.SIGUSR2) == 0
        assert sender.targets() == 0
        sender.owe(owed(child.pid, END_BURST + 68))  # a client let them pile up: a bounded burst goes
        assert sender.end(child.pid, RT) and sender.sent == 6 + END_BURST and sender.merged == 3 + 68
        child.stdin.close()
        # what the target took: every real-time one sent, one standard
        assert child.stdout.readline() == f"{5 + END_BURST} 1\n".encode()
    finally:
        child.kill()
        child.wait()


def test_many_blocked_targets_cost_a_few_looks_each():
    children = [spawn(BLOCKS_SIGUSR1) for _ in range(40)]
    try:
        sender = run_sender([owed(c.pid, 100) for c in children], 1.0)
        assert sender.sent == 40
        assert sender.looks < 40 * 15, sender.looks
    finally:
        for c in children:
            c.kill()
            c.wait()


def test_ignored_signals_are_dropped_not_sent():
    child = spawn(IGNORES_SIGUSR1)
    try:
        sender = run_sender([owed(child.pid, 1000)], 0.3)
        assert sender.sent == 0 and sender.dropped == 1000 and sender.targets() == 0
    finally:
        child.kill()
        child.wait()


def test_signals_to_a_vanished_process_are_dropped():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = processes.read_start(child.pid)
    child.wait()
    sender = run_sender([owed(child.pid, 3, start=start or 1)], 0.2)
    assert sender.owed(child.pid, RT) == 0 and sender.sent == 0


def test_signals_owed_to_an_earlier_process_never_reach_the_one_at_its_pid_now():
    child = spawn(COUNTS_SIGUSR1)
    try:
        start = processes.read_start(child.pid)
        sender = run_sender([owed(child.pid, 3, start=start - 10_000_000)], 0.3)
        assert sender.sent == 0
        child.stdin.close()
        assert child.stdout.readline() == b"0\n"
    finally:
        child.kill()
        child.wait()


def test_signals_stop_when_the_target_leaves_the_owners_reach():
    """A user armed them; the process is root's now (a setuid program that
    became fully root): kill(2) would refuse that user, so the sender stops."""
    child = spawn(COUNTS_SIGUSR1)
    try:
        sender = run_sender([owed(child.pid, 3, owner=(65534, 65534))], 0.3)
        assert sender.sent == 0 and sender.targets() == 0
        child.stdin.close()
        assert child.stdout.readline() == b"0\n"
    finally:
        child.kill()
        child.wait()


def test_signals_reach_the_process_they_were_armed_for():
    child = spawn(COUNTS_SIGUSR1, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")
    try:
        sender = run_sender([owed(child.pid, 3, owner=(65534, 65534))], 0.5)
        assert sender.sent == 3
        child.stdin.close()
        assert child.stdout.readline() == b"3\n"
    finally:
        child.kill()
        child.wait()


def test_signals_owed_to_a_zombie_are_dropped_not_sent():
    """Its parent has not reaped it yet: a signal would be discarded, so the
    sender lets the backlog go at once instead of sending it all."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = processes.read_start(child.pid)
    while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    try:
        sender = run_sender([owed(child.pid, 5000, start=start)], 0.3)
        assert sender.sent == 0 and sender.dropped == 5000 and sender.targets() == 0
    finally:
        child.wait()


# A C-level view is not needed: Python's handler runs in the main thread, but
# which thread the kernel queued the signal to shows in that thread's SigPnd.
THREAD_BLOCKS_SIGUSR1 = (
    "import os, signal, sys, threading\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
    "done = threading.Event()\n"
    "t = threading.Thread(target=done.wait)\n"
    "t.start()\n"
    "print('ready', t.native_id, flush=True)\n"
    "sys.stdin.readline()\n"
    "done.set(); t.join()\n"
    "print('joined', flush=True)\n"
    "sys.stdin.read()\n"
)


def _pending(pid: int, tid: int) -> tuple[int, int]:
    """(thread-private pending mask, process-shared pending mask) of ``tid``."""
    fields = {}
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["SigPnd"], 16), int(fields["ShdPnd"], 16)


def test_a_standard_signal_pending_and_blocked_absorbs_the_next_overflows():
    """IRIX sent hwp_ovflw_sig from the overflow interrupt; standard signals
    do not queue, so overflows while one is pending (the target blocks it)
    merge into it and nothing is held back to send later."""
    child = spawn(BLOCKS_SIGUSR1.replace("signal.SIGRTMIN + 2", "signal.SIGUSR1"))
    try:
        sender = run_sender([owed(child.pid, 1, signal.SIGUSR1)], 0.2)
        assert sender.sent == 1
        sender = run_sender([owed(child.pid, 4, signal.SIGUSR1)], 0.2)  # still pending there
        assert sender.sent == 0 and sender.merged == 4 and sender.targets() == 0
    finally:
        child.kill()
        child.wait()


def test_a_thread_signal_reaches_that_thread_and_never_a_later_one_with_its_tid():
    child = subprocess.Popen(
        [sys.executable, "-c", THREAD_BLOCKS_SIGUSR1], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        words = child.stdout.readline().split()
        assert words[0] == b"ready"
        tid = int(words[1])
        start = processes.read_thread_start(child.pid, tid)
        item = Signal(child.pid, processes.read_start(child.pid), None, signal.SIGUSR1, 1, tid, start)
        sender = run_sender([item], 0.2)
        assert sender.sent == 1
        bit = 1 << (signal.SIGUSR1 - 1)
        assert _pending(child.pid, tid)[0] & bit  # queued to the thread itself
        assert not _pending(child.pid, child.pid)[0] & bit and not _pending(child.pid, tid)[1] & bit
        child.stdin.write(b"\n")
        child.stdin.flush()
        assert child.stdout.readline() == b"joined\n"
        # Python's join returns as the thread's Python code ends; its task,
        # still holding the first signal pending, goes a moment later.
        assert wait_for(lambda: processes.read_thread_start(child.pid, tid) is None, timeout=30)
        # The thread is gone: a signal owed to it (its start no longer there) goes nowhere.
        sender = run_sender([item], 0.2)
        assert sender.sent == 0 and sender.dropped == 1
    finally:
        child.kill()
        child.wait()


def test_one_user_can_have_signals_owed_to_only_so_many_targets_at_a_time():
    children = [spawn(BLOCKS_SIGUSR1) for _ in range(3)]
    try:

        async def main():
            sender = SignalSender(max_per_user=2)
            for child in children:
                sender.owe(owed(child.pid, 5, owner=(65534, 65534)))
            sender.owe(owed(os.getpid(), 0, owner=None))  # root's targets are not counted
            assert sender.targets() == 3 and sender.refused == 5
            sender.forget(children[0].pid)
            sender.owe(owed(children[2].pid, 5, owner=(65534, 65534)))  # room again
            assert sender.targets() == 3 and sender.refused == 5
            sender.owe(owed(children[0].pid, 1, owner=(65534, 65534)))
            assert sender.refused == 6

        trio.run(main)
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_an_overflow_signal_owed_after_ticks_on_its_number_is_sent_as_armed():
    """Profiling ticks go only while caught; an overflow signal armed later on
    the same number (profiling off, PIOCENEVCTRS) goes whether caught or not,
    as IRIX's did: the ticks still owed must not make it caught-only too.
    Ticks owed after it do not either."""
    for tick_first in (True, False):
        child = spawn("import sys\nprint('ready', flush=True)\nsys.stdin.read()\n")
        try:
            start = processes.read_start(child.pid)
            tick = Signal(child.pid, start, None, signal.SIGUSR1, 2, caught_only=True)
            overflow = Signal(child.pid, start, None, signal.SIGUSR1, 1)
            run_sender([tick, overflow] if tick_first else [overflow, tick], 1.0)
            assert child.wait(timeout=10) == -signal.SIGUSR1
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()


def test_ticks_alone_never_reach_a_process_that_does_not_catch_them():
    child = spawn("import sys\nprint('ready', flush=True)\nsys.stdin.read()\n")
    try:
        ticks = Signal(child.pid, processes.read_start(child.pid), None, signal.SIGUSR1, 3, caught_only=True)
        sender = run_sender([ticks], 0.5)
        assert child.poll() is None and sender.sent == 0
        assert (sender.dropped, sender.merged) == (3, 0)
    finally:
        child.kill()
        child.wait()


def test_a_process_whose_start_was_never_learnt_gets_no_signal_at_its_pid():
    """Owed to a process whose fork was heard only once it had gone (start
    unknown): the pid may be another process's by now, so nothing is sent
    to whoever has it."""
    child = spawn(COUNTS_SIGUSR1)
    try:
        sender = run_sender([owed(child.pid, 2, start=0)], 0.3)
        assert sender.sent == 0 and sender.dropped == 2
        out, _ = child.communicate(b"", timeout=10)
        assert out == b"0\n"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# Each delivery of the signal, as the kernel makes it: CPython's C-level
# handler writes the signal's number to the wakeup fd once per delivery, where
# its Python handler may run once for several.
COUNTS_DELIVERIES = (
    "import os, signal, sys, threading\n"
    "r, w = os.pipe()\n"
    "os.set_blocking(w, False)\n"
    "signal.set_wakeup_fd(w)\n"
    "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
    "SETUP\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "os.set_blocking(r, False)\n"
    "print(len(os.read(r, 4096)), flush=True)\n"
)


def deliveries(child: subprocess.Popen) -> int:
    child.stdin.write(b"\n")
    child.stdin.flush()
    return int(child.stdout.readline())


def test_a_standard_signal_owed_per_overflow_reaches_a_handler_once_per_overflow():
    """Two overflows found at one look (the daemon late, or a manual clock's
    advance) each interrupted the program on IRIX, and each interrupt sent
    its signal: the sender owes one per overflow, sending the next once the
    target has taken the last, and merges none with a signal the target
    does not block."""
    child = spawn(COUNTS_DELIVERIES.replace("SETUP", "pass"))
    try:
        sender = run_sender([owed(child.pid, 5, signal.SIGUSR1)], 1.0)
        assert (sender.sent, sender.merged) == (5, 0)
        assert deliveries(child) == 5
    finally:
        child.kill()
        child.wait()


ANOTHER_THREAD_TAKES_IT = (
    "done = threading.Event()\n"
    "t = threading.Thread(target=done.wait, daemon=True)\n"
    "t.start()\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})"
)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.parametrize("setup", ["pass", ANOTHER_THREAD_TAKES_IT], ids=["one thread", "another thread takes it"])
def test_a_standard_signal_on_its_way_in_is_not_merged_with(setup):
    """Pending and not blocked, a signal is on its way in (the target has not
    run since): the kernel would have delivered it before the next overflow
    interrupt, taken on the target's own CPU.  A stopped process shows it:
    one is sent, the rest wait for it, none merges; each arrives once it runs.
    A process's signal is on its way while any thread does not block it
    (the main thread blocks it in the second case)."""
    child = spawn(COUNTS_DELIVERIES.replace("SETUP", setup))
    try:
        os.kill(child.pid, signal.SIGSTOP)
        assert wait_for(lambda: _state(child.pid) == "T")

        async def main():
            sender = SignalSender()
            sender.owe(owed(child.pid, 3, signal.SIGUSR1))
            with trio.move_on_after(0.3):
                await sender.run()
            assert (sender.sent, sender.merged, sender.owed(child.pid, signal.SIGUSR1)) == (1, 0, 2)
            os.kill(child.pid, signal.SIGCONT)
            with trio.move_on_after(2.0):
                await sender.run()
            assert (sender.sent, sender.merged) == (3, 0)

        trio.run(main)
        assert deliveries(child) == 3
    finally:
        child.kill()
        child.wait()


def test_a_process_signal_merges_only_where_every_thread_blocks_it():
    """Sent to the process, a standard signal stays pending only while every
    thread blocks it: then the next overflows merge with it."""
    child = spawn(COUNTS_DELIVERIES.replace("SETUP", (
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
        "done = threading.Event()\n"
        "t = threading.Thread(target=done.wait, daemon=True)\n"
        "t.start()"
    )))  # fmt: skip
    try:
        sender = run_sender([owed(child.pid, 4, signal.SIGUSR1)], 0.3)
        assert (sender.sent, sender.merged, sender.targets()) == (1, 3, 0)
    finally:
        child.kill()
        child.wait()


def test_signals_held_until_their_counts_are_stored_then_go_all():
    """A process whose overflow counts the set-up store could not take yet
    (its start unreadable, hwperfd.service._held_for_store) gets its signals
    only once they are stored: sent first, a restart between would send them
    again."""
    child = spawn(COUNTS_SIGUSR1)
    stored = trio.Event()

    async def main():
        sender = SignalSender()
        sender.held = lambda pid: not stored.is_set()
        sender.owe(owed(child.pid, 2))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender.run)
            await trio.sleep(0.3)
            held_sent = sender.sent
            stored.set()
            with trio.move_on_after(2):
                while sender.sent < 2:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        return held_sent, sender.sent

    try:
        held_sent, sent = trio.run(main)
        assert held_sent == 0
        assert sent == 2
        child.stdin.close()
        assert child.stdout.readline() == b"2\n"
    finally:
        child.kill()
        child.wait()
