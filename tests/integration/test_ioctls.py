"""The PIOC* ioctls through the real mount, from Python, with exact counts."""

import errno
import os

import pytest

from hwperfd.client import ProcessCounters, kernel, slots_for, spec, user
from structs import HWPERF_CNTEN_E, HWPERF_CNTEN_S, HWPERF_CNTEN_U

MS = 1_000_000
CYCLES_PER_MS = 200_000  # the manual_mount runs 200 MHz CPUs


def advance(mount, user_time, system_time="0"):
    mount.control(f"advance {os.getpid()} {user_time} {system_time}")


def test_enevctrs_returns_a_positive_generation_that_reads_agree_with(counters, manual_mount):
    gen = counters.enable({0: user(0), 16: user(0)})
    assert gen > 0
    advance(manual_mount, "5ms", "2ms")
    generation, counts = counters.read()
    assert generation == gen
    assert counts[0] == counts[16] == 5 * CYCLES_PER_MS


def test_events_follow_the_workload_profile_exactly(counters, manual_mount):
    counters.set_profile("balanced graduated_instructions=1.5 dcache_misses=1/8")
    counters.enable({15: user(15), 25: user(9)})
    advance(manual_mount, "3ms")
    _, counts = counters.read()
    assert counts[15] == 3 * CYCLES_PER_MS * 3 // 2
    assert counts[25] == 3 * CYCLES_PER_MS // 8
    counters.set_profile("balanced")


def test_exception_level_counts_its_share_of_system_time(counters, manual_mount):
    counters.enable({0: spec(0, HWPERF_CNTEN_E)})
    advance(manual_mount, "4ms", "10ms")
    _, counts = counters.read()
    assert counts[0] == 10 * CYCLES_PER_MS // 10  # exl_share 1/10 of system time


def test_multiplexed_events_share_ticks_and_report_only_their_own(counters, manual_mount):
    counters.enable({0: user(0), 1: user(15), 2: user(9)})
    advance(manual_mount, "60ms")
    _, counts = counters.read()
    # three slots on counter 0, each active for two of the six 10 ms ticks
    assert counts[0] == 20 * CYCLES_PER_MS
    assert counts[1] == 20 * CYCLES_PER_MS * 8 // 10
    assert counts[2] == 20 * CYCLES_PER_MS * 2 // 1000


def test_getevctrl_is_einval_when_not_in_use(counters):
    with pytest.raises(OSError) as info:
        counters.control()
    assert info.value.errno == errno.EINVAL


def test_getevctrl_returns_the_control_words(counters):
    gen = counters.enable({3: spec(3, HWPERF_CNTEN_U, interrupt=True)})
    generation, words = counters.control()
    assert generation == gen
    assert words[3] == (3 << 5) | 0x10 | 0x8
    assert sum(1 for w in words if w) == 1


def test_setevctrl_restarts_every_slot_two_generations_up(counters, manual_mount):
    """IRIX 6.5's hwperf_change_control: disable (generation + 1), then enable
    (+ 1), which starts every counted slot again at zero."""
    gen = counters.enable({0: user(0)})
    advance(manual_mount, "1ms")
    new = counters.set_control({0: user(0), 17: user(1)})
    assert new == gen + 2
    advance(manual_mount, "1ms")
    generation, counts = counters.read()
    assert generation == new
    assert counts[0] == CYCLES_PER_MS  # the unchanged slot restarted too
    assert counts[17] == CYCLES_PER_MS * 8 // 10


def test_relevctrs_stops_counting_but_counts_stay_readable(counters, manual_mount):
    counters.enable({0: user(0)})
    advance(manual_mount, "2ms")
    counters.release()
    advance(manual_mount, "5ms")
    generation, counts = counters.read()
    assert counts[0] == 2 * CYCLES_PER_MS
    counters.release()  # again: succeeds and changes nothing (PAPI_stop twice)
    assert counters.read() == (generation, counts)
    with pytest.raises(OSError) as info:
        counters.control()
    assert info.value.errno == errno.EINVAL


def test_reacquiring_bumps_generation_and_zeroes_counts(counters, manual_mount):
    first = counters.enable({0: user(0)})
    advance(manual_mount, "1ms")
    counters.release()
    second = counters.enable({0: user(0)})
    assert second > first
    assert counters.read()[1][0] == 0


def test_enevctrs_twice_is_ebusy(counters):
    counters.enable({0: user(0)})
    with pytest.raises(OSError) as info:
        counters.enable({0: user(0)})
    assert info.value.errno == errno.EBUSY


@pytest.mark.parametrize(
    "specs, thresholds, signal",
    [
        ({0: user(16)}, None, 0),  # counter 0 of the R10000 has events 0-15
        ({0: spec(0, HWPERF_CNTEN_S)}, None, 0),  # supervisor mode: EPERM for non-root, EINVAL for root
        ({0: user(0)}, {0: -1}, 0),
        ({0: user(0)}, None, 33),
        ({0: user(0)}, None, -1),
        ({}, None, 0),
    ],
)
def test_improper_requests_are_einval_and_change_nothing(counters, specs, thresholds, signal):
    with pytest.raises(OSError) as info:
        counters.enable(specs, thresholds, signal)
    assert info.value.errno == errno.EINVAL
    with pytest.raises(OSError):
        counters.control()


def test_getprevctrs_fills_usage_from_linux_and_counts(counters, manual_mount):
    gen = counters.enable({0: user(0)})
    advance(manual_mount, "1ms")
    usage = counters.read_usage()
    assert usage.generation == gen
    assert usage.counts[0] == CYCLES_PER_MS
    f = usage.fields
    assert f.pu_tstamp.tv_sec > 1_600_000_000
    assert 0 < f.pu_starttime.tv_sec <= f.pu_tstamp.tv_sec
    assert f.pu_minf > 0 and f.pu_rss > 0 and f.pu_size >= f.pu_rss
    assert f.pu_vctx + f.pu_ictx > 0
    assert f.pu_syscr > 0
    assert f.pu_utime.tv_sec * 10**9 + f.pu_utime.tv_nsec >= MS  # the manual clock's, advanced above
    assert f.pu_cpu_mon.cm_gen == gen and f.pu_cpu_mon.cm_flags & 0x1
    assert f.pu_cpu_mon.cm_evctrl[0].hwp_mode == HWPERF_CNTEN_U


def _ns(spec):
    return spec.tv_sec * 10**9 + spec.tv_nsec


def test_getprevctrs_usage_times_are_the_clocks_that_the_counts_come_from(counters, manual_mount):
    """pu_utime and pu_stime sit beside the counts: on the manual clock they
    are its time, which moves only when told, never the host's."""
    counters.enable({0: user(0)})
    before = counters.read_usage()
    sum(range(2_000_000))  # host CPU time the manual clock does not see
    after = counters.read_usage()
    assert _ns(after.fields.pu_utime) == _ns(before.fields.pu_utime)
    assert _ns(after.fields.pu_stime) == _ns(before.fields.pu_stime)
    assert after.fields.pu_utlb == before.fields.pu_utlb
    advance(manual_mount, "3ms", "2ms")
    moved = counters.read_usage()
    assert _ns(moved.fields.pu_utime) - _ns(before.fields.pu_utime) == 3 * MS
    assert _ns(moved.fields.pu_stime) - _ns(before.fields.pu_stime) == 2 * MS
    assert moved.counts[0] - before.counts[0] == 3 * CYCLES_PER_MS


def test_papi_read_only_open_can_drive_the_counters(manual_mount):
    with ProcessCounters(mount=manual_mount.path, writable=False) as pc:
        with pytest.raises(OSError):
            pc.control()
        gen = pc.enable([user(0)] * 32)  # every slot, event 0
        gen2 = pc.set_control(slots_for(0, 25))
        assert gen2 == gen + 2
        advance(manual_mount, "1ms")
        assert pc.read()[1][25] == CYCLES_PER_MS // 100
        pc.release()


def test_root_kernel_mode_is_the_processes_own_counters(counters, manual_mount):
    # IRIX 6.5's PIOCENEVCTRS enables the process's own counters (HWPERF_PROC),
    # kernel mode too; only syssgi's HWPERF_ENSYSCNTRS takes system mode.
    gen = counters.enable({0: kernel(0)})
    assert gen > 0
    assert "system mode free" in (manual_mount.path / "control").read_text()
    assert counters.control() == (gen, (kernel(0),) + (0,) * 31)
    counters.release()
