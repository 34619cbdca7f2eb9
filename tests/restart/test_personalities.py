"""perfctr, libcpc and pctr set-up across restarts of the daemon
(docs/restart.md): vperfctrs (a-mode and i-mode), per-LWP sets (with
overflow) and pctr's functions come back from the store; their programs,
through libperfctr, libcpc and libpctr, see a pause and go on."""

from __future__ import annotations

import contextlib

import fcntl
import os
import re
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from hwperfd.host.processes import read_system_cpu_times
from structs.pctr import PCIOCS0
from tests.conftest import Mount
from tests.restart.test_restart import (  # noqa: F401
    TIMEOUT, _store, build_with_libraries, daemon, go, line, start_program,
)  # fmt: skip

MHZ = 1000  # 1 ns of CPU time = 1 cycle
PERIOD = 20_000_000  # 20 ms of user time between overflows
INTEL = ("--cpu-type", "intel", "--mhz", str(MHZ), "--cpus", "2")
CYCLES_ALL = 0x3C | 1 << 16 | 1 << 17 | 1 << 22  # unhalted cycles, user and system, enabled


@pytest.fixture(scope="session")
def x86_restart(shared_tmp) -> Path:
    return build_with_libraries(shared_tmp, "x86_restart", "libperfctr", "libcpc", "libpctr")


def check_final(final: list[str]) -> dict[str, int]:
    """A program's last words: with ``cpu``, its cycles (user and system)
    within 1% of its thread's CPU time since it set them up, at 1 cycle a
    ns (and 1 ms for the set-up call itself); with ``overflows`` (those
    handled before the final read), one signal for every PERIOD cycles
    counted, none lost and none sent twice (one may be on its way); with
    ``imode``, the i-mode counter's sum, the same count: both count cycles
    from the same control, and an overflow stops both at its event until
    the handler resumes them (seed 002), so a count lost on one side of a
    restart, not the other, shows here."""
    words = dict(zip(final[::2], map(int, final[1::2])))
    cycles = words["cycles"]
    if "imode" in words:
        assert words["imode"] == cycles, words
    if "cpu" in words:
        assert words["cpu"] * 0.99 - 1_000_000 <= cycles <= words["cpu"] * 1.01, words
    else:
        assert cycles // PERIOD - 1 <= words["overflows"] <= cycles // PERIOD, words
    return words


def program_args(mode: str) -> list[str]:
    return [mode, str(PERIOD)] if mode in ("perfctr-i", "cpc-ovf") else [mode]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
@pytest.mark.parametrize("mode", ["perfctr-a", "perfctr-i", "cpc", "cpc-ovf"])
def test_per_thread_counters_survive_a_restart(daemon, x86_restart, mode, how):  # noqa: F811
    """A vperfctr or a per-LWP set, counting its own thread as nobody, read
    all the time: the daemon dies and another mounts; no call fails, and the
    counts at the end are every cycle of the run (or every overflow)."""
    d = daemon(*INTEL)
    program = start_program(x86_restart, d.mount, *program_args(mode), nobody=True)
    line(program, "ready")
    time.sleep(0.3)
    d.restart(how)
    time.sleep(0.3)
    go(program)
    final = line(program, "final")
    assert program.wait(timeout=TIMEOUT) == 0
    words = check_final(final)
    assert words.get("overflows", 2) >= 2
    assert "refused" not in d.logs()


def set_pctr(mount: Mount, function: int) -> None:
    fd = os.open(mount.path / "pctr", os.O_RDWR)
    try:
        fcntl.ioctl(fd, PCIOCS0, function.to_bytes(4, "little"))
    finally:
        os.close(fd)


def pctr_cpu0(mount: Mount) -> tuple[int, int]:
    """(counter 0 of CPU 0, its function) from the node's text."""
    text = (mount.path / "pctr").read_text()
    found = re.search(r"^cpu 0 tsc \d+ ctr0 (\d+) fn (0x[0-9a-f]+)", text, re.M)
    assert found, text
    return int(found.group(1)), int(found.group(2), 16)


def busy_ns(cpu: int = 0) -> int:
    times = read_system_cpu_times()[cpu]
    return times.user_ns + times.system_ns


def test_pctr_functions_and_counts_survive_a_restart(daemon, x86_restart):  # noqa: F811
    """Root programs counter 0 (cycles, user and system); the daemon is
    killed and another mounts: the function holds the hardware as before,
    CPU 0's count goes on from the CPU's busy time (none lost or invented,
    within 1%), and a libpctr program reading all along sees no error."""
    d = daemon(*INTEL)
    before = busy_ns()
    set_pctr(d.mount, CYCLES_ALL)
    after = busy_ns()
    reader = start_program(x86_restart, d.mount, "pctr", nobody=True)
    line(reader, "ready")
    time.sleep(0.5)
    d.restart()
    time.sleep(0.5)
    # The count is taken between these two looks at CPU 0: on a loaded
    # machine the test may wait hundreds of ms for a CPU after the read,
    # which CPU 0 spends busy, so each bound takes its own side.
    asking = busy_ns()
    count, function = pctr_cpu0(d.mount)
    now = busy_ns()
    assert function == CYCLES_ALL
    assert "reserved-by pctr" in (d.mount.path / "pctr").read_text()
    bounds = (asking - after) * 0.99 - 10_000_000, (now - before) * 1.01 + 10_000_000
    assert bounds[0] <= count <= bounds[1], (count, before, after, asking, now)
    go(reader)
    line(reader, "final")
    assert reader.wait(timeout=TIMEOUT) == 0
    set_pctr(d.mount, 0)
    assert "reserved-by -" in (d.mount.path / "pctr").read_text()


def test_a_corrupt_personality_record_is_refused_logged_and_skipped(daemon, x86_restart):  # noqa: F811
    """A vperfctr's record whose body was changed fails its checksum: logged,
    dropped; the daemon starts, and the thread's other set-up (a pctr function
    is machine-wide, so a second daemon's) is unaffected."""
    d = daemon(*INTEL)
    program = start_program(x86_restart, d.mount, "perfctr-a", nobody=True)
    line(program, "ready")
    d.mount.process.kill()
    d.mount.process.wait()
    with contextlib.closing(sqlite3.connect(_store(d.mount))) as db, db:
        (key,) = db.execute("SELECT key FROM setup WHERE kind = 'perfctr'").fetchone()
        db.execute("UPDATE setup SET body = replace(body, 'cstatus', 'cstatuz') WHERE kind = 'perfctr'")
    d.mount = d._start()
    assert f"set-up record perfctr/{key} refused: checksum mismatch" in d.mount.log_text()
    with contextlib.suppress(BrokenPipeError):  # its next read may meet the refusal before the word to stop
        go(program)
    assert program.wait(timeout=TIMEOUT) == 2  # its vperfctr is gone: EINVAL, as for a file never attached
