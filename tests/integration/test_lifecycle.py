"""Fork and exit inheritance, PIOCSAVECCNTRS, zombies and overflow signals."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hwperfd.client import ProcessCounters, user
from structs import PIOCSAVECCNTRS
from tests.waiting import process_state, wait_for

HERE = Path(__file__).parent
CYCLES_PER_MS = 200_000


class Family:
    def __init__(self, mount):
        self.mount = mount
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "family.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=mount.env(HWPERFD_SRC=str(HERE.parent.parent)),
        )  # fmt: skip
        self.pid = self.proc.pid

    def ask(self, command: str) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def counters(self, pid=None):
        return ProcessCounters(pid or self.pid, mount=self.mount.path)

    def advance(self, pid, amount):
        self.mount.control(f"advance {pid} {amount}")

    def close(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def family(manual_mount):
    f = Family(manual_mount)
    yield f
    f.close()


def test_forked_child_inherits_control_with_zeroed_counts(family):
    with family.counters() as parent:
        gen = parent.enable({0: user(0), 16: user(0)})
        family.advance(family.pid, "2ms")
        child = int(family.ask("fork"))
        with family.counters(child) as c:
            generation, words = c.control()
            assert words == parent.control()[1]
            assert generation == gen
            assert c.read()[1][0] == 0
            family.advance(child, "3ms")
            assert c.read()[1][0] == 3 * CYCLES_PER_MS
        assert parent.read()[1][0] == 2 * CYCLES_PER_MS
        family.ask(f"exit {child}")
        family.ask(f"reap {child}")


def test_child_counts_reach_a_waiting_parent_at_exit(family):
    with family.counters() as parent:
        parent.enable({0: user(0)})
        child = int(family.ask("fork"))
        family.advance(child, "4ms")
        family.advance(family.pid, "1ms")
        assert family.ask(f"wait {child}") == "reaped"
        assert parent.read()[1][0] == 5 * CYCLES_PER_MS


def test_zombie_counts_stay_readable_until_reaped_then_reach_the_parent(family):
    with family.counters() as parent:
        parent.enable({0: user(0)})
        child = int(family.ask("fork"))
        family.advance(child, "6ms")
        with family.counters(child) as c:
            family.ask(f"exit {child}")
            assert wait_for(lambda: process_state(child) == "Z")
            assert c.read()[1][0] == 6 * CYCLES_PER_MS  # the zombie still answers
            assert parent.read()[1][0] == 0  # not waited for yet
            family.ask(f"reap {child}")
            assert wait_for(lambda: parent.read()[1][0] == 6 * CYCLES_PER_MS)
        assert not (family.mount.path / f"{child:05d}").exists()
        descendants = [l for l in parent.summary().splitlines() if l.startswith("descendant")]
        assert descendants == [f"descendant {child} python3 {6 * CYCLES_PER_MS}" + " 0" * 31]


@pytest.mark.parametrize("on", ["parent-file-with-pid", "child-file"])
def test_savecntrs_gives_the_parent_the_counts_at_exit_without_waiting(family, on):
    import fcntl

    with family.counters() as parent:
        parent.enable({0: user(0)})
        child = int(family.ask("fork"))
        family.advance(child, "7ms")
        with family.counters(child) as c:
            if on == "child-file":
                fcntl.ioctl(c.fd, PIOCSAVECCNTRS, 0)
            else:
                fcntl.ioctl(parent.fd, PIOCSAVECCNTRS, child)
            family.ask(f"exit {child}")
            assert wait_for(lambda: process_state(child) == "Z")
            assert wait_for(lambda: parent.read()[1][0] == 7 * CYCLES_PER_MS)
        family.ask(f"reap {child}")
        assert wait_for(lambda: not (family.mount.path / f"{child:05d}").exists())
        assert parent.read()[1][0] == 7 * CYCLES_PER_MS  # added once, not again at reap


def test_savecntrs_works_when_the_parent_does_not_count(family):
    import fcntl

    child = int(family.ask("fork"))
    with family.counters(child) as c:
        c.enable({0: user(0)})
        family.advance(child, "2ms")
        fcntl.ioctl(c.fd, PIOCSAVECCNTRS, 0)
        family.ask(f"exit {child}")
        assert wait_for(lambda: process_state(child) == "Z")
    with family.counters() as parent:
        assert wait_for(lambda: parent.read()[1][0] == 2 * CYCLES_PER_MS)
    family.ask(f"reap {child}")


@pytest.mark.parametrize("threshold, overflows", [(100_000, 6), (150_000, 4), (1_000_000, 2)])
def test_every_overflow_signals_when_the_process_takes_each_in_turn(family, threshold, overflows):
    """r10k_counters(5): each overflow of a slot with the interrupt enable
    bit sends hwp_ovflw_sig; the process handles each before the next."""
    gen = int(family.ask(f"enable {user(0, interrupt=True)} {threshold} {int(signal.SIGUSR1)}"))
    assert gen > 0
    for n in range(1, overflows + 1):
        family.advance(family.pid, f"{threshold * 1_000_000 // CYCLES_PER_MS}ns")  # one threshold's cycles
        assert int(family.ask(f"signals {n}")) == n


def test_overflows_found_at_one_look_each_send_their_signal(family):
    """Five overflows in one stretch of time (a manual clock's advance, or a
    look made late): IRIX sent hwp_ovflw_sig from each overflow interrupt,
    so five signals come, each once the last was taken - none merges with
    one pending that the process does not block."""
    assert int(family.ask(f"enable {user(0, interrupt=True)} 1000 {int(signal.SIGUSR1)}")) > 0
    family.advance(family.pid, f"{5 * 1000 * 1_000_000 // CYCLES_PER_MS}ns")
    assert int(family.ask("signals 5")) == 5  # and no other in the 0.2 s after the fifth


def test_a_slot_without_the_interrupt_enable_bit_sends_no_signal(family):
    """r10k_counters(5): "Bit 4 is the interrupt enable bit, which specifies
    whether overflows for the specified event will generate interrupts or not"."""
    assert int(family.ask(f"enable {user(0)} 1000 {int(signal.SIGUSR1)}")) > 0
    family.advance(family.pid, "1ms")
    with family.counters() as c:
        assert c.read()[1][0] == CYCLES_PER_MS
    assert int(family.ask("signals 0")) == 0


def test_threshold_without_signal_counts_on_quietly(family):
    assert int(family.ask(f"enable {user(0)} 1000 0")) > 0
    family.advance(family.pid, "1ms")
    with family.counters() as c:
        assert c.read()[1][0] == CYCLES_PER_MS
    assert int(family.ask("signals 0")) == 0
