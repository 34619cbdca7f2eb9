"""Mounts with the x86 models for perfctr, and perfctr users' C programs built
against hwperfd's <libperfctr.h> and libperfctr."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, running_hwperfd

HERE = Path(__file__).resolve().parent
PROGRAMS = ("self", "signal", "global", "launcher", "threads", "remote", "pages", "thread_exit", "short_period",
            "papi_intervals", "evntsels", "mpx_slices", "exec_overflow", "register", "kept")
MHZ = 1000  # 1 ms of CPU time = 1 000 000 cycles


@pytest.fixture(scope="session")
def perfctr_programs(shared_tmp) -> dict[str, Path]:
    """The C programs, linked with libperfctr, where any user can run them."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), "libperfctr"], check=True)
    out = shared_tmp / "perfctr-bin"
    out.mkdir(mode=0o755, exist_ok=True)
    built = {}
    for name in PROGRAMS:
        target = out / name
        subprocess.run(
            ["cc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", "-o", str(target),
             str(HERE / f"{name}.c"), str(ROOT / "lib" / "libperfctr.a"), "-lpthread"],
            check=True,
        )  # fmt: skip
        built[name] = target
    return built


def _mount(shared_tmp, name: str, *args: str):
    return running_hwperfd(shared_tmp / f"mnt-{name}", shared_tmp / f"hwperfd-{name}.log", *args)


@pytest.fixture(scope="session")
def intel(shared_tmp):
    """Two emulated Core 2 CPUs at 1000 MHz on the manual clock."""
    with _mount(shared_tmp, "perfctr-intel", "--clock", "manual", "--cpus", "2", "--cpu-type", "intel",
                "--mhz", str(MHZ)) as m:  # fmt: skip
        yield m


@pytest.fixture(scope="session")
def amd(shared_tmp):
    with _mount(shared_tmp, "perfctr-amd", "--clock", "manual", "--cpus", "1", "--cpu-type", "amd",
                "--mhz", str(MHZ)) as m:  # fmt: skip
        yield m


@pytest.fixture(scope="session")
def mips(shared_tmp):
    with _mount(shared_tmp, "perfctr-mips", "--clock", "manual", "--cpus", "1") as m:
        yield m


@pytest.fixture(scope="session")
def intel_real(shared_tmp):
    """A Core 2 at 1000 MHz on the real clock: threads count their real CPU time."""
    with _mount(shared_tmp, "perfctr-intel-real", "--cpus", "1", "--cpu-type", "intel", "--mhz", str(MHZ)) as m:
        yield m
