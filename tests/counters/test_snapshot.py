"""State-page arithmetic: a snapshot extrapolated to later CPU times equals
what the kernel counts when it catches up, however the time arrives; and
what the formula cannot reproduce is marked for the ioctl."""

import errno
import os
import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwperfd.client import StatePage
from hwperfd.counters.kernel import Caller, CounterKernel
from hwperfd.counters.request import CounterRequest
from hwperfd.counters.snapshot import extrapolate, slot_at, tsc_slot
from hwperfd.cpu.core import Tsc
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.procfs.statepages import StatePages
import structs
from structs import HWPERF_CNTEN_E, HWPERF_CNTEN_U, spec_word


class Ledger:
    """A time source that is a plain table."""

    name = "manual"

    def __init__(self):
        self.procs = {}

    def process_times(self, pid):
        return self.procs.get(pid)

    def cpu_times(self, cpu):
        return (0, 0)

    def run(self, pid, user_ns, system_ns=0):
        u, s = self.procs.get(pid, (0, 0))
        self.procs[pid] = (u + user_ns, s + system_ns)


class Proc:
    def __init__(self, pid, uid=0):
        self.pid, self.uid, self.pgid, self.processor = pid, uid, pid, 0


# A process counts in user mode and at exception level (kernel mode is system mode's).
MODES = [HWPERF_CNTEN_U, HWPERF_CNTEN_E, HWPERF_CNTEN_U | HWPERF_CNTEN_E]
PID = 4242


def counting(specs, mhz=195, profile=None, **request):
    ledger = Ledger()
    kernel = CounterKernel(CpuSet(2, "r10000", mhz), ledger)
    ledger.run(PID, 0)
    if profile is not None:
        kernel.set_profile(PID, profile)
    kernel.enable(Caller(PID, 0, 0, PID), Proc(PID), CounterRequest.build(specs, **request))
    return kernel, ledger


def read(kernel):
    return kernel.read(Caller(PID, 0, 0, PID), Proc(PID))


@settings(max_examples=200, deadline=None)
@given(
    event0=st.sampled_from([0, 1, 2, 9, 14]),
    event1=st.sampled_from([0, 9, 10, 11]),
    mode0=st.sampled_from(MODES),
    mode1=st.sampled_from(MODES),
    mhz=st.sampled_from([195, 200, 300]),
    exl=st.sampled_from([Fraction(1, 10), Fraction(0), Fraction(3, 7)]),
    before=st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)), max_size=5),
    after=st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)), min_size=1, max_size=8),
)
def test_extrapolation_equals_the_kernels_catch_up(event0, event1, mode0, mode1, mhz, exl, before, after):
    profile = WorkloadProfile.named("balanced").with_rates(exl_share=exl)
    kernel, ledger = counting({0: spec_word(event0, mode0), 16: spec_word(event1, mode1)}, mhz, profile)
    for u, s in before:  # a residue carried into the snapshot
        ledger.run(PID, u, s)
        read(kernel)
    snapshot = kernel.snapshot(PID)
    assert snapshot is not None and not snapshot.fallback
    for u, s in after:  # the daemon cuts the time anywhere
        ledger.run(PID, u, s)
        read(kernel)
        assert extrapolate(snapshot, ledger.procs[PID]) == read(kernel)[1]


def test_a_slot_that_does_not_move_keeps_its_count():
    kernel, ledger = counting({0: spec_word(0, HWPERF_CNTEN_U)})
    ledger.run(PID, 5_000_000)
    read(kernel)
    snapshot = kernel.snapshot(PID)
    assert snapshot.slots[1] == (0, 0, 0, 0, 0)
    assert snapshot.slots[0][0] == 975_000 and snapshot.slots[0][4] > 0


def test_multiplexed_slots_fall_back():
    kernel, _ = counting({0: spec_word(0, HWPERF_CNTEN_U), 1: spec_word(1, HWPERF_CNTEN_U)})
    assert kernel.snapshot(PID).fallback


def test_overflow_signals_fall_back_and_thresholds_alone_do_not():
    specs = {0: spec_word(0, HWPERF_CNTEN_U | 0x10)}
    kernel, _ = counting(specs, thresholds={0: 1000}, signal=10)
    assert kernel.snapshot(PID).fallback
    kernel, _ = counting(specs, thresholds={0: 1000})
    assert not kernel.snapshot(PID).fallback


def test_released_counters_fall_back():
    kernel, _ = counting({0: spec_word(0, HWPERF_CNTEN_U)})
    kernel.release(Caller(PID, 0, 0, PID), Proc(PID))
    assert kernel.snapshot(PID).fallback


def test_no_snapshot_without_counters():
    kernel, _ = counting({0: spec_word(0, HWPERF_CNTEN_U)})
    assert kernel.snapshot(PID + 1) is None


# -- the page as written and read (no mount: the writer and the Python reader) --


@pytest.fixture
def pages(tmp_path):
    kernel, ledger = counting({0: spec_word(0, HWPERF_CNTEN_U), 16: spec_word(9, HWPERF_CNTEN_U)})
    kernel_pid = os.getpid()  # the page's process must be this one for the reader
    ledger.run(kernel_pid, 0)
    kernel.enable(Caller(kernel_pid, 0, 0, kernel_pid), Proc(kernel_pid), kernel._procs[PID].block.request)
    store = StatePages(kernel, ledger, str(tmp_path / "state"), "/mnt/x", per_user=2)
    yield store, kernel, ledger, kernel_pid
    store.close()


def test_the_page_layout_is_the_headers(pages):
    store, kernel, ledger, pid = pages
    ledger.run(pid, 3_000_000, 1_000_000)
    kernel.catch_up([pid])
    path = store.grant(pid, 0, 0)
    data = open(path, "rb").read()
    assert len(data) == structs.HWPERFD_STATE_SIZE
    page = structs.hwperfd_state_t.parse(data)
    assert (page.hs_magic, page.hs_version, page.hs_nslots, page.hs_seq % 2) == (
        structs.HWPERFD_STATE_MAGIC, structs.HWPERFD_STATE_VERSION, 32, 0)  # fmt: skip
    assert page.hs_clock == structs.HWPERFD_STATE_CLOCK_MANUAL and page.hs_pid == pid
    assert (page.hs_user_ns, page.hs_system_ns) == (3_000_000, 1_000_000)
    assert page.hs_slots[0].count == 585_000  # 3 ms of user time at 195 MHz
    assert struct.unpack_from("<Q", data, 128)[0] == 585_000
    assert os.stat(path).st_mode & 0o7777 == 0o400
    assert os.stat(os.path.dirname(path)).st_mode & 0o7777 == 0o711


def test_the_python_reader_follows_the_writer(pages):
    store, kernel, ledger, pid = pages
    page = StatePage(store.grant(pid, 0, 0))
    try:
        for step in range(3):
            ledger.run(pid, 1_000_000 * step + 123, 7)
            store.publish(pid)
            assert page.read() == read_pid(kernel, pid)
        kernel.release(Caller(pid, 0, 0, pid), Proc(pid))
        store.publish(pid)
        assert page.read() is None and page.dead
    finally:
        page.close()


def read_pid(kernel, pid):
    return kernel.read(Caller(pid, 0, 0, pid), Proc(pid))


def test_a_page_goes_with_its_process_and_the_cap_is_per_user(pages):
    store, kernel, ledger, pid = pages
    path = store.grant(pid, 0, 0)
    assert store.grant(pid, 0, 0) == path  # one page per process
    assert len(store) == 1
    store.retire(pid)
    assert not os.path.exists(path) and len(store) == 0
    ledger.run(PID + 1, 0)
    kernel.enable(Caller(PID + 1, 0, 0, PID + 1), Proc(PID + 1), CounterRequest.build({0: spec_word(0, 8)}))
    store.grant(pid, 0, 0)
    store.grant(PID, 0, 0)
    with pytest.raises(OSError) as refused:
        store.grant(PID + 1, 0, 0)
    assert refused.value.errno == 11  # EAGAIN
    other = store.grant(PID + 1, 0, 1000)  # another user's cap is its own
    assert os.stat(other).st_uid == 0 and os.stat(other).st_mode & 0o777 == 0o440


def seq_of(path):
    return struct.unpack_from("<I", open(path, "rb").read(), 8)[0]


def test_a_process_event_rewrites_only_the_pages_it_is_about_and_drops_ended_ones(pages):
    """Forks and exits of other processes leave a page as written (its counts
    are not theirs): an exit storm beside N pages once cost N page writes an
    exit.  A page whose context ended goes all the same."""
    store, kernel, ledger, pid = pages
    mine, theirs = store.grant(pid, 0, 0), store.grant(PID, 0, 0)
    ledger.run(pid, 1_000_000)
    ledger.run(PID, 2_000_000)
    before = seq_of(mine), seq_of(theirs)
    store.publish_changed([PID])
    assert (seq_of(mine), seq_of(theirs)) == (before[0], before[1] + 2)
    assert structs.hwperfd_state_t.parse(open(theirs, "rb").read()).hs_slots[0].count == 390_000  # 2 ms at 195 MHz
    kernel.forget(PID)
    store.publish_changed([])
    assert not os.path.exists(theirs) and seq_of(mine) == before[0] and len(store) == 1
    store.publish()  # every page: the one left is written too
    assert seq_of(mine) == before[0] + 2
    kernel.release(Caller(pid, 0, 0, pid), Proc(pid))  # no longer counting: its page goes
    store.publish_changed([])
    assert not os.path.exists(mine) and len(store) == 0


def test_another_personality_publishes_its_own_pages_beside_irixs(pages):
    """A second source (here another kernel, standing for a per-thread
    personality) gets pages of its own for the same id, under the same cap."""
    store, kernel, ledger, pid = pages
    other, other_ledger = counting({0: spec_word(0, HWPERF_CNTEN_U)}, mhz=300)
    other_ledger.run(pid, 0)
    other.enable(Caller(pid, 0, 0, pid), Proc(pid), CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U)}))
    mine, theirs = store.grant(pid, 0, 0), store.grant(pid, 0, 0, other, thread=True)
    assert mine != theirs and len(store) == 2
    other_ledger.run(pid, 1_000_000)
    store.publish(pid, other)
    page = structs.hwperfd_state_t.parse(open(theirs, "rb").read())
    assert page.hs_slots[0].count == 300_000 and page.hs_pid == pid
    store.retire(pid, other)
    assert os.path.exists(mine) and not os.path.exists(theirs)
    with pytest.raises(OSError):  # the cap (2) counts every source's pages
        store.grant(pid, 0, 0, other)
        store.grant(PID, 0, 0)
        store.grant(PID, 0, 0, other)


def test_pages_are_off_unless_the_directory_is_roots_own(tmp_path):
    kernel, ledger = counting({0: spec_word(0, HWPERF_CNTEN_U)})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    assert StatePages.create(kernel, ledger, str(tmp_path / "link"), "/mnt/x", 2) is None
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    assert StatePages.create(kernel, ledger, str(theirs), "/mnt/x", 2) is None
    assert StatePages.create(kernel, ledger, "", "/mnt/x", 2) is None  # --state-dir ''


def test_a_crashed_daemons_pages_are_cleared_at_start(tmp_path):
    kernel, ledger = counting({0: spec_word(0, HWPERF_CNTEN_U)})
    first = StatePages(kernel, ledger, str(tmp_path / "state"), "/mnt/x", 2)
    path = first.grant(PID, 0, 0)  # and never closed
    second = StatePages(kernel, ledger, str(tmp_path / "state"), "/mnt/x", 2)
    assert not os.path.exists(path) and second.dir == first.dir
    assert oct(os.stat(second.dir).st_mode & 0o777) == oct(0o711)
    second.close()
    assert not os.path.exists(second.dir)


@settings(max_examples=100, deadline=None)
@given(
    model=st.sampled_from(["r10000", "intel"]),
    select=st.sampled_from([0x8, 0x2, 0x1, 0xB]),
    bursts=st.lists(st.tuples(st.integers(0, 10**8), st.integers(0, 10**8)), min_size=1, max_size=6),
)
def test_a_seed_002_register_extrapolates_like_its_runs(model, select, bursts):
    """What a per-thread personality publishes: a core register's rates."""
    from hwperfd.counters.snapshot import register_rates, slot_at, slot_rate
    from hwperfd.cpu.core import MIPS_EVENT_SHIFT, X86_EN, X86_OS, X86_USR, PmuCpu
    from hwperfd.cpu.models import MODELS
    from hwperfd.cpu.profiles import PROFILE_RATES

    cpu = PmuCpu(0, MODELS[model], Fraction(195))
    if model == "intel":  # cycles (0x3c) in user and/or OS mode
        evntsel = 0x3C | X86_EN | (X86_USR if select & 0x8 else 0) | (X86_OS if select & 0x3 else 0)
    else:  # graduated instructions (event 15 on counter 0), U/K/EXL as chosen
        evntsel = (15 << MIPS_EVENT_SHIFT) | select
    cpu.program(0, evntsel)
    rates, exl = PROFILE_RATES["balanced"], Fraction(1, 10)
    cpu.run(1234, 567, rates, exl)  # a residue carried into the snapshot
    user, system = register_rates(cpu, 0, rates, exl)
    assert user + system > 0
    slot = slot_rate(cpu.total(0), cpu._regs[0].residue, user, system)
    assert slot is not None
    du = ds = 0
    for u, s in bursts:
        cpu.run(u, s, rates, exl)
        du, ds = du + u, ds + s
        assert slot_at(slot, du, ds) == cpu.total(0)


_MID_WRITE_READER = r"""
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <hwperfd/state.h>
int main(int argc, char **argv)
{
    struct hwperfd_state_reader r;
    struct timespec a, b;
    uint64_t counts[1];
    int generation;
    if (argc != 2 || hwperfd_state_map(argv[1], &r) != 0)
        return 2;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    int rc = hwperfd_state_read(&r, &generation, counts, 1);
    int saved = errno;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    printf("%d %d %lld\n", rc, saved, (b.tv_sec - a.tv_sec) * 1000000000LL + b.tv_nsec - a.tv_nsec);
    return 0;
}
"""


def test_a_page_left_mid_write_sends_readers_to_the_daemon_at_once(tmp_path):
    # A daemon preempted between the odd and the even count on a busy machine
    # (for a scheduler slice), or stopped or killed there (for good): readers
    # wait 20 us, then ask the daemon, whose answer comes once the write is
    # done (or says it is gone).  Spinning longer burned milliseconds of the
    # reader's own CPU time - an overflow handler's read, with its counters
    # frozen all the while - beside CPU-bound processes.
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    page = bytearray(structs.HWPERFD_STATE_SIZE)
    struct.pack_into("<IHHI", page, 0, structs.HWPERFD_STATE_MAGIC, structs.HWPERFD_STATE_VERSION, 32, 7)
    path = tmp_path / "page"
    path.write_bytes(bytes(page))
    assert StatePage(str(path)).read() is None
    (tmp_path / "reader.c").write_text(_MID_WRITE_READER)
    subprocess.run(["cc", "-O2", f"-I{root}/include", "-o", str(tmp_path / "reader"), str(tmp_path / "reader.c"),
                    f"{root}/lib/state.c", f"{root}/lib/state_open.c", "-lpthread"], check=True)  # fmt: skip
    out = subprocess.run([str(tmp_path / "reader"), str(path)], capture_output=True, text=True, timeout=30, check=True)
    rc, err, cpu_ns = out.stdout.split()
    assert (rc, err) == ("-1", str(errno.EAGAIN))
    assert int(cpu_ns) < 150_000, cpu_ns  # 20 us of waiting (2^20 looks took 300 us)


def test_the_daemons_own_pages_are_bounded_per_reader_and_never_cross_users(tmp_path):
    """One user reading more processes than its share of the daemon's own
    pages loses its own least recently read, never another user's."""
    from hwperfd.procfs.statepages import PRIVATE_PER_USER

    kernel, ledger = counting({0: spec_word(0, HWPERF_CNTEN_U)})
    store = StatePages(kernel, ledger, str(tmp_path / "state"), "/mnt/x", per_user=2)
    others = range(PID + 1, PID + 2 + PRIVATE_PER_USER)
    for pid in others:
        ledger.run(pid, 0)
        kernel.enable(Caller(pid, 0, 0, pid), Proc(pid), CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U)}))
    roots = store.reading_page(PID, 0, 0)
    assert roots is not None
    for pid in others:
        assert store.reading_page(pid, 0, 1000) is not None
    assert store.reading_page(PID, 0, 0) is roots  # root's page is still there
    kept = [pid for pid in others if store.reading_page(pid, 0, 1000) is not None]
    assert len(kept) == len(others) and len(store) == 1 + PRIVATE_PER_USER
    assert not os.listdir(store.dir)  # no file for any of them
    store.close()


@pytest.mark.parametrize("mhz", [Fraction(2400), Fraction(1000), Fraction(2401, 3)])
def test_a_tsc_slot_over_wall_time_is_the_tsc_at_every_later_instant(mhz):
    """pctr's TSC and a cpc CPU binding's tick on a page moved by CLOCK_MONOTONIC."""
    tsc = Tsc(mhz)
    for base_ns in (0, 123_456_789, 10**15 + 7):
        slot = tsc_slot(mhz, base_ns, 5)
        for dt in (0, 1, 999, 10**9 + 3):
            assert slot_at(slot, dt, 0) == tsc.at(base_ns + dt) - 5
