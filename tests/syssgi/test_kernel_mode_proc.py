"""Kernel mode through /proc counts the process's own kernel time, on the real mount.

IRIX 6.5's PIOCENEVCTRS and PIOCSETEVCTRL always enable the target's own
counters (prioctl.c's piocenevctrsex and piocsetevctrl pass HWPERF_PROC to
hwperf_enable_counters / hwperf_change_control): K counts the process's time
in the kernel, needs only root (EPERM without it, r1nk_perf_init_counters),
and shares the hardware with every other process's counters.  Only syssgi's
HWPERF_ENSYSCNTRS takes the all-CPU system mode; while it is held every
/proc acquire is EBUSY, and the user-mode counters it displaced stay off.

Under the manual clock ``advance PID USER SYSTEM`` moves a process's CPU
time and ``advance-cpu CPU USER SYSTEM`` a CPU's: U counts user time, K 9/10
of system time and EXL the other 1/10 (the default profile's ``exl_share``),
at 200 000 cycles per ms.
"""

import errno
import subprocess

import pytest

from hwperfd.client import ProcessCounters, spec, user
from structs import HWPERF_CNTEN_E, HWPERF_CNTEN_K, HWPERF_CNTEN_U
from tests.conftest import NOBODY, run_as_nobody
from tests.waiting import process_state, wait_for

CYCLES_PER_MS = 200_000
U, K, E = HWPERF_CNTEN_U, HWPERF_CNTEN_K, HWPERF_CNTEN_E
ZERO = (0,) * 32


def cycles(mode: int, user_ms: int, system_ms: int) -> int:
    """Cycles counted in ``mode`` for this much user and system time."""
    total = 0
    if mode & U:
        total += user_ms * CYCLES_PER_MS
    if mode & K:
        total += system_ms * CYCLES_PER_MS * 9 // 10
    if mode & E:
        total += system_ms * CYCLES_PER_MS // 10
    return total


def slots(**values) -> tuple[int, ...]:
    out = [0] * 32
    for name, value in values.items():
        out[int(name[1:])] = value
    return tuple(out)


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
def test_root_kernel_mode_enable_counts_the_processes_own_kernel_time(me, control, manual_mount, mode):
    gen = me.enable({0: spec(0, mode), 17: spec(1, mode)})  # cycles, graduated instructions
    assert gen > 0
    assert not system_held(manual_mount)
    assert errno_of(control.read_system) == errno.EINVAL  # no system mode was taken
    assert me.control() == (gen, slots(c0=spec(0, mode), c17=spec(1, mode)))

    manual_mount.control("advance-cpu 0 1ms 10ms")  # the machine's time: not this process's
    manual_mount.control(f"advance {me.pid} 3ms 20ms")
    own = cycles(mode, 3, 20)
    assert me.read() == (gen, slots(c0=own, c17=own * 8 // 10))  # graduated instructions: 0.8 per cycle
    me.release()
    assert me.read() == (gen, slots(c0=own, c17=own * 8 // 10))


def test_root_kernel_mode_counters_share_the_hardware_with_running_user_counters(me, manual_mount, busy):
    with ProcessCounters(busy.pid, mount=manual_mount.path) as looping:
        user_gen = looping.enable({0: user(0)})
        assert process_state(busy.pid) == "R"
        gen = me.enable({0: spec(0, K | U)})  # not "will not forcibly acquire": nothing to acquire
        manual_mount.control(f"advance {busy.pid} 2ms")
        manual_mount.control(f"advance {me.pid} 1ms 10ms")
        assert looping.read() == (user_gen, slots(c0=2 * CYCLES_PER_MS))
        assert me.read() == (gen, slots(c0=cycles(K | U, 1, 10)))
        assert not system_held(manual_mount)


def test_setevctrl_to_kernel_mode_from_root_restarts_every_slot_two_generations_up(me, manual_mount):
    """PAPI's `second` ctest: PIOCSETEVCTRL with HWPERF_CNTEN_K as root.
    hwperf_change_control disables (generation + 1) and enables again (+ 1),
    so every slot starts again at zero, the unchanged ones too."""
    gen = me.enable({0: user(0), 16: user(0)})
    manual_mount.control(f"advance {me.pid} 5ms 5ms")
    assert me.read() == (gen, slots(c0=5 * CYCLES_PER_MS, c16=5 * CYCLES_PER_MS))
    new = me.set_control({0: user(0), 16: spec(0, U | K)})
    assert new == gen + 2
    assert me.read() == (new, ZERO)  # slot 0 kept its control word and restarted all the same
    assert me.control() == (new, slots(c0=user(0), c16=spec(0, U | K)))
    manual_mount.control(f"advance {me.pid} 1ms 10ms")
    assert me.read() == (new, slots(c0=CYCLES_PER_MS, c16=cycles(U | K, 1, 10)))
    assert not system_held(manual_mount)


def test_unprivileged_kernel_mode_is_eperm_and_changes_nothing(me, manual_mount, nobody_python):
    code = (
        "import errno\n"
        "from hwperfd.client import ProcessCounters, spec, user\n"
        "pc = ProcessCounters()\n"
        "def attempt(call, *args):\n"
        "    try:\n        print(call(*args))\n"
        "    except OSError as e:\n        print(errno.errorcode[e.errno])\n"
        "for mode in (2, 10, 3):\n"
        "    attempt(pc.enable, {0: spec(0, mode)})\n"
        "attempt(pc.control)\n"  # still never used
        "gen = pc.enable({0: user(0)})\n"
        "attempt(pc.set_control, {0: spec(0, 10)})\n"
        "print(pc.control() == (gen, (user(0),) + (0,) * 31))\n"
    )
    result = run_as_nobody(nobody_python, "-c", code, mount=manual_mount)
    assert result.stdout.split() == ["EPERM", "EPERM", "EPERM", "ESRCH", "EPERM", "True"], result.stderr


def test_syssgi_system_mode_refuses_every_proc_request_with_ebusy(me, control, manual_mount, sleeper, examples):
    gen = control.enable_system({0: spec(0, K)})
    with ProcessCounters(sleeper.pid, mount=manual_mount.path) as other:
        assert errno_of(other.enable, {0: user(0)}) == errno.EBUSY  # root, user mode
        assert errno_of(other.enable, {0: spec(0, K | U)}) == errno.EBUSY  # root, kernel mode
    assert errno_of(me.enable, {0: spec(0, K)}) == errno.EBUSY
    # An unprivileged program on its own file: r10k_counters(5)'s example.
    result = subprocess.run(
        NOBODY + [str(examples / "r10k_counters")], capture_output=True, text=True, env=manual_mount.env()
    )
    assert result.returncode != 0
    assert result.stderr == "failed to acquire counters: Device or resource busy\n"
    assert control.read_system()[0] == gen  # nothing changed hands


def test_switched_out_user_counters_are_displaced_and_stay_off(me, control, manual_mount, sleeper, spawn):
    second = spawn("sleep", "60")
    files = [ProcessCounters(p.pid, mount=manual_mount.path) for p in (sleeper, second)]
    try:
        gens = [f.enable({0: user(0), 16: user(0)}) for f in files]
        manual_mount.control(f"advance {sleeper.pid} 3ms")
        manual_mount.control(f"advance {second.pid} 4ms")
        assert wait_for(lambda: process_state(sleeper.pid) == process_state(second.pid) == "S")

        control.enable_system({0: spec(0, K | E)})

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

        control.release_system()
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
        control.enable_system({0: spec(0, K)})
        assert other.read() == (gen, (CYCLES_PER_MS,) + (0,) * 31)


def test_setevctrl_restarting_released_counters_is_ebusy_under_system_mode(control, manual_mount, sleeper):
    """PIOCSETEVCTRL on released counters acquires them again (PAPI_start
    after PAPI_stop), so system mode refuses it as it does PIOCENEVCTRS;
    nothing changes, and once system mode goes the same call restarts."""
    with ProcessCounters(sleeper.pid, mount=manual_mount.path) as other:
        gen = other.enable({0: user(0)})
        manual_mount.control(f"advance {sleeper.pid} 1ms")
        other.release()
        control.enable_system({0: spec(0, K)})
        assert errno_of(other.set_control, {0: user(0)}) == errno.EBUSY
        assert other.read() == (gen, (CYCLES_PER_MS,) + (0,) * 31)
        control.release_system()
        assert other.set_control({0: user(0)}) == gen + 1


def test_proc_release_of_syssgi_system_mode_is_not_the_processes(me, control, manual_mount):
    me.enable({0: spec(0, U)})
    me.release()
    control.enable_system({0: spec(0, K)})
    me.release()  # this process's own released counters: succeeds, changes nothing ...
    assert system_held(manual_mount)  # ... and does not touch syssgi's system mode
    control.release_system()


def test_unprivileged_kernel_mode_is_eperm_even_while_system_mode_is_held(
    me, control, manual_mount, shared_tmp, nobody_python
):
    control.enable_system({0: spec(0, K)})
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
