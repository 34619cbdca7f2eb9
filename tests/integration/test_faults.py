"""Failures on purpose: the control node's `fail` and `lose` commands, seen
by real C and Python clients through real ioctls."""

import errno
import subprocess
import sys

import pytest

from hwperfd.client import Control, ProcessCounters, user
from tests.conftest import finish
from tests.waiting import wait_for

CYCLES_PER_MS = 200_000


@pytest.fixture
def control(manual_mount):
    """The control node; every fault a test arms is disarmed after it."""
    with Control(mount=manual_mount.path) as c:
        try:
            yield c
        finally:
            c.clear_faults()


@pytest.fixture
def sleeper():
    """A process that waits on stdin: its file is the one the test drives."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield child.pid
    child.kill()
    child.wait()


def armed(control) -> list[str]:
    return [line for line in control.status().splitlines() if line.startswith("fault ")]


def errno_of(call, *args):
    with pytest.raises(OSError) as info:
        call(*args)
    return info.value.errno


def test_armed_read_fails_the_chosen_times_then_counts_are_intact(manual_mount, control, sleeper):
    with ProcessCounters(sleeper, mount=manual_mount.path) as counters:
        generation = counters.enable({0: user(0)})
        control.fail(sleeper, "PIOCGETEVCTRS", "EINTR", 2)
        control.advance(sleeper, 1_000_000)
        assert errno_of(counters.read) == errno.EINTR
        assert errno_of(counters.read) == errno.EINTR
        control.advance(sleeper, 1_000_000)
        assert counters.read() == (generation, (2 * CYCLES_PER_MS,) + (0,) * 31)


def test_a_failed_enable_changes_nothing(manual_mount, control, sleeper):
    with ProcessCounters(sleeper, mount=manual_mount.path) as counters:
        control.fail(sleeper, "PIOCENEVCTRS", "EBUSY")
        assert errno_of(counters.enable, {0: user(0)}) == errno.EBUSY
        assert errno_of(counters.control) == errno.ESRCH  # still never used: no counter structure
        assert counters.enable({0: user(0)}) == 1


def test_other_processes_and_calls_are_untouched(manual_mount, control, sleeper, counters):
    control.fail(sleeper, "PIOCGETEVCTRS", "EIO", "always")
    generation = counters.enable({0: user(0)})  # this test's own process
    assert counters.read()[0] == generation
    with ProcessCounters(sleeper, mount=manual_mount.path) as theirs:
        assert theirs.enable({0: user(0)}) == 1
        assert theirs.control()[0] == 1
        assert errno_of(theirs.read) == errno.EIO


def test_an_always_fault_holds_until_cleared_and_is_listed(manual_mount, control, sleeper):
    control.fail("*", "*", "EAGAIN", "always")
    assert armed(control) == ["fault * * EAGAIN always"]
    with ProcessCounters(sleeper, mount=manual_mount.path) as counters:
        for _ in range(3):
            assert errno_of(counters.enable, {0: user(0)}) == errno.EAGAIN
        assert errno_of(control.read_system) == errno.EAGAIN
        control.clear_faults()
        assert armed(control) == []
        assert counters.enable({0: user(0)}) == 1


def test_syssgi_calls_fail_on_the_control_node(manual_mount, control):
    control.fail("control", "HWPERF_ENSYSCNTRS", "EBUSY")
    kernel_cycles = {0: (0 << 5) | 0x2}
    assert errno_of(control.enable_system, kernel_cycles) == errno.EBUSY
    assert errno_of(control.read_system) == errno.EINVAL  # system mode was not taken
    assert "system mode free" in control.status()


@pytest.mark.parametrize(
    "command",
    [
        "fail 1 PIOCGETEVCTRS ENOSYS",  # would turn ioctls off for the whole mount
        "fail 1 PIOCFROB EBUSY",
        "fail 1 PIOCGETEVCTRS EWHATEVER",
        "fail 1 PIOCGETEVCTRS EBUSY 0",
        "fail 1 PIOCGETEVCTRS",
        "fail 999999999 PIOCGETEVCTRS EBUSY",
        "fail nobody PIOCGETEVCTRS EBUSY",
        "lose 1",  # not counting
        "faults",
    ],
)
def test_bad_fault_commands_are_refused_and_arm_nothing(control, command):
    assert errno_of(control.command, command) == errno.EINVAL
    assert armed(control) == []


def run_r10k_example(mount, examples, meanwhile):
    """Run r10k_counters(5)'s example; call ``meanwhile(pid)`` while it counts."""
    proc = subprocess.Popen(
        [examples / "r10k_counters", "-w"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=mount.env(),
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "counting"
        meanwhile(proc.pid)
        out, err = finish(proc, "go\n", timeout=30)
    finally:
        proc.kill()
    return proc.returncode, out, err


def test_lose_makes_the_r10k_example_report_lost_counters(manual_mount, examples, control):
    """r10k_counters(5)'s example compares the generation from PIOCENEVCTRS
    with the one PIOCGETEVCTRS returns: `lose` is how to test that branch."""
    returncode, out, err = run_r10k_example(manual_mount, examples, control.lose)
    assert returncode == 0, err
    assert out.strip().splitlines() == ["program lost event counters"]


def test_a_fault_reaches_a_c_client_as_its_errno(manual_mount, examples, control):
    returncode, _, err = run_r10k_example(
        manual_mount, examples, lambda pid: control.fail(pid, "PIOCGETEVCTRS", "EINTR")
    )
    # The man page's example exits with errno after perror(3), which may change it.
    assert returncode != 0
    assert "PIOCGETEVCTRS returns error: Interrupted system call" in err


def test_faults_of_a_process_go_with_it(manual_mount, control):
    """A pid is reused: a fault armed for the process that had it must not
    fall on the next one."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    control.fail(child.pid, "*", "EIO", "always")
    control.fail("*", "PIOCGETEVCTRL", "EAGAIN", "always")
    assert len(armed(control)) == 2
    child.kill()
    child.wait()
    assert wait_for(lambda: armed(control) == ["fault * PIOCGETEVCTRL EAGAIN always"])
