"""The overflow-signal sender on its own: bounded backlog, no busy polling."""

import signal
import subprocess
import sys

import trio

from hwperfd.signals import MAX_OWED, SignalSender

BLOCKS_SIGUSR1 = (
    "import signal, sys\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def run_sender(pid: int, count: int, seconds: float) -> SignalSender:
    """Owe ``count`` SIGUSR1 to ``pid`` and let the sender work for ``seconds``."""

    async def main():
        sender = SignalSender()
        sender.owe(pid, signal.SIGUSR1, count)
        with trio.move_on_after(seconds):
            await sender.run()
        return sender

    return trio.run(main)


def test_owed_signals_are_capped_and_the_rest_merge():
    async def main():
        sender = SignalSender()
        sender.owe(4242, signal.SIGUSR1, MAX_OWED - 10)
        sender.owe(4242, signal.SIGUSR1, 510)
        sender.owe(4242, signal.SIGUSR2, 3)
        assert sender.owed(4242, signal.SIGUSR1) == MAX_OWED
        assert sender.merged == 500
        assert sender.owed(4242, signal.SIGUSR2) == 3

    trio.run(main)


def test_sender_backs_off_while_its_signal_stays_pending():
    """A target that blocks the signal keeps it pending: one is sent, the
    rest wait, and the sender polls at most every ~10 ms instead of spinning."""
    child = subprocess.Popen([sys.executable, "-c", BLOCKS_SIGUSR1], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        sender = run_sender(child.pid, 5, 0.5)
        assert sender.sent == 1
        assert sender.owed(child.pid, signal.SIGUSR1) == 4
        assert sender.polls < 150  # 1000 at the 0.5 ms pace of a sender that makes progress
    finally:
        child.kill()
        child.wait()


def test_signals_to_a_vanished_process_are_dropped():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    sender = run_sender(child.pid, 3, 0.2)
    assert sender.owed(child.pid, signal.SIGUSR1) == 0 and sender.sent == 0
