"""syssgi(SGI_EVENTCTR) sub-commands as ioctls on the control node, from the Python client.

r10k_counters(5), "Syssgi Commands": HWPERF_ENSYSCNTRS forcibly acquires
system mode (kernel mode required, EBUSY only if system mode is held),
HWPERF_GET_SYSCNTRS sums the CPUs, HWPERF_GET_CPUCNTRS reads one CPU and
returns 0 for a bad cpuid, HWPERF_GET_SYSEVCTRL is EINVAL when the counters
are not in use, HWPERF_SET_SYSEVCTRL needs root and bumps the generation on
every call, HWPERF_RELSYSCNTRS returns 0.  The profiling commands act on the
caller (tests/syssgi/test_profiling.py runs them through libhwperf).
"""

import errno
import fcntl

import pytest

import structs
from hwperfd.client import Control, ProcessCounters, pack_request, spec, user
from structs import HWPERF_CNTEN_E, HWPERF_CNTEN_K, HWPERF_CNTEN_S, HWPERF_CNTEN_U
from tests.conftest import run_as_nobody

CYCLES_PER_MS = 200_000
U, K, E = HWPERF_CNTEN_U, HWPERF_CNTEN_K, HWPERF_CNTEN_E
ZERO = (0,) * 32


def errno_of(call, *args) -> int:
    with pytest.raises(OSError) as info:
        call(*args)
    return info.value.errno


def counts(**slots) -> tuple[int, ...]:
    out = [0] * 32
    for name, value in slots.items():
        out[int(name[1:])] = value
    return tuple(out)


def test_ensyscntrs_acquires_every_cpu_and_returns_a_generation(control, manual_mount):
    gen = control.enable_system({0: spec(0, K | U), 25: spec(9, K)})  # cycles, L1 D misses
    assert gen > 0
    assert "system mode held" in (manual_mount.path / "control").read_text()
    assert control.read_system() == (gen, ZERO)
    manual_mount.control("advance-cpu 0 2ms 10ms")
    manual_mount.control("advance-cpu 1 0 100ms")
    cpu0 = 2 * CYCLES_PER_MS + 9 * CYCLES_PER_MS  # U: 2 ms; K: 9/10 of 10 ms
    cpu1 = 90 * CYCLES_PER_MS
    assert control.read_cpu(0) == (gen, counts(c0=cpu0, c25=9 * CYCLES_PER_MS // 100))
    assert control.read_cpu(1) == (gen, counts(c0=cpu1, c25=cpu1 // 100))
    assert control.read_system() == (gen, counts(c0=cpu0 + cpu1, c25=(9 * CYCLES_PER_MS + cpu1) // 100))
    assert control.release_system() is None


def test_each_cpu_multiplexes_in_its_own_control_block(control, manual_mount):
    # Two events on counter 0: each CPU rotates them at its own 10 ms ticks.
    gen = control.enable_system({0: spec(0, K), 1: spec(15, K)})
    manual_mount.control("advance-cpu 0 0 10ms")
    manual_mount.control("advance-cpu 1 0 10ms")
    tick = 9 * CYCLES_PER_MS  # K share of one 10 ms tick
    assert control.read_cpu(0) == (gen, counts(c0=tick))
    assert control.read_cpu(1) == (gen, counts(c0=tick))
    manual_mount.control("advance-cpu 1 0 10ms")
    assert control.read_cpu(1) == (gen, counts(c0=tick, c1=tick * 8 // 10))
    assert control.read_system() == (gen, counts(c0=2 * tick, c1=tick * 8 // 10))


def test_ensyscntrs_forcibly_displaces_running_user_counters(control, manual_mount, busy):
    with ProcessCounters(busy.pid, mount=manual_mount.path) as looping:
        user_gen = looping.enable({0: user(0)})
        manual_mount.control(f"advance {busy.pid} 1ms")
        gen = control.enable_system({0: spec(0, K)})  # /proc would say EBUSY here
        assert gen > 0
        displaced, frozen = looping.read()
        assert displaced == user_gen + 1
        assert frozen == counts(c0=CYCLES_PER_MS)
        manual_mount.control(f"advance {busy.pid} 4ms")
        assert looping.read() == (displaced, frozen)
        assert errno_of(looping.enable, {0: user(0)}) == errno.EBUSY
        control.release_system()
        manual_mount.control(f"advance {busy.pid} 4ms")
        assert looping.read() == (displaced, frozen)  # still off: must be restarted
        assert looping.enable({0: user(0)}) > displaced


def test_ensyscntrs_is_ebusy_while_system_mode_is_held(control, manual_mount):
    gen = control.enable_system({0: spec(0, K)})
    for specs in ({0: spec(0, K)}, {0: spec(0, K | U | E)}, {16: spec(3, K)}):
        assert errno_of(control.enable_system, specs) == errno.EBUSY
    assert control.read_system()[0] == gen


@pytest.mark.parametrize(
    "specs, thresholds, signal",
    [
        ({0: spec(0, U)}, None, 0),  # no kernel mode
        ({0: spec(0, E)}, None, 0),  # EXL alone is not kernel mode
        ({0: spec(0, U | E), 16: spec(0, U)}, None, 0),
        ({}, None, 0),  # nothing at all
        ({0: spec(0, K | HWPERF_CNTEN_S)}, None, 0),  # supervisor mode is not supported
        ({0: spec(16, K)}, None, 0),  # no event 16 on an R10000 counter
        ({0: spec(0, K)}, {0: -5}, 0),  # negative threshold
        ({0: spec(0, K)}, None, 33),  # signal out of 0..32
    ],
    ids=["u", "x", "ux", "empty", "supervisor", "bad-event", "negative-threshold", "bad-signal"],
)
def test_ensyscntrs_rejects_improper_requests_with_einval(control, manual_mount, specs, thresholds, signal):
    assert errno_of(control.enable_system, specs, thresholds, signal) == errno.EINVAL
    assert "system mode free" in (manual_mount.path / "control").read_text()


def test_calls_on_free_counters(control):
    assert errno_of(control.read_system) == errno.EINVAL
    assert errno_of(control.system_control) == errno.EINVAL  # "EINVAL if the counters are not in use"
    assert errno_of(control.set_system_control, {0: spec(0, K)}) == errno.EINVAL
    assert errno_of(control.release_system) == errno.EINVAL
    assert control.read_cpu(0) == (0, ZERO)  # nothing to read on any CPU


@pytest.mark.parametrize("cpuid", [2, 3, 64, 2**31 - 1, -1, -(2**31)])
def test_get_cpucntrs_returns_0_for_an_invalid_cpuid(control, manual_mount, cpuid):
    gen = control.enable_system({0: spec(0, K)})
    manual_mount.control("advance-cpu 1 0 10ms")
    assert control.read_cpu(cpuid) == (0, ZERO)
    assert control.read_cpu(1) == (gen, counts(c0=9 * CYCLES_PER_MS))


def test_set_sysevctrl_bumps_the_generation_on_every_call(control, manual_mount):
    first = {0: spec(0, K), 17: spec(1, K)}
    gen = control.enable_system(first)
    manual_mount.control("advance-cpu 0 0 10ms")
    assert control.set_system_control(first) == gen + 1  # even when nothing changes
    assert control.read_system() == (gen + 1, counts(c0=1_800_000, c17=1_440_000))  # and counts go on

    second = {0: spec(0, K), 25: spec(9, K | U)}
    assert control.set_system_control(second) == gen + 2
    assert control.system_control() == (gen + 2, counts(c0=spec(0, K), c25=spec(9, K | U)))
    manual_mount.control("advance-cpu 1 10ms 10ms")
    # Slot 0 kept its count; slot 17 is gone; slot 25 started from zero.
    assert control.read_system() == (gen + 2, counts(c0=3_600_000, c25=(2_000_000 + 1_800_000) // 100))
    assert control.read_cpu(0) == (gen + 2, counts(c0=1_800_000))

    # A refused change changes nothing, not even the generation.
    assert errno_of(control.set_system_control, {0: user(0)}) == errno.EINVAL
    assert errno_of(control.set_system_control, {0: spec(0, K)}, {0: -1}) == errno.EINVAL
    assert control.system_control()[0] == gen + 2
    assert control.set_system_control(first) == gen + 3


def test_profiling_commands_act_on_the_caller_and_the_bare_profenable_cannot_reach_buffers(control):
    """HWPERF_PROFENABLE's histograms are in the caller's memory: the bare
    ioctl is EFAULT (libhwperf sends HWPERFD_PROFENABLE); SUSP and CONT act
    on the calling process's own counters and return 0 (here it has none)."""
    args = pack_request({0: spec(0, K)})
    assert errno_of(fcntl.ioctl, control.fd, structs.HWIOC_PROFENABLE, args) == errno.EFAULT
    assert fcntl.ioctl(control.fd, structs.HWIOC_PROF_CTR_SUSP, 0) == 0
    assert fcntl.ioctl(control.fd, structs.HWIOC_PROF_CTR_CONT, 0) == 0
    # Profiling while system mode is held: EBUSY (hwperf_enable_counters).
    control.enable_system({0: spec(0, K)})
    prof = structs.hwperfd_profenable_t.build(
        dict(hp_args=structs.hwperf_profevctrarg_t.parse(pack_request({0: spec(0, U)}, {0: 1000})), hp_sig=40, hp_pad=0)
    )
    assert errno_of(fcntl.ioctl, control.fd, structs.HWPERFD_PROFENABLE, prof) == errno.EBUSY
    assert errno_of(fcntl.ioctl, control.fd, structs.HWIOC_PROFENABLE, args) == errno.EFAULT


def test_non_root_reads_system_counters_and_changes_nothing(control, manual_mount, nobody_python):
    """The control node is 0644: a non-root user opens it read-only, reads
    with GET_SYSCNTRS, GET_CPUCNTRS and GET_SYSEVCTRL, and gets EPERM from
    ENSYSCNTRS, SET_SYSEVCTRL and RELSYSCNTRS; text commands need write
    permission (EACCES)."""
    gen = control.enable_system({0: spec(0, K)})
    manual_mount.control("advance-cpu 1 0 10ms")
    code = (
        "import errno, os\n"
        "from hwperfd.client import Control, spec\n"
        "c = Control()\n"
        "print(c.read_system()[0], c.read_system()[1][0], c.read_cpu(1)[1][0], c.system_control()[1][0])\n"
        "for name, call in [('en', lambda: c.enable_system({0: spec(0, 2)})),\n"
        "                   ('set', lambda: c.set_system_control({0: spec(0, 2), 1: spec(1, 2)})),\n"
        "                   ('rel', c.release_system), ('cmd', lambda: c.command('advance-cpu 0 0 1s'))]:\n"
        "    try:\n        call(); print(name, 'ok')\n"
        "    except OSError as e:\n        print(name, errno.errorcode[e.errno])\n"
        "try:\n    open(os.environ['HWPERFD_MOUNT'] + '/control', 'w')\n"
        "except OSError as e:\n    print('write', errno.errorcode[e.errno])\n"
    )
    result = run_as_nobody(nobody_python, "-c", code, mount=manual_mount)
    kernel = 9 * CYCLES_PER_MS
    assert result.stdout.split("\n")[:-1] == [
        f"{gen} {kernel} {kernel} {spec(0, K)}",
        "en EPERM",
        "set EPERM",
        "rel EPERM",
        "cmd EBADF",
        "write EACCES",
    ], result.stderr
    assert control.read_system() == (gen, counts(c0=kernel))
    assert control.system_control() == (gen, (spec(0, K),) + (0,) * 31)


def test_ensyscntrs_sends_overflow_signals_to_its_caller(control, manual_mount):
    """HWPERF_ENSYSCNTRS takes hwp_ovflw_sig as PIOCENEVCTRS does: the
    program that acquired system mode gets one signal per overflow of a slot
    with the interrupt enable bit, when it takes each before the next."""
    import signal as _signal

    from tests.waiting import wait_for

    got = []
    old = _signal.signal(_signal.SIGUSR2, lambda *_: got.append(1))
    try:
        # cycles in kernel mode, overflow every 1 ms of kernel time (200 000 cycles)
        control.enable_system({0: spec(0, K, interrupt=True)}, thresholds={0: CYCLES_PER_MS}, signal=_signal.SIGUSR2)
        kernel_us = 0
        for cpu, steps in ((0, 10), (1, 5)):
            for _ in range(steps):
                manual_mount.control(f"advance-cpu {cpu} 0 1ms")  # 0.9 ms in K: at most one overflow
                kernel_us += 900
                assert wait_for(lambda: len(got) >= kernel_us // 1000, timeout=5)
        import time

        time.sleep(0.1)
        assert len(got) == 13  # 13.5 ms of kernel time
    finally:
        _signal.signal(_signal.SIGUSR2, old)


def test_system_generation_keeps_rising_across_acquisitions(control):
    gens = []
    for _ in range(3):
        gens.append(control.enable_system({0: spec(0, K)}))
        gens.append(control.set_system_control({0: spec(0, K | U)}))
        control.release_system()
    assert gens == sorted(set(gens)) and gens[0] > 0


def test_a_second_control_handle_sees_the_same_system_counters(control, manual_mount):
    gen = control.enable_system({16: spec(0, K | E)})
    manual_mount.control("advance-cpu 0 0 10ms")
    with Control(mount=manual_mount.path) as other:
        assert other.read_system() == (gen, counts(c16=2_000_000))
        other.release_system()
    assert errno_of(control.read_system) == errno.EINVAL
