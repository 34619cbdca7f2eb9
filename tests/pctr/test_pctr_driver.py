"""The pctr(4) driver's rules through real ioctls on <mount>/pctr."""

from __future__ import annotations

import errno
import fcntl
import os
import struct

import pytest

from structs.pctr import (
    PCIOCRD,
    PCIOCS0,
    PCIOCS1,
    PCIOCS2,
    PCIOCS3,
    PCTR_EN,
    PCTR_U,
    PCTRST_SIZE,
    pctrst,
)


def ioctl_errno(fd: int, cmd: int, value: int = 0) -> int:
    try:
        fcntl.ioctl(fd, cmd, struct.pack("I", value))
    except OSError as exc:
        return exc.errno
    return 0


def read(fd: int):
    return pctrst.parse(fcntl.ioctl(fd, PCIOCRD, bytes(PCTRST_SIZE)))


@pytest.fixture
def fds(intel):
    ro = os.open(intel.path / "pctr", os.O_RDONLY)
    rw = os.open(intel.path / "pctr", os.O_RDWR)
    yield ro, rw
    os.close(ro)
    os.close(rw)


def test_checks_run_in_the_drivers_order(fds):
    ro, rw = fds
    good = 0xC0 | PCTR_U | PCTR_EN
    # The counter index comes first: even a read-only descriptor gets EINVAL.
    assert ioctl_errno(ro, PCIOCS2, good) == errno.EINVAL
    assert ioctl_errno(rw, PCIOCS3, good) == errno.EINVAL
    # Then the open mode, before the function is looked at.
    assert ioctl_errno(ro, PCIOCS0, good | 0x100000) == errno.EPERM
    assert ioctl_errno(ro, PCIOCS0, good) == errno.EPERM
    # Then the reserved bits (0x380000).
    for bit in (0x080000, 0x100000, 0x200000):
        assert ioctl_errno(rw, PCIOCS1, good | bit) == errno.EINVAL
    assert read(rw).pctr_fn[1] == 0  # refused calls changed nothing
    assert ioctl_errno(rw, PCIOCS1, good) == 0
    assert read(ro).pctr_fn[1] == good


def test_unknown_ioctls_get_einval(fds):
    ro, _ = fds
    for cmd in (PCIOCS0 + 4, PCIOCRD + 1, 0x5401):
        assert ioctl_errno(ro, cmd) == errno.EINVAL


def test_busy_while_another_personality_holds_the_hardware(intel, fds):
    _, rw = fds
    intel.control("reserve perfctr-global")
    try:
        assert ioctl_errno(rw, PCIOCS0, 0xC0 | PCTR_U | PCTR_EN) == errno.EBUSY
        assert ioctl_errno(rw, PCIOCS0, 0) == 0  # setting nothing takes nothing
        assert read(rw).pctr_fn[0] == 0
    finally:
        intel.control("release perfctr-global")
    assert ioctl_errno(rw, PCIOCS0, 0xC0 | PCTR_U | PCTR_EN) == 0
    assert "hardware reserved by pctr" in (intel.path / "control").read_text()
    with pytest.raises(OSError) as refused:
        intel.control("reserve perfctr-global")
    assert refused.value.errno == errno.EINVAL
    assert ioctl_errno(rw, PCIOCS0, 0) == 0
    assert "hardware reserved by nobody" in (intel.path / "control").read_text()


def test_the_texts_show_a_function_set_or_cleared_at_once(intel, fds):
    """A text read right after PCIOCSx shows the new function and holder:
    texts are shared by reads within a tick unless a call says it changed
    what they show, and a set that did not say so left the node showing the
    counter programmed, and the hardware held, after it was cleared."""
    _, rw = fds
    good = 0xC0 | PCTR_U | PCTR_EN
    node, control = intel.path / "pctr", intel.path / "control"
    for _ in range(20):
        assert "reserved-by -\n" in node.read_text()
        assert "hardware reserved by nobody" in control.read_text()
        assert ioctl_errno(rw, PCIOCS0, good) == 0
        text = node.read_text()
        assert "reserved-by pctr\n" in text and f"ctr0 0 fn {good:#x} " in text, text
        assert "hardware reserved by pctr" in control.read_text()
        assert ioctl_errno(rw, PCIOCS0, 0) == 0


def test_reading_the_node_names_the_model(intel):
    text = (intel.path / "pctr").read_text()
    assert "vendor GenuineIntel\n" in text and "machine amd64\n" in text and "counters 2\n" in text
    assert "model intel: " in (intel.path / "control").read_text()


def test_a_cpu_without_pctr_counters_answers_enodev_and_still_reads_the_tsc(manual_mount):
    fd = os.open(manual_mount.path / "pctr", os.O_RDWR)
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})  # host CPU 0 reads emulated CPU 0
    try:
        assert ioctl_errno(fd, PCIOCS0, 0xC0 | PCTR_U | PCTR_EN) == errno.ENODEV
        assert ioctl_errno(fd, PCIOCS3, 0) == errno.ENODEV  # before the index check, as the driver
        before = read(fd)
        manual_mount.control("advance-cpu 0 1ms 1ms")
        after = read(fd)
    finally:
        os.sched_setaffinity(0, affinity)
        os.close(fd)
    assert after.pctr_tsc - before.pctr_tsc == 2 * 200_000  # 2 ms at 200 MHz
    assert list(after.pctr_fn) == [0] * 4 and list(after.pctr_hwc) == [0] * 4


def test_irix_system_mode_is_busy_while_another_personality_holds_the_hardware(manual_mount):
    from hwperfd.client import Control, spec
    from structs import HWPERF_CNTEN_K

    control = Control(mount=manual_mount.path)
    manual_mount.control("reserve pctr")
    try:
        with pytest.raises(OSError) as busy:
            control.enable_system({0: spec(0, HWPERF_CNTEN_K)})  # syssgi HWPERF_ENSYSCNTRS
        assert busy.value.errno == errno.EBUSY
        assert "system mode free" in (manual_mount.path / "control").read_text()
    finally:
        manual_mount.control("release pctr")
    assert control.enable_system({0: spec(0, HWPERF_CNTEN_K)}) > 0
    text = (manual_mount.path / "control").read_text()
    assert "hardware reserved by irix-system-mode" in text and "model r10000: " in text
    with pytest.raises(OSError) as refused:
        manual_mount.control("reserve pctr")  # the holder's name comes back in the daemon's log
    assert refused.value.errno == errno.EINVAL
    control.release_system()
    control.close()
    assert "hardware reserved by nobody" in (manual_mount.path / "control").read_text()
