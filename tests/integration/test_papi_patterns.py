"""PAPI's IRIX substrate, as C programs: stop and start on one descriptor, and
the slot rule (slot i, hwp_ev = i mod 16) on both CPU types. Exact counts on
the manual clock, as root and as an unprivileged user."""

import errno
import subprocess

import pytest

from tests.conftest import NOBODY, finish, running_hwperfd

R10K_CYCLES_PER_MS = 200_000  # manual_mount: R10000 at 200 MHz
R12K_CYCLES_PER_MS = 300_000


def run_steps(cmd, mount, advances: list[str]) -> dict[str, str]:
    """Run a client that prints 'counting' and waits for a line once per
    entry of ``advances``: move its manual clock by that much each time."""
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mount.env()
    )
    lines = []
    try:
        for advance in advances:
            while True:
                line = proc.stdout.readline()
                assert line, proc.stderr.read()
                if line.strip() == "counting":
                    break
                lines.append(line)
            mount.control(f"advance {proc.pid} {advance}")
            proc.stdin.write("go\n")
            proc.stdin.flush()
        out, err = finish(proc, timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return dict(line.rstrip("\n").split(": ", 1) for line in lines + out.splitlines(keepends=True))


@pytest.mark.parametrize("who", ["root", "nobody"])
def test_papi_stop_start_reset_cycle_counts_each_run_from_zero(manual_mount, examples, who):
    prefix = NOBODY if who == "nobody" else []
    out = run_steps(prefix + [str(examples / "papi_cycle"), "-w"], manual_mount, ["3ms", "2ms", "1ms", "5ms"])
    ms = R10K_CYCLES_PER_MS
    assert int(out["probe errno"]) == errno.EINVAL
    init = int(out["init generation"])
    first = int(out["first generation"])
    assert first > init > 0
    assert int(out["first cycles"]) == 3 * ms
    assert int(out["first graduated instructions"]) == 3 * ms * 8 // 10
    # Released: PIOCGETEVCTRL says EINVAL, time is not counted, counts stay.
    assert int(out["control after stop"]) == errno.EINVAL
    assert int(out["stopped generation"]) == first
    assert int(out["stopped cycles"]) == 3 * ms
    # PIOCSETEVCTRL after the release starts again, from zero, newer generation.
    restart = int(out["restart generation"])
    assert restart > first
    assert int(out["second generation"]) == restart
    assert int(out["second cycles"]) == 1 * ms
    # PAPI_reset: stop + start.
    reset = int(out["reset generation"])
    assert reset > restart
    assert int(out["reset cycles"]) == 0
    assert int(out["third cycles"]) == 5 * ms
    assert int(out["third graduated instructions"]) == 5 * ms * 8 // 10
    # A second library init on released counters acquires again.
    assert int(out["reinit generation"]) > reset


@pytest.fixture(scope="module")
def r12000_slots_mount(shared_tmp):
    """2 R12000s at 300 MHz on the manual clock (1 ms = 300 000 cycles)."""
    with running_hwperfd(
        shared_tmp / "mnt-r12000-slots", shared_tmp / "hwperfd-r12000-slots.log",
        "--clock", "manual", "--cpus", "2", "--cpu-type", "r12000", "--mhz", "300",
    ) as mount:  # fmt: skip
        yield mount


def slot_counts(mount, examples, args, who="root"):
    """slot_rule's counts over 10 ms of user time."""
    prefix = NOBODY if who == "nobody" else []
    out = run_steps(prefix + [str(examples / "slot_rule"), "-w", *args], mount, ["10ms"])
    return {int(k.split()[1]): int(v) for k, v in out.items() if k.startswith("slot ")}


# The balanced profile's rate (per cycle) of event i, for the slots tested.
RATES = {0: 1, 5: 0.0001, 9: 0.002, 21: 0.05, 25: 0.01, 26: 0.001}


@pytest.mark.parametrize("cpu", ["r10000", "r12000"])
@pytest.mark.parametrize("pair", [(5, 21), (9, 25), (0, 26)])
@pytest.mark.parametrize("who", ["root", "nobody"])
def test_slot_i_with_hwp_ev_i_mod_16_counts_event_i(manual_mount, r12000_slots_mount, examples, cpu, pair, who):
    mount, per_ms = (manual_mount, R10K_CYCLES_PER_MS) if cpu == "r10000" else (r12000_slots_mount, R12K_CYCLES_PER_MS)
    counts = slot_counts(mount, examples, [str(s) for s in pair], who=who)
    assert counts == {slot: round(10 * per_ms * RATES[slot]) for slot in pair}


def test_r12000_counter_1_adds_16_to_hwp_ev(r12000_slots_mount, examples):
    """Other hwp_ev values on the R12000: counter 0 takes the event number as
    it is (HWPERF_PRFCNT_*), counter 1 counts (hwp_ev + 16) mod 32."""
    counts = slot_counts(r12000_slots_mount, examples, ["5:21", "21:21"])  # FP on counter 0; failed SC on counter 1
    assert counts == {5: 10 * R12K_CYCLES_PER_MS * 5 // 100, 21: 10 * R12K_CYCLES_PER_MS // 10_000}
    counts = slot_counts(r12000_slots_mount, examples, ["9:25", "25:25"])  # data misses on 0; instruction misses on 1
    assert counts == {9: 10 * R12K_CYCLES_PER_MS // 100, 25: 10 * R12K_CYCLES_PER_MS * 2 // 1000}


@pytest.mark.parametrize("cpu, arg", [("r10000", "3:16"), ("r12000", "3:32"), ("r12000", "20:32")])
def test_hwp_ev_out_of_range_is_einval(manual_mount, r12000_slots_mount, examples, cpu, arg):
    mount = manual_mount if cpu == "r10000" else r12000_slots_mount
    result = subprocess.run([examples / "slot_rule", arg], capture_output=True, text=True, env=mount.env(), check=False)
    assert result.stdout.strip() == f"errno: {errno.EINVAL}", result.stderr
