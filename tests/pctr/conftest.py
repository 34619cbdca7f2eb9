"""Mounts with x86 models and the OpenBSD-style C programs, built from tests/pctr/*.c."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
from pathlib import Path

import pytest

from structs.pctr import PCIOCS
from tests.conftest import ROOT, running_hwperfd

HERE = Path(__file__).resolve().parent
PROGRAMS = ("rdtsc_timing", "read_set_read", "p6_two_counters", "amd_four_counters", "rdpmc_one")
MHZ = 1000  # 1 ms of CPU time = 1 000 000 cycles


@pytest.fixture(scope="session")
def pctr_programs(shared_tmp) -> dict[str, Path]:
    """The C programs, linked with libpctr, where any user can run them."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), "libpctr"], check=True)
    out = shared_tmp / "pctr-bin"
    out.mkdir(mode=0o755, exist_ok=True)
    built = {}
    for name in PROGRAMS:
        target = out / name
        subprocess.run(
            ["cc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", "-o", str(target),
             str(HERE / f"{name}.c"), str(ROOT / "lib" / "libpctr.a")],
            check=True,
        )  # fmt: skip
        built[name] = target
    return built


def _mount(shared_tmp, name: str, *args: str):
    return running_hwperfd(shared_tmp / f"mnt-{name}", shared_tmp / f"hwperfd-{name}.log", *args)


@pytest.fixture(scope="session")
def intel_mount(shared_tmp):
    """One emulated Intel CPU at 1000 MHz on the manual clock."""
    with _mount(shared_tmp, "intel", "--clock", "manual", "--cpus", "1", "--cpu-type", "intel", "--mhz", str(MHZ)) as m:
        yield m


@pytest.fixture(scope="session")
def amd_mount(shared_tmp):
    with _mount(shared_tmp, "amd", "--clock", "manual", "--cpus", "1", "--cpu-type", "amd", "--mhz", str(MHZ)) as m:
        yield m


@pytest.fixture(scope="session")
def intel_real_mount(shared_tmp):
    with _mount(shared_tmp, "intel-real", "--cpu-type", "intel", "--mhz", str(MHZ)) as m:
        yield m


def clear_functions(mount, counters: int) -> None:
    fd = os.open(mount.path / "pctr", os.O_WRONLY)
    try:
        for i in range(counters):
            fcntl.ioctl(fd, PCIOCS[i], struct.pack("I", 0))
    finally:
        os.close(fd)


@pytest.fixture
def intel(intel_mount):
    """The Intel mount, its counters cleared before and after the test."""
    clear_functions(intel_mount, 2)
    yield intel_mount
    clear_functions(intel_mount, 2)


@pytest.fixture
def amd(amd_mount):
    clear_functions(amd_mount, 4)
    yield amd_mount
    clear_functions(amd_mount, 4)
