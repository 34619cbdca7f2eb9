"""The reads of perfctr, libcpc and pctr the bridge answers in C (docs/speed.md,
Reads answered in C): after the daemon has answered a thread's
VPERFCTR_READ_STATE or _READ_SUM of its own vperfctr, cpc sample of its own
LWP set, or anyone's PCIOCRD, that caller's next ones come from the state
page without Python - exactly what the daemon answered at the same instant
on the manual clock, never while the page says "ask the daemon", and never
for another caller, who gets the daemon's own answer or errno."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from structs import cpc as abi_cpc
from structs import perfctr as abi
from structs.pctr import PCIOCRD, PCIOCS, pctrst
from tests.conftest import ROOT, running_hwperfd

MS = 1_000_000
USR, INT, EN = 1 << 16, 1 << 20, 1 << 22
INST_RETIRED = 0xC0
TRIES = 40  # batches tried until one meets a moment without process events (see test_fast_reads.py)
BATCH = 30


def answered(mount) -> int:
    time.sleep(0.011)  # the control node's text is rendered anew at most every 10 ms (procfs/fs.py)
    status = (mount.path / "control").read_text()
    return int(re.search(r"answered from state pages in the bridge: (\d+)", status)[1])


def in_the_bridge(mount, read, first):
    """Batches of reads after ``first`` (the daemon's): every one equal to
    it, and in some batch all but the first answered in C (the first is the
    daemon's when a process event came meanwhile, and marks the file again)."""
    for _ in range(TRIES):
        before = answered(mount)
        reads = [read() for _ in range(BATCH + 1)]
        assert reads == [first] * (BATCH + 1)
        if answered(mount) - before >= BATCH:
            return
    pytest.fail(f"no batch of {BATCH} reads answered wholly in the bridge in {TRIES} tries")


def never_in_the_bridge(mount, read, times: int = BATCH) -> list:
    before = answered(mount)
    reads = [read() for _ in range(times)]
    assert answered(mount) == before
    return reads


@pytest.fixture(scope="module")
def intel(shared_tmp):
    """Two Core 2 CPUs at 1000 MHz on the manual clock."""
    args = ("--clock", "manual", "--cpus", "2", "--cpu-type", "intel", "--mhz", "1000")
    with running_hwperfd(shared_tmp / "fastnode-mnt", shared_tmp / "fastnode.log", *args) as mount:
        yield mount


# -- perfctr ---------------------------------------------------------------------


def _control(nractrs=1, nrictrs=0, ireset=(), tsc_on=1, flags=0):
    n = nractrs + nrictrs
    return abi.vperfctr_control.build({
        "si_signo": 0,
        "cpu_control": {
            "tsc_on": tsc_on, "nractrs": nractrs, "nrictrs": nrictrs,
            "pmc_map": list(range(n)) + [0] * (18 - n),
            "evntsel": [INST_RETIRED | USR | EN] * nractrs + [INST_RETIRED | USR | EN | INT] * nrictrs + [0] * (18 - n),
            "evntsel_high": [0] * 20,
            "ireset": list(ireset) + [0] * (18 - len(ireset)),
            "_reserved": [0] * 4,
        },
        "preserve": 0, "flags": flags, "_reserved": [0] * 3,
    })  # fmt: skip


@pytest.fixture
def vperfctr(intel):
    fd = os.open(intel.path / "perfctr", os.O_RDONLY)
    fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
    yield fd
    try:
        fcntl.ioctl(fd, abi.VPERFCTR_UNLINK)
    finally:
        os.close(fd)


def read_state(fd: int) -> bytes:
    return bytes(fcntl.ioctl(fd, abi.VPERFCTR_READ_STATE, bytes(abi.VPERFCTR_STATE_SIZE)))


def read_sum(fd: int) -> bytes:
    return bytes(fcntl.ioctl(fd, abi.VPERFCTR_READ_SUM, bytes(abi.SUM_CTRS_SIZE)))


def test_a_threads_reads_of_its_own_vperfctr_are_answered_in_the_bridge_exactly(intel, vperfctr):
    fcntl.ioctl(vperfctr, abi.VPERFCTR_CONTROL, _control())
    intel.control(f"advance {os.getpid()} 2ms")
    for read in (read_state, read_sum):
        first = read(vperfctr)  # the daemon's (reading the control node had it look)
        in_the_bridge(intel, lambda read=read: read(vperfctr), first)
    state = abi.vperfctr_state.parse(read_state(vperfctr))
    assert state.sum.pmc[0] == 2 * MS * 8 // 10 and state.sum.tsc == 2 * MS  # 0.8 instructions a cycle
    intel.control(f"advance {os.getpid()} 3ms")  # the daemon writes the page again before the write returns
    state = abi.vperfctr_state.parse(read_state(vperfctr))
    assert state.sum.pmc[0] == 5 * MS * 8 // 10 and state.sum.tsc == 5 * MS
    assert abi.vperfctr_state.parse(read_state(vperfctr)) == state


def test_a_stopped_or_i_mode_vperfctr_is_read_by_the_daemon(intel, vperfctr):
    fcntl.ioctl(vperfctr, abi.VPERFCTR_CONTROL, _control(nractrs=0, tsc_on=0))  # vperfctr_stop
    intel.control(f"advance {os.getpid()} 1ms")
    assert len(set(never_in_the_bridge(intel, lambda: read_state(vperfctr)))) == 1
    fcntl.ioctl(vperfctr, abi.VPERFCTR_CONTROL, _control(nractrs=0, nrictrs=1, ireset=[-(10 * MS)]))
    intel.control(f"advance {os.getpid()} 1ms")
    never_in_the_bridge(intel, lambda: read_state(vperfctr))


def test_a_vperfctr_suspended_on_its_overflow_is_read_from_its_page_until_iresume(intel, vperfctr):
    """A suspended vperfctr's counters stand at the overflowing event until
    iresume and its TSC runs on: perfctr's mapped state showed that, and so
    does the page, so the handler's read costs no round trip."""
    fcntl.ioctl(vperfctr, abi.VPERFCTR_CONTROL, _control(nractrs=0, nrictrs=1, ireset=[-MS]))
    never_in_the_bridge(intel, lambda: read_state(vperfctr), 3)  # running i-mode counters: the daemon's
    intel.control(f"advance {os.getpid()} 2ms")  # 1.6 M instructions: past the overflow at 1 M
    first = read_state(vperfctr)
    state = abi.vperfctr_state.parse(first)
    assert state.sum.pmc[0] == MS and state.sum.tsc == 2 * MS and state.cstatus == 1 << 31  # the TSC alone on
    in_the_bridge(intel, lambda: read_state(vperfctr), first)
    intel.control(f"advance {os.getpid()} 1ms")
    later = abi.vperfctr_state.parse(read_state(vperfctr))
    assert later.sum.pmc[0] == MS and later.sum.tsc == 3 * MS
    fcntl.ioctl(vperfctr, abi.VPERFCTR_IRESUME)
    never_in_the_bridge(intel, lambda: read_state(vperfctr), 3)


def test_a_forked_child_reading_the_inherited_vperfctr_gets_the_daemons_errno(intel, vperfctr):
    """The file is marked for this thread: the child (another thread, here
    also another user) reaches the driver, whose rule for another thread's
    vperfctr (its stopped tracer only) refuses it."""
    fcntl.ioctl(vperfctr, abi.VPERFCTR_CONTROL, _control())
    intel.control(f"advance {os.getpid()} 1ms")
    first = read_state(vperfctr)
    in_the_bridge(intel, lambda: read_state(vperfctr), first)
    before = answered(intel)
    for nobody in (False, True):
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child
            os.close(read_end)
            code = 0
            try:
                if nobody:
                    os.setgid(65534)
                    os.setuid(65534)
                read_state(vperfctr)
            except OSError as exc:
                code = exc.errno or 0
            os.write(write_end, str(code).encode())
            os._exit(0)
        os.close(write_end)
        got = int(os.read(read_end, 16) or b"-1")
        os.close(read_end)
        os.waitpid(child, 0)
        assert got == errno.ESRCH, f"the child's read answered {got}"  # ptrace_check_attach's
    assert read_state(vperfctr) == first
    assert answered(intel) - before <= 1  # the children's reads were the daemon's


# -- libcpc ----------------------------------------------------------------------


def _cpc_io(flags=abi_cpc.CPC_COUNT_USER, nreqs=1, preset=0):
    req = dict(cr_event="INST_RET", cr_preset=preset, cr_flags=flags, cr_nattrs=0,
               cr_attr=[dict(ka_name="", ka_val=0)] * abi_cpc.HWPERFD_CPC_MAXATTRS)  # fmt: skip
    io = dict(ci_error=0, ci_subcode=0, ci_target=abi_cpc.HWPERFD_CPC_LWP, ci_flags=0, ci_pid=0, ci_id=0,
              ci_index=0, ci_nreqs=nreqs, ci_preset=0, ci_hrtime=0, ci_tick=0,
              ci_data=[0] * abi_cpc.HWPERFD_CPC_MAXREQS, ci_req=[req] * abi_cpc.HWPERFD_CPC_MAXREQS)  # fmt: skip
    return bytearray(abi_cpc.cpc_io.build(io))


def sample(fd: int, raw: bytearray, cmd: int = abi_cpc.HWPERFD_CPCIO_SAMPLE) -> tuple:
    """The sample's answer, but for its hrtime (each answer's own instant)."""
    out = bytearray(raw)
    fcntl.ioctl(fd, cmd, out)
    head = abi_cpc.parse_head(bytes(out))
    assert out[abi_cpc.CPC_IO_HEAD_SIZE :] == raw[abi_cpc.CPC_IO_HEAD_SIZE :]  # the rest handed back as it came
    return (head.ci_error, head.ci_subcode, head.ci_flags, head.ci_nreqs, head.ci_tick, tuple(head.ci_data))


@pytest.fixture
def cpc_fd(intel):
    fd = os.open(intel.path / "cpc", os.O_RDONLY)
    yield fd
    os.close(fd)


def test_cpc_samples_of_the_lwps_own_set_are_answered_in_the_bridge_exactly(intel, cpc_fd):
    raw = _cpc_io()
    raw[abi_cpc.CPC_IO_HEAD_SIZE + abi_cpc.CPC_REQ_SIZE :] = b"\xa5" * (len(raw) - abi_cpc.CPC_IO_HEAD_SIZE
                                                                       - abi_cpc.CPC_REQ_SIZE)  # fmt: skip
    fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_BIND, raw)
    assert abi_cpc.parse_head(bytes(raw)).ci_error == 0
    try:
        intel.control(f"advance-thread {threading.get_native_id()} 1ms")
        first = sample(cpc_fd, raw)
        assert first[:5] == (0, -1, 0, 1, MS) and first[5][0] == MS * 8 // 10
        in_the_bridge(intel, lambda: sample(cpc_fd, raw), first)
        # The same sample sent with the whole struct (a libcpc of another build): the same answers, in C too.
        whole = next(number for number, head in abi_cpc.WHOLE_IO_CALLS.items() if head == abi_cpc.HWPERFD_CPCIO_SAMPLE)
        in_the_bridge(intel, lambda: sample(cpc_fd, raw, whole), first)
        intel.control(f"advance-thread {threading.get_native_id()} 2ms")
        assert sample(cpc_fd, raw)[4:6] == (3 * MS, (3 * MS * 8 // 10,) + (0,) * 7)
    finally:
        fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_RELE, raw)
    # Released: the daemon answers the sample, as Solaris does, with EINVAL in ci_error.
    assert never_in_the_bridge(intel, lambda: sample(cpc_fd, raw), 3)[0][0] == errno.EINVAL


def test_a_set_that_notifies_on_overflow_and_one_whose_counters_were_taken_are_sampled_by_the_daemon(intel, cpc_fd):
    raw = _cpc_io(abi_cpc.CPC_COUNT_USER | abi_cpc.CPC_OVF_NOTIFY_EMT)
    fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_BIND, raw)
    try:
        never_in_the_bridge(intel, lambda: sample(cpc_fd, raw))
    finally:
        fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_RELE, raw)
    raw = _cpc_io()
    fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_BIND, raw)
    try:
        first = sample(cpc_fd, raw)
        in_the_bridge(intel, lambda: sample(cpc_fd, raw), first)
        intel.control("reserve another")  # another personality takes the counters: the set is invalidated
        try:
            refused = never_in_the_bridge(intel, lambda: sample(cpc_fd, raw), 3)
            assert {r[0] for r in refused} == {errno.EAGAIN}
        finally:
            intel.control("release another")
    finally:
        fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_RELE, raw)


def test_a_set_frozen_on_its_overflow_is_sampled_from_its_page_until_restarted(intel, cpc_fd):
    """A set that notifies stands frozen at the overflowing event once its
    SIGEMT went (cpc_bind_curlwp(3CPC)) until cpc_set_restart: its page shows
    the values standing, so the handler's sample costs no round trip."""
    took = []
    old = signal.signal(abi_cpc.HWPERFD_CPC_SIGCARRIER, lambda signum, frame: took.append(signum))
    raw = _cpc_io(abi_cpc.CPC_COUNT_USER | abi_cpc.CPC_OVF_NOTIFY_EMT, preset=2**64 - MS)
    fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_BIND, raw)
    try:
        never_in_the_bridge(intel, lambda: sample(cpc_fd, raw), 3)  # running, notifying: the daemon's
        intel.control(f"advance-thread {threading.get_native_id()} 2ms")  # 1.6 M instructions: past the wrap
        first = None
        while first is None or first[0] == errno.EINTR:
            # The SIGEMT's carrier came first (EINTR, in the answer or from
            # the call itself, as libcpc sees it); the sample made again takes effect.
            try:
                first = sample(cpc_fd, raw)
            except InterruptedError:
                first = None
        assert took and first[:5] == (0, -1, 0, 1, 2 * MS) and first[5][0] == 0  # frozen at the wrap
        in_the_bridge(intel, lambda: sample(cpc_fd, raw), first)
        fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_RESTART, bytearray(raw))
        never_in_the_bridge(intel, lambda: sample(cpc_fd, raw), 3)
    finally:
        fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_RELE, raw)
        signal.signal(abi_cpc.HWPERFD_CPC_SIGCARRIER, old)


def test_a_sample_of_another_lwp_or_a_timers_look_is_left_to_the_daemon(intel, cpc_fd):
    raw = _cpc_io()
    fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_BIND, raw)
    try:
        first = sample(cpc_fd, raw)
        in_the_bridge(intel, lambda: sample(cpc_fd, raw), first)
        look = bytearray(raw)
        look[40:48] = abi_cpc.HWPERFD_CPC_LOOK.to_bytes(8, "little")  # ci_preset
        never_in_the_bridge(intel, lambda: sample(cpc_fd, look), 3)
        got: list[tuple] = []
        other = threading.Thread(target=lambda: got.append(sample(cpc_fd, raw)))  # no set of its own
        before = answered(intel)
        other.start()
        other.join()
        assert got[0][0] == errno.EINVAL and answered(intel) == before
    finally:
        fcntl.ioctl(cpc_fd, abi_cpc.HWPERFD_CPCIO_RELE, raw)


# -- pctr ------------------------------------------------------------------------


def pctr_read(fd: int) -> tuple:
    st = pctrst.parse(fcntl.ioctl(fd, PCIOCRD, bytes(pctrst.sizeof())))
    return (tuple(st.pctr_fn), st.pctr_tsc, tuple(st.pctr_hwc))


@pytest.fixture
def pinned():
    old = os.sched_getaffinity(0)
    yield lambda cpu: os.sched_setaffinity(0, old if cpu is None else {cpu})
    os.sched_setaffinity(0, old)


def test_pcioc_reads_are_answered_in_the_bridge_from_the_callers_cpu(intel, pinned):
    function = INST_RETIRED | USR | EN
    fd = os.open(intel.path / "pctr", os.O_RDWR)
    try:
        fcntl.ioctl(fd, PCIOCS[0], function.to_bytes(4, "little"))
        intel.control("advance-cpu 0 1ms")
        intel.control("advance-cpu 1 3ms")
        seen = {}
        for cpu in (0, 1, 0):
            pinned(cpu)
            first = pctr_read(fd)
            assert first[0][0] == function
            in_the_bridge(intel, lambda: pctr_read(fd), first)
            seen[cpu] = first
        assert seen[0][2][0] == MS * 8 // 10 and seen[1][2][0] == 3 * MS * 8 // 10
        # Free to move: the bridge reads which CPU the caller ran on (its stat),
        # and a read made on one CPU throughout is that CPU's.
        pinned(None)
        if len(os.sched_getaffinity(0)) > 1:
            getcpu = ctypes.CDLL(None).sched_getcpu
            for _ in range(TRIES):
                before = answered(intel)
                for _ in range(BATCH + 1):
                    cpu, got = getcpu(), pctr_read(fd)
                    assert got in (seen[0], seen[1])
                    if getcpu() == cpu:
                        assert got == seen[cpu % 2]
                if answered(intel) - before >= BATCH:
                    break
            else:
                pytest.fail(f"no batch of {BATCH} reads answered wholly in the bridge in {TRIES} tries")
        pinned(0)  # each CPU's TSC is its own (the manual clock's busy time): one CPU's reads are equal
        fcntl.ioctl(fd, PCIOCS[0], (0).to_bytes(4, "little"))  # pctr gives the counters back
        first = pctr_read(fd)
        assert first[0][0] == 0  # the function changed: the daemon answered it, not the mark
        in_the_bridge(intel, lambda: pctr_read(fd), first)
        intel.control("reserve another")  # another personality takes them: the daemon answers
        try:
            never_in_the_bridge(intel, lambda: pctr_read(fd), 3)
        finally:
            intel.control("release another")
    finally:
        fcntl.ioctl(fd, PCIOCS[0], (0).to_bytes(4, "little"))
        os.close(fd)


# -- the real clock ----------------------------------------------------------------


@pytest.fixture(scope="module")
def intel_real(shared_tmp):
    args = ("--clock", "real", "--cpus", "2", "--cpu-type", "intel", "--mhz", "1000")
    with running_hwperfd(shared_tmp / "fastnode-real-mnt", shared_tmp / "fastnode-real.log", *args) as mount:
        yield mount


def _never_backwards(mount, read, daemon_read) -> None:
    """Reads of a thread that burns CPU between them, every third one the
    daemon's (``daemon_read``: after another call, which drops the marks):
    each at least the one before, and some answered in C."""
    before = answered(mount)
    last = None
    for i in range(600):
        sum(range(200))
        value = daemon_read() if i % 3 == 0 else read()
        if last is not None:
            assert all(a <= b for a, b in zip(last, value)), (i, last, value)
        last = value
    assert answered(mount) > before


def test_real_clock_reads_in_the_bridge_and_the_daemon_never_go_backwards(intel_real):
    fd = os.open(intel_real.path / "perfctr", os.O_RDONLY)
    try:
        fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
        fcntl.ioctl(fd, abi.VPERFCTR_CONTROL, _control())

        def state() -> tuple:
            parsed = abi.vperfctr_state.parse(read_state(fd))
            return (parsed.sum.tsc, parsed.sum.pmc[0])

        def after_another_call() -> tuple:
            fcntl.ioctl(fd, abi.VPERFCTR_READ_CONTROL, bytes(abi.VPERFCTR_CONTROL_SIZE))
            return state()

        _never_backwards(intel_real, state, after_another_call)
        fcntl.ioctl(fd, abi.VPERFCTR_UNLINK)
    finally:
        os.close(fd)
    fd = os.open(intel_real.path / "cpc", os.O_RDONLY)
    raw = _cpc_io()
    try:
        fcntl.ioctl(fd, abi_cpc.HWPERFD_CPCIO_BIND, raw)
        look = bytearray(raw)
        look[40:48] = abi_cpc.HWPERFD_CPC_LOOK.to_bytes(8, "little")  # ci_preset: the daemon's sample
        _never_backwards(intel_real, lambda: sample(fd, raw)[4:6], lambda: sample(fd, look)[4:6])
        fcntl.ioctl(fd, abi_cpc.HWPERFD_CPCIO_RELE, raw)
    finally:
        os.close(fd)


_EXEC_READER = """
import fcntl, os, sys
from structs import perfctr as abi
fd = int(sys.argv[1])
try:
    state = abi.vperfctr_state.parse(fcntl.ioctl(fd, abi.VPERFCTR_READ_STATE, bytes(abi.VPERFCTR_STATE_SIZE)))
    print("after", state.cstatus, state.sum.pmc[0], flush=True)
except OSError as exc:
    print("after errno", exc.errno, flush=True)
"""

_MARKED_THEN_EXEC = """
import fcntl, os, sys
from structs import perfctr as abi
sys.path.insert(0, {root!r})
from tests.integration.test_fast_node_reads import _control
fd = os.open(sys.argv[1], os.O_RDONLY)
os.set_inheritable(fd, True)
fcntl.ioctl(fd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({{"tid": 0, "creat": 1}}))
fcntl.ioctl(fd, abi.VPERFCTR_CONTROL, _control(flags=int(sys.argv[2])))
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
for _ in range(20):
    state = abi.vperfctr_state.parse(fcntl.ioctl(fd, abi.VPERFCTR_READ_STATE, bytes(abi.VPERFCTR_STATE_SIZE)))
print("before", state.cstatus, state.sum.pmc[0], flush=True)
sys.stdin.readline()
os.execv(sys.executable, [sys.executable, "-c", {reader!r}, str(fd)])
"""


@pytest.mark.parametrize("cloexec", [False, True])
def test_an_exec_is_applied_before_the_next_read_is_answered(intel, cloexec):
    """A vperfctr read in C before its thread's exec: the first read of the
    new image is what the daemon answers once it has applied the exec - the
    counts kept, or with VPERFCTR_CONTROL_CLOEXEC the vperfctr unlinked at
    the exec (stopped, its counts from before it) - never the old page's."""
    script = _MARKED_THEN_EXEC.format(root=str(ROOT), reader=_EXEC_READER)
    flags = abi.VPERFCTR_CONTROL_CLOEXEC if cloexec else 0
    proc = subprocess.Popen([sys.executable, "-c", script, str(intel.path / "perfctr"), str(flags)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdin is not None
        word, pid = proc.stdout.readline().split()
        assert word == "ready"
        intel.control(f"advance {pid} 1ms")
        before = answered(intel)
        proc.stdin.write("\n")
        proc.stdin.flush()
        _, cstatus, count = proc.stdout.readline().split()
        assert int(count) == MS * 8 // 10 and int(cstatus) != 0
        assert answered(intel) > before  # its reads were answered in C
        proc.stdin.write("\n")
        proc.stdin.flush()
        after = proc.stdout.readline().split()
        if cloexec:
            assert after == ["after", "0", str(MS * 8 // 10)]  # unlinked at the exec: stopped
        else:
            assert after == ["after", cstatus, str(MS * 8 // 10)]  # kept: counting on
    finally:
        proc.kill()
        proc.wait()
