"""System mode through /proc (r10k_counters(5), "Operation Modes"), on the real mount.

A root caller whose PIOCENEVCTRS asks for kernel mode takes the counters in
system mode: every emulated CPU counts the same events in its own control
block, and reads sum the CPUs.  System mode refuses everyone (EBUSY) while it
is held; /proc will not take it while user-mode counters run on a CPU; and
user-mode counters it displaces stay off, with a new generation, until they
are explicitly restarted.

Under the manual clock CPU time comes from ``advance-cpu CPU USER SYSTEM``:
U counts the CPU's user time, K 9/10 of its system time and EXL the other
1/10 (the default profile's ``exl_share``), at 200 000 cycles per ms.
"""

import errno
import signal
import subprocess

import pytest

from hwperfd.client import ProcessCounters, spec, user
from structs import HWPERF_CNTEN_E, HWPERF_CNTEN_K, HWPERF_CNTEN_U
from tests.conftest import NOBODY, run_as_nobody
from tests.waiting import process_state, wait_for

CYCLES_PER_MS = 200_000
U, K, E = HWPERF_CNTEN_U, HWPERF_CNTEN_K, HWPERF_CNTEN_E


def cycles(mode: int, user_ms: int, system_ms: int) -> int:
    """Cycles a CPU counts in ``mode`` for this much user and system time."""
    total = 0
    if mode & U:
        total += user_ms * CYCLES_PER_MS
    if mode & K:
        total += system_ms * CYCLES_PER_MS * 9 // 10
    if mode & E:
        total += system_ms * CYCLES_PER_MS // 10
    return total


@pytest.fixture
def me(control, counters):
    """This (root) process's file; whatever it holds is released afterwards.
    Asked for after ``control``, so it is released before ``control`` checks
    that system mode is free (fixtures end in the reverse order)."""
    return counters


def system_held(mount) -> bool:
    return "system mode held" in (mount.path / "control").read_text()


def errno_of(call, *args) -> int:
    with pytest.raises(OSError) as info:
        call(*args)
    return info.value.errno


@pytest.mark.parametrize("mode", [K, K | U, K | E, K | U | E], ids=["k", "uk", "kx", "ukx"])
def test_root_kernel_mode_request_counts_on_every_cpu(me, control, manual_mount, mode):
    gen = me.enable({0: spec(0, mode), 17: spec(1, mode)})  # cycles, graduated instructions
    assert gen > 0
    assert system_held(manual_mount)
    assert control.system_control() == (gen, tuple(spec(0, mode) if i == 0 else spec(1, mode) if i == 17 else 0 for i in range(32)))

    manual_mount.control("advance-cpu 0 1ms 10ms")
    manual_mount.control("advance-cpu 1 3ms 20ms")
    manual_mount.control(f"advance {me.pid} 50ms 50ms")  # process time: not system mode's business
    cpu0, cpu1 = cycles(mode, 1, 10), cycles(mode, 3, 20)

    generation, counts = me.read()  # the owner's /proc read returns the global block
    assert generation == gen
    assert counts[0] == cpu0 + cpu1
    assert counts[17] == cpu0 * 8 // 10 + cpu1 * 8 // 10  # graduated instructions: 0.8 per cycle
    assert sum(counts) == counts[0] + counts[17]
    assert control.read_cpu(0) == (gen, (cpu0,) + (0,) * 16 + (cpu0 * 8 // 10,) + (0,) * 14)
    assert control.read_cpu(1) == (gen, (cpu1,) + (0,) * 16 + (cpu1 * 8 // 10,) + (0,) * 14)
    assert control.read_system() == (gen, counts)

    me.release()
    assert not system_held(manual_mount)


def test_per_cpu_blocks_are_summed_on_every_read(me, control, manual_mount):
    gen = me.enable({0: spec(0, K)})
    expected = [0, 0]
    for step, (cpu, system_ms) in enumerate([(0, 10), (1, 30), (1, 10), (0, 50), (0, 10)]):
        manual_mount.control(f"advance-cpu {cpu} 0 {system_ms}ms")
        expected[cpu] += cycles(K, 0, system_ms)
        assert me.read() == (gen, (sum(expected),) + (0,) * 31), step
        assert control.read_cpu(cpu)[1][0] == expected[cpu]


def test_system_mode_refuses_every_other_request_with_ebusy(me, control, manual_mount, sleeper, examples):
    gen = me.enable({0: spec(0, K)})
    with ProcessCounters(sleeper.pid, mount=manual_mount.path) as other:
        assert errno_of(other.enable, {0: user(0)}) == errno.EBUSY  # root, user mode
        assert errno_of(other.enable, {0: spec(0, K | U)}) == errno.EBUSY  # root, system mode again
    assert errno_of(control.enable_system, {0: spec(0, K)}) == errno.EBUSY  # even the forcible syssgi
    # An unprivileged program on its own file: r10k_counters(5)'s example.
    result = subprocess.run(
        NOBODY + [str(examples / "r10k_counters")], capture_output=True, text=True, env=manual_mount.env()
    )
    assert result.returncode != 0
    assert result.stderr == "failed to acquire counters: Device or resource busy\n"
    assert me.read()[0] == gen  # nothing changed hands


def test_proc_will_not_take_system_mode_while_user_counters_run(me, control, manual_mount, busy):
    with ProcessCounters(busy.pid, mount=manual_mount.path) as looping:
        user_gen = looping.enable({0: user(0)})
        assert process_state(busy.pid) == "R"
        for mode in (K, K | U, K | E):
            assert errno_of(me.enable, {0: spec(0, mode)}) == errno.EBUSY
        assert not system_held(manual_mount)
        # The refused request changed nothing for the running process.
        manual_mount.control(f"advance {busy.pid} 2ms")
        assert looping.read() == (user_gen, (2 * CYCLES_PER_MS,) + (0,) * 31)
        assert looping.control()[0] == user_gen

        # Switched out (stopped), it no longer blocks system mode, and is displaced.
        busy.send_signal(signal.SIGSTOP)
        assert wait_for(lambda: process_state(busy.pid) == "T")
        system_gen = me.enable({0: spec(0, K)})
        assert system_gen > 0 and system_held(manual_mount)
        displaced_gen, counts = looping.read()
        assert displaced_gen > user_gen
        assert counts[0] == 2 * CYCLES_PER_MS
        me.release()
        busy.send_signal(signal.SIGCONT)

        # It does not count again until restarted explicitly.
        manual_mount.control(f"advance {busy.pid} 5ms")
        assert looping.read() == (displaced_gen, counts)
        assert errno_of(looping.control) == errno.EINVAL
        assert errno_of(looping.set_control, {0: user(0)}) == errno.EINVAL
        restarted = looping.enable({0: user(0)})
        assert restarted > displaced_gen
        manual_mount.control(f"advance {busy.pid} 1ms")
        assert looping.read() == (restarted, (CYCLES_PER_MS,) + (0,) * 31)
        looping.release()


def test_switched_out_user_counters_are_displaced_and_stay_off(me, control, manual_mount, sleeper, spawn):
    second = spawn("sleep", "60")
    files = [ProcessCounters(p.pid, mount=manual_mount.path) for p in (sleeper, second)]
    try:
        gens = [f.enable({0: user(0), 16: user(0)}) for f in files]
        manual_mount.control(f"advance {sleeper.pid} 3ms")
        manual_mount.control(f"advance {second.pid} 4ms")
        assert wait_for(lambda: process_state(sleeper.pid) == process_state(second.pid) == "S")

        me.enable({0: spec(0, K | E)})  # both switched out: system mode is granted

        frozen = []
        for f, gen, ms in zip(files, gens, (3, 4)):
            generation, counts = f.read()
            assert generation == gen + 1  # "the generation number ... will be increased"
            assert counts[0] == counts[16] == ms * CYCLES_PER_MS
            frozen.append((generation, counts))
            assert errno_of(f.enable, {0: user(0)}) == errno.EBUSY  # cannot come back while held
        usage = files[0].read_usage()
        assert usage.generation == gens[0] + 1
        assert usage.fields.pu_cpu_mon.cm_flags & 0x4  # HWPERF_CM_LOST

        me.release()
        for f, pid in zip(files, (sleeper.pid, second.pid)):
            manual_mount.control(f"advance {pid} 10ms")
        assert [f.read() for f in files] == frozen  # still off after system mode is gone

        again = files[1].enable({0: user(0)})
        assert again > frozen[1][0]
        manual_mount.control(f"advance {second.pid} 2ms")
        assert files[1].read() == (again, (2 * CYCLES_PER_MS,) + (0,) * 31)
        assert files[0].read() == frozen[0]  # the other one was not restarted
    finally:
        for f in files:
            f.close()


def test_released_user_counters_are_not_displaced(me, control, manual_mount, sleeper):
    with ProcessCounters(sleeper.pid, mount=manual_mount.path) as other:
        gen = other.enable({0: user(0)})
        manual_mount.control(f"advance {sleeper.pid} 1ms")
        other.release()
        me.enable({0: spec(0, K)})
        assert other.read() == (gen, (CYCLES_PER_MS,) + (0,) * 31)


def test_setevctrl_restarting_released_counters_is_ebusy_under_system_mode(me, control, manual_mount, sleeper):
    """PIOCSETEVCTRL on released counters acquires them again (PAPI_start
    after PAPI_stop), so system mode refuses it as it does PIOCENEVCTRS;
    nothing changes, and once system mode goes the same call restarts."""
    with ProcessCounters(sleeper.pid, mount=manual_mount.path) as other:
        gen = other.enable({0: user(0)})
        manual_mount.control(f"advance {sleeper.pid} 1ms")
        other.release()
        me.enable({0: spec(0, K)})
        assert errno_of(other.set_control, {0: user(0)}) == errno.EBUSY
        assert other.read() == (gen, (CYCLES_PER_MS,) + (0,) * 31)
        me.release()
        assert other.set_control({0: user(0)}) == gen + 1


def test_system_mode_from_proc_can_be_changed_and_released_through_syssgi(me, control, manual_mount):
    gen = me.enable({0: spec(0, K)})
    manual_mount.control("advance-cpu 0 0 10ms")
    new = control.set_system_control({0: spec(0, K), 16: spec(0, K | U)})
    assert new == gen + 1
    assert me.read()[0] == new  # the owner sees the new generation
    assert me.control() == control.system_control()
    manual_mount.control("advance-cpu 1 1ms 10ms")
    assert me.read()[1][0] == cycles(K, 0, 20)
    assert me.read()[1][16] == cycles(K | U, 1, 10)
    control.release_system()
    assert not system_held(manual_mount)
    # The owner's counters are released: releasing again succeeds and changes nothing.
    before = me.read()
    me.release()
    assert me.read() == before
    assert errno_of(me.control) == errno.EINVAL


def test_proc_release_of_syssgi_system_mode_is_not_the_owners(me, control, manual_mount):
    me.enable({0: spec(0, U)})
    me.release()
    control.enable_system({0: spec(0, K)})
    me.release()  # this process's own released counters: succeeds, changes nothing ...
    assert system_held(manual_mount)  # ... and does not touch syssgi's system mode
    control.release_system()


def test_unprivileged_kernel_mode_is_eperm_even_while_system_mode_is_held(
    me, control, manual_mount, shared_tmp, nobody_python
):
    me.enable({0: spec(0, K)})
    code = (
        "import errno\n"
        "from hwperfd.client import ProcessCounters, spec\n"
        "pc = ProcessCounters()\n"
        "for mode in (2, 10, 8):\n"
        "    try:\n        pc.enable({0: spec(0, mode)})\n"
        "    except OSError as e:\n        print(errno.errorcode[e.errno])\n"
    )
    result = run_as_nobody(nobody_python, "-c", code, mount=manual_mount)
    assert result.stdout.split() == ["EPERM", "EPERM", "EBUSY"], result.stderr
