"""The perfctr driver's rules through real ioctls on <mount>/perfctr: the
x86 control checks and their errnos in the driver's order, sums and the
TSC, unlink, iresume, global mode and the shared reservation.

This test process is the monitored thread (its main thread: tid == pid),
and the manual clock moves its CPU time exactly: Core 2 at 1000 MHz, the
default "balanced" profile (0.8 instructions per cycle).
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import struct
import sys

import pytest

from tests.waiting import wait_for

from structs import perfctr as abi
from structs.pctr import PCIOCS
from tests.conftest import run_as_nobody

MS = 1_000_000
USR, OS_, INT, EN = 1 << 16, 1 << 17, 1 << 20, 1 << 22
INST_RETIRED = 0xC0
CYCLES = 0x3C
FIXED = 0x40000000  # pmc_map of Core 2's fixed-function counter 0 (x86.c CORE2_PMC_FIXED_FLAG)


def control(nractrs=0, nrictrs=0, evntsel=(), pmc_map=None, ireset=(), tsc_on=1, si_signo=0, preserve=0, flags=0):
    n = nractrs + nrictrs
    pmc_map = list(pmc_map if pmc_map is not None else range(n))
    return abi.vperfctr_control.build({
        "si_signo": si_signo,
        "cpu_control": {
            "tsc_on": tsc_on, "nractrs": nractrs, "nrictrs": nrictrs,
            "pmc_map": pmc_map + [0] * (18 - len(pmc_map)),
            "evntsel": list(evntsel) + [0] * (18 - len(evntsel)),
            "evntsel_high": [0] * 20,
            "ireset": list(ireset) + [0] * (18 - len(ireset)),
            "_reserved": [0] * 4,
        },
        "preserve": preserve, "flags": flags, "_reserved": [0] * 3,
    })  # fmt: skip


class Vperfctr:
    def __init__(self, mount, tid: int = 0, creat: bool = True) -> None:
        self.mount = mount
        self.fd = os.open(mount.path / "perfctr", os.O_RDONLY)
        fcntl.ioctl(self.fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": tid, "creat": int(creat)}))

    def control(self, data: bytes) -> None:
        fcntl.ioctl(self.fd, abi.VPERFCTR_CONTROL, data)

    def state(self):
        return abi.vperfctr_state.parse(fcntl.ioctl(self.fd, abi.VPERFCTR_READ_STATE, bytes(abi.VPERFCTR_STATE_SIZE)))

    def sums(self):
        return abi.perfctr_sum_ctrs.parse(fcntl.ioctl(self.fd, abi.VPERFCTR_READ_SUM, bytes(abi.SUM_CTRS_SIZE)))

    def close(self) -> None:
        try:
            fcntl.ioctl(self.fd, abi.VPERFCTR_UNLINK)
        finally:
            os.close(self.fd)


@pytest.fixture
def vp(intel):
    v = Vperfctr(intel)
    yield v
    v.close()


def advance(mount, user: str, system: str = "0") -> None:
    mount.control(f"advance {os.getpid()} {user} {system}")


def test_abi_and_info_say_perfctr_2_6_on_a_core_2(intel):
    fd = os.open(intel.path / "perfctr", os.O_RDONLY)
    try:
        (version,) = struct.unpack("I", fcntl.ioctl(fd, abi.PERFCTR_ABI, bytes(4)))
        info = abi.perfctr_info.parse(fcntl.ioctl(fd, abi.PERFCTR_INFO, bytes(abi.PERFCTR_INFO_SIZE)))
        cpus = abi.perfctr_cpu_mask.parse(fcntl.ioctl(fd, abi.PERFCTR_CPUS, bytes(abi.CPU_MASK_SIZE)))
    finally:
        os.close(fd)
    assert version == 0x05020501 == info.abi_version
    assert info.cpu_type == abi.PERFCTR_X86_INTEL_CORE2
    assert info.cpu_features == abi.PERFCTR_FEATURE_RDPMC | abi.PERFCTR_FEATURE_RDTSC | abi.PERFCTR_FEATURE_PCINT
    assert info.cpu_khz == 1_000_000
    assert (cpus.nrwords, cpus.mask[0]) == (1, 0b11)


def test_amd_is_a_k8(amd):
    fd = os.open(amd.path / "perfctr", os.O_RDONLY)
    try:
        info = abi.perfctr_info.parse(fcntl.ioctl(fd, abi.PERFCTR_INFO, bytes(abi.PERFCTR_INFO_SIZE)))
    finally:
        os.close(fd)
    assert info.cpu_type == abi.PERFCTR_X86_AMD_K8


def test_a_mode_counts_and_the_tsc_are_exact(intel, vp):
    vp.control(control(2, 0, [INST_RETIRED | USR | EN, CYCLES | USR | OS_ | EN]))
    advance(intel, "2ms", "1ms")
    st = vp.state()
    assert st.cstatus == (1 << 31) | (2 << 8) | 2
    assert st.sum.pmc[0] == 2 * MS * 8 // 10  # user only
    assert st.sum.pmc[1] == 3 * MS
    assert st.sum.tsc == 3 * MS  # the thread's own time, in cycles
    assert vp.sums().pmc[:2] == st.sum.pmc[:2]


def test_sums_reset_unless_preserved_and_the_tsc_keeps_counting(intel, vp):
    sel = [CYCLES | USR | EN, INST_RETIRED | USR | EN]
    vp.control(control(2, 0, sel))
    advance(intel, "1ms")
    vp.control(control(2, 0, sel, preserve=0b10))
    advance(intel, "1ms")
    st = vp.state()
    assert st.sum.pmc[0] == MS  # reset
    assert st.sum.pmc[1] == 2 * MS * 8 // 10  # preserved
    assert st.sum.tsc == 2 * MS  # tsc_on: tsc_sum is never reset
    vp.control(control(1, 0, sel[:1], tsc_on=0))
    assert vp.state().sum.tsc == 0


def test_stop_leaves_the_sums_and_stops_counting(intel, vp):
    vp.control(control(1, 0, [CYCLES | USR | EN]))
    advance(intel, "1ms")
    vp.control(control(tsc_on=0))
    advance(intel, "5ms")
    st = vp.state()
    assert st.cstatus == 0 and st.sum.pmc[0] == MS


@pytest.mark.parametrize(
    "kwargs, code",
    [
        (dict(nractrs=6, evntsel=[CYCLES | USR | EN] * 6), errno.EINVAL),  # Core 2 has 2 + 3
        (dict(nractrs=1, evntsel=[CYCLES | USR | EN], pmc_map=[2]), errno.EINVAL),  # general: 0 and 1
        (dict(nractrs=1, evntsel=[CYCLES | USR | EN], pmc_map=[FIXED | 3]), errno.EINVAL),  # fixed: 0-2
        (dict(nractrs=2, evntsel=[CYCLES | USR | EN] * 2, pmc_map=[FIXED | 1] * 2), errno.EINVAL),
        (dict(nractrs=1, evntsel=[CYCLES | USR], pmc_map=[FIXED | 1]), errno.EINVAL),  # fixed, no ENable
        (dict(nractrs=1, evntsel=[CYCLES | EN], pmc_map=[FIXED | 1]), errno.EINVAL),  # fixed, CPL 0
        (dict(nractrs=2, evntsel=[CYCLES | USR | EN] * 2, pmc_map=[1, 1]), errno.EINVAL),
        (dict(nractrs=1, evntsel=[CYCLES | USR | EN | (1 << 19)]), errno.EPERM),  # reserved (pin control)
        (dict(nractrs=1, evntsel=[CYCLES | USR | EN | (1 << 21)]), errno.EPERM),  # reserved (any-thread)
        (dict(nractrs=1, evntsel=[CYCLES | USR]), errno.EINVAL),  # no ENable
        (dict(nractrs=1, evntsel=[CYCLES | EN]), errno.EINVAL),  # CPL 0
        (dict(nractrs=1, evntsel=[CYCLES | USR | EN | INT]), errno.EINVAL),  # a-mode with INT
        (dict(nrictrs=1, evntsel=[CYCLES | USR | EN], ireset=[-100]), errno.EINVAL),  # i-mode without INT
        (dict(nrictrs=1, evntsel=[CYCLES | USR | EN | INT], ireset=[100]), errno.EINVAL),  # ireset >= 0
        (dict(nrictrs=1, evntsel=[CYCLES | USR | EN | INT], ireset=[0]), errno.EINVAL),
    ],
)
def test_control_validation_errnos(vp, kwargs, code):
    with pytest.raises(OSError) as exc:
        vp.control(control(**kwargs))
    assert exc.value.errno == code


def test_the_fixed_function_counters_count_their_own_event_in_the_modes_asked(intel, vp):
    """Core 2's FIXED_CTR0-2 (pmc_map 0x40000000 + n) count instructions
    retired, core cycles and reference cycles whatever the event code; only
    the event select's CPL bits reach them (x86.c p6_like_check_control),
    and they count beside both general counters - what PAPI's Core 2 tables
    put PAPI_TOT_INS, PAPI_TOT_CYC and PAPI_REF_CYC on."""
    sel = [CYCLES | USR | EN, INST_RETIRED | USR | OS_ | EN, USR | EN, 0x13C | OS_ | EN, INST_RETIRED | USR | EN]
    vp.control(control(5, 0, sel, pmc_map=[0, 1, FIXED | 1, FIXED | 2, FIXED]))
    advance(intel, "2ms", "1ms")
    st = vp.state()
    assert st.cstatus == (1 << 31) | (5 << 8) | 5
    assert st.sum.pmc[:5] == [2 * MS, 3 * MS * 8 // 10, 2 * MS, MS, 2 * MS * 8 // 10]
    read = abi.vperfctr_control.parse(fcntl.ioctl(vp.fd, abi.VPERFCTR_READ_CONTROL, bytes(abi.VPERFCTR_CONTROL_SIZE)))
    assert list(read.cpu_control.pmc_map[:5]) == [0, 1, FIXED | 1, FIXED | 2, FIXED]  # as given


def test_amd_has_no_fixed_function_counters(amd):
    vp = Vperfctr(amd)
    try:
        with pytest.raises(OSError) as exc:
            vp.control(control(1, 0, [CYCLES | USR | EN], pmc_map=[FIXED]))
        assert exc.value.errno == errno.EINVAL
        vp.control(control(4, 0, [0x76 | USR | EN] * 4))  # its four general counters
    finally:
        vp.close()


def test_reserved_bits_are_checked_before_the_enable_bit(vp):
    # x86.c: reserved bits (EPERM) come before the EN rule (EINVAL).
    with pytest.raises(OSError) as exc:
        vp.control(control(1, 0, [CYCLES | USR | (1 << 19)]))
    assert exc.value.errno == errno.EPERM


def test_a_refused_control_leaves_the_counters_stopped(intel, vp):
    vp.control(control(1, 0, [CYCLES | USR | EN]))
    with pytest.raises(OSError):
        vp.control(control(1, 0, [CYCLES | USR]))
    advance(intel, "1ms")
    assert vp.state().cstatus == 0


def test_iresume_without_an_overflow_is_eperm(vp):
    vp.control(control(1, 0, [CYCLES | USR | EN]))
    with pytest.raises(OSError) as exc:
        fcntl.ioctl(vp.fd, abi.VPERFCTR_IRESUME)
    assert exc.value.errno == errno.EPERM


def test_an_i_mode_overflow_suspends_the_counters_until_iresume(intel, vp):
    vp.control(control(1, 1, [INST_RETIRED | USR | EN, CYCLES | USR | EN | INT], ireset=[0, -MS // 2], si_signo=0))
    advance(intel, "1ms")  # 1 000 000 cycles: the i-mode counter overflows half way
    st = vp.state()
    assert st.cstatus == 1 << 31  # only the TSC runs
    # Both stopped at the overflowing event (x86.c's interrupt handler suspends them).
    assert st.sum.pmc[1] == MS // 2 and st.sum.pmc[0] == MS // 2 * 8 // 10
    advance(intel, "1ms")
    assert vp.state().sum.pmc[1] == MS // 2  # suspended
    fcntl.ioctl(vp.fd, abi.VPERFCTR_IRESUME)
    assert vp.state().cstatus == (1 << 31) | (1 << 16) | (2 << 8) | 1
    advance(intel, "1ms")
    st = vp.state()
    assert st.sum.pmc[1] == MS and st.sum.pmc[0] == MS * 8 // 10 and st.sum.tsc == 3 * MS


def test_unlink_keeps_the_final_sums_and_refuses_control_with_esrch(intel):
    vp = Vperfctr(intel)
    try:
        vp.control(control(1, 0, [CYCLES | USR | EN]))
        advance(intel, "1ms")
        fcntl.ioctl(vp.fd, abi.VPERFCTR_UNLINK)
        advance(intel, "1ms")
        assert vp.sums().pmc[0] == MS
        with pytest.raises(OSError) as exc:
            vp.control(control(1, 0, [CYCLES | USR | EN]))
        assert exc.value.errno == errno.ESRCH
    finally:
        os.close(vp.fd)


def test_creat_twice_is_eexist_and_open_finds_the_first(intel, vp):
    vp.control(control(1, 0, [CYCLES | USR | EN]))
    with pytest.raises(OSError) as exc:
        Vperfctr(intel)
    assert exc.value.errno == errno.EEXIST
    other = Vperfctr(intel, creat=False)
    try:
        advance(intel, "1ms")
        assert other.state().sum.pmc[0] == MS
    finally:
        os.close(other.fd)


def test_another_threads_perfctr_needs_ptrace_attach(intel):
    child = os.fork()
    if child == 0:
        os.read(os.open("/dev/null", os.O_RDONLY), 1)
        import time

        time.sleep(30)
        os._exit(0)
    try:
        with pytest.raises(OSError) as exc:
            Vperfctr(intel, tid=child)
        assert exc.value.errno == errno.ESRCH
        with pytest.raises(OSError) as exc:
            Vperfctr(intel, tid=1 << 22)
        assert exc.value.errno == errno.ESRCH
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


def test_vperfctr_calls_on_an_unbound_node_are_einval(intel):
    fd = os.open(intel.path / "perfctr", os.O_RDONLY)
    try:
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(fd, abi.VPERFCTR_READ_SUM, bytes(abi.SUM_CTRS_SIZE))
        assert exc.value.errno == errno.EINVAL
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(fd, 0xD0FF)  # _IO(0xD0, 0xFF): no such call
        assert exc.value.errno == errno.EINVAL
    finally:
        os.close(fd)


def test_perfctr_is_enodev_like_on_a_mips_model(mips):
    fd = os.open(mips.path / "perfctr", os.O_RDONLY)
    try:
        info = abi.perfctr_info.parse(fcntl.ioctl(fd, abi.PERFCTR_INFO, bytes(abi.PERFCTR_INFO_SIZE)))
        assert info.cpu_type == abi.PERFCTR_X86_GENERIC and info.cpu_features == abi.PERFCTR_FEATURE_RDTSC
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
        assert exc.value.errno == errno.EINVAL
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(fd, abi.GPERFCTR_CONTROL, gcontrol(0))
        assert exc.value.errno == errno.EINVAL
        fcntl.ioctl(fd, abi.GPERFCTR_CONTROL, gcontrol(0, nractrs=0, evntsel=()))  # the TSC alone is there
    finally:
        os.close(fd)


# -- global mode ------------------------------------------------------------------


def gcontrol(cpu, nractrs=1, evntsel=(CYCLES | USR | OS_ | EN,), nrictrs=0, tsc_on=1):
    ctrl = abi.vperfctr_control.parse(control(nractrs, nrictrs, evntsel, tsc_on=tsc_on,
                                              ireset=[-1] * (nractrs + nrictrs)))  # fmt: skip
    return abi.gperfctr_cpu_control.build({"cpu": cpu, "cpu_control": ctrl.cpu_control, "_reserved": [0] * 4})


def gread(fd, cpu):
    data = abi.gperfctr_cpu_state.build({"cpu": cpu, "cpu_control": abi.vperfctr_control.parse(control()).cpu_control,
                                         "sum": {"tsc": 0, "pmc": [0] * 18}, "_reserved": [0] * 4})  # fmt: skip
    return abi.gperfctr_cpu_state.parse(fcntl.ioctl(fd, abi.GPERFCTR_READ, data))


@pytest.fixture
def gfd(intel):
    fd = os.open(intel.path / "perfctr", os.O_RDONLY)
    yield fd
    fcntl.ioctl(fd, abi.GPERFCTR_STOP)
    os.close(fd)


def test_global_mode_counts_each_cpu_exactly(intel, gfd):
    assert fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, gcontrol(0)) is not None
    fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, gcontrol(1, evntsel=(INST_RETIRED | USR | EN,)))
    assert fcntl.ioctl(gfd, abi.GPERFCTR_START, 0) == 2  # active CPUs
    intel.control("advance-cpu 0 2ms 1ms")
    intel.control("advance-cpu 1 1ms")
    s0, s1 = gread(gfd, 0), gread(gfd, 1)
    assert s0.sum.pmc[0] == 3 * MS and s0.sum.tsc == 3 * MS
    assert s1.sum.pmc[0] == MS * 8 // 10
    assert s1.cpu_control.evntsel[0] == INST_RETIRED | USR | EN


def test_global_mode_rules(intel, gfd):
    for data, code in [
        (gcontrol(2), errno.EINVAL),  # no CPU 2
        (gcontrol(0, nractrs=0, nrictrs=1, evntsel=(CYCLES | USR | EN | INT,)), errno.EPERM),  # no i-mode
        (gcontrol(0, evntsel=(CYCLES | USR | EN | (1 << 19),)), errno.EPERM),
    ]:
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, data)
        assert exc.value.errno == code
    with pytest.raises(OSError) as exc:
        fcntl.ioctl(gfd, abi.GPERFCTR_START, 5000)  # under 10 ms
    assert exc.value.errno == errno.EINVAL
    fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, gcontrol(0))
    fcntl.ioctl(gfd, abi.GPERFCTR_START, 0)
    with pytest.raises(OSError) as exc:
        fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, gcontrol(0))  # running: stop first
    assert exc.value.errno == errno.EBUSY
    with pytest.raises(OSError) as exc:
        Vperfctr(intel)  # global mode holds the hardware
    assert exc.value.errno == errno.EBUSY


def test_global_start_is_ebusy_while_another_personality_holds_the_pmu(intel, gfd):
    pctr = os.open(intel.path / "pctr", os.O_WRONLY)
    try:
        fcntl.ioctl(pctr, PCIOCS[0], struct.pack("I", CYCLES | USR | EN))
        fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, gcontrol(0))
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(gfd, abi.GPERFCTR_START, 0)
        assert exc.value.errno == errno.EBUSY
    finally:
        fcntl.ioctl(pctr, PCIOCS[0], struct.pack("I", 0))
        os.close(pctr)
    intel.control("reserve irix-system-mode")
    try:
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(gfd, abi.GPERFCTR_START, 0)
        assert exc.value.errno == errno.EBUSY
    finally:
        intel.control("release irix-system-mode")
    assert fcntl.ioctl(gfd, abi.GPERFCTR_START, 0) == 1
    # and the other way round: pctr is told the hardware is taken
    pctr = os.open(intel.path / "pctr", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(pctr, PCIOCS[0], struct.pack("I", CYCLES | USR | EN))
        assert exc.value.errno == errno.EBUSY
    finally:
        os.close(pctr)
    assert "perfctr-global" in (intel.path / "perfctr").read_text()


def test_global_start_is_ebusy_while_vperfctrs_exist(intel, gfd, vp):
    fcntl.ioctl(gfd, abi.GPERFCTR_CONTROL, gcontrol(0))
    with pytest.raises(OSError) as exc:
        fcntl.ioctl(gfd, abi.GPERFCTR_START, 0)
    assert exc.value.errno == errno.EBUSY


def test_vperfctrs_hold_the_machines_reservation_as_virtual_c_does(intel):
    """The first vperfctr reserves the hardware, the last one freed gives it
    back; while pctr or IRIX system mode holds it, none can be made."""
    intel.control("reserve irix-system-mode")
    try:
        with pytest.raises(OSError) as exc:
            Vperfctr(intel)
        assert exc.value.errno == errno.EBUSY
    finally:
        intel.control("release irix-system-mode")
    v = Vperfctr(intel)
    try:
        assert "hardware reserved by perfctr-virtual" in (intel.path / "control").read_text()
        pctr = os.open(intel.path / "pctr", os.O_WRONLY)
        try:
            with pytest.raises(OSError) as exc:
                fcntl.ioctl(pctr, PCIOCS[0], struct.pack("I", CYCLES | USR | EN))
            assert exc.value.errno == errno.EBUSY
        finally:
            os.close(pctr)
    finally:
        v.close()
    # The file's release reaches the daemon after close(2) returns.
    assert wait_for(lambda: "hardware reserved by nobody" in (intel.path / "control").read_text())


NOBODY_GLOBAL = """
import errno, fcntl, os, sys
sys.path.insert(0, sys.argv[1])
from structs import perfctr as abi
fd = os.open(os.path.join(os.environ["HWPERFD_MOUNT"], "perfctr"), os.O_RDONLY)
for cmd in (abi.GPERFCTR_STOP, abi.GPERFCTR_START):
    try:
        fcntl.ioctl(fd, cmd, 0)
        print("allowed")
    except OSError as exc:
        print(errno.errorcode[exc.errno])
fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
print("vperfctr ok")
"""


def test_global_mode_is_roots_and_vperfctr_anyones(intel, nobody_python, shared_tmp):
    script = shared_tmp / "perfctr_nobody.py"
    script.write_text(NOBODY_GLOBAL)
    script.chmod(0o644)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = run_as_nobody(nobody_python, str(script), root, mount=intel)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["EPERM", "EPERM", "vperfctr ok"]


def test_the_node_reads_as_the_drivers_info(intel):
    text = (intel.path / "perfctr").read_text()
    assert "cpu_type 18" in text and "abi_version 0x05020501" in text
    assert sys.platform == "linux"


def test_random_requests_get_an_errno_and_the_daemon_stays_up(intel):
    import random

    rng = random.Random(12)
    sized = [abi.PERFCTR_ABI, abi.PERFCTR_INFO, abi.PERFCTR_CPUS, abi.VPERFCTR_READ_SUM, abi.VPERFCTR_CONTROL,
             abi.VPERFCTR_READ_CONTROL, abi.VPERFCTR_READ_STATE, abi.VPERFCTR_ATTACH, abi.GPERFCTR_CONTROL,
             abi.GPERFCTR_READ, abi.VPERFCTR_CONTROL_NS, abi.VPERFCTR_UNLINK_NS, abi.PERFCTR_THREAD_CLOCKS,
             abi.VPERFCTR_IRESUME_NS, abi.VPERFCTR_OVERFLOW_NS]  # fmt: skip
    plain = [abi.VPERFCTR_UNLINK, abi.VPERFCTR_IRESUME, abi.VPERFCTR_CREAT, abi.VPERFCTR_OPEN, 0xD0FF]
    allowed = {errno.EINVAL, errno.EPERM, errno.ESRCH, errno.EEXIST, errno.EBUSY, errno.EAGAIN, errno.ENOTTY}
    for _ in range(300):
        fd = os.open(intel.path / "perfctr", os.O_RDONLY)
        try:
            for _ in range(4):
                if rng.random() < 0.7:
                    cmd = rng.choice(sized)
                    size = (cmd >> 16) & 0x3FFF
                    words = [rng.choice([0, 1, 2, 3, 18, -1, 1 << 31, rng.getrandbits(32)]) for _ in range(size // 4)]
                    data = struct.pack(f"<{size // 4}I", *(w & 0xFFFFFFFF for w in words))
                    try:
                        fcntl.ioctl(fd, cmd, data)
                    except OSError as exc:
                        assert exc.errno in allowed, (hex(cmd), exc)
                else:
                    try:
                        fcntl.ioctl(fd, rng.choice(plain), rng.choice([0, 1, os.getpid(), 1 << 30]))
                    except OSError as exc:
                        assert exc.errno in allowed, exc
        finally:
            fcntl.ioctl(fd, abi.GPERFCTR_STOP)
            try:
                fcntl.ioctl(fd, abi.VPERFCTR_UNLINK)  # no random overflow signal for this process later
            except OSError:
                pass
            os.close(fd)
    assert intel.process.poll() is None
    assert "cpu_type 18" in (intel.path / "perfctr").read_text()


def test_a_new_control_after_an_overflow_without_the_tsc_leaves_nothing_to_iresume(intel, vp):
    # Without the TSC an i-mode overflow leaves cstatus 0 (the vperfctr looks
    # stopped); a control taken then replaces the counters the overflow was of,
    # so IRESUME has nothing to resume: EPERM, and the new counters run on.
    vp.control(control(0, 2, [CYCLES | USR | EN | INT] * 2, ireset=[-MS // 2, -MS // 2], tsc_on=0))
    advance(intel, "1ms")
    assert vp.state().cstatus == 0
    vp.control(control(1, 0, [INST_RETIRED | USR | EN], tsc_on=0))
    with pytest.raises(OSError) as exc:
        fcntl.ioctl(vp.fd, abi.VPERFCTR_IRESUME)
    assert exc.value.errno == errno.EPERM
    advance(intel, "1ms")
    st = vp.state()
    assert st.cstatus == (1 << 8) | 1 and st.sum.pmc[0] == MS * 8 // 10


def _overflow_masks() -> list[int]:
    """The overflow signals queued to this thread (SIGIO blocked), by mask:
    si_value's low 32 bits sit where siginfo's si_status does."""
    masks = []
    while (info := signal.sigtimedwait({signal.SIGIO}, 0)) is not None:
        masks.append(info.si_status & 0xFFFFFFFF)
    return masks


@pytest.fixture
def sigio_blocked():
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGIO})
    yield
    _overflow_masks()
    signal.pthread_sigmask(signal.SIG_SETMASK, old)


@pytest.mark.parametrize("mount_name", ["intel", "amd"])
def test_each_i_mode_counter_overflows_at_its_own_period_and_the_mask_names_only_those(request, mount_name,
                                                                                       sigio_blocked):  # fmt: skip
    """Seed 002: identify_overflow resets only the overflown counters' start
    values; iresume restores every i-mode counter to its start, so one that
    did not overflow continues its period.  Every counter stops at the
    overflowing event (cycles: 1 a ns at 1 000 MHz)."""
    mount = request.getfixturevalue(mount_name)
    cycles = 0x76 if mount_name == "amd" else CYCLES
    periods = [300, 200, 100] if mount_name == "amd" else [100, 150]
    v = Vperfctr(mount)
    try:
        n = len(periods)
        v.control(control(0, n, [cycles | USR | EN | INT] * n, ireset=[-p for p in periods], si_signo=signal.SIGIO))
        masks = []
        for _ in range(20):
            advance(mount, "1us")  # longer than any period: each advance ends at the next overflow
            masks += _overflow_masks()
            assert v.state().cstatus == 1 << 31  # only the TSC runs until iresume
            fcntl.ioctl(v.fd, abi.VPERFCTR_IRESUME)
        # The overflows come at the common multiples' order: 100, 150, 200, 300 (both), ...
        ticks = sorted({k * p for p in periods for k in range(1, 100)})[:20]
        expect = [sum(1 << i for i, p in enumerate(periods) if t % p == 0) for t in ticks]
        assert masks == expect
        st = v.state()
        assert st.sum.pmc[:n] == [ticks[-1]] * n  # every counter stopped at the 20th overflow
    finally:
        v.close()


def test_a_call_after_an_unhandled_overflow_is_eintr_and_its_retry_takes_effect(intel, sigio_blocked):
    """The overflow comes before the thread's next call: the call answers
    EINTR (the signal is delivered as it returns) and the same call made
    again takes effect, whatever happened since."""
    v = Vperfctr(intel)
    try:
        v.control(control(0, 1, [CYCLES | USR | EN | INT], ireset=[-1000], si_signo=signal.SIGIO))
        advance(intel, "2us")
        stop = control(0, 0, [], tsc_on=0)
        with pytest.raises(InterruptedError):
            v.control(stop)  # SIGIO is pending here: it comes first
        v.control(stop)  # the retry: taken, though the signal is still pending
        assert v.state().cstatus == 0 and v.state().sum.pmc[0] == 1000
        assert _overflow_masks() == [0b1]
    finally:
        v.close()
