"""Real-clock and manual-clock mounts and the samplers (tests/overflow/*.c),
linked with libperfctr and libcpc (the IRIX one with the tree's headers
alone), where any user can run them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hwperfd.host.cpualarm import task_clock_allowed

from tests.conftest import ROOT, running_hwperfd

HERE = Path(__file__).resolve().parent
MHZ = 1000  # 1 ms of CPU time = 1 000 000 cycles
IRIX_CPUS = 2  # the emulated CPUs of irix_real: system mode counts each apart
IRIX_MHZ = 200  # an R10000's 32-bit counters: 10 s of CPU time = 2e9 cycles, under a threshold's 2**31


def task_clock_events_allowed() -> bool:
    """Whether any user may open a task-clock event on itself
    (perf_event_paranoid 2 or less, and the syscall not filtered): the
    libraries' CPU-clock timer (lib/overflow_timer.h); else they fall back
    to POSIX CPU-clock timers, which ring late on a busy machine."""
    try:
        paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    except OSError:
        return False
    return paranoid <= 2 and task_clock_allowed(kernel=False)


def _build(shared_tmp: Path, name: str) -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib")], check=True)
    out = shared_tmp / "overflow-bin"
    out.mkdir(mode=0o755, exist_ok=True)
    target = out / name
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", "-o", str(target),
                    str(HERE / f"{name}.c"), str(ROOT / "lib" / "libperfctr.a"), str(ROOT / "lib" / "libcpc.a"),
                    str(ROOT / "lib" / "libhwperf.a"), "-pthread"], check=True)  # fmt: skip
    return target


@pytest.fixture(scope="session")
def ring_rearm(shared_tmp) -> Path:
    """ring_rearm.c: lib/overflow_timer.h alone, no library, no daemon."""
    out = shared_tmp / "overflow-bin"
    out.mkdir(mode=0o755, exist_ok=True)
    target = out / "ring_rearm"
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'lib'}", "-o", str(target),
                    str(HERE / "ring_rearm.c"), "-pthread"], check=True)  # fmt: skip
    return target


@pytest.fixture(scope="session")
def irix_sampler(shared_tmp) -> Path:
    return _build(shared_tmp, "irix_sampler")


@pytest.fixture(scope="session")
def irix_real(shared_tmp):
    """Two R10000s at 200 MHz on the real clock (1 ms of CPU time = 200 000 cycles)."""
    with running_hwperfd(shared_tmp / "mnt-overflow-irix", shared_tmp / "hwperfd-overflow-irix.log",
                         "--cpus", str(IRIX_CPUS), "--mhz", str(IRIX_MHZ)) as m:  # fmt: skip
        yield m


@pytest.fixture(scope="session")
def four_threads(shared_tmp) -> Path:
    return _build(shared_tmp, "four_threads")


@pytest.fixture(scope="session")
def timed(shared_tmp) -> Path:
    return _build(shared_tmp, "timed")


@pytest.fixture(scope="session")
def intel_manual(shared_tmp):
    """Two Core 2 CPUs at 1000 MHz on the manual clock: long periods cost no time."""
    with running_hwperfd(shared_tmp / "mnt-overflow-manual", shared_tmp / "hwperfd-overflow-manual.log", "--clock",
                         "manual", "--cpus", "2", "--cpu-type", "intel", "--mhz", str(MHZ)) as m:  # fmt: skip
        yield m


@pytest.fixture(scope="session")
def intel_real(shared_tmp):
    """Two Core 2 CPUs at 1000 MHz on the real clock: threads count their real CPU time."""
    with running_hwperfd(shared_tmp / "mnt-overflow-real", shared_tmp / "hwperfd-overflow-real.log", "--cpus", "2",
                         "--cpu-type", "intel", "--mhz", str(MHZ)) as m:  # fmt: skip
        yield m
